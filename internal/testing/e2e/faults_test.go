package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// runID keeps the keys of one test run apart from earlier runs' in a Redis
// that outlives them.
func runID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// Fault 1: two replicas share one real Redis. A is killed with SIGKILL while
// the third of five unsafe calls runs; the client sends the same batch to B.
// Every call gets a result; the two that completed on A are replayed (their
// side effect stays at one); the one in flight runs at most twice (B takes
// it over once A's lease runs out); the rest run once.
func TestFault1_KilledReplicaBatchResentToAnother(t *testing.T) {
	t.Parallel()
	redisURL := "redis://" + testenv.RedisAddr(t) + "/0"
	effects := newSideEffects(t)
	args := []string{"--store", redisURL, "--idempotency-lease", "1s"}
	a := start(t, effects.env(), countserverBin, args...)
	b := start(t, effects.env(), countserverBin, args...)
	req := bumpBatch(runID(t), 5, 300)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stream, err := toolwirev1.NewToolServiceClient(dial(t, a.addr)).ExecuteBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	completedOnA := map[string]bool{}
	killed := false
	_, err = collect(stream, func(ev *toolwirev1.ExecuteBatchResponse) {
		if r := ev.GetResult(); r != nil {
			completedOnA[r.GetCallId()] = true
		}
		// Once two calls are done and the third is running (its side effect
		// has happened), kill A without letting it clean up.
		if s := ev.GetStarted(); s != nil && s.GetCallId() == "c2" && !killed {
			for effects.count("c2") == 0 {
				time.Sleep(time.Millisecond)
			}
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	})
	if err == nil || !killed {
		t.Fatalf("the stream from A ended cleanly (killed=%v): the kill came too late", killed)
	}
	if len(completedOnA) != 2 || !completedOnA["c0"] || !completedOnA["c1"] {
		t.Fatalf("completed on A before the kill: %v, want c0 and c1", completedOnA)
	}
	_ = a.wait(t)

	events := execute(t, dial(t, b.addr), req)
	got := results(t, events)
	for _, c := range req.GetCalls() {
		id := c.GetCallId()
		r := got[id]
		if r == nil || r.GetIsError() {
			t.Errorf("%s: result %v %q, want a success", id, r.GetErrorKind(), text(r))
			continue
		}
		switch id {
		case "c0", "c1":
			if !r.GetReplayed() || ranBy(r) != a.cmd.Process.Pid {
				t.Errorf("%s completed on A but was not replayed from it (replayed=%v, ran by %d)", id, r.GetReplayed(), ranBy(r))
			}
			if n := effects.count(id); n != 1 {
				t.Errorf("%s's side effect happened %d times, want 1", id, n)
			}
		case "c2":
			if n := effects.count(id); n < 1 || n > 2 {
				t.Errorf("the call in flight ran %d times, want at most twice", n)
			}
		default:
			if n := effects.count(id); n != 1 || r.GetReplayed() {
				t.Errorf("%s: side effect %d times, replayed=%v; want one fresh run", id, n, r.GetReplayed())
			}
		}
	}
	if f := finished(t, events); f.GetReplayed() != 2 || f.GetSucceeded() != 5 {
		t.Errorf("BatchFinished = %v, want 5 succeeded, 2 of them replayed", f)
	}
}

// Fault 2: the bbolt store keeps a replica's records across a restart: the
// same batch sent before and after runs nothing twice.
func TestFault2_BoltStoreSurvivesRestart(t *testing.T) {
	t.Parallel()
	effects := newSideEffects(t)
	db := "bolt://" + filepath.Join(t.TempDir(), "toolwire.db")
	req := bumpBatch(runID(t), 3, 10)

	first := start(t, effects.env(), countserverBin, "--store", db)
	before := results(t, execute(t, dial(t, first.addr), req))
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.wait(t); err != nil {
		t.Fatalf("first process: %v\n%s", err, first.logText())
	}

	second := start(t, effects.env(), countserverBin, "--store", db)
	events := execute(t, dial(t, second.addr), req)
	after := results(t, events)
	for _, c := range req.GetCalls() {
		id := c.GetCallId()
		if before[id].GetIsError() || !after[id].GetReplayed() {
			t.Errorf("%s: before %q, after replayed=%v; want a replay", id, text(before[id]), after[id].GetReplayed())
		}
		sameOutcome(t, before[id], after[id])
		if n := effects.count(id); n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}
	if f := finished(t, events); f.GetReplayed() != 3 {
		t.Errorf("BatchFinished = %v, want 3 replayed", f)
	}
}

// Fault 3: SIGTERM while 1,000 calls are in flight. Health turns
// NOT_SERVING while the streams still run; calls that end within the drain
// timeout succeed, the rest are cancelled with results; every stream ends
// with BatchFinished; the process exits 0 within the drain timeout plus a
// generous margin.
func TestFault3_GracefulDrainUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		streams   = 10
		perStream = 100
		drain     = 8 * time.Second
	)
	srv := start(t, nil, toolwireBin, "serve", "--diag", "--listen", "127.0.0.1:0",
		"--max-parallel", "1000", "--drain-timeout", drain.String())
	conn := dial(t, srv.addr)
	client := toolwirev1.NewToolServiceClient(conn)
	health := healthpb.NewHealthClient(dial(t, srv.addr))

	var started, doneStreams atomic.Int32
	allStarted := make(chan struct{})
	var once sync.Once
	type outcome struct {
		events []*toolwirev1.ExecuteBatchResponse
		err    error
	}
	outcomes := make(chan outcome, streams)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for s := range streams {
		req := &toolwirev1.ExecuteBatchRequest{}
		for i := range perStream {
			ms := 4000 // finishes within the drain timeout
			if i%2 == 1 {
				ms = 600000 // is cancelled when it passes
			}
			req.Calls = append(req.Calls, &toolwirev1.ToolCall{
				CallId: fmt.Sprintf("s%d-%d", s, i), Name: "sleep", Arguments: fmt.Sprintf(`{"ms":%d}`, ms)})
		}
		go func() {
			stream, err := client.ExecuteBatch(ctx, req)
			if err != nil {
				outcomes <- outcome{err: err}
				return
			}
			events, err := collect(stream, func(ev *toolwirev1.ExecuteBatchResponse) {
				if ev.GetStarted() != nil && started.Add(1) == streams*perStream {
					once.Do(func() { close(allStarted) })
				}
			})
			doneStreams.Add(1)
			outcomes <- outcome{events, err}
		}()
	}
	select {
	case <-allStarted:
	case <-time.After(testTimeout):
		t.Fatalf("only %d of %d calls started", started.Load(), streams*perStream)
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	for {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: toolwirev1.ToolService_ServiceDesc.ServiceName})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if doneStreams.Load() > 0 {
			t.Fatalf("a stream ended before health turned NOT_SERVING (last: %v, %v)", resp.GetStatus(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	succeeded, cancelled := 0, 0
	for range streams {
		o := <-outcomes
		if o.err != nil {
			t.Fatalf("a stream failed: %v", o.err)
		}
		f := finished(t, o.events)
		rs := results(t, o.events)
		if len(rs) != perStream || f.GetSucceeded()+f.GetFailed()+f.GetSkipped() != perStream {
			t.Fatalf("a stream has %d results, BatchFinished %v; want %d", len(rs), f, perStream)
		}
		for id, r := range rs {
			switch {
			case !r.GetIsError():
				succeeded++
			case r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_CANCELLED && strings.Contains(text(r), "shutting down"):
				cancelled++
			default:
				t.Errorf("%s: %v %q", id, r.GetErrorKind(), text(r))
			}
		}
	}
	if succeeded != streams*perStream/2 || cancelled != streams*perStream/2 {
		t.Errorf("%d succeeded and %d cancelled, want %d each", succeeded, cancelled, streams*perStream/2)
	}
	if err := srv.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0\n%s", err, srv.logText())
	}
	// Generous: the drain timeout, the abandon grace, and room for a loaded machine.
	if took, limit := time.Since(signalled), drain+2*time.Second+20*time.Second; took > limit {
		t.Errorf("exit took %s after SIGTERM, want under %s", took, limit)
	}
}

// Fault 4: 50 clients send the same keyed call at once: it runs exactly
// once, and all 50 get the same result. With a shared Redis the clients are
// spread over two replicas.
func TestFault4_ConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
		procs int
	}{
		{"memory", func(*testing.T) string { return "memory" }, 1},
		{"redis_two_replicas", func(t *testing.T) string { return "redis://" + testenv.RedisAddr(t) + "/0" }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			effects := newSideEffects(t)
			storeURL := tc.store(t)
			var addrs []string
			for range tc.procs {
				addrs = append(addrs, start(t, effects.env(), countserverBin, "--store", storeURL).addr)
			}
			req := bumpBatch(runID(t), 1, 200)
			const clients = 50
			got := make([]*toolwirev1.CallResult, clients)
			var wg sync.WaitGroup
			for i := range clients {
				conn := dial(t, addrs[i%len(addrs)]) // a client each
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
					defer cancel()
					stream, err := toolwirev1.NewToolServiceClient(conn).ExecuteBatch(ctx, req)
					if err != nil {
						t.Error(err)
						return
					}
					events, err := collect(stream, nil)
					if err != nil {
						t.Error(err)
						return
					}
					got[i] = results(t, events)["c0"]
				})
			}
			wg.Wait()
			if n := effects.count("c0"); n != 1 {
				t.Fatalf("%d clients sent the same call; it ran %d times, want once", clients, n)
			}
			replayed := 0
			for _, r := range got {
				if r.GetIsError() {
					t.Fatalf("result %v %q", r.GetErrorKind(), text(r))
				}
				sameOutcome(t, got[0], r)
				if r.GetReplayed() {
					replayed++
				}
			}
			if replayed != clients-1 {
				t.Errorf("%d results replayed, want %d", replayed, clients-1)
			}
		})
	}
}
