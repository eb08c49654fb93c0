package engine

import (
	"context"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Tools returns the declarations of snap's tools that the caller of ctx
// (see CallerFrom) may call, sorted by name: what every surface lists.
func (e *Engine) Tools(ctx context.Context, snap *tools.Snapshot) []*toolwirev1.Tool {
	out := make([]*toolwirev1.Tool, 0, snap.Len())
	for _, t := range snap.Tools() {
		if e.Permits(ctx, t.Name) {
			out = append(out, Declaration(t))
		}
	}
	return out
}

// Declaration returns t's declaration as the contract has it.
func Declaration(t *tools.Tool) *toolwirev1.Tool {
	p := &toolwirev1.Tool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  t.Description,
		InputSchema:  string(t.InputSchema),
		OutputSchema: string(t.OutputSchema),
		Annotations: &toolwirev1.ToolAnnotations{
			ReadOnly:    t.Annotations.ReadOnly,
			Destructive: t.Annotations.Destructive,
			Idempotent:  t.Annotations.Idempotent,
			OpenWorld:   t.Annotations.OpenWorld,
		},
		Source: toolwirev1.ToolSource(t.Source),
	}
	if t.Timeout > 0 {
		p.Timeout = durationpb.New(t.Timeout)
	}
	return p
}
