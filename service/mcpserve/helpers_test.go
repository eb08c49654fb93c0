package mcpserve

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The revisions every test runs under.
var revisions = []string{RevisionStateless, RevisionSessions}

// tokens are the test middleware's bearer tokens and their callers.
var tokens = map[string]*engine.Identity{
	"alice-token": {ID: "alice", Groups: []string{"humans", "admins"}, Method: engine.MethodToken},
	"bob-token":   {ID: "bob", Method: engine.MethodToken},
}

// testAuth stands in for the HTTP port's auth middleware: a known bearer
// token puts its caller in the context; anything else gets 401.
func testAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		caller, known := tokens[token]
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthenticated: no known bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(engine.WithIdentity(r.Context(), caller)))
	})
}

// bobMayNot keeps bob from the tool "secret".
var bobMayNot = func() *policy.Rules {
	r, err := policy.New(policy.Permissions{"bob": {Deny: []string{"secret"}}}, nil, nil)
	if err != nil {
		panic(err)
	}
	return r
}()

// gate lets a test hold calls of the tools read and write until it opens
// them, and records when each starts and ends.
type gate struct {
	mu     sync.Mutex
	log    []string
	open   map[string]chan struct{} // by call label
	change chan struct{}
}

func newGate() *gate {
	return &gate{open: map[string]chan struct{}{}, change: make(chan struct{}, 100)}
}

func (g *gate) ch(label string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.open[label]
	if !ok {
		c = make(chan struct{})
		g.open[label] = c
	}
	return c
}

func (g *gate) record(s string) {
	g.mu.Lock()
	g.log = append(g.log, s)
	g.mu.Unlock()
	g.change <- struct{}{}
}

func (g *gate) lines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.log...)
}

func (g *gate) has(s string) bool {
	for _, l := range g.lines() {
		if l == s {
			return true
		}
	}
	return false
}

// labelArgs are the arguments of read and write.
type labelArgs struct {
	Label string `json:"label"`
}

