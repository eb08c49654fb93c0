package client_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// hostile is a ToolService whose RPCs do what its function fields say: a
// server that breaks the contract, served over a real socket.
type hostile struct {
	toolwirev1.UnimplementedToolServiceServer
	list    func(*toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error)
	execute func(*toolwirev1.ExecuteBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error
	attach  func(*toolwirev1.AttachBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error
}

func (h *hostile) ListTools(_ context.Context, req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	return h.list(req)
}

func (h *hostile) ExecuteBatch(req *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	return h.execute(req, s)
}

func (h *hostile) AttachBatch(req *toolwirev1.AttachBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	return h.attach(req, s)
}

// serveHostile serves h on a loopback port and returns a client for it.
func serveHostile(t *testing.T, h *hostile, opts ...client.Option) *client.Client {
	t.Helper()
	addr := serveGRPC(t, func(gs *grpc.Server) { toolwirev1.RegisterToolServiceServer(gs, h) })
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seqd returns a copy of ev numbered seq.
func seqd(seq uint64, ev *toolwirev1.ExecuteBatchResponse) *toolwirev1.ExecuteBatchResponse {
	ev = proto.Clone(ev).(*toolwirev1.ExecuteBatchResponse)
	ev.Seq = seq
	return ev
}

// TestListToolsEndlessPages: a server whose pages never end, each going on
// from the last, is read up to the client's bounds on a listing (64 MiB,
// or the pages WithListLimits allows), then refused with an error naming
// the bound; one that names a page token twice is refused at once.
func TestListToolsEndlessPages(t *testing.T) {
	t.Parallel()
	desc := strings.Repeat("d", 1000)
	tests := []struct {
		name     string
		opts     []client.Option
		tools    int  // per page, each with a 1,000-byte description
		token    bool // the same token on every page
		maxPages int64
		want     string
	}{
		{"pages of 1 MB", nil, 1000, false, 66, "more than 64 MiB"},
		{"small pages", []client.Option{client.WithListLimits(0, 100)}, 1, false, 100, "read 100 pages"},
		{"a token twice", nil, 1, true, 2, "page token it named before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var pages atomic.Int64
			c := serveHostile(t, &hostile{list: func(*toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
				n := pages.Add(1)
				resp := &toolwirev1.ListToolsResponse{Revision: "r", NextPageToken: fmt.Sprint("p", n)}
				if tt.token {
					resp.NextPageToken = "more"
				}
				for i := range tt.tools {
					resp.Tools = append(resp.Tools, &toolwirev1.Tool{Name: fmt.Sprintf("t%09d-%04d", n, i), Description: desc})
				}
				return resp, nil
			}}, tt.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := c.ListTools(ctx)
			runtime.ReadMemStats(&after)
			t.Logf("%d pages, %d MiB allocated: %v", pages.Load(), (after.TotalAlloc-before.TotalAlloc)>>20, err)
			if err == nil || !strings.Contains(err.Error(), tt.want) || pages.Load() > tt.maxPages {
				t.Errorf("%v after %d pages; want an error saying %q after at most %d", err, pages.Load(), tt.want, tt.maxPages)
			}
		})
	}
}
