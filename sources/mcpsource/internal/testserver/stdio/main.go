// Command stdio serves the test MCP server over stdin/stdout, for the
// gateway's tests of stdio servers. With TESTSERVER_PIDFILE set it writes its
// process ID there; with TESTSERVER_CANCELFILE set it writes "cancelled"
// there when the slow tool's call is cancelled; with TESTSERVER_RELEASEFILE
// set the wait tool waits until that file exists; with TESTSERVER_PROTOCOL
// set it negotiates only that protocol version. With TESTSERVER_URLFILE set
// it serves streamable HTTP on a free loopback port instead, and writes its
// URL there once it listens, so tests can kill a real HTTP server process.
//
// Helpers, for the tests of what a server leaves running: with
// TESTSERVER_HELPER_PIDFILE set it starts a copy of itself that holds its
// stdout and stderr, sleeps for two minutes and writes its own process ID
// there, in the server's process group, or in a session of its own with
// TESTSERVER_HELPER_SETSID set; with TESTSERVER_EXIT_TOOL set it also
// offers the tool "exit", which ends the server (exit status 3) mid-call.
//
// Misbehaviours, for the tests of what the gateway says of them: with
// TESTSERVER_BANNER set it first writes a line of text to stdout, as
// servers that log there do (the variable's value, unless it is "1"); with TESTSERVER_HUGE_TOOL set it offers the
// tools "huge", whose result is 17 MiB of text, and "huge_note", which
// writes a 17 MiB notification to stdout before its result; with
// TESTSERVER_NUMBERS_TOOL set it offers the tool "numbers", whose
// structured content is the variable's value, as written.
//
// It is for the gateway's tests; nothing imports it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

func main() {
	if os.Getenv("TESTSERVER_HELPER") != "" {
		helper()
		return
	}
	if f := os.Getenv("TESTSERVER_HELPER_PIDFILE"); f != "" {
		startHelper(f, os.Getenv("TESTSERVER_HELPER_SETSID") != "")
	}
	if f := os.Getenv("TESTSERVER_PIDFILE"); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			log.Fatal(err)
		}
	}
	var hooks testserver.Hooks
	if f := os.Getenv("TESTSERVER_CANCELFILE"); f != "" {
		hooks.SlowCancelled = func() { _ = os.WriteFile(f, []byte("cancelled"), 0o600) }
	}
	if f := os.Getenv("TESTSERVER_RELEASEFILE"); f != "" {
		hooks.Wait = func(ctx context.Context) {
			for ctx.Err() == nil {
				if _, err := os.Stat(f); err == nil {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	if v := os.Getenv("TESTSERVER_PROTOCOL"); v != "" {
		hooks.ProtocolVersions = []string{v}
	}
	switch v := os.Getenv("TESTSERVER_BANNER"); v {
	case "":
	case "1":
		fmt.Println("Starting the test MCP server on stdio...")
	default:
		fmt.Println(v)
	}
	srv := testserver.New(hooks)
	if os.Getenv("TESTSERVER_HUGE_TOOL") != "" {
		mcp.AddTool(srv, &mcp.Tool{Name: "huge", Description: "Returns 17 MiB of text."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 17<<20)}}}, nil, nil
			})
		mcp.AddTool(srv, &mcp.Tool{Name: "huge_note", Description: "Writes a 17 MiB notification."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				// Written before the result, so it does not interleave with the SDK's writes.
				fmt.Printf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"%s"}}`+"\n", strings.Repeat("x", 17<<20))
				return &mcp.CallToolResult{}, nil, nil
			})
	}
	if v := os.Getenv("TESTSERVER_NUMBERS_TOOL"); v != "" {
		srv.AddTool(&mcp.Tool{Name: "numbers", Description: "Returns its structured content as written.", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: v}}, StructuredContent: json.RawMessage(v)}, nil
			})
	}
	if os.Getenv("TESTSERVER_EXIT_TOOL") != "" {
		mcp.AddTool(srv, &mcp.Tool{Name: "exit", Description: "Ends the server."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				os.Exit(3)
				return nil, nil, nil
			})
	}
	if f := os.Getenv("TESTSERVER_URLFILE"); f != "" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		// Written whole with a rename, so a reader never sees half a URL.
		if err := os.WriteFile(f+".tmp", []byte("http://"+lis.Addr().String()), 0o600); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(f+".tmp", f); err != nil {
			log.Fatal(err)
		}
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
		log.Fatal(http.Serve(lis, h))
	}
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
}

// startHelper starts a helper that inherits stdout and stderr, and waits
// until it has written its process ID to pidfile.
func startHelper(pidfile string, setsid bool) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TESTSERVER_HELPER=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(pidfile); err == nil && len(b) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// helper writes its process ID and sleeps, holding the stdout and stderr
// it was given.
func helper() {
	f := os.Getenv("TESTSERVER_HELPER_PIDFILE")
	if err := os.WriteFile(f+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(f+".tmp", f); err != nil {
		log.Fatal(err)
	}
	time.Sleep(2 * time.Minute)
}
