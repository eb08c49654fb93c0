// Package sourcetest holds what tests of background tool sources (the MCP
// gateway, the remote mounts) use to watch them: waiting for a registry's
// tools to reach a state, and a log buffer to read while they write.
//
// It is for the sources' tests: it imports tools/, never engine/, service/
// or cmd/.
package sourcetest

import (
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools"
)

// waitLimit only keeps a broken test from hanging; nothing is timed.
const waitLimit = 30 * time.Second

// WaitTools waits until the registry's names satisfy ok and returns its
// snapshot; what says what is awaited if it never comes.
func WaitTools(t testing.TB, reg *tools.Registry, what string, ok func(names []string) bool) *tools.Snapshot {
	t.Helper()
	limit := time.After(waitLimit)
	for {
		changed := reg.Changed()
		snap := reg.Snapshot()
		if ok(snap.Names()) {
			return snap
		}
		select {
		case <-changed:
		case <-limit:
			t.Fatalf("waiting for %s: tools are %v", what, snap.Names())
		}
	}
}

// Has is a condition for WaitTools: every one of names is offered.
func Has(names ...string) func([]string) bool {
	return func(got []string) bool {
		for _, n := range names {
			if !slices.Contains(got, n) {
				return false
			}
		}
		return true
	}
}

// Wait waits until ch is closed (or receives); what says what is awaited if
// it never comes.
func Wait(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("waiting for %s", what)
	}
}
