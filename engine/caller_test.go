package engine

import (
	"context"
	"testing"
)

func TestCaller(t *testing.T) {
	t.Parallel()
	if got := CallerFrom(context.Background()); got != "" {
		t.Errorf("CallerFrom(background) = %q, want anonymous", got)
	}
	ctx := WithCaller(context.Background(), "agent-a")
	if got := CallerFrom(ctx); got != "agent-a" {
		t.Errorf("CallerFrom = %q, want agent-a", got)
	}
}
