package engine

import (
	"context"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// Permissions decides which tools a caller may see and call. A nil
// Permissions in Config lets every caller call every tool.
type Permissions interface {
	// Permitted reports whether caller (see CallerFrom) may call the tool named
	// tool. It is asked about names that may not be registered and must not
	// depend on whether they are, so that a refusal reveals nothing about
	// the registry.
	Permitted(caller, tool string) bool
}

// Permits reports whether the caller of ctx (see CallerFrom) may call the
// named tool; a surface lists only the tools it permits.
func (e *Engine) Permits(ctx context.Context, name string) bool {
	return e.deps.Permissions == nil || e.deps.Permissions.Permitted(CallerFrom(ctx), name)
}

func (b *batch) permits(name string) bool { return b.e.Permits(b.callerCtx, name) }

// permitted ends a call its caller may not make with NOT_PERMITTED. The
// text is the same whether or not the tool exists, so a caller cannot probe
// the registry with it.
func permitted(_ context.Context, b *batch, i int) *toolwirev1.CallResult {
	call := b.req.GetCalls()[i]
	name := call.GetName()
	if b.permits(name) || isWrapper(call) {
		// A wrapper such as multi_tool_use.parallel is planned as unknown
		// and gets the explanation of what to do instead, which says
		// nothing about the registry either.
		return nil
	}
	return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED,
		fmt.Sprintf("not permitted: this caller may not call %q. Nothing was run; call only the tools you were given.", name))
}

// visibleNames returns the registered tool names the batch's caller may
// call: an UNKNOWN_TOOL result lists only these, lest it reveal the rest.
func (b *batch) visibleNames() []string {
	names := b.snap.Names()
	if b.e.deps.Permissions == nil {
		return names
	}
	visible := make([]string, 0, len(names))
	for _, n := range names {
		if b.permits(n) {
			visible = append(visible, n)
		}
	}
	return visible
}
