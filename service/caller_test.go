package service

import (
	"context"
	"testing"
)

func TestCaller(t *testing.T) {
	t.Parallel()
	if got := Caller(context.Background()); got != "" {
		t.Errorf("Caller(background) = %q, want anonymous", got)
	}
	ctx := WithCaller(context.Background(), "agent-a")
	if got := Caller(ctx); got != "agent-a" {
		t.Errorf("Caller = %q, want agent-a", got)
	}
}
