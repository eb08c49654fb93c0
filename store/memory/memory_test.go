package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestContract(t *testing.T) {
	open := func(t *testing.T) *memory.Store {
		s := memory.New(memory.Options{})
		t.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Idempotency(t, open)
	storetest.Vars(t, open)
	// One process holds a memory store: both "replicas" share the value.
	storetest.Signals(t, func(t *testing.T) (*memory.Store, *memory.Store) { s := open(t); return s, s })
}

func TestBounded(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{MaxEntries: 10})
	defer s.Close()
	for i := range 25 {
		if err := s.SetVar(ctx, "s", fmt.Sprint(i), []byte("1"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, fmt.Sprint(i), "fp", "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > 10 {
		t.Fatalf("store holds %d entries, over its bound of 10", n)
	}
	// The most recent writes survive.
	if _, ok, _ := s.GetVar(ctx, "s", "24"); !ok {
		t.Fatal("the latest variable was evicted")
	}
	if c, _ := s.Claim(ctx, "24", "fp", "p", time.Hour, time.Hour); c.State != store.InFlight {
		t.Fatalf("latest record = %v, want in flight", c.State)
	}
}

func TestClosed(t *testing.T) {
	s := memory.New(memory.Options{})
	s.Close()
	if _, err := s.Claim(context.Background(), "k", "fp", "o", time.Hour, time.Hour); err != store.ErrClosed {
		t.Fatalf("Claim after Close = %v, want ErrClosed", err)
	}
	if err := s.Signal(context.Background(), "t"); err != store.ErrClosed {
		t.Fatalf("Signal after Close = %v, want ErrClosed", err)
	}
	if _, ok := s.Watch("t", func() {}); ok {
		t.Fatal("Watch after Close took a watcher")
	}
}

func TestEventLogContract(t *testing.T) {
	storetest.EventLog(t, func(t *testing.T) *memory.Store {
		s := memory.New(memory.Options{MaxLogEntries: 5})
		t.Cleanup(func() { s.Close() })
		return s
	}, storetest.WithMaxLogEntries(5))
}

// TestBoundedInBytes: records whose results are large are evicted by
// MaxBytes long before MaxEntries, the most recent kept. A count alone let
// 800 keyed calls of 200 KiB results hold 163 MiB, and 100,000 would hold
// 20 GiB.
func TestBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	const maxBytes = 1 << 20
	s := memory.New(memory.Options{MaxBytes: maxBytes})
	defer s.Close()
	result := make([]byte, 100<<10)
	for i := range 50 {
		key := fmt.Sprint(i)
		if _, err := s.Claim(ctx, key, "fp", "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, "o", result, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.SetVar(ctx, "s", key, result, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := s.Bytes(); n > maxBytes {
		t.Fatalf("records and variables hold %d bytes, over MaxBytes %d", n, maxBytes)
	}
	if n := s.Len(); n > 20 {
		t.Fatalf("store holds %d entries of 100 KiB within 1 MiB", n)
	}
	if c, _ := s.Claim(ctx, "49", "fp", "p", time.Hour, time.Hour); c.State != store.Completed {
		t.Fatalf("latest record = %v, want completed", c.State)
	}
	if _, ok, _ := s.GetVar(ctx, "s", "49"); !ok {
		t.Fatal("the latest variable was evicted")
	}
	// Releasing a claim gives its bytes back.
	before, _ := s.Bytes()
	if _, err := s.Claim(ctx, "x", "fp", "o", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "x", "o"); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Bytes(); after != before {
		t.Fatalf("a claim released left %d bytes counted", after-before)
	}
}

// TestExpiredGoAtTheNextWrite: entries past their TTL are dropped by the
// next write, not kept until a bound is reached or they are read.
func TestExpiredGoAtTheNextWrite(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{})
	defer s.Close()
	for i := range 100 {
		if err := s.SetVar(ctx, "s", fmt.Sprint(i), make([]byte, 1024), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.SetVar(ctx, "s", "new", []byte("1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("store holds %d entries after its expired ones' TTL and a write, want 1", n)
	}
}

// TestLogsBoundedInBytes: finished event logs past MaxLogBytes go, the
// oldest first, before their TTL; logs still being written stay, however
// much they hold, and so does the one finished last. Without the bound
// 200 finished detached batches of four 200 KiB results held 164 MiB for
// their 24 hours.
func TestLogsBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	const maxLogBytes = 1 << 20
	s := memory.New(memory.Options{MaxLogBytes: maxLogBytes})
	defer s.Close()
	event := make([]byte, 100<<10)
	if err := s.Open(ctx, "running", "o", time.Hour, time.Hour, event); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		name := fmt.Sprint("log", i)
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour, event); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, name, "o", time.Hour, event); err != nil {
			t.Fatal(err)
		}
	}
	if _, n := s.Bytes(); n > maxLogBytes {
		t.Fatalf("logs hold %d bytes, over MaxLogBytes %d", n, maxLogBytes)
	}
	if _, err := s.Stat(ctx, "log0"); err != store.ErrLogNotFound {
		t.Fatalf("Stat of the log finished first = %v, want ErrLogNotFound", err)
	}
	if info, err := s.Stat(ctx, "log39"); err != nil || !info.Finished {
		t.Fatalf("Stat of the log finished last = %v, %v; want it kept", info, err)
	}
	// The running log outgrows the bound alone: it stays, and pushes out
	// every finished log but the last.
	for range 20 {
		if _, err := s.Append(ctx, "running", "o", event); err != nil {
			t.Fatalf("Append to the running log: %v", err)
		}
	}
	if n := s.Logs(); n != 2 {
		t.Fatalf("store holds %d logs, want the running one and the one finished last", n)
	}
	if info, err := s.Stat(ctx, "running"); err != nil || info.Last != 21 {
		t.Fatalf("Stat of the running log = %v, %v; want 21 entries", info, err)
	}
	// An expired log gives its bytes back.
	if err := s.Open(ctx, "short", "o", time.Millisecond, time.Millisecond, event); err != nil {
		t.Fatal(err)
	}
	_, before := s.Bytes()
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Stat(ctx, "short"); err != store.ErrLogNotFound {
		t.Fatalf("Stat of an expired log = %v, want ErrLogNotFound", err)
	}
	if _, after := s.Bytes(); before-after < len(event) {
		t.Fatalf("an expired log gave back %d bytes, want at least %d", before-after, len(event))
	}
}
