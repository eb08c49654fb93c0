package remote

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeRemote is a ToolService that answers as its function fields say: a
// remote toolwire that is broken or hostile. WatchTools sends one
// revision and holds the stream; ListTools lists tools; ExecuteBatch
// runs execute.
type fakeRemote struct {
	toolwirev1.UnimplementedToolServiceServer
	list    func(*toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error)
	execute func(*toolwirev1.ExecuteBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error
}

func (f *fakeRemote) ListTools(_ context.Context, req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	return f.list(req)
}

func (f *fakeRemote) WatchTools(_ *toolwirev1.WatchToolsRequest, s grpc.ServerStreamingServer[toolwirev1.WatchToolsResponse]) error {
	if err := s.Send(&toolwirev1.WatchToolsResponse{Revision: "r1"}); err != nil {
		return err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

func (f *fakeRemote) ExecuteBatch(req *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	return f.execute(req, s)
}

// serveFake serves f on a loopback TCP socket until the test ends and
// returns its address.
func serveFake(t *testing.T, f *fakeRemote) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	toolwirev1.RegisterToolServiceServer(gs, f)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// oneTool lists one tool, "t".
func oneTool(*toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	return &toolwirev1.ListToolsResponse{Revision: "r1", Tools: []*toolwirev1.Tool{{Name: "t", InputSchema: `{"type":"object"}`}}}, nil
}

func textResult(id, text string) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Result{Result: &toolwirev1.CallResult{
		CallId: id, Content: []*toolwirev1.Content{{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: text}}}}}}}
}

// mountFake mounts the fake as "f" and returns its tool f_t.
func mountFake(t *testing.T, f *fakeRemote) *tools.Tool {
	t.Helper()
	mounts, reg := newMounts(t)
	if err := mounts.Sync(context.Background(), []Config{{Name: "f", Target: serveFake(t, f), Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the fake's tool", sourcetest.Has("f_t"))
	tool, _ := snap.Lookup("f_t")
	return tool
}

func progress(id, msg string) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{CallId: id, Message: msg}}}
}

// TestResultsAreTheCallsOwn forwards a call to remotes whose batches carry
// events of call IDs the call never had, results after its result, or a
// result and then silence. The call's result is the one naming it, taken
// as it arrives, and only its progress is reported: the last result of
// any ID was taken (a foreign "wrong" after the call's "right" replaced
// it; a foreign result alone was the call's), and a result followed by
// silence was held until the call's deadline, which reported the call as
// timed out.
func TestResultsAreTheCallsOwn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// events are sent for a call of ID id; then the stream ends, or
		// with hold it stays open until the client leaves.
		events func(id string) []*toolwirev1.ExecuteBatchResponse
		hold   bool
		want   string
	}{
		{"foreign results around the call's", func(id string) []*toolwirev1.ExecuteBatchResponse {
			return []*toolwirev1.ExecuteBatchResponse{textResult("other", "wrong"), textResult(id, "right"), textResult("other", "wrong")}
		}, false, "right"},
		{"results after the call's", func(id string) []*toolwirev1.ExecuteBatchResponse {
			return []*toolwirev1.ExecuteBatchResponse{textResult(id, "right"), textResult(id, "wrong")}
		}, false, "right"},
		{"a foreign result only", func(id string) []*toolwirev1.ExecuteBatchResponse {
			return []*toolwirev1.ExecuteBatchResponse{progress("other", "foreign"), textResult("other", "wrong")}
		}, false, `remote toolwire "f" ended the batch without a result`},
		{"the call's result, then silence", func(id string) []*toolwirev1.ExecuteBatchResponse {
			return []*toolwirev1.ExecuteBatchResponse{progress(id, "own"), textResult(id, "right"), progress(id, "after")}
		}, true, "right"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := mountFake(t, &fakeRemote{list: oneTool, execute: func(req *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
				for _, ev := range tc.events(req.GetCalls()[0].GetCallId()) {
					if err := s.Send(ev); err != nil {
						return err
					}
				}
				if tc.hold {
					<-s.Context().Done()
				}
				return nil
			}})
			// The deadline only keeps a broken handler from hanging.
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			var mu sync.Mutex
			var reported []string
			res, err := tool.Handler(ctx, tools.NewCall("mine", "f_t", nil, func(p tools.Progress) {
				mu.Lock()
				reported = append(reported, p.Message)
				mu.Unlock()
			}))
			if err != nil {
				t.Fatalf("the call failed: %v", err)
			}
			if len(res.Content) != 1 || res.Content[0].Text != tc.want {
				t.Errorf("result %+v, want the text %q", res, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range reported {
				if m != "own" {
					t.Errorf("progress %q reported; only the call's own, before its result, belongs to it", m)
				}
			}
		})
	}
}

