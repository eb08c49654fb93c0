// Command stdio serves the test MCP server over stdin/stdout, for the
// gateway's tests of stdio servers. With TESTSERVER_PIDFILE set it writes its
// process ID there; with TESTSERVER_CANCELFILE set it writes "cancelled"
// there when the slow tool's call is cancelled. With TESTSERVER_URLFILE set
// it serves streamable HTTP on a free loopback port instead, and writes its
// URL there once it listens, so tests can kill a real HTTP server process.
//
// It is for the gateway's tests; nothing imports it.
package main

import (
	"context"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

func main() {
	if f := os.Getenv("TESTSERVER_PIDFILE"); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			log.Fatal(err)
		}
	}
	var hooks testserver.Hooks
	if f := os.Getenv("TESTSERVER_CANCELFILE"); f != "" {
		hooks.SlowCancelled = func() { _ = os.WriteFile(f, []byte("cancelled"), 0o600) }
	}
	srv := testserver.New(hooks)
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
