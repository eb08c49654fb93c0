// Package grpcsource offers the methods of gRPC services as tools,
// discovered through the servers' reflection service, as listed under
// grpc_services: in toolwire's config file. Each server's tools are the
// registry source "grpc:<name>", named "<name>_<Service>_<Method>".
//
// The reflection service (grpc.reflection.v1, or v1alpha) lists the
// services and sends their descriptors; each unary and server-streaming
// method becomes a tool whose input schema is the request message's
// protobuf JSON mapping (schema.go) and whose output schema is the
// response's (a server-streaming method's: the list of its responses).
// Include and exclude patterns (glob.go) select methods by full name. A
// call is the request decoded with protojson into a dynamicpb message and
// sent on the server's connection with the call's context (deadline,
// cancellation) and the caller's traceparent; the response comes back as
// protojson text and structured content; a status error is an error
// result with its code and message. A stream's result is the messages
// that arrived when it ended or when the call's deadline came (method.go).
//
// Servers are kept with sources/internal/supervise as remote mounts are:
// connected in the background, re-resolved on every reload and whenever
// the connection comes back, their tools removed while they are away. A
// server a reload removes or changes offers no tools from then on, but its
// calls in flight finish on its old connection (sources/internal/inflight),
// which closes once they have.
// It must not import engine/, service/, store/ or cmd/.
package grpcsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/toolwire/toolwire/sources/internal/inflight"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/offer"
	"github.com/toolwire/toolwire/sources/internal/supervise"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
)

// resolveTimeout bounds one resolution through the reflection service.
const resolveTimeout = 30 * time.Second

// Services keeps the tools of a set of gRPC servers in a registry.
type Services struct {
	reg    *tools.Registry
	log    *slog.Logger
	set    *supervise.Set[Config]
	bounds listing.Bounds // of each server's tools; listing.Default unless a test lowers them
	// keepalive is how its connections find a server that stopped
	// answering; defaultKeepalive unless a test shortens it.
	keepalive keepalive.ClientParameters

	mu      sync.Mutex
	runners map[string]*server // the running one of each name

	closing sync.WaitGroup // one per connection retired with calls in flight
}

// New returns services adding tools to reg and logging to logger (nil
// discards). It connects to nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Services {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Services{reg: reg, log: logger, runners: map[string]*server{}, bounds: listing.Default, keepalive: defaultKeepalive}
	s.set = supervise.New(supervise.Hooks[Config]{
		Name:     func(c Config) string { return c.Name },
		Equal:    Config.equal,
		Validate: ValidateAll,
		Start:    s.newServer,
	})
	return s
}

// Status reports each gRPC server's connection: up, down or retrying.
func (s *Services) Status() []supervise.Status { return s.set.Status() }

// Check reports whether cfgs are a valid configuration, changing nothing.
func (s *Services) Check(_ context.Context, cfgs []Config) error { return ValidateAll(cfgs) }

// Sync makes the servers exactly cfgs, as remote mounts do, and has every
// server that stays re-resolve its services, so a reload picks up what
// changed on them. It returns at once.
func (s *Services) Sync(ctx context.Context, cfgs []Config) error {
	s.mu.Lock()
	before := maps.Clone(s.runners)
	s.mu.Unlock()
	if err := s.set.Sync(ctx, cfgs); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, c := range cfgs {
		want[c.Name] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, r := range s.runners {
		if !want[name] {
			delete(s.runners, name)
			continue
		}
		if before[name] != r {
			continue // started by this Sync: it resolves as it connects
		}
		select {
		case r.refresh <- struct{}{}:
		default: // one is pending
		}
	}
	return nil
}

// Close stops every server's loop, removes its tools and waits, calls in
// flight included.
func (s *Services) Close() error {
	s.set.Close()
	s.closing.Wait()
	return nil
}

// defaultKeepalive: a connection silent for Time while a call is on it
// is pinged (HTTP/2 PING), and closed when no answer comes within
// Timeout, failing its calls (UNAVAILABLE); the next connection then finds
// the server as it is (a frozen process's kernel still accepts the TCP
// connection, but no HTTP/2 handshake comes, and the connection fails
// after gRPC's connect timeout, taking the tools with it). Without pings a
// server that stopped answering (a frozen process, a path that drops
// packets) kept its connection, and each call waited out its deadline.
// Time is a gRPC server's default keepalive enforcement MinTime (5m): a
// server answers pings more frequent than it with GOAWAY
// (ENHANCE_YOUR_CALM), which would end a long call with no message for
// minutes on a healthy one.
var defaultKeepalive = keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second}

