package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
)

// redisEnv names the Redis server (host:port) the detached rows use; unset,
// the Redis row is left out.
const redisEnv = "TOOLWIRE_BENCH_REDIS"

// detachRow compares a one-call batch of echo sent plainly and with detach
// on one store, each through a replica of its own over gRPC, and times an
// AttachBatch on a second replica sharing the store to its first event.
type detachRow struct {
	Store       string  `json:"store"`
	Plain       latency `json:"plain"`
	Detached    latency `json:"detached"`
	AttachFirst latency `json:"attach_first_event"` // zero for bolt: one process's file
}

// replica is an engine on a store, served over gRPC.
type replica struct {
	eng  *engine.Engine
	gs   *grpc.Server
	conn *grpc.ClientConn
	tw   toolwirev1.ToolServiceClient
}

func newReplica(reg *tools.Registry, st store.Store, name string) (*replica, error) {
	eng := engine.New(engine.Config{BatchTTL: 10 * time.Minute}, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Idempotency: st, Vars: st, EventLog: st, Replica: name})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	conn, err := serve(gs)
	if err != nil {
		return nil, err
	}
	return &replica{eng: eng, gs: gs, conn: conn, tw: toolwirev1.NewToolServiceClient(conn)}, nil
}

func (r *replica) close() {
	r.eng.CancelCalls()
	r.conn.Close()
	r.gs.Stop()
	r.eng.Close()
}

func measureDetach(ctx context.Context, _ *env, sc scale, rep *report) error {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "toolwire-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stores := []struct {
		name  string
		open  func() (store.Store, error)
		share bool // a second replica can share it
	}{
		{"memory", func() (store.Store, error) { return memory.New(memory.Options{}), nil }, true},
		{"bolt", func() (store.Store, error) { return bolt.Open(filepath.Join(dir, "bench.db"), bolt.Options{}) }, false},
	}
	if addr := os.Getenv(redisEnv); addr != "" {
		stores = append(stores, struct {
			name  string
			open  func() (store.Store, error)
			share bool
		}{"redis", func() (store.Store, error) {
			return redis.Open(ctx, "redis://"+addr+"/0", redis.Options{Prefix: fmt.Sprintf("bench-%d:", time.Now().UnixNano())})
		}, true})
	}
	for _, s := range stores {
		st, err := s.open()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		row, err := detachOn(ctx, reg, st, s.name, s.share, sc.DetachRuns)
		st.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		rep.Detach = append(rep.Detach, row)
	}
	return nil
}

func detachOn(ctx context.Context, reg *tools.Registry, st store.Store, name string, share bool, runs int) (detachRow, error) {
	row := detachRow{Store: name}
	a, err := newReplica(reg, st, "a")
	if err != nil {
		return row, err
	}
	defer a.close()
	call := []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: echoArgs}}
	one := func(detach bool) (time.Duration, error) {
		start := time.Now()
		stream, err := a.tw.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: call, Options: &toolwirev1.BatchOptions{Detach: detach}})
		if err != nil {
			return 0, err
		}
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return time.Since(start), nil
			}
			if err != nil {
				return 0, err
			}
			if r := ev.GetResult(); r.GetIsError() {
				return 0, errors.New("call failed: " + r.String())
			}
		}
	}
	// Alternate, so the two share whatever the machine does meanwhile.
	var plain, detached []time.Duration
	for range runs {
		for _, d := range []bool{false, true} {
			t, err := one(d)
			if err != nil {
				return row, err
			}
			if d {
				detached = append(detached, t)
			} else {
				plain = append(plain, t)
			}
		}
	}
	row.Plain, row.Detached = summarize(plain), summarize(detached)
	if !share {
		return row, nil
	}
	b, err := newReplica(reg, st, "b")
	if err != nil {
		return row, err
	}
	defer b.close()
	// A batch that runs while B attaches: a long sleep on A, left by its client.
	sctx, cancel := context.WithCancel(ctx)
	stream, err := a.tw.ExecuteBatch(sctx, &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{{CallId: "s", Name: "sleep", Arguments: `{"ms":600000}`}},
		Options: &toolwirev1.BatchOptions{Detach: true},
	})
	if err != nil {
		cancel()
		return row, err
	}
	first, err := stream.Recv()
	cancel()
	if err != nil {
		return row, err
	}
	id := first.GetAccepted().GetBatchId()
	var attach []time.Duration
	for range runs {
		actx, stop := context.WithCancel(ctx)
		start := time.Now()
		s, err := b.tw.AttachBatch(actx, &toolwirev1.AttachBatchRequest{BatchId: id})
		if err == nil {
			_, err = s.Recv()
		}
		attach = append(attach, time.Since(start))
		stop()
		if err != nil {
			return row, err
		}
	}
	row.AttachFirst = summarize(attach)
	_, err = b.tw.CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: id})
	return row, err
}