// TestListingIsBounded mounts remotes whose ListTools never ends (a new
// page token on every page, each page's names after the last), cycles
// through one token, lists a name twice, or declares more bytes than a
// listing may hold. Each listing is cut at its first bound, the tools
// before the cut offered: the endless one was read until the 30 s
// listing timeout (901 pages of 1000 tools, 2 GiB of heap after 10 s, and
// no tool offered), and a name listed twice failed the whole update.
func TestListingIsBounded(t *testing.T) {
	t.Parallel()
	names := func(from, n int) []*toolwirev1.Tool {
		var out []*toolwirev1.Tool
		for i := range n {
			out = append(out, &toolwirev1.Tool{Name: fmt.Sprintf("t%04d", from+i), InputSchema: `{"type":"object"}`})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		page      func(n int, token string) *toolwirev1.ListToolsResponse // the n-th page asked for, from 1
		wantTools int
		maxPages  int64
	}{
		{"endless pages", func(n int, _ string) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Revision: "r1", Tools: names(10*n, 10), NextPageToken: fmt.Sprint(n)}
		}, 50, 5},
		{"one token again and again", func(n int, _ string) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Revision: "r1", Tools: names(10*n, 10), NextPageToken: "again"}
		}, 20, 2},
		{"more tools than a listing holds", func(n int, _ string) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Revision: "r1", Tools: names(0, 80)}
		}, 60, 1},
		{"more bytes than a listing holds", func(n int, _ string) *toolwirev1.ListToolsResponse {
			tl := names(10*n, 10)
			for _, x := range tl {
				x.Description = strings.Repeat("d", 100<<10)
			}
			return &toolwirev1.ListToolsResponse{Revision: "r1", Tools: tl, NextPageToken: fmt.Sprint(n)}
		}, 14, 2}, // 1500 KiB hold 14 of 100 KiB
		{"a name twice", func(n int, _ string) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Revision: "r1", Tools: append(names(0, 3), names(1, 1)...)}
		}, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pages atomic.Int64
			f := &fakeRemote{list: func(req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
				return tc.page(int(pages.Add(1)), req.GetPageToken()), nil
			}}
			mounts, reg := newMounts(t)
			mounts.bounds = listing.Bounds{Tools: 60, Bytes: 1500 << 10, Pages: 5}
			if err := mounts.Sync(context.Background(), []Config{{Name: "f", Target: serveFake(t, f), Insecure: true}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools before the cut", func(n []string) bool { return len(n) > 0 })
			if got := snap.Len(); got != tc.wantTools {
				t.Errorf("%d tools offered, want %d", got, tc.wantTools)
			}
			if got := pages.Load(); got > tc.maxPages {
				t.Errorf("%d pages read, want at most %d", got, tc.maxPages)
			}
		})
	}
}

func started(id string) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Started{Started: &toolwirev1.CallStarted{CallId: id}}}
}

// TestResultsLostOrLarge forwards calls to remotes that send a result
// larger than gRPC's default 4 MiB (a remote whose max_message_bytes
// allows it), one past what a mount receives, a stream that ends after
// the call started, and a refusal before it did. A 5 MiB result was
// reported as the call failing ("received message larger than max");
// it passes through. When the result is lost after the call started,
// the error says the call may have run, where it said the remote failed
// the call, inviting the model to make it again.
func TestResultsLostOrLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		send    func(id string, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error
		isError bool
		want    string // the result's text, or its start
	}{
		{"a result of 5 MiB", func(id string, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			s.Send(started(id))
			return s.Send(textResult(id, strings.Repeat("x", 5<<20)))
		}, false, strings.Repeat("x", 5<<20)},
		{"a result past what a mount receives", func(id string, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			s.Send(started(id))
			return s.Send(textResult(id, strings.Repeat("x", maxEventBytes)))
		}, true, `remote toolwire "f" lost the call after it started there, so it may have run`},
		{"the end of the stream after the call started", func(id string, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			return s.Send(started(id))
		}, true, `remote toolwire "f" ended the batch without the call's result after it started there, so it may have run`},
		{"a refusal before the call started", func(id string, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			return status.Error(codes.Unavailable, "draining")
		}, true, `remote toolwire "f" failed the call: draining`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := mountFake(t, &fakeRemote{list: oneTool, execute: func(req *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
				return tc.send(req.GetCalls()[0].GetCallId(), s)
			}})
			res, err := tool.Handler(context.Background(), tools.NewCall("mine", "f_t", nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Content) != 1 || res.IsError != tc.isError || !strings.HasPrefix(res.Content[0].Text, tc.want) {
				got := ""
				if len(res.Content) > 0 {
					got = res.Content[0].Text
				}
				t.Errorf("result is_error %v, %.200q; want is_error %v, %.200q", res.IsError, got, tc.isError, tc.want)
			}
		})
	}
}

// TestSchemasCompiledOnce: a listing's tools share one schema cache, and
// a declaration is compiled, so the registry does not compile it again:
// each tool compiled its schemas alone, and the registry again, at every
// listing. Counted in allocations: declaring a tool whose schema the
// listing has compiled already costs a small part of compiling it.
func TestSchemasCompiledOnce(t *testing.T) { // not parallel: AllocsPerRun
	var props []string
	for i := range 60 {
		props = append(props, fmt.Sprintf(`"field_%d":{"type":"string","description":"a field","maxLength":100}`, i))
	}
	schema := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	mt := &mount{cfg: Config{Name: "r"}}
	declare := func(name string, schemas *tools.SchemaCache) tools.Tool {
		d, err := mt.declaration(&toolwirev1.Tool{Name: name, InputSchema: schema, OutputSchema: schema}, schemas)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := testing.AllocsPerRun(3, func() { declare("first", &tools.SchemaCache{}) })
	listing := &tools.SchemaCache{}
	declare("first", listing)
	var d tools.Tool
	next := testing.AllocsPerRun(3, func() { d = declare("next", listing) })
	if next > first/4 {
		t.Errorf("declaring a tool of the listing's schema took %.0f allocations, the first %.0f; want its schemas compiled once, for the first", next, first)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if update := testing.AllocsPerRun(3, func() { _ = reg.Update([]string{"r_next"}, d) }); update > first/4 {
		t.Errorf("adding the declaration to a registry took %.0f allocations, a compile %.0f; want none compiled again", update, first)
	}
}
