// Command countserver is "toolwire serve" for the end-to-end fault tests:
// the diagnostic tools plus bump, a tool with a side effect the test counts.
// bump POSTs its id to the URL in $BUMP_URL, then sleeps for its ms, so a
// test can kill the server while a bump is in flight. It takes the store
// flags of toolwire serve and logs the same listening line.
//
// It composes what serve composes, plus its one tool; nothing imports it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/store/storeurl"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "countserver:", err)
		os.Exit(1)
	}
}

// BumpArgs are bump's arguments.
type BumpArgs struct {
	ID string `json:"id"`
	MS int    `json:"ms"`
}

// BumpOutput is bump's structured output.
type BumpOutput struct {
	ID  string `json:"id"`
	Pid int    `json:"pid"` // which process ran it
}

func run(ctx context.Context) error {
	var cfg engine.Config
	fs := flag.NewFlagSet("countserver", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	storeURL := fs.String("store", "memory", "store URL")
	fs.DurationVar(&cfg.IdempotencyLease, "idempotency-lease", 0, "lease")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 0, "drain timeout")
	fs.IntVar(&cfg.MaxParallel, "max-parallel", 0, "max parallel")
	_ = fs.Parse(os.Args[1:])
	deps := engine.Deps{Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 1}))}

	target := os.Getenv("BUMP_URL")
	bump := tools.MustTyped("bump", "Counts one side effect at $BUMP_URL, then sleeps ms.",
		func(ctx context.Context, _ *tools.Call, in BumpArgs) (*tools.Result, BumpOutput, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"?id="+url.QueryEscape(in.ID), nil)
			if err != nil {
				return nil, BumpOutput{}, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, BumpOutput{}, err
			}
			resp.Body.Close()
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
				return nil, BumpOutput{}, ctx.Err()
			}
			return nil, BumpOutput{ID: in.ID, Pid: os.Getpid()}, nil
		})
	bump.Annotations = tools.Annotations{Destructive: true, OpenWorld: true}
	reg, err := tools.NewRegistry(append(diag.Tools(), bump)...)
	if err != nil {
		return err
	}
	st, err := storeurl.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	deps.Idempotency, deps.Vars = st, st
	eng := engine.New(cfg, deps)
	defer eng.Close()
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "{\"msg\":\"toolwire listening on %s\",\"addr\":%q}\n", lis.Addr(), lis.Addr().String())
	return srv.Serve(ctx, lis)
}
