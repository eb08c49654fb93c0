package policy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/tools"
)

// Rules is the server's one admission vocabulary, the engine.Admission it
// runs with: who may call what with which arguments, as one ordered set
// of rules answering one verdict. In order:
//
//  1. the caller's permissions (Permissions): a tool it may not call is
//     refused by its name, before anything else, and listed nowhere;
//  2. the policies in force (Live): the first CEL rule whose condition
//     holds decides: allow ends the policies (the approval rules are still
//     asked), deny refuses the call with the rule's message,
//     require_approval holds it;
//  3. the approval rules (ApprovalRule): the first that covers the call
//     holds it for a person's approval, with its reason.
//
// What none of them stops is allowed. The engine asks Permitted (step 1)
// when it lists tools and plans a batch, and Decide (every step) once per
// call, after its arguments are validated.
type Rules struct {
	perms     Permissions
	policies  *Live // nil: none
	approvals []approval
}

// approval is an ApprovalRule as the set keeps it.
type approval struct {
	match
	reason string
}

var _ engine.Admission = (*Rules)(nil)

// New returns the set of perms, the policies policies holds in force (nil:
// none; the set asks it at each call, so a reload's Swap takes effect at
// once) and the approval rules, or the first malformed pattern among them.
func New(perms Permissions, policies *Live, approvals []ApprovalRule) (*Rules, error) {
	if err := perms.Validate(); err != nil {
		return nil, err
	}
	if err := checkApprovals(approvals); err != nil {
		return nil, err
	}
	r := &Rules{perms: perms, policies: policies}
	for _, a := range approvals {
		r.approvals = append(r.approvals, approval{match: match{callers: a.Callers, tools: a.Tools}, reason: a.Reason})
	}
	return r, nil
}

// Permitted implements engine.Admission: whether caller's permissions let
// it call the tool named tool, whether or not such a tool exists.
func (r *Rules) Permitted(caller *engine.Identity, tool string) bool {
	return r.perms.Permitted(caller.ID, tool)
}

// Decide implements engine.Admission: the verdict of the first rule of the
// set, in order, that stops the call; allowed when none does.
func (r *Rules) Decide(ctx context.Context, caller *engine.Identity, t *tools.Tool, args json.RawMessage) engine.Verdict {
	if !r.Permitted(caller, t.Name) {
		return engine.Verdict{Effect: engine.Deny, Reason: fmt.Sprintf("this caller may not call %q", t.Name)}
	}
	if r.policies != nil {
		if v := r.policies.Decide(ctx, caller, t, args); v.Effect != engine.Allow {
			return v
		}
	}
	for _, a := range r.approvals {
		if a.caller(caller.ID) && a.tool(t.Name) {
			reason := a.reason
			if reason == "" {
				reason = fmt.Sprintf("calls of %s need approval", t.Name)
			}
			return engine.Verdict{Effect: engine.Hold, Reason: reason}
		}
	}
	return engine.Verdict{}
}
