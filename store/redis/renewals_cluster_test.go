package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
)

// TestRenewLogsAcrossSlots: RenewLogs's one pipeline renews logs whose
// keys live on every master of a Redis Cluster (the client splits it by
// slot), with an answer for each.
func TestRenewLogsAcrossSlots(t *testing.T) {
	cl := testenv.StartRedisCluster(t)
	ctx, cancel := context.WithDeadline(context.Background(), testenv.Deadline(t))
	defer cancel()
	s := openAt(t, cl.URL(), "renew:")
	var names []string
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		name := fmt.Sprint("log", i)
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		masters[cl.MasterOf(t, name).Addr] = true // the name is its keys' hash tag
	}
	if len(masters) < 2 {
		t.Fatalf("the logs are on %d masters; want them spread", len(masters))
	}
	if err := s.Open(ctx, "theirs", "other", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	errs, err := s.RenewLogs(ctx, "o", time.Hour, append(names, "theirs", "unknown")...)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs[:len(names)] {
		if err != nil {
			t.Errorf("RenewLogs answered %v for %s; want it renewed", err, names[i])
		}
	}
	if !errors.Is(errs[len(names)], store.ErrLeaseLost) || !errors.Is(errs[len(names)+1], store.ErrLogNotFound) {
		t.Errorf("RenewLogs answered %v, %v for another's log and an unknown one; want ErrLeaseLost, ErrLogNotFound", errs[len(names)], errs[len(names)+1])
	}
}
