package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// supergateway (npm, supergateway 4.0.0) is the usual way to put a stdio
// MCP server behind streamable HTTP. The bench runs two in front of the
// same stdio MCP server toolwire's gateway runs, and times the same client
// calling echo through each, beside MCP client → /mcp → mcp stdio:
//   - as its README starts it (stateless), which spawns the stdio server
//     anew for every request, whatever the protocol: so few calls are timed;
//   - with --stateful and a client at 2025-11-25, its fastest mode: one
//     child per session (a 2026-07-28 client has no session, so it would
//     again get a child per request).

// supergatewayDirs are where the bench looks for supergateway when
// --supergateway is not given: bench/testdata/supergateway after `npm ci`
// there, from the repository's root (go run ./bench) or from bench/ (its
// tests).
var supergatewayDirs = []string{"bench/testdata/supergateway", "testdata/supergateway"}

// findSupergateway returns the supergateway command installed in one of
// supergatewayDirs, or "" when none is.
func findSupergateway() string {
	for _, d := range supergatewayDirs {
		p := filepath.Join(d, "node_modules", ".bin", "supergateway")
		if _, err := os.Stat(p); err == nil {
			if abs, err := filepath.Abs(p); err == nil {
				return abs
			}
		}
	}
	return ""
}

// sessionProtocol is the newest MCP revision with sessions.
const sessionProtocol = "2025-11-25"

// supergateway is one running supergateway and a go-sdk client of it.
type supergateway struct {
	cs     *mcp.ClientSession
	cmd    *exec.Cmd
	exited chan error
	hc     *http.Client
	marker string // an argument of every stdio server it starts
}

// startSupergateway runs command (supergateway) in front of the bench's
// stdio MCP server on a free loopback port, stateful or as its README
// starts it, and connects the go-sdk client to it.
func startSupergateway(ctx context.Context, command string, stateful bool) (_ *supergateway, err error) {
	exe, err := stdioCommand()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &supergateway{exited: make(chan error, 1)}
	// The marker argument, which the stdio server ignores, names the
	// children supergateway starts, for a test to find any left behind.
	s.marker = fmt.Sprintf("toolwire-bench-supergateway-%d-%v", os.Getpid(), stateful)
	args := []string{"--stdio", strconv.Quote(exe) + " " + s.marker, "--outputTransport", "streamableHttp",
		"--port", strconv.Itoa(port), "--logLevel", "none"}
	if stateful {
		args = append(args, "--stateful")
	}
	s.cmd = exec.Command(command, args...)
	s.cmd.Env = append(os.Environ(), stdioEnv+"=1", "GODEBUG="+stdioDebug)
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting supergateway: %w", err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			return nil, fmt.Errorf("supergateway exited before listening: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.New("supergateway did not listen within 30s")
		}
	}
	s.hc = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	var opts *mcp.ClientSessionOptions
	if stateful {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol}
	}
	s.cs, err = mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: s.hc, DisableStandaloneSSE: true}, opts)
	if err != nil {
		return nil, fmt.Errorf("connecting to supergateway: %w", err)
	}
	if v := s.cs.InitializeResult().ProtocolVersion; stateful && v != sessionProtocol {
		return nil, fmt.Errorf("supergateway answered protocol %s, want %s (a session)", v, sessionProtocol)
	}
	return s, nil
}

// echo calls the stdio MCP server's echo through supergateway.
func (s *supergateway) echo(ctx context.Context) error {
	return mcpCall(ctx, s.cs, "echo")
}

// stop ends the client and supergateway (SIGINT, then SIGKILL after 5 s),
// which ends the stdio servers it started.
func (s *supergateway) stop() {
	if s == nil {
		return
	}
	if s.cs != nil {
		_ = s.cs.Close()
		s.hc.CloseIdleConnections()
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.exited:
		s.exited <- err
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// startSupergateways starts both supergateways of the comparison.
func (e *env) startSupergateways(ctx context.Context, command string) (err error) {
	if e.sgStateful, err = startSupergateway(ctx, command, true); err != nil {
		return err
	}
	e.sgDefault, err = startSupergateway(ctx, command, false)
	return err
}

// freePort is a loopback TCP port free a moment ago, for a program that
// takes a port number rather than a listener.
func freePort() (int, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port, nil
}
