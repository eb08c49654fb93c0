// Command stdio serves the test MCP server over stdin/stdout, for the
// gateway's tests of stdio servers. With TESTSERVER_PIDFILE set it writes its
// process ID there; with TESTSERVER_CANCELFILE set it writes "cancelled"
// there when the slow tool's call is cancelled.
package main

import (
	"context"
	"log"
	"os"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools/mcpgw/internal/testserver"
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
	if err := testserver.New(hooks).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
}
