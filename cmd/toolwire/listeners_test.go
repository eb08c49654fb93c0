package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
)

// fakePort records when it was told to stop and stops as it is told, or
// fails at once.
type fakePort struct {
	fail  error
	order *[]string
	mu    *sync.Mutex
	name  string
}

func (f fakePort) Serve(ctx context.Context, lis net.Listener) error {
	defer lis.Close()
	if f.fail != nil {
		return f.fail
	}
	<-ctx.Done()
	f.mu.Lock()
	*f.order = append(*f.order, f.name)
	f.mu.Unlock()
	return nil
}

func testListeners(t *testing.T, fail error) ([]listener, *[]string) {
	var order []string
	var mu sync.Mutex
	var ls []listener
	for _, p := range []struct {
		name string
		late bool
		fail error
	}{{"health", true, nil}, {"grpc", false, nil}, {"http", false, fail}, {"admin", true, nil}} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, listener{name: p.name, lis: lis, srv: fakePort{fail: p.fail, order: &order, mu: &mu, name: p.name}, late: p.late})
	}
	return ls, &order
}

// TestServeStopsLateListenersLast checks serve's one errgroup: when ctx is
// done every port stops, the late ones (health, admin) only after the
// others have drained; a port that fails stops the others and its error,
// named, is serve's.
func TestServeStopsLateListenersLast(t *testing.T) {
	t.Parallel()
	s := &serveRun{log: slog.New(slog.DiscardHandler)}
	ls, order := testListeners(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.serveAll(ctx, ls); err != nil {
		t.Fatalf("serve after ctx done: %v", err)
	}
	if got := strings.Join(*order, ","); !strings.HasPrefix(got, "grpc,http") && !strings.HasPrefix(got, "http,grpc") {
		t.Errorf("stop order %s; want grpc and http before health and admin", got)
	}

	ls, order = testListeners(t, errors.New("accept: broken"))
	err := s.serveAll(t.Context(), ls)
	if err == nil || err.Error() != "http: accept: broken" {
		t.Errorf("serve with a failing port: %v; want its error, named", err)
	}
	if len(*order) != 3 {
		t.Errorf("stopped %v; want the three other ports stopped by the failure", *order)
	}
}

// TestListenErrorsNameTheSetting: an address serve cannot listen on (one
// in use, one without a port) is an error naming which of its four
// addresses it is, key and flag; the gRPC port's said only "listen tcp
// 127.0.0.1:…: bind: address already in use".
func TestListenErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", taken.Addr().String()}, "listen (--listen): listen tcp " + taken.Addr().String() + ": bind: address already in use"},
		{[]string{"--listen", "127.0.0.1"}, "listen (--listen): listen tcp: address 127.0.0.1: missing port in address"},
		{[]string{"--listen", "127.0.0.1:0", "--http-listen", taken.Addr().String()}, "http_listen (--http-listen): listen tcp"},
		{[]string{"--listen", "127.0.0.1:0", "--health-listen", taken.Addr().String()}, "health_listen (--health-listen): listen tcp"},
		{[]string{"--listen", "127.0.0.1:0", "--admin-listen", taken.Addr().String()}, "admin_listen (--admin-listen): listen tcp"},
	} {
		err := run(t.Context(), append([]string{"serve", "--no-workspace"}, c.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v; want an error containing %q", c.args, err, c.want)
		}
	}
}
