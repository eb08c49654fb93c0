package mcpserve

import (
	"container/list"
	"context"
	"fmt"
	"iter"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resuming 2025-11-25 streams.
//
// A 2025-11-25 response stream (a POST's, or a session's GET stream) can be
// cut mid-call by anything between client and server: a proxy's timeout, a
// load balancer's drain, a laptop changing networks. MCP's answer
// (2025-11-25, basic/transports, "Resumability and Redelivery") is event
// IDs: the server gives each SSE event an ID, starts each stream with a
// priming event (an ID and empty data) so that even a call cut before its
// first message can be resumed, and says in a retry field how long to wait
// before reconnecting; the client reconnects with a GET carrying
// Last-Event-ID and gets the events after it, the call's result among them,
// exactly once. The call itself runs on: on 2025-11-25 a call belongs to
// its session, not to the POST that carried it.
//
// The go-sdk does the protocol's part when its handler has an EventStore
// (IDs, priming, replay); toolwire gives it eventStore, which keeps the
// events in memory within a byte budget, and adds the retry field the SDK
// does not write (withRetry). 2026-07-28 has no resumable streams (a
// request that loses its stream is sent again), so the stateless handler
// has no store.

// Defaults of Options.ResumeBytes and Options.ResumeRetry.
const (
	defaultResumeBytes = 16 << 20
	defaultResumeRetry = time.Second
)

// The memory an event and a stream cost beyond their data, counted against
// the budget so that it bounds the store's entries too: a session that
// opens a million streams with empty events cannot grow the store past it.
const (
	eventOverhead  = 48  // a slice header and its share of the list
	streamOverhead = 256 // a streamLog, its list element, two map entries, the IDs
)

// eventStore is an mcp.EventStore that keeps every session's streams in
// memory, within max bytes (data and overheads) over all sessions. Past
// the budget it drops the streams least recently written first, whole, and
// when the one being written is all that is left, its oldest events; a
// client that then resumes from a dropped event gets the SDK's 400 ("failed
// to replay events") and fails the call, where without resumption it would
// have lost it anyway. A session's streams go when the session closes
// (SessionClosed), and the budget bounds whatever is left of sessions that
// never close.
type eventStore struct {
	mu      sync.Mutex
	max     int
	used    int
	streams map[streamKey]*streamLog
	lru     list.List // of *streamLog; front: the least recently written
	// bySession finds a session's streams when it closes.
	bySession map[string]map[string]*streamLog
}

type streamKey struct{ session, stream string }

// streamLog is one stream's kept events: data[i] is event first+i.
type streamLog struct {
	key   streamKey
	first int
	data  [][]byte
	size  int // bytes counted against the budget
	elem  *list.Element
}

var _ mcp.EventStore = (*eventStore)(nil)

func newEventStore(maxBytes int) *eventStore {
	return &eventStore{max: maxBytes, streams: map[streamKey]*streamLog{}, bySession: map[string]map[string]*streamLog{}}
}

// Open implements mcp.EventStore: it makes the stream's (empty) log.
func (s *eventStore) Open(_ context.Context, session, stream string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log(session, stream)
	s.evict(l)
	return nil
}

// Append implements mcp.EventStore: data is the stream's next event. The
// data is kept as it is: the SDK never changes an event it has written.
func (s *eventStore) Append(_ context.Context, session, stream string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log(session, stream)
	l.data = append(l.data, data)
	n := len(data) + eventOverhead
	l.size += n
	s.used += n
	s.lru.MoveToBack(l.elem)
	s.evict(l)
	return nil
}

// After implements mcp.EventStore: the stream's events after index, or
// mcp.ErrEventsPurged when the one just after it is no longer kept.
func (s *eventStore) After(_ context.Context, session, stream string, index int) iter.Seq2[[]byte, error] {
	s.mu.Lock()
	var (
		events [][]byte
		err    error
	)
	// index comes from the client's Last-Event-ID: any int, so the
	// comparisons below are written not to overflow.
	if l, ok := s.streams[streamKey{session, stream}]; !ok {
		err = fmt.Errorf("stream %q of session %q: not kept (never opened, or dropped for the resume budget): %w", stream, session, mcp.ErrEventsPurged)
	} else if index < l.first-1 {
		err = fmt.Errorf("stream %q of session %q: the events after %d were dropped for the resume budget: %w", stream, session, index, mcp.ErrEventsPurged)
	} else if last := l.first + len(l.data) - 1; index < last {
		events = slices.Clone(l.data[index-l.first+1:])
	}
	s.mu.Unlock()
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range events {
			if !yield(d, nil) {
				return
			}
		}
	}
}

// SessionClosed implements mcp.EventStore: the session's streams go.
func (s *eventStore) SessionClosed(_ context.Context, session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.bySession[session] {
		s.drop(l)
	}
	return nil
}

// log returns the stream's log, made if missing. s.mu is held.
func (s *eventStore) log(session, stream string) *streamLog {
	k := streamKey{session, stream}
	if l, ok := s.streams[k]; ok {
		return l
	}
	l := &streamLog{key: k, size: streamOverhead + len(session) + len(stream)}
	l.elem = s.lru.PushBack(l)
	s.streams[k] = l
	if s.bySession[session] == nil {
		s.bySession[session] = map[string]*streamLog{}
	}
	s.bySession[session][stream] = l
	s.used += l.size
	return l
}

// drop forgets a stream. s.mu is held.
func (s *eventStore) drop(l *streamLog) {
	s.used -= l.size
	s.lru.Remove(l.elem)
	delete(s.streams, l.key)
	if m := s.bySession[l.key.session]; m != nil {
		delete(m, l.key.stream)
		if len(m) == 0 {
			delete(s.bySession, l.key.session)
		}
	}
}

// evict brings the store within its budget, keeping the stream just
// written (cur) and its last event. s.mu is held.
func (s *eventStore) evict(cur *streamLog) {
	for e := s.lru.Front(); s.used > s.max && e != nil; {
		next := e.Next()
		if l := e.Value.(*streamLog); l != cur {
			s.drop(l)
		}
		e = next
	}
	for s.used > s.max && len(cur.data) > 1 {
		n := len(cur.data[0]) + eventOverhead
		cur.data[0] = nil
		cur.data = cur.data[1:]
		cur.first++
		cur.size -= n
		s.used -= n
	}
}

// withRetry has h's SSE responses start with a retry field: the first
// event of every stream (the priming event, or the first message when the
// request's revision has no priming event) also says, in milliseconds, how
// long a client whose stream is cut waits before it reconnects with
// Last-Event-ID. The go-sdk writes the field only on a stream it closes
// itself (CloseSSEStream), which toolwire never asks of it.
func withRetry(h http.Handler, retry time.Duration) http.Handler {
	field := "retry: " + strconv.FormatInt(retry.Milliseconds(), 10) + "\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&retryWriter{ResponseWriter: w, field: field}, r)
	})
}

// retryWriter puts field before the first bytes of an SSE body; the SDK
// writes each event with one Write, so they are the first event's start.
type retryWriter struct {
	http.ResponseWriter
	field   string
	started atomic.Bool
}

func (w *retryWriter) Write(p []byte) (int, error) {
	if w.started.Swap(true) || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		return w.ResponseWriter.Write(p)
	}
	n, err := w.ResponseWriter.Write(append([]byte(w.field), p...))
	return max(0, n-len(w.field)), err
}

// Unwrap lets http.ResponseController (which the SDK flushes through)
// reach the connection's writer.
func (w *retryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
