package auth

import (
	"fmt"
	"path"

	"github.com/toolwire/toolwire/engine"
)

// Policy holds each caller's tool permissions, keyed by caller name (a
// token's name or a certificate's identity). The entry "*" applies to
// callers without an entry of their own; a caller with neither may call
// every tool. A Policy is an engine.Permissions.
type Policy map[string]Rule

var _ engine.Permissions = Policy(nil)

// Rule allows and denies tools by name patterns in path.Match syntax ("*"
// any run of characters, "?" one, "[a-z]" a class), so "*_files" matches
// "list_files" and "find_files". A tool is permitted when it matches no Deny pattern and either
// Allow is empty or it matches an Allow pattern: deny wins.
type Rule struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Validate reports the first malformed pattern.
func (p Policy) Validate() error {
	for caller, r := range p {
		for _, pat := range append(append([]string(nil), r.Allow...), r.Deny...) {
			if _, err := path.Match(pat, ""); err != nil {
				return fmt.Errorf("permissions of %q: pattern %q: %w", caller, pat, err)
			}
		}
	}
	return nil
}

// Permitted reports whether caller may call tool; see Policy and Rule.
func (p Policy) Permitted(caller, tool string) bool {
	r, ok := p[caller]
	if !ok {
		if r, ok = p["*"]; !ok {
			return true
		}
	}
	if matchAny(r.Deny, tool) {
		return false
	}
	return len(r.Allow) == 0 || matchAny(r.Allow, tool)
}

func matchAny(patterns []string, name string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}
