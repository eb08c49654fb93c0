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
