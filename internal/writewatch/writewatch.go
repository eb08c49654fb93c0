// Package writewatch ends the HTTP responses whose clients stop reading.
//
// A client that stops reading holds the server's write: TCP's or HTTP/2's
// flow control blocks Write, the handler's goroutine waits in it, and
// what it was writing stays in memory, for as long as the client keeps
// the connection. The engine's send watchdog ends such a batch stream
// (engine.Stopper); this package does the same for every other response
// of an HTTP surface: a tools/list page, a list-changed notice, a unary
// result, a WatchTools stream. A Watch wraps each response's writer and,
// like the engine's watchdog, looks every few milliseconds at the writes
// under way; one that has waited Timeout is ended with a write deadline in
// the past (HTTP/1.1 closes the connection, HTTP/2 resets the stream), and
// every later write of that response fails at once.
//
// While something else watches a response's writes (Writer.Engage: an
// engine batch whose Stopper is the Writer, so its budget and send timeout
// apply), the Watch leaves that response alone.
//
// Writes cost two atomic stores; the Watch's goroutine runs only while
// responses are being written through it.
package writewatch

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/internal/monotime"
)

// ErrStopped is what a Writer's writes return once it was stopped.
var ErrStopped = errors.New("the response was ended: its client read nothing for the send timeout")

// Watch ends the writes that wait Timeout for their client, and, while
// the writes that have waited budgetStall hold more than a budget of
// bytes, the largest of them.
type Watch struct {
	timeout time.Duration
	budget  int64 // bytes; negative: none
	log     *slog.Logger
	what    string // names the responses in the log

	mu      sync.Mutex
	writers map[*Writer]struct{}
	running bool // the watching goroutine runs
	stopped atomic.Int64
}

// budgetStall is how long a write must have waited to count against the
// budget: a client reading as fast as its link allows finishes each write
// sooner.
const budgetStall = 500 * time.Millisecond

// New returns a Watch ending writes that wait longer than timeout (not
// positive: none is ended) and, while the writes that have waited half a
// second hold more than budget bytes (negative: no bound; the engine's
// max_buffered_bytes), the largest of them: a client that reads nothing
// pins the response it was sent, and a few requests could otherwise pin
// gigabytes for the timeout. what names the responses in its log lines
// ("MCP response"), which go to log at warning level.
func New(timeout time.Duration, budget int, what string, log *slog.Logger) *Watch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watch{timeout: timeout, budget: int64(budget), log: log, what: what, writers: map[*Writer]struct{}{}}
}

// Stopped reports how many responses the Watch has ended.
func (wt *Watch) Stopped() int64 { return wt.stopped.Load() }

// Wrap returns w under watch until Done. r is the request it answers, for
// the log.
func (wt *Watch) Wrap(w http.ResponseWriter, r *http.Request) *Writer {
	ww := &Writer{ResponseWriter: w, watch: wt, path: r.URL.Path, remote: r.RemoteAddr}
	if wt.timeout <= 0 && wt.budget < 0 {
		return ww
	}
	wt.mu.Lock()
	wt.writers[ww] = struct{}{}
	if !wt.running {
		wt.running = true
		go wt.run()
	}
	wt.mu.Unlock()
	return ww
}

