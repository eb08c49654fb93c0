package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/toolwire/toolwire/client"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultPort is the port of an --addr or --listen given without one.
const defaultPort = "50051"

// clientFlags are the flags every client command has.
type clientFlags struct {
	addr    string
	timeout time.Duration
	sec     clientSecurity // auth.go
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", defaultAddr, "server `address`: host:port, or host alone for port "+defaultPort)
	fs.DurationVar(&c.timeout, "timeout", 0, "deadline for the whole command (0: none)")
	c.sec.register(fs)
}

// withDefaultPort returns addr with port 50051 when it names a host alone
// ("localhost", "10.0.0.7", "[::1]"); grpc-go would otherwise take the
// DNS default, 443. Targets with a scheme (dns:///…, unix:…) are left alone.
func withDefaultPort(addr string) string {
	if strings.Contains(addr, ":/") || strings.HasPrefix(addr, "unix:") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.Count(host, ":") > 0 && net.ParseIP(host) == nil {
		return addr // not a host alone; let grpc-go say what is wrong
	}
	return net.JoinHostPort(host, defaultPort)
}

// notAURL refuses an --addr written as a URL, as the HTTP port's are
// (http://127.0.0.1:8080): grpc-go said "too many colons in address",
// having added its default port, 443, to the whole of it.
func notAURL(addr string) error {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil
	}
	host, _, _ := strings.Cut(rest, "/")
	tls := ""
	if scheme == "https" {
		tls = " --tls"
	}
	return fmt.Errorf("--addr %s is a URL; the client commands take the address of a gRPC port: --addr %s%s", addr, host, tls)
}

// dial returns a client and a context carrying the --timeout deadline; the
// returned function releases both.
func (c *clientFlags) dial(ctx context.Context) (*client.Client, context.Context, func(), error) {
	return c.dialWith(ctx)
}

// dialWith is dial with more client options.
func (c *clientFlags) dialWith(ctx context.Context, more ...client.Option) (*client.Client, context.Context, func(), error) {
	if err := notAURL(c.addr); err != nil {
		return nil, nil, nil, err
	}
	c.addr = withDefaultPort(c.addr)
	opts, err := c.sec.options(c.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	opts = append(opts, more...)
	cl, err := client.New(c.addr, opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	cancel := func() {}
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// explain turns an RPC error that means nothing listens at the address into
// a sentence a user can act on; other errors are wrapped with what failed.
func (c *clientFlags) explain(what string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		msg := st.Message()
		switch {
		case strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such file or directory"):
			return fmt.Errorf(`no toolwire server at %s (is "toolwire serve" running?)`, c.addr)
		case strings.Contains(msg, "while dialing: "):
			_, cause, _ := strings.Cut(msg, "while dialing: ")
			return fmt.Errorf("cannot reach a toolwire server at %s: %s", c.addr, strings.TrimSuffix(cause, `"`))
		case strings.Contains(msg, "name resolver error"):
			return fmt.Errorf("cannot reach a toolwire server at %s: the name does not resolve (%s)", c.addr, msg)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// clientCommand runs a client command and finishes its error: a command
// the user interrupted (Ctrl-C, which cancels ctx) prints "cancelled" and
// exits 130, as shells report a SIGINT; an unreachable server is explained.
func clientCommand(ctx context.Context, stderr io.Writer, cmd func() error) error {
	err := cmd()
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(stderr, "cancelled")
		return &exitError{code: 130}
	}
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
