package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// echoServer is the MCP server every MCP measurement calls: the go-sdk's
// server with one typed tool, echo, which returns its text unchanged. The
// bench serves it over streamable HTTP in process (startMCP) and over stdio
// as a child process (startStdio): the bench's own binary, run again with
// stdioEnv set.
func echoServer() *mcp.Server {
	type echoIn struct {
		Text string `json:"text" jsonschema:"the text to return"`
	}
	type echoOut struct {
		Text string `json:"text"`
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Returns the given text unchanged."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			return nil, echoOut(in), nil
		})
	return server
}

// stdioEnv, set to "1", makes the bench's binary (the command's or its
// test's) serve echoServer over stdin and stdout instead of measuring.
const stdioEnv = "TOOLWIRE_BENCH_MCP_STDIO"

// stdioDebug is the GODEBUG the stdio MCP server runs with. Without it the
// server (the go-sdk's, built with this Go) hung now and then as a garbage
// collection began, the world stopped and every thread asleep: twice in
// 632,000 direct calls, and in 3 of 46 --quick runs (docs/performance.md). With
// it, 1,403,700 calls went through. The measuring process keeps the
// defaults.
const stdioDebug = "asyncpreemptoff=1"

// serveStdioIfAsked serves echoServer over stdio and exits when stdioEnv
// says this process is the bench's stdio MCP server; otherwise it returns.
func serveStdioIfAsked() {
	if os.Getenv(stdioEnv) != "1" {
		return
	}
	if err := echoServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "bench stdio MCP server:", err)
	}
	os.Exit(0)
}

// stdioCommand is the bench's own binary, which, run with stdioEnv set, is
// its stdio MCP server.
func stdioCommand() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the bench's binary for the stdio MCP server: %w", err)
	}
	return exe, nil
}

// startStdio runs the bench's stdio MCP server as a child process and
// connects the go-sdk client to it: the direct stdio call the gateway's
// forwarded calls are compared with.
func (e *env) startStdio(ctx context.Context) error {
	exe, err := stdioCommand()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), stdioEnv+"=1", "GODEBUG="+stdioDebug)
	e.stdio, err = mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	return err
}

// stdioEcho calls echo of the stdio MCP server directly.
func (e *env) stdioEcho(ctx context.Context) error {
	return mcpCall(ctx, e.stdio, "echo")
}

// gatewayStdioEcho calls the stdio MCP server's echo through toolwire: a
// one-call batch of the gateway's stdio_echo.
func (e *env) gatewayStdioEcho(ctx context.Context) error {
	_, err := e.batch(ctx, oneCall(gatewayStdioTool))
	return err
}

// surfaceStdioEcho calls the stdio MCP server's echo through toolwire's
// /mcp, with the go-sdk client: MCP in front of MCP.
func (e *env) surfaceStdioEcho(ctx context.Context) error {
	return mcpCall(ctx, e.surfaceMCP, gatewayStdioTool)
}

// gatewayStdioTool is the stdio MCP server's echo as the gateway offers it.
const gatewayStdioTool = "stdio_echo"
