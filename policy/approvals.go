package policy

import "fmt"

// ApprovalRule is one entry of the config file's "approvals" list: it
// holds the calls of tools matching one of Tools, made by one of Callers
// (empty: every caller), for a person's approval (see match), with Reason
// told with the wait.
type ApprovalRule struct {
	Tools   []string `json:"tools"`
	Callers []string `json:"callers,omitempty"`
	Reason  string   `json:"reason,omitempty"`
}

// checkApprovals reports the first approval rule that cannot match: one
// naming no tools, or with a malformed pattern.
func checkApprovals(rules []ApprovalRule) error {
	for i, r := range rules {
		if len(r.Tools) == 0 {
			return fmt.Errorf("approvals[%d] names no tools", i)
		}
		if err := checkPatterns(r.Tools); err != nil {
			return fmt.Errorf("approvals[%d]: %w", i, err)
		}
	}
	return nil
}
