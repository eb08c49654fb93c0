package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
)

// testTimeout only fails a test that would otherwise hang.
const testTimeout = 2 * time.Minute

// Binaries built once for every test: mcpServerBin is the MCP gateway's
// test server, spoken to over stdio.
var toolwireBin, countserverBin, mcpServerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolwire-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	toolwireBin = filepath.Join(dir, "toolwire")
	countserverBin = filepath.Join(dir, "countserver")
	mcpServerBin = filepath.Join(dir, "mcptestserver")
	for bin, pkg := range map[string]string{toolwireBin: "../../../cmd/toolwire", countserverBin: "./countserver", mcpServerBin: "../../../sources/mcpsource/internal/testserver/stdio"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a server running as a child process.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	log    strings.Builder
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// start runs bin with args and env, and returns once it listens. The
// process is killed when the test ends, if it is still running.
func start(t *testing.T, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.HasPrefix(rec.Msg, "toolwire listening on ") {
				addrc <- rec.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", bin, p.err, p.logText())
	case <-time.After(testTimeout):
		t.Fatalf("%s did not report its address\n%s", bin, p.logText())
	}
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// wait waits for the process to exit and returns its error.
func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(testTimeout):
		t.Fatalf("process did not exit\n%s", p.logText())
		return nil
	}
}

// dial returns a connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// sideEffects counts bump's POSTs by id, as an outside system would see them.
type sideEffects struct {
	mu  sync.Mutex
	got map[string]int
	url string
}

func newSideEffects(t *testing.T) *sideEffects {
	s := &sideEffects{got: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got[r.URL.Query().Get("id")]++
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *sideEffects) env() []string { return []string{"BUMP_URL=" + s.url} }

func (s *sideEffects) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[id]
}

// bumpBatch returns a batch of n keyed bump calls, each sleeping ms.
func bumpBatch(run string, n, ms int) *toolwirev1.ExecuteBatchRequest {
	req := &toolwirev1.ExecuteBatchRequest{}
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		req.Calls = append(req.Calls, &toolwirev1.ToolCall{
			CallId: id, Name: "bump", Arguments: fmt.Sprintf(`{"id":%q,"ms":%d}`, id, ms),
			IdempotencyKey: run + "-" + id,
		})
	}
	return req
}

// collect reads a stream to its end, passing each event to each (when not
// nil) as it arrives.
func collect(stream grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse], each func(*toolwirev1.ExecuteBatchResponse)) ([]*toolwirev1.ExecuteBatchResponse, error) {
	var events []*toolwirev1.ExecuteBatchResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events = append(events, ev)
		if each != nil {
			each(ev)
		}
	}
}

// execute sends req to conn and collects its events, failing on an RPC error.
func execute(t *testing.T, conn *grpc.ClientConn, req *toolwirev1.ExecuteBatchRequest) []*toolwirev1.ExecuteBatchResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stream, err := toolwirev1.NewToolServiceClient(conn).ExecuteBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(stream, nil)
	if err != nil {
		t.Fatalf("ExecuteBatch: %v", err)
	}
	return events
}

// results maps call IDs to results, failing on a call with two.
func results(t *testing.T, events []*toolwirev1.ExecuteBatchResponse) map[string]*toolwirev1.CallResult {
	t.Helper()
	out := map[string]*toolwirev1.CallResult{}
	for _, ev := range events {
		if r := ev.GetResult(); r != nil {
			if _, dup := out[r.GetCallId()]; dup {
				t.Errorf("call %s has two results", r.GetCallId())
			}
			out[r.GetCallId()] = r
		}
	}
	return out
}

// finished returns the stream's BatchFinished, failing unless it came last.
func finished(t *testing.T, events []*toolwirev1.ExecuteBatchResponse) *toolwirev1.BatchFinished {
	t.Helper()
	if len(events) == 0 || events[len(events)-1].GetFinished() == nil {
		t.Fatalf("the stream did not end with BatchFinished (%d events)", len(events))
	}
	return events[len(events)-1].GetFinished()
}

func text(r *toolwirev1.CallResult) string {
	var b strings.Builder
	for _, c := range r.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// sameOutcome compares what the model reads of two results.
func sameOutcome(t *testing.T, want, got *toolwirev1.CallResult) {
	t.Helper()
	ignore := protocmp.IgnoreFields(&toolwirev1.CallResult{}, "call_id", "index", "replayed", "duration")
	if diff := cmp.Diff(want, got, protocmp.Transform(), ignore); diff != "" {
		t.Errorf("results differ (-want +got):\n%s", diff)
	}
}

// ranBy returns the pid bump's structured output names.
func ranBy(r *toolwirev1.CallResult) int {
	var out struct{ Pid int }
	_ = json.Unmarshal([]byte(r.GetStructuredContent()), &out)
	return out.Pid
}
