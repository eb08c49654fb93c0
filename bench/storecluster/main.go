// Command storecluster measures what a Redis Cluster costs beside one
// Redis (issue 32), side by side in one run: two replicas alike but for
// the store — an engine and the gRPC service on a loopback port, as in
// go run ./bench — one on a single Redis and one on a Redis Cluster. In
// each round every replica gets, in turn, a detached one-call batch of
// echo and a keyed one-call batch (a new key each time, so the call is
// claimed, run and recorded), so the noise of a shared machine falls on
// both. It reports p50 and p99 of each and the cluster's ratio to the
// single Redis.
//
//	go run ./bench/storecluster --redis 127.0.0.1:6379 --cluster 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//
// The addresses default to those .ci/run exports for the tests
// (TOOLWIRE_TEST_REDIS_ADDR, TOOLWIRE_TEST_REDIS_CLUSTER_ADDRS).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	single := flag.String("redis", os.Getenv("TOOLWIRE_TEST_REDIS_ADDR"), "the single Redis, host:port")
	cluster := flag.String("cluster", os.Getenv("TOOLWIRE_TEST_REDIS_CLUSTER_ADDRS"), "the Redis Cluster's nodes, host:port,host:port,…")
	rounds := flag.Int("rounds", 2000, "rounds; each sends every kind of batch to every replica once")
	flag.Parse()
	if *single == "" || *cluster == "" {
		fmt.Fprintln(os.Stderr, "storecluster: --redis and --cluster are required")
		os.Exit(2)
	}
	if err := run(context.Background(), "redis://"+*single+"/0", "redis+cluster://"+*cluster, *rounds, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "storecluster:", err)
		os.Exit(1)
	}
}

// replica is an engine on one store, served over gRPC on loopback.
type replica struct {
	name  string
	store *redis.Store
	eng   *engine.Engine
	gs    *grpc.Server
	conn  *grpc.ClientConn
	tw    toolwirev1.ToolServiceClient
	times map[string][]time.Duration // by kind of batch
}

func newReplica(ctx context.Context, name, url string, reg *tools.Registry) (*replica, error) {
	st, err := redis.Open(ctx, url, redis.Options{Prefix: fmt.Sprintf("bench-%d:", time.Now().UnixNano())})
	if err != nil {
		return nil, err
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Idempotency: st, Vars: st, EventLog: st, Replica: name})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		st.Close()
		eng.Close()
		return nil, err
	}
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &replica{name: name, store: st, eng: eng, gs: gs, conn: conn, tw: toolwirev1.NewToolServiceClient(conn), times: map[string][]time.Duration{}}, nil
}

func (r *replica) close() {
	r.conn.Close()
	r.gs.Stop()
	r.eng.Close()
	r.store.Close()
}

// batch sends req and reads its stream to the end, returning the time
// from sending to the last event.
func (r *replica) batch(ctx context.Context, req *toolwirev1.ExecuteBatchRequest) (time.Duration, error) {
	start := time.Now()
	stream, err := r.tw.ExecuteBatch(ctx, req)
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
		if res := ev.GetResult(); res.GetIsError() || res.GetReplayed() {
			return 0, fmt.Errorf("%s: call %v", r.name, res)
		}
	}
}

var kinds = []string{"detached", "keyed"}

func run(ctx context.Context, singleURL, clusterURL string, rounds int, out io.Writer) error {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		return err
	}
	var reps []*replica
	for _, s := range []struct{ name, url string }{{"redis", singleURL}, {"redis-cluster", clusterURL}} {
		r, err := newReplica(ctx, s.name, s.url, reg)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer r.close()
		reps = append(reps, r)
	}
	echo := `{"text":"hello"}`
	for i := range rounds + rounds/10 { // the first tenth warms up
		for _, kind := range kinds {
			for _, r := range reps {
				c := &toolwirev1.ToolCall{CallId: "1", Name: "echo", Arguments: echo}
				req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{c}}
				switch kind {
				case "detached":
					req.Options = &toolwirev1.BatchOptions{Detach: true}
				case "keyed":
					c.IdempotencyKey = fmt.Sprint("k", i)
				}
				d, err := r.batch(ctx, req)
				if err != nil {
					return err
				}
				if i >= rounds/10 {
					r.times[kind] = append(r.times[kind], d)
				}
			}
		}
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "batch\tstore\tp50\tp99\tp50 ×redis\tp99 ×redis\t\n")
	for _, kind := range kinds {
		base50, base99 := pct(reps[0].times[kind], 50), pct(reps[0].times[kind], 99)
		for _, r := range reps {
			p50, p99 := pct(r.times[kind], 50), pct(r.times[kind], 99)
			fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%.2f\t%.2f\t\n", kind, r.name, p50.Round(time.Microsecond), p99.Round(time.Microsecond),
				float64(p50)/float64(base50), float64(p99)/float64(base99))
		}
	}
	return tw.Flush()
}

// pct is the p-th percentile of d.
func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