// run looks at the writes under way every tick, while any response is
// watched.
func (wt *Watch) run() {
	every := 250 * time.Millisecond
	if wt.timeout > 0 {
		every = min(max(wt.timeout/8, time.Millisecond), every)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for range tick.C {
		now := monotime.Now()
		var late, stalled []*Writer
		var held int64
		wt.mu.Lock()
		if len(wt.writers) == 0 {
			wt.running = false
			wt.mu.Unlock()
			return
		}
		for w := range wt.writers {
			since := w.since.Load()
			if since == 0 || w.engaged.Load() != 0 || w.stopped.Load() {
				continue
			}
			switch waited := time.Duration(now - since); {
			case wt.timeout > 0 && waited >= wt.timeout:
				late = append(late, w)
			case waited >= budgetStall:
				stalled = append(stalled, w)
				held += w.size.Load()
			}
		}
		wt.mu.Unlock()
		for _, w := range late {
			wt.end(w, "the client read nothing for the send timeout; ending the response", "send_timeout", wt.timeout.String())
		}
		for wt.budget >= 0 && held > wt.budget && len(stalled) > 0 {
			most := 0
			for i, w := range stalled {
				if w.size.Load() > stalled[most].size.Load() {
					most = i
				}
			}
			w := stalled[most]
			stalled = append(stalled[:most], stalled[most+1:]...)
			held -= w.size.Load()
			wt.end(w, "responses waiting for clients that read nothing passed max_buffered_bytes; ending the one that holds the most",
				"held_bytes", w.size.Load(), "max_buffered_bytes", wt.budget)
		}
	}
}

// end stops w, counted and logged first: the handler sees its write fail
// as soon as Stop is called.
func (wt *Watch) end(w *Writer, msg string, attrs ...any) {
	if w.stopped.Load() {
		return
	}
	wt.stopped.Add(1)
	wt.log.Warn(wt.what+": "+msg, append([]any{"path", w.path, "remote", w.remote}, attrs...)...)
	if !w.Stop() {
		wt.log.Error(wt.what+": the response's write cannot be ended (its ResponseWriter has no write deadline); later writes fail",
			"path", w.path, "remote", w.remote)
	}
}

// Writer is a response under a Watch. It is also an engine.Stopper:
// StopSend ends it.
type Writer struct {
	http.ResponseWriter
	watch   *Watch
	path    string
	remote  string
	since   atomic.Int64 // when the write under way began (Unix ns); 0 between writes
	size    atomic.Int64 // the bytes of the write under way
	engaged atomic.Int32 // > 0: the engine watches the writes
	stopped atomic.Bool
	done    atomic.Bool
	mu      sync.Mutex // Stop's use of the ResponseWriter, and Done, which ends it
}

// Done takes the response out of the watch; call it once the handler is
// done with the response.
func (w *Writer) Done() {
	w.mu.Lock()
	already := w.done.Swap(true)
	w.mu.Unlock()
	if already {
		return
	}
	w.watch.mu.Lock()
	delete(w.watch.writers, w)
	w.watch.mu.Unlock()
}

// Engage tells the Watch that something else (the engine's send watchdog,
// with this Writer as its Stopper) watches the response's writes, until
// the function it returns is called.
func (w *Writer) Engage() (release func()) {
	w.engaged.Add(1)
	var once sync.Once
	return func() { once.Do(func() { w.engaged.Add(-1) }) }
}

// Stop ends the write under way, with a write deadline in the past, and
// makes every later one fail with ErrStopped. It reports whether the
// write under way, if any, could be ended.
//
// A response whose handler is done with it (Done) is left alone: the
// Watch picks the responses to end, then ends them, and a handler may
// return in between, after which net/http's HTTP/2 ResponseWriter is no
// longer one (its SetWriteDeadline dereferenced nil and ended the
// process).
func (w *Writer) Stop() bool {
	if w.stopped.Swap(true) {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done.Load() {
		return true // nothing is being written
	}
	return http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now()) == nil
}

// StopSend is Stop, as the engine's Stopper.
func (w *Writer) StopSend(error) bool { return w.Stop() }

// Stopped reports whether the response was ended.
func (w *Writer) Stopped() bool { return w.stopped.Load() }

func (w *Writer) Write(p []byte) (int, error) {
	if w.stopped.Load() {
		return 0, ErrStopped
	}
	w.size.Store(int64(len(p)))
	w.since.Store(monotime.Now())
	n, err := w.ResponseWriter.Write(p)
	w.since.Store(0)
	return n, err
}

// FlushError flushes what was written to the client: where HTTP/1.1
// waits for a client that does not read.
func (w *Writer) FlushError() error {
	if w.stopped.Load() {
		return ErrStopped
	}
	w.since.Store(monotime.Now())
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.since.Store(0)
	return err
}

// Flush is FlushError for callers that want an http.Flusher.
func (w *Writer) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the response underneath.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
