package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/sources/internal/inflight"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/offer"
	"github.com/toolwire/toolwire/sources/internal/supervise"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/baggage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	// listTimeout bounds each listing, so a remote that accepts the RPC
	// and then says nothing is retried, not waited for.
	listTimeout = 30 * time.Second
	// listPageSize, listRecvBytes and listRestarts are client.ListTools's:
	// the tools asked for per page, the largest page received (a
	// server's max_list_bytes), and how many times a listing whose tools
	// changed between pages starts over.
	listPageSize  = 1000
	listRecvBytes = 64 << 20
	listRestarts  = 3
	// maxEventBytes is the largest ExecuteBatch event a forwarded call
	// receives: a remote whose max_message_bytes is above gRPC's default
	// 4 MiB sends results that large, which were refused here and
	// reported as the call failing ("received message larger than max").
	// 16 MiB, what an MCP server's answer may be.
	maxEventBytes = 16 << 20
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// mount is one remote: the Runner its loop reconnects with, and the state
// its tools' handlers share with it.
type mount struct {
	m       *Mounts
	cfg     Config
	log     *slog.Logger
	offered *offer.Tools // its tools in the registry; only the run loop touches it

	mu     sync.Mutex
	client *client.Client  // nil while not connected
	calls  *inflight.Calls // client's
}

// newMount returns the mount for c; its loop is run by m.set.
func (m *Mounts) newMount(c Config) supervise.Runner {
	return &mount{m: m, cfg: c, log: m.log.With("remote", c.Name, "target", c.Target),
		offered: offer.New(m.reg, "remote:"+c.Name, "remote", "the remote's")}
}

// Retrying logs why the remote is unavailable.
func (mt *mount) Retrying(err error, delay time.Duration) {
	mt.log.Warn("remote toolwire unavailable; retrying", "error", err, "retry_in", delay)
}

// Connect connects, lists the remote's tools at every revision WatchTools
// announces, and returns when the watch ends, with the tools removed.
func (mt *mount) Connect(ctx context.Context) (listed bool, err error) {
	opts, err := mt.cfg.dialOptions()
	if err != nil {
		return false, err
	}
	c, err := client.New(mt.cfg.Target, opts...)
	if err != nil {
		return false, err
	}
	mt.m.closing.Add(1)
	calls := inflight.New(func() {
		c.Close()
		mt.m.closing.Done()
	})
	mt.mu.Lock()
	mt.client, mt.calls = c, calls
	mt.mu.Unlock()
	defer func() {
		// Tools first, so no new call starts; then the connection, once
		// the calls in flight on it have returned: a reload that changed
		// the mount failed them at once ("the client connection is
		// closing"), and a call that ran there was reported lost.
		mt.offered.Set(nil, mt.log)
		mt.mu.Lock()
		mt.client, mt.calls = nil, nil
		mt.mu.Unlock()
		calls.Retire()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ToolService().WatchTools(ctx, &toolwirev1.WatchToolsRequest{})
	if err != nil {
		return false, err
	}
	last := ""
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return listed, errors.New("the remote ended the watch")
		}
		if err != nil {
			return listed, err
		}
		if ev.GetRevision() == last {
			continue
		}
		lctx, lcancel := context.WithTimeout(ctx, listTimeout)
		list, err := mt.list(lctx, c)
		lcancel()
		if err != nil {
			return listed, fmt.Errorf("listing tools: %w", err)
		}
		if !listed {
			mt.log.Info("remote toolwire connected")
			supervise.Up(ctx)
		}
		listed, last = true, ev.GetRevision()
		mt.offered.Set(list, mt.log)
	}
}

// list lists the remote's tools as local declarations, all of one
// revision: as client.ListTools does, a page at a time, starting over
// (up to listRestarts times) when the tools change between pages. Unlike
// client.ListTools, it holds a listing to listing.Default: a remote whose
// pages never ended (a page token on every page, each page's names after
// the last) was read until listTimeout, 2 GiB held after 10 s. A listing
// past a bound is cut there with an error logged, and the tools before
// the cut are offered, as an MCP server's are.
func (mt *mount) list(ctx context.Context, c *client.Client) ([]tools.Tool, error) {
	for restart := 0; ; restart++ {
		list, err := mt.listPages(ctx, c)
		if status.Code(err) == codes.Aborted && restart < listRestarts {
			continue
		}
		return list, err
	}
}

