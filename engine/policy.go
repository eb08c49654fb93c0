package engine

import (
	"context"
	"encoding/json"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// Policy decides, call by call, whether a caller may make a call with its
// arguments: what Permissions cannot say by tool name alone ("run_command,
// but only go and git"). A nil Policy in Config allows every call that
// Permissions do. Package policy's rules in CEL are one.
type Policy interface {
	// Evaluate decides the call of t with args, validated against t's
	// input schema, by caller. It must not block: it runs on the call's
	// path.
	Evaluate(ctx context.Context, caller *Identity, t *tools.Tool, args json.RawMessage) Verdict
}

// Verdict is a Policy's decision on one call.
type Verdict struct {
	Deny bool // the call is refused, and not run
	// Approve holds the call for a person's approval (approval.go), with
	// Message as the reason told with the wait.
	Approve bool
	Rule    string // the rule that decided; "" when none did
	Message string // for the model: why, and what to do instead
}

// policed ends a call the policy refuses with NOT_PERMITTED: the rule's
// message as the text, for the model, and the rule's name in details.
func policed(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	p := b.e.deps.Policy
	if p == nil {
		return nil
	}
	c := &b.calls[i]
	v := p.Evaluate(ctx, IdentityFrom(b.callerCtx), c.tool, c.args)
	if v.Approve && !v.Deny {
		c.approvalReason = fmt.Sprintf("policy %q: %s", v.Rule, v.Message) // the approval step holds it
		return nil
	}
	if !v.Deny {
		return nil
	}
	res := b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED, fmt.Sprintf("not permitted by policy %q: %s. Nothing was run.", v.Rule, v.Message))
	details, _ := json.Marshal(struct {
		Policy string `json:"policy"`
	}{v.Rule})
	res.Details = string(details)
	return res
}
