package policy

import "fmt"

// Permissions are each caller's tool permissions (the config file's
// auth.permissions), keyed by caller name (a token's name or a
// certificate's identity). The entry "*" applies to callers without an
// entry of their own; a caller with neither may call every tool. They are
// the first rules of the set (Rules): a tool a caller may not call is
// listed nowhere for it, and its calls end NOT_PERMITTED.
type Permissions map[string]Permission

// Permission allows and denies tools by name patterns (see match): a tool
// is permitted when it matches no Deny pattern and either Allow is empty
// or it matches an Allow pattern; deny wins.
type Permission struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Validate reports the first malformed pattern.
func (p Permissions) Validate() error {
	for caller, r := range p {
		if err := checkPatterns(r.Allow); err != nil {
			return fmt.Errorf("permissions of %q: %w", caller, err)
		}
		if err := checkPatterns(r.Deny); err != nil {
			return fmt.Errorf("permissions of %q: %w", caller, err)
		}
	}
	return nil
}

// Permitted reports whether caller may call tool; see Permissions.
func (p Permissions) Permitted(caller, tool string) bool {
	r, ok := p[caller]
	if !ok {
		if r, ok = p["*"]; !ok {
			return true
		}
	}
	if (match{tools: r.Deny}).tool(tool) {
		return false
	}
	return len(r.Allow) == 0 || (match{tools: r.Allow}).tool(tool)
}
