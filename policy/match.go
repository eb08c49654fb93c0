package policy

import (
	"fmt"
	"path"
	"slices"
)

// match is how every rule of the set names the calls it covers: tools by
// name patterns in path.Match syntax ("*" any run of characters, "?" one,
// "[a-z]" a class), so "*_files" matches "list_files" and "find_files";
// callers by ID, none meaning every caller. Permissions and approval rules
// both match through it, so a pattern means the same in either.
type match struct {
	callers []string
	tools   []string
}

// checkPatterns reports the first malformed pattern of pats, as "pattern
// %q: why".
func checkPatterns(pats []string) error {
	for _, pat := range pats {
		if _, err := path.Match(pat, ""); err != nil {
			return fmt.Errorf("pattern %q: %w", pat, err)
		}
	}
	return nil
}

// caller reports whether m covers the caller id.
func (m match) caller(id string) bool {
	return len(m.callers) == 0 || slices.Contains(m.callers, id)
}

// tool reports whether one of m's patterns matches the tool name.
func (m match) tool(name string) bool {
	for _, pat := range m.tools {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}
