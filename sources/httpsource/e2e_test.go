package httpsource_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/service/grpcserve"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"
)

// testTimeout only fails a test that would otherwise hang.
const testTimeout = 20 * time.Second

// serve runs a toolwire server over bufconn with the HTTP tools of
// specsYAML, logging at debug level into log, and returns a client.
func serve(t *testing.T, specsYAML string, log io.Writer) *client.Client {
	t.Helper()
	var specs []httpsource.Spec
	if err := yaml.UnmarshalStrict([]byte(specsYAML), &specs); err != nil {
		t.Fatal(err)
	}
	hc := httpsource.NewClient()
	ts, err := httpsource.Tools(specs, hc)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	c, err := client.New("passthrough:///bufnet",
		client.WithTransportCredentials(insecure.NewCredentials()),
		client.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		gs.Stop()
		eng.Close()
		hc.CloseIdleConnections()
	})
	return c
}

// TestBatchSecretsAndLanes runs HTTP tools through ExecuteBatch: lanes
// follow read_only, and the secret a header carries reaches the upstream
// but no result, details, log line or declaration. Not parallel: it sets
// environment variables.
func TestBatchSecretsAndLanes(t *testing.T) {
	const secret = "s3cr3t-7f1d2c"
	t.Setenv("TW_E2E_SECRET", secret)

	var mu sync.Mutex
	var gotAuth, gotKey, elsewhereKey []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhereKey = append(elsewhereKey, r.Header.Get("X-Api-Key")+r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, `{"landed":true}`)
	}))
	defer elsewhere.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		gotKey = append(gotKey, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		switch r.URL.Path {
		case "/items":
			io.WriteString(w, `{"data":{"items":[{"name":"widget"}]}}`)
		case "/create":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"42"}`)
		case "/fail":
			http.Error(w, "upstream is unhappy", http.StatusBadGateway)
		case "/hop":
			http.Redirect(w, r, elsewhere.URL+"/landing", http.StatusFound)
		}
	}))
	defer up.Close()

	log := &logbuf.Buffer{}
	c := serve(t, `
- name: list
  url: `+up.URL+`/items
  headers: {Authorization: 'Bearer {{TW_E2E_SECRET}}', X-Api-Key: '{{TW_E2E_SECRET}}'}
  response_path: data.items[0].name
  read_only: true
- name: create
  method: POST
  url: `+up.URL+`/create
  headers: {Authorization: 'Bearer {{TW_E2E_SECRET}}'}
  parameters: {type: object, properties: {title: {type: string}}}
- name: broken
  url: `+up.URL+`/fail
  headers: {X-Api-Key: '{{TW_E2E_SECRET}}'}
  read_only: true
- name: unset
  url: `+up.URL+`/items
  headers: {X-Api-Key: '{{TW_E2E_NOT_SET}}'}
  read_only: true
- name: hop
  url: `+up.URL+`/hop
  headers: {X-Api-Key: '{{TW_E2E_SECRET}}', Authorization: 'Bearer {{TW_E2E_SECRET}}'}
  read_only: true
`, log)

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var events []*toolwirev1.ExecuteBatchResponse
	seq := c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("a", "list", nil), client.Call("b", "list", nil),
		client.Call("c", "create", map[string]any{"title": "t"}),
		client.Call("d", "list", nil), client.Call("e", "broken", nil), client.Call("f", "unset", nil), client.Call("g", "hop", nil),
	}})
	batch, err := client.Collect(func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for ev, err := range seq {
			if ev != nil {
				events = append(events, ev)
			}
			if !yield(ev, err) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	var lanes [][]string
	var parallel []bool
	for _, l := range batch.Accepted.GetLanes() {
		lanes = append(lanes, l.GetCallIds())
		parallel = append(parallel, l.GetParallel())
	}
	if diff := cmp.Diff([][]string{{"a", "b"}, {"c"}, {"d", "e", "f", "g"}}, lanes); diff != "" {
		t.Errorf("lanes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{true, false, true}, parallel); diff != "" {
		t.Errorf("parallel (-want +got):\n%s", diff)
	}

	want := []struct {
		isError bool
		text    string
	}{
		{false, "widget"}, {false, "widget"}, {false, `{"id":"42"}`}, {false, "widget"},
		{true, "HTTP 502 Bad Gateway: upstream is unhappy"},
		{true, "TW_E2E_NOT_SET"},
		{true, "refused a redirect to " + elsewhere.URL + "/landing: 127.0.0.1 is a loopback address"},
	}
	for i, r := range batch.Results {
		if r.GetIsError() != want[i].isError || !strings.Contains(client.Text(r), want[i].text) {
			t.Errorf("result %s: error %v %q; want error %v containing %q", r.GetCallId(), r.GetIsError(), client.Text(r), want[i].isError, want[i].text)
		}
		if r.GetDetails() == "" && r.GetCallId() != "f" {
			t.Errorf("result %s has no details", r.GetCallId())
		}
	}

	mu.Lock()
	for _, v := range gotAuth {
		if v != "" && v != "Bearer "+secret {
			t.Errorf("upstream saw Authorization %q", v)
		}
	}
	if !strings.Contains(strings.Join(gotKey, ","), secret) {
		t.Error("the upstream never received the secret header")
	}
	// Another host on loopback is internal: the redirect is refused
	// (redirect_test.go), so neither the request nor its secrets arrive.
	if len(elsewhereKey) != 0 {
		t.Errorf("the internal host a redirect led to was reached, with headers %q", elsewhereKey)
	}
	mu.Unlock()

	list, err := c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var everything strings.Builder
	for _, ev := range events {
		everything.WriteString(protojson.Format(ev))
	}
	everything.WriteString(protojson.Format(list))
	everything.WriteString(log.String())
	if strings.Contains(everything.String(), secret) {
		t.Errorf("the secret leaked into events, ListTools or logs:\n%s", everything.String())
	}
	if strings.Contains(protojson.Format(list), "TW_E2E") {
		t.Errorf("ListTools shows header templates:\n%s", protojson.Format(list))
	}
}

// TestBatchCancelReachesUpstream times a slow HTTP call out: the upstream's
// request context ends, and the call's result is a timeout.
func TestBatchCancelReachesUpstream(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	gone := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-time.After(testTimeout):
		}
	}))
	defer up.Close()
	c := serve(t, "- {name: slow, url: "+up.URL+"/slow, read_only: true}", io.Discard)

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	call := client.Call("s", "slow", nil)
	call.Timeout = durationpb.New(200 * time.Millisecond)
	batch, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call}}))
	if err != nil {
		t.Fatal(err)
	}
	if r := batch.Results[0]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT {
		t.Errorf("result %v; want a timeout", r)
	}
	<-started
	select {
	case <-gone:
	case <-time.After(testTimeout):
		t.Fatal("the upstream's request context never ended")
	}

	// Cancelling the RPC reaches the upstream too.
	ctx2, cancel2 := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range c.ExecuteBatch(ctx2, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("s2", "slow", nil)}}) {
		}
	}()
	<-started
	cancel2()
	select {
	case <-gone:
	case <-time.After(testTimeout):
		t.Fatal("cancelling the RPC did not reach the upstream")
	}
	<-done
}