// testTools are the diagnostic tools and: image (an image block), secret
// (which bob may not call), hold (reports progress once, then returns only
// when cancelled, recording that it was), count (progress 1 to 5 with
// output chunks), and read (read-only) and write, which wait for the gate.
func testTools(g *gate, cancelled chan<- string) []tools.Tool {
	image := tools.MustTyped("image", "Returns a one-pixel PNG.", func(context.Context, *tools.Call, struct{}) (*tools.Result, any, error) {
		return &tools.Result{Content: []tools.Content{{Text: "a pixel"}, {Data: []byte("\x89PNG\r\n\x1a\n"), MIMEType: "image/png"}}}, nil, nil
	})
	image.Annotations.ReadOnly = true
	secret := tools.MustTyped("secret", "Tells a secret.", func(context.Context, *tools.Call, struct{}) (*tools.Result, any, error) {
		return tools.Text("the secret"), nil, nil
	})
	identity := tools.MustTyped("identity", "Returns the caller's identity: ID, method, groups.", func(ctx context.Context, _ *tools.Call, _ struct{}) (*tools.Result, any, error) {
		id := engine.IdentityFrom(ctx)
		return tools.Text(id.ID + " " + id.Method + " " + strings.Join(id.Groups, ",")), nil, nil
	})
	hold := tools.MustTyped("hold", "Waits until cancelled.", func(ctx context.Context, c *tools.Call, _ struct{}) (*tools.Result, any, error) {
		c.Progressf(1, 0, "holding")
		<-ctx.Done()
		if cancelled != nil {
			cancelled <- c.ID
		}
		return nil, nil, ctx.Err()
	})
	count := tools.MustTyped("count", "Reports progress 1 to 5 of 5, an output chunk after each, then returns.", func(_ context.Context, c *tools.Call, _ struct{}) (*tools.Result, any, error) {
		for i := 1; i <= 5; i++ {
			c.Progressf(float64(i), 5, "step %d", i)
			c.Output(fmt.Sprintf("chunk %d\n", i))
		}
		return tools.Text("counted"), nil, nil
	})
	count.Annotations.ReadOnly = true
	wait := func(verb string) tools.Tool {
		tool := tools.MustTyped(verb, "Waits for the test's gate.", func(ctx context.Context, _ *tools.Call, in labelArgs) (*tools.Result, any, error) {
			g.record(verb + " " + in.Label + " start")
			select {
			case <-g.ch(in.Label):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			g.record(verb + " " + in.Label + " end")
			return tools.Text(in.Label), nil, nil
		})
		tool.Annotations.ReadOnly = verb == "read"
		return tool
	}
	return append(diag.Tools(), image, secret, identity, hold, count, wait("read"), wait("write"))
}

// growTool adds to reg a tool of the name it is given: a way for a client
// to change the registry mid-test.
func growTool(reg *tools.Registry) tools.Tool {
	type args struct {
		Name string `json:"name"`
	}
	return tools.MustTyped("grow", "Adds a tool of the given name.", func(_ context.Context, _ *tools.Call, in args) (*tools.Result, any, error) {
		grown := tools.MustTyped(in.Name, "Added by grow.", func(context.Context, *tools.Call, struct{}) (*tools.Result, any, error) {
			return tools.Text("grown"), nil, nil
		})
		return tools.Text("added " + in.Name), nil, reg.Add(grown)
	})
}

// testServer is one replica: a registry, an engine and the MCP surface,
// served by an httptest server behind testAuth.
type testServer struct {
	reg  *tools.Registry
	eng  *engine.Engine
	mcp  *Server
	http *httptest.Server
	url  string
	gate *gate
	// cancelled receives the call ID of each hold call that saw its
	// cancellation.
	cancelled chan string
}

func newTestServer(t testing.TB, opts *Options) *testServer {
	t.Helper()
	ts := &testServer{gate: newGate(), cancelled: make(chan string, 10)}
	reg, err := tools.NewRegistry(testTools(ts.gate, ts.cancelled)...)
	if err != nil {
		t.Fatal(err)
	}
	ts.reg = reg
	if err := reg.Add(growTool(reg)); err != nil {
		t.Fatal(err)
	}
	ts.eng = engine.New(engine.Config{DrainTimeout: time.Second}, engine.Deps{Admission: bobMayNot, Logger: slog.New(slog.DiscardHandler)})
	var o Options
	if opts != nil {
		o = *opts
	}
	if ts.mcp, err = New(ts.eng, reg, o); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", testAuth(ts.mcp)) // as the HTTP port serves it
	ts.http = httptest.NewServer(mux)
	ts.url = ts.http.URL + "/mcp"
	t.Cleanup(func() {
		ts.mcp.Close()
		ts.http.CloseClientConnections()
		ts.http.Close()
		ts.eng.Close()
	})
	return ts
}

// withToken adds a bearer token to every request.
type withToken struct {
	token string
	base  http.RoundTripper
}

func (w withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if w.token != "" {
		r.Header.Set("Authorization", "Bearer "+w.token)
	}
	return w.base.RoundTrip(r)
}

// httpClient is an HTTP client that sends token, with connections of its
// own, closed when the test ends.
func httpClient(t testing.TB, token string) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: withToken{token: token, base: tr}}
}

// connect opens a go-sdk client session on url at revision, as the caller
// of token.
func connect(t testing.TB, url, token, revision string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := dial(t, url, token, revision, opts)
	if err != nil {
		t.Fatalf("connect at %s: %v", revision, err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != revision {
		t.Fatalf("negotiated %s, want %s", got, revision)
	}
	return cs
}

func dial(t testing.TB, url, token, revision string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient(t, token), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

// call calls a tool and fails the test on a protocol error.
func call(t testing.TB, cs *mcp.ClientSession, name, args string, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args), Meta: meta})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

// text joins a result's text blocks.
func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// waitFor waits for cond, failing the test just before its own deadline:
// what it waits for must happen, and a fixed bound (it was 10s) is one a
// loaded machine can outlast.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := testenv.Deadline(t)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited until the test's deadline for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