// listPages lists the remote's tools from the first page, skipping (with a
// log line) those that cannot be offered locally and a name listed twice.
func (mt *mount) listPages(ctx context.Context, c *client.Client) ([]tools.Tool, error) {
	var out []tools.Tool
	seen := map[string]bool{}
	l := listing.Listing{Max: mt.m.bounds}
	schemas := &tools.SchemaCache{}
	req := &toolwirev1.ListToolsRequest{PageSize: listPageSize}
	revision := ""
	for page := 1; ; page++ {
		resp, err := c.ToolService().ListTools(ctx, req, grpc.MaxCallRecvMsgSize(listRecvBytes))
		if err != nil {
			return nil, err
		}
		if page == 1 {
			revision = resp.GetRevision()
		} else if resp.GetRevision() != revision {
			return nil, status.Errorf(codes.Aborted, "the tools changed between pages (revision %s, then %s)", revision, resp.GetRevision())
		}
		for _, t := range resp.GetTools() {
			if !l.Tool() {
				break
			}
			if seen[t.GetName()] {
				mt.log.Warn("remote lists a tool twice; using the first", "tool", t.GetName())
				continue
			}
			seen[t.GetName()] = true
			d, err := mt.declaration(t, schemas)
			if err != nil {
				mt.log.Warn("skipping remote tool", "tool", t.GetName(), "error", err)
				continue
			}
			if !l.Keep(d) {
				break
			}
			out = append(out, d)
		}
		if l.Cut != nil || !l.Next(resp.GetNextPageToken()) {
			break
		}
		req = &toolwirev1.ListToolsRequest{PageSize: listPageSize, PageToken: resp.GetNextPageToken()}
	}
	if l.Cut != nil {
		mt.log.Error("remote's ListTools cut short; offering the tools listed before the cut", "error", l.Cut, "tools", len(out))
	}
	return out, nil
}

// declaration converts one of the remote's declarations, with its schemas
// compiled by schemas, or says why it cannot be offered locally.
func (mt *mount) declaration(t *toolwirev1.Tool, schemas *tools.SchemaCache) (tools.Tool, error) {
	d := tools.Tool{
		Name:         mt.cfg.Name + "_" + t.GetName(),
		Title:        t.GetTitle(),
		Description:  t.GetDescription(),
		InputSchema:  json.RawMessage(t.GetInputSchema()),
		OutputSchema: json.RawMessage(t.GetOutputSchema()),
		Annotations: tools.Annotations{
			ReadOnly:    t.GetAnnotations().GetReadOnly(),
			Destructive: t.GetAnnotations().GetDestructive(),
			Idempotent:  t.GetAnnotations().GetIdempotent(),
			OpenWorld:   t.GetAnnotations().GetOpenWorld(),
		},
		Timeout: t.GetTimeout().AsDuration(),
		Source:  tools.SourceRemote,
		Handler: mt.handler(t.GetName()),
	}
	if len(d.OutputSchema) == 0 {
		d.OutputSchema = nil
	}
	if !toolName.MatchString(d.Name) {
		return tools.Tool{}, errors.New("prefixed name does not match [A-Za-z0-9_.-]{1,128}")
	}
	// Compile it alone, so one bad tool is skipped rather than failing
	// the update of all the remote's tools. The registry does not compile
	// a compiled tool again, and a listing's tools share one cache, so
	// each distinct schema text is compiled once, as an MCP server's are.
	return schemas.Compile(d)
}

