package engine

import (
	"context"
	"encoding/json"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// Admission decides who may call what with which arguments: one ordered
// set of rules answering one verdict, asked the same way for every
// surface. Package policy's Rules is the one a server runs with (each
// caller's permissions, then the CEL policies, then the approval rules);
// a nil Admission in Deps admits every call. It is asked two questions,
// at the two points where the engine can answer them without revealing
// what the caller may not see:
//
//   - Permitted, by a tool's name alone, when the engine lists tools for a
//     caller and when it plans a batch, before it says whether the tool
//     exists: a tool the caller may not call is listed nowhere and its
//     calls end NOT_PERMITTED, whether it exists or not;
//   - Decide, once per call, after its arguments are validated and before
//     it takes an idempotency key or a slot: allow, deny with a reason, or
//     hold for a person's approval (approval.go keeps the waiting).
//
// Its methods must not block: they run on the call's path.
type Admission interface {
	// Permitted reports whether caller may see and call the tool named
	// tool. It is asked about names that may not be registered and must
	// not depend on whether they are, so that a refusal reveals nothing
	// about the registry.
	Permitted(caller *Identity, tool string) bool
	// Decide gives the verdict on a call of t with args, validated against
	// t's input schema, by caller.
	Decide(ctx context.Context, caller *Identity, t *tools.Tool, args json.RawMessage) Verdict
}

// Effect is what a Verdict does to a call.
type Effect int

const (
	// Allow lets the call go on along its path.
	Allow Effect = iota
	// Deny ends the call NOT_PERMITTED, not run.
	Deny
	// Hold makes the call wait for a person's decision (ResolveApproval)
	// before it goes on; see approval.go.
	Hold
)

// Verdict is an Admission's decision on one call.
type Verdict struct {
	Effect Effect
	// Rule names the policy rule that decided, which a denied call's
	// result names in its details and a held call's reason names; "" when
	// no named rule did (a permission, an approval rule, or none).
	Rule string
	// Reason is why: for the model, of a denied call (say what to do
	// instead); told with the wait, of a held one.
	Reason string
}

// Permits reports whether the caller of ctx (see CallerFrom) may call the
// named tool; a surface lists only the tools it permits.
func (e *Engine) Permits(ctx context.Context, name string) bool {
	return e.deps.Admission == nil || e.deps.Admission.Permitted(IdentityFrom(ctx), name)
}

// permitted ends a call its caller may not make with NOT_PERMITTED, as the
// plan found it (newBatch asked Admission.Permitted once per call). The
// text is the same whether or not the tool exists, so a caller cannot
// probe the registry with it.
func permitted(_ context.Context, b *batch, i int) *toolwirev1.CallResult {
	call := b.req.GetCalls()[i]
	if !b.calls[i].refused || isWrapper(call) {
		// A wrapper such as multi_tool_use.parallel is planned as unknown
		// and gets the explanation of what to do instead, which says
		// nothing about the registry either.
		return nil
	}
	return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED,
		fmt.Sprintf("not permitted: this caller may not call %q. Nothing was run; call only the tools you were given.", call.GetName()))
}

// admitted asks the Admission for the call's verdict, once: a denied call
// ends NOT_PERMITTED, with the reason as the text, for the model, and the
// deciding rule's name in details; a held call waits for a person's
// decision (awaitApproval) and goes on when approved.
func admitted(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	a := b.e.deps.Admission
	if a == nil {
		return nil
	}
	c := &b.calls[i]
	v := a.Decide(ctx, IdentityFrom(b.callerCtx), c.tool, c.args)
	switch v.Effect {
	case Deny:
		if v.Rule == "" {
			return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED, fmt.Sprintf("not permitted: %s. Nothing was run.", v.Reason))
		}
		res := b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED, fmt.Sprintf("not permitted by policy %q: %s. Nothing was run.", v.Rule, v.Reason))
		details, _ := json.Marshal(struct {
			Policy string `json:"policy"`
		}{v.Rule})
		res.Details = string(details)
		return res
	case Hold:
		reason := v.Reason
		if v.Rule != "" {
			reason = fmt.Sprintf("policy %q: %s", v.Rule, v.Reason)
		}
		return b.awaitApproval(ctx, i, reason)
	}
	return nil
}

// visibleNames returns the registered tool names the batch's caller may
// call: an UNKNOWN_TOOL result lists only these, lest it reveal the rest.
func (b *batch) visibleNames() []string {
	names := b.snap.Names()
	if b.e.deps.Admission == nil {
		return names
	}
	visible := make([]string, 0, len(names))
	for _, n := range names {
		if b.e.Permits(b.callerCtx, n) {
			visible = append(visible, n)
		}
	}
	return visible
}
