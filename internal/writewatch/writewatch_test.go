package writewatch

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// big is more than a socket's buffers and HTTP/2's windows hold.
const big = 64 << 20

// server serves a handler that writes big bytes through a Watch with
// timeout, reporting the handler's write error on the channel it returns.
// Engaged, the response is engaged all along (as under the engine).
func server(t *testing.T, timeout time.Duration, h2c, engaged bool) (*Watch, string, <-chan error, *logbuf.Buffer) {
	return budgetServer(t, timeout, -1, h2c, engaged)
}

// budgetServer is server with a Watch of that budget.
func budgetServer(t *testing.T, timeout time.Duration, budget int, h2c, engaged bool) (*Watch, string, <-chan error, *logbuf.Buffer) {
	t.Helper()
	log := &logbuf.Buffer{}
	wt := New(timeout, budget, "test response", slog.New(slog.NewTextHandler(log, nil)))
	errc := make(chan error, 1)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	release := make(chan struct{})
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := wt.Wrap(w, r)
		defer ww.Done()
		if engaged {
			defer ww.Engage()()
		}
		var err error
		for n := 0; n < big && err == nil; n += len(chunk) {
			if _, err = ww.Write(chunk); err == nil {
				err = ww.FlushError()
			}
		}
		errc <- err
		if engaged {
			<-release
		}
	}))
	if h2c {
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetHTTP1(true)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	hs.Start()
	t.Cleanup(func() {
		close(release)
		hs.CloseClientConnections()
		hs.Close()
	})
	return wt, hs.URL, errc, log
}

// stall sends a GET to url and reads nothing of the response.
func stall(t *testing.T, url string, h2c bool) {
	t.Helper()
	if h2c {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// TestStalledWriteIsEnded: a response whose client reads nothing is ended
// once one of its writes has waited the timeout, or, under a timeout far
// off, once it has waited half a second holding more than the budget,
// over HTTP/1.1 and h2c: the handler's write returns an error and the
// Watch counts and logs it.
func TestStalledWriteIsEnded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		budget  int
		logged  string
	}{
		{"send timeout", 200 * time.Millisecond, -1, "read nothing for the send timeout"},
		{"budget", time.Hour, 512 << 10, "passed max_buffered_bytes"}, // the handler writes 1 MiB at a time
	} {
		for _, h2c := range []bool{false, true} {
			t.Run(tc.name+"/"+map[bool]string{false: "HTTP/1.1", true: "h2c"}[h2c], func(t *testing.T) {
				t.Parallel()
				wt, url, errc, log := budgetServer(t, tc.timeout, tc.budget, h2c, false)
				stall(t, url, h2c)
				select {
				case err := <-errc:
					if err == nil {
						t.Fatal("the handler wrote 64 MiB to a client reading nothing")
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the stalled write was not ended")
				}
				if wt.Stopped() != 1 || !strings.Contains(log.String(), tc.logged) {
					t.Errorf("stopped %d; log:\n%s", wt.Stopped(), log)
				}
			})
		}
	}
}

// TestEngagedWriteIsLeftAlone: while something else watches a response
// (Engage), the Watch does not end it; Stop, as the engine's Stopper
// calls it, does, and every later write fails at once.
func TestEngagedWriteIsLeftAlone(t *testing.T) {
	t.Parallel()
	wt, url, errc, _ := server(t, 50*time.Millisecond, false, true)
	stall(t, url, false)
	var w *Writer
	deadline := time.Now().Add(30 * time.Second)
	for w == nil {
		wt.mu.Lock()
		for x := range wt.writers {
			if x.since.Load() != 0 {
				w = x
			}
		}
		wt.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no write under way")
		}
		time.Sleep(time.Millisecond)
	}
	// Many of the Watch's ticks, with the write stalled: it must not end it.
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("an engaged response was ended by the Watch: %v", err)
	default:
	}
	if !w.StopSend(errors.New("the engine's send timeout")) {
		t.Error("StopSend could not end the write")
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the stopped write succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("StopSend did not end the write")
	}
	if _, err := w.Write([]byte("more")); !errors.Is(err, ErrStopped) {
		t.Errorf("a write after Stop: %v, want ErrStopped", err)
	}
	if wt.Stopped() != 0 {
		t.Errorf("the Watch counts %d responses it ended; the engine ended this one", wt.Stopped())
	}
}

// TestIdleWatchHasNoGoroutine: the Watch's goroutine runs only while
// responses are watched (goleak checks the end of the test run too).
func TestIdleWatchHasNoGoroutine(t *testing.T) {
	t.Parallel()
	wt := New(time.Second, -1, "test", nil)
	rec := httptest.NewRecorder()
	w := wt.Wrap(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if _, err := w.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	w.Done()
	deadline := time.Now().Add(10 * time.Second)
	for {
		wt.mu.Lock()
		running := wt.running
		wt.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Watch's goroutine still runs with nothing to watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rec.Body.String() != "ok" {
		t.Errorf("wrote %q", rec.Body)
	}
}

// TestStopAfterTheHandlerReturned: the Watch picks the responses to end,
// then ends them, and a handler may return in between; net/http's HTTP/2
// ResponseWriter is no longer one then, and ending it dereferenced nil,
// ending the process (seen once in mcpserve's tests). A response its
// handler is done with is left alone.
func TestStopAfterTheHandlerReturned(t *testing.T) {
	t.Parallel()
	wt := New(time.Minute, -1, "test response", nil)
	got := make(chan *Writer, 1)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := wt.Wrap(w, r)
		defer ww.Done()
		io.WriteString(ww, "ok")
		got <- ww
	}))
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	defer hs.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" || resp.ProtoMajor != 2 {
		t.Fatalf("%s over HTTP/%d", b, resp.ProtoMajor)
	}
	resp.Body.Close() // the handler has returned: the response is complete
	ww := <-got
	if !ww.Stop() || !ww.Stopped() {
		t.Error("Stop of a response its handler is done with: want it counted as ended")
	}
}