// handler forwards calls of the remote's tool remote as one-call batches.
func (mt *mount) handler(remote string) tools.Handler {
	return func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
		mt.mu.Lock()
		c, calls := mt.client, mt.calls
		if c != nil && !calls.Begin() {
			c = nil
		}
		mt.mu.Unlock()
		if c == nil {
			return tools.Errorf("remote toolwire %q is not connected; its tools come back when it reconnects", mt.cfg.Name), nil
		}
		// The connection stays open until the call returns, reload or
		// not, so that its result and its cancellation still travel.
		defer calls.End()
		id := call.ID
		if id == "" {
			id = "call"
		}
		tc := &toolwirev1.ToolCall{CallId: id, Name: remote, Arguments: string(call.Arguments)}
		if dl, ok := ctx.Deadline(); ok {
			// The RPC carries the deadline too; the remote keeps a margin
			// from it, so its result arrives before ours is decided.
			tc.Timeout = durationpb.New(time.Until(dl))
		}
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{tc}, SessionId: remoteSession(call.Caller, call.SessionID)}
		// The caller's trace continues on the remote (the client sends
		// traceparent and tracestate), but not the baggage the agent sent
		// toolwire: its keys and values are the agent's choice, and the
		// remote, which sees every call as the mount's, is no agent's to
		// reach (docs/sources.md, "Traces").
		ctx = baggage.ContextWithoutBaggage(ctx)
		// Only events naming the call sent are its own; its result ends
		// the call, whatever the remote sends or withholds after it
		// (leaving the loop cancels the RPC). A result kept until the
		// stream ended was lost to a remote that never ended it (the
		// call timed out instead), and the last result of any call ID
		// was taken as the call's.
		//
		// Once the call has started there, a stream that fails or ends
		// without its result may have lost the result of a call that ran:
		// the error says so, so that the model does not simply make the
		// call again.
		started := false
		for ev, err := range c.ExecuteBatch(ctx, req, grpc.MaxCallRecvMsgSize(maxEventBytes)) {
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if started {
					return tools.Errorf("remote toolwire %q lost the call after it started there, so it may have run; check before calling again: %s",
						mt.cfg.Name, status.Convert(err).Message()), nil
				}
				return tools.Errorf("remote toolwire %q failed the call: %s", mt.cfg.Name, status.Convert(err).Message()), nil
			}
			if s := ev.GetStarted(); s != nil && s.GetCallId() == id {
				started = true
			}
			if p := ev.GetProgress(); p != nil && p.GetCallId() == id {
				started = true
				call.Report(tools.Progress{Progress: p.Progress, Total: p.Total, Message: p.GetMessage(), Output: p.GetOutput()})
			}
			if r := ev.GetResult(); r != nil && r.GetCallId() == id {
				return result(r), nil
			}
		}
		if started {
			return tools.Errorf("remote toolwire %q ended the batch without the call's result after it started there, so it may have run; check before calling again", mt.cfg.Name), nil
		}
		return tools.Errorf("remote toolwire %q ended the batch without a result", mt.cfg.Name), nil
	}
}

// remoteSession is the session a call of caller's session is sent to the
// remote in. A session is a caller's: two callers sending one session_id
// have two (their workspaces, variables and order apart). Every call
// reaches the remote as the mount, one caller, so the bare ID would make
// one session there of all callers' sessions of that ID: a caller who
// sent another's ID would read and write that caller's remote workspace.
// The ID sent names both, hashed to stay within the contract's 256 bytes
// and to keep callers' names off the remote; a caller's session keeps one
// ID there, and no session stays none.
func remoteSession(caller, session string) string {
	if session == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(strconv.Quote(caller) + "/" + session))
	return "tw-" + hex.EncodeToString(sum[:])
}

// result converts a remote's result, unchanged.
func result(r *toolwirev1.CallResult) *tools.Result {
	out := &tools.Result{IsError: r.GetIsError()}
	if r.GetIsError() {
		out.ErrorKind = int32(r.GetErrorKind())
	}
	for _, c := range r.GetContent() {
		switch {
		case c.GetImage() != nil:
			out.Content = append(out.Content, tools.Content{Data: c.GetImage().GetData(), MIMEType: c.GetImage().GetMimeType()})
		default:
			out.Content = append(out.Content, tools.Content{Text: c.GetText().GetText()})
		}
	}
	if s := r.GetStructuredContent(); s != "" {
		out.StructuredContent = json.RawMessage(s)
	}
	if d := r.GetDetails(); d != "" {
		out.Details = json.RawMessage(d)
	}
	return out
}