// server is one configured server: the Runner its loop reconnects with.
type server struct {
	cfg       Config
	log       *slog.Logger
	bounds    listing.Bounds
	keepalive keepalive.ClientParameters
	offered   *offer.Tools
	refresh   chan struct{}
	closing   *sync.WaitGroup // the Services'

	mu    sync.Mutex
	cc    *grpc.ClientConn // nil while not connected
	calls *inflight.Calls  // cc's
}

func (s *Services) newServer(c Config) supervise.Runner {
	r := &server{cfg: c, log: s.log.With("grpc", c.Name, "target", c.Target), bounds: s.bounds, keepalive: s.keepalive,
		offered: offer.New(s.reg, "grpc:"+c.Name, "gRPC", "the gRPC server's"),
		refresh: make(chan struct{}, 1), closing: &s.closing}
	s.mu.Lock()
	s.runners[c.Name] = r
	s.mu.Unlock()
	return r
}

// conn returns the connection with the call counted on it, and end to
// call when the call has returned; nil while there is none.
func (r *server) conn() (cc grpc.ClientConnInterface, end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc == nil || !r.calls.Begin() {
		return nil, nil
	}
	return r.cc, r.calls.End
}

// Retrying logs why the server is unavailable.
func (r *server) Retrying(err error, delay time.Duration) {
	r.log.Warn("gRPC server unavailable; retrying", "error", err, "retry_in", delay)
}

// Connect connects, resolves the services and offers their tools, and
// re-resolves when asked to (a reload) and when the connection comes back
// after a break. It returns when the connection fails, with the tools
// removed.
func (r *server) Connect(ctx context.Context) (bool, error) {
	tc, per, err := r.cfg.settings().Credentials()
	if err != nil {
		return false, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(tc), grpc.WithKeepaliveParams(r.keepalive)}
	if per != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(per))
	}
	cc, err := grpc.NewClient(r.cfg.Target, opts...)
	if err != nil {
		return false, err
	}
	r.closing.Add(1)
	calls := inflight.New(func() {
		cc.Close()
		r.closing.Done()
	})
	defer func() {
		// Tools first, so no new call starts; then the connection, once
		// the calls in flight on it have returned: a reload that changed
		// the server failed them at once ("the client connection is
		// closing"), results lost, calls that ran reported as lost.
		r.offered.Set(nil, r.log)
		r.mu.Lock()
		r.cc, r.calls = nil, nil
		r.mu.Unlock()
		calls.Retire()
	}()
	resolved := false
	resolveAndOffer := func() error {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		svcs, types, err := resolve(rctx, cc)
		if err != nil {
			return fmt.Errorf("reflection: %w", err)
		}
		r.mu.Lock()
		r.cc, r.calls = cc, calls
		r.mu.Unlock()
		if !resolved {
			r.log.Info("gRPC server connected")
			supervise.Up(ctx)
		}
		resolved = true
		r.offered.Set(methodTools(r.cfg, svcs, types, r, r.bounds, r.log), r.log)
		return nil
	}
	if err := resolveAndOffer(); err != nil {
		return false, err
	}
	ready := true
	for {
		st := cc.GetState()
		switch st {
		case connectivity.TransientFailure, connectivity.Shutdown:
			return true, errors.New("the connection failed")
		case connectivity.Idle:
			cc.Connect()
		case connectivity.Ready:
			if !ready {
				// Back after a break: the server may have changed.
				if err := resolveAndOffer(); err != nil {
					return true, err
				}
			}
			ready = true
		default:
			ready = false
		}
		if st != connectivity.Ready {
			ready = false
		}
		wctx, cancel := context.WithCancel(ctx)
		changed := make(chan struct{})
		go func() {
			cc.WaitForStateChange(wctx, st)
			close(changed)
		}()
		select {
		case <-ctx.Done():
			cancel()
			<-changed
			return true, ctx.Err()
		case <-r.refresh:
			cancel()
			<-changed
			if err := resolveAndOffer(); err != nil {
				return true, err
			}
		case <-changed:
			cancel()
		}
	}
}
