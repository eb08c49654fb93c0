package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// openStalledMCP opens o.streams requests to s's /mcp over h2c,
// o.perConn on a connection whose HTTP/2 windows are o.window, each one
// 2026-07-28 tools/call of echo with o.mcpText bytes of text, and reads
// nothing of any answer (the response's header, which the client's
// transport takes, excepted).
func openStalledMCP(ctx context.Context, s *server, o options) (*stalledStreams, error) {
	ctx, cancel := context.WithCancel(ctx)
	st := &stalledStreams{cancel: cancel}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("s", o.mcpText) +
		`"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	var client *http.Client
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range o.streams {
		if i%o.perConn == 0 {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			if o.window > 0 {
				tr.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: o.window, MaxReceiveBufferPerConnection: o.window}
			}
			st.transports = append(st.transports, tr)
			client = &http.Client{Transport: tr}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.http+"/mcp", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
			"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"} {
			req.Header.Set(k, v)
		}
		c := client
		wg.Go(func() {
			resp, err := c.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				st.refused++
				if st.firstErr == nil {
					st.firstErr = err
				}
				return
			}
			st.bodies = append(st.bodies, resp.Body) // read nothing
			if resp.StatusCode != http.StatusOK {
				st.statuses = append(st.statuses, resp.StatusCode)
			}
		})
		if o.openInterval > 0 {
			time.Sleep(o.openInterval)
		}
	}
	wg.Wait()
	return st, nil
}

// normalCallsMCP runs callers go-sdk MCP clients (2026-07-28), each
// calling echo n times, alternating between the two servers.
func normalCallsMCP(ctx context.Context, servers [2]*server, callers, n int) (*latencies, error) {
	var mu sync.Mutex
	lat := &latencies{}
	var wg sync.WaitGroup
	errc := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			var sessions [2]*mcp.ClientSession
			for k, s := range servers {
				tr := &http.Transport{MaxIdleConnsPerHost: 4}
				defer tr.CloseIdleConnections()
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "stalled-bench", Version: "v0"}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: "http://" + s.http + "/mcp", HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1},
					&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
				if err != nil {
					errc <- err
					return
				}
				defer cs.Close()
				sessions[k] = cs
			}
			for j := range n {
				k := (c + j) % 2
				start := time.Now()
				res, err := sessions[k].CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": strings.Repeat("n", 100)}})
				d := time.Since(start)
				var rpc *jsonrpc.Error
				mu.Lock()
				switch {
				case errors.As(err, &rpc) && rpc.Code == -32010: // resource exhausted
					lat.refused[k]++
				case err != nil || res.IsError:
					lat.failed[k]++
				default:
					lat.d[k] = append(lat.d[k], d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	return lat, ctx.Err()
}
