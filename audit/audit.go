// Package audit writes the audit trail: one JSON line per call, whoever
// made it, whatever surface it came by, and however it ended, as an
// engine.Observer. A line names the caller, the batch and the call, the
// tool and its source, a SHA-256 of the canonical arguments (the
// arguments themselves only when configured, with secret fields
// redacted), the policy's decision, the outcome, the duration, whether it
// was replayed, and the sandbox a command ran under.
//
// Lines go through a bounded queue to one writer, which appends them to a
// file rotated by size or to standard output and syncs every
// SyncEvery; the engine never waits for the disk longer than EnqueueWait.
// A line that cannot be written or queued is counted and reported (a log
// line, Healthy false), and with Config.Required the server refuses calls
// rather than run them unaudited (Gate).
//
// It knows no transport: it must not import gRPC or any surface.
package audit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Config is the audit trail's configuration; its keys sit at the top level
// of serve's config file.
type Config struct {
	// Log is where the lines go: a file path, or "-" for standard output.
	// Empty: no audit trail.
	Log string `json:"audit_log"`
	// Arguments records each call's arguments in its line, beside their
	// hash, with the fields named in Redact replaced.
	Arguments bool `json:"audit_arguments"`
	// Redact names argument fields, at any depth, whose values a line never
	// holds (with Arguments); "password", "token", "secret", "api_key" and
	// "authorization" always are.
	Redact []string `json:"audit_redact"`
	// Required refuses calls while the trail cannot be written, rather
	// than run them unaudited.
	Required bool `json:"audit_required"`
	// MaxSizeMB rotates the file past this many megabytes; default 100.
	MaxSizeMB int `json:"audit_max_size_mb"`
	// MaxBackups is how many rotated files are kept; default 10.
	MaxBackups int `json:"audit_max_backups"`
}

// Bounds of the writer.
const (
	// queueLines is how many lines wait for the writer at most.
	queueLines = 8192
	// EnqueueWait is the longest a call's end waits for room in the queue
	// (a writer stuck on a full disk); past it the line is dropped and
	// counted.
	EnqueueWait = 100 * time.Millisecond
	// SyncEvery is how often the writer syncs the file while lines come.
	SyncEvery = 100 * time.Millisecond
)

// alwaysRedacted are the fields no line ever holds.
var alwaysRedacted = []string{"password", "token", "secret", "api_key", "authorization"}

// Line is one audit line.
type Line struct {
	Time       time.Time       `json:"time"`
	Caller     string          `json:"caller"`
	AuthMethod string          `json:"auth_method,omitempty"`
	BatchID    string          `json:"batch_id"`
	CallID     string          `json:"call_id"`
	Index      int             `json:"index"`
	Tool       string          `json:"tool"`
	Source     string          `json:"source"`
	ArgsSHA256 string          `json:"args_sha256"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Decision   string          `json:"decision"` // "allow", or "deny" by a permission or a policy
	Rule       string          `json:"rule,omitempty"`
	Outcome    string          `json:"outcome"` // "ok" or the error kind, lower case
	DurationMS float64         `json:"duration_ms"`
	Replayed   bool            `json:"replayed,omitempty"`
	Sandbox    json.RawMessage `json:"sandbox,omitempty"`
	SessionID  string          `json:"session_id,omitempty"`
}

// Trail is a running audit trail: an engine.Observer.
type Trail struct {
	cfg    Config
	redact map[string]bool
	log    *slog.Logger
	out    io.WriteCloser
	lines  chan []byte
	done   chan struct{}

	// mu orders line sends before Close closes the queue: a call that
	// ends after Close (a detached batch's, an abandoned tool's) is
	// dropped, not a send on a closed channel.
	mu     sync.RWMutex
	closed bool

	written, dropped, failed atomic.Int64
	healthy                  atomic.Bool
	lastReport               atomic.Int64 // Unix ns of the last failure logged
}

var _ engine.Observer = (*Trail)(nil)

// Open starts the trail cfg describes, or returns nil, nil when cfg.Log is
// empty. A file that cannot be opened for appending is an error.
func Open(cfg Config, log *slog.Logger) (*Trail, error) {
	if cfg.Log == "" {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	var out io.WriteCloser
	if cfg.Log == "-" {
		out = nopCloser{os.Stdout}
	} else {
		f, err := openRotating(cfg.Log, int64(orDefault(cfg.MaxSizeMB, 100))<<20, orDefault(cfg.MaxBackups, 10))
		if err != nil {
			return nil, fmt.Errorf("audit_log: %w", err)
		}
		out = f
	}
	return start(cfg, out, log, queueLines), nil
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// start runs a trail writing to out.
func start(cfg Config, out io.WriteCloser, log *slog.Logger, queue int) *Trail {
	t := &Trail{cfg: cfg, log: log, out: out, lines: make(chan []byte, queue), done: make(chan struct{}), redact: map[string]bool{}}
	for _, f := range append(append([]string(nil), alwaysRedacted...), cfg.Redact...) {
		t.redact[strings.ToLower(f)] = true
	}
	t.healthy.Store(true)
	go t.write()
	return t
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// syncer is a writer that can flush to stable storage.
type syncer interface{ Sync() error }

// write is the trail's one writer: it appends each line and syncs every
// SyncEvery while lines come, and once more when the queue closes.
func (t *Trail) write() {
	defer close(t.done)
	w := bufio.NewWriterSize(t.out, 64<<10)
	tick := time.NewTicker(SyncEvery)
	defer tick.Stop()
	pending := int64(0) // lines written to w since the last flush
	flush := func() {
		if pending == 0 {
			return
		}
		err := w.Flush()
		if err == nil {
			if s, ok := t.out.(syncer); ok {
				err = s.Sync()
			}
		}
		if err != nil {
			// What the buffer held is lost: count it, and start afresh (a
			// bufio.Writer keeps its first error for ever).
			t.failed.Add(pending)
			t.written.Add(-pending)
			w.Reset(t.out)
		}
		pending = 0
		t.report(err)
	}
	for {
		select {
		case line, ok := <-t.lines:
			if !ok {
				flush()
				return
			}
			_, _ = w.Write(line) // into the buffer; a failure shows at the flush
			t.written.Add(1)
			pending++
		case <-tick.C:
			flush()
		}
	}
}

// report records the writer's health after err (nil: a success) and logs
// a failure at most every ten seconds.
func (t *Trail) report(err error) {
	if err == nil {
		if !t.healthy.Swap(true) {
			t.log.Info("the audit trail is written again", "audit_log", t.cfg.Log)
		}
		return
	}
	t.healthy.Store(false)
	now := time.Now().UnixNano()
	if last := t.lastReport.Load(); now-last > int64(10*time.Second) && t.lastReport.CompareAndSwap(last, now) {
		t.log.Error("the audit trail cannot be written", "audit_log", t.cfg.Log, "error", err.Error(),
			"dropped", t.dropped.Load(), "failed", t.failed.Load(), "refusing_calls", t.cfg.Required)
	}
}

// Healthy reports whether the last write succeeded and no line was
// dropped since.
func (t *Trail) Healthy() bool { return t.healthy.Load() }

// Stats are the trail's counts: lines written, dropped (the queue full
// past EnqueueWait) and failed (the write failed).
func (t *Trail) Stats() (written, dropped, failed int64) {
	return t.written.Load(), t.dropped.Load(), t.failed.Load()
}

// Close writes what is queued, syncs, and closes the file. Lines of calls
// ending after Close are dropped.
func (t *Trail) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.lines)
	t.mu.Unlock()
	<-t.done
	return t.out.Close()
}

// CallEnded writes the call's line.
func (t *Trail) CallEnded(ctx context.Context, c *engine.CallInfo, res *toolwirev1.CallResult) {
	b, err := json.Marshal(t.line(c, res))
	if err != nil {
		t.failed.Add(1)
		t.report(err)
		return
	}
	b = append(b, '\n')
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		t.dropped.Add(1)
		return
	}
	select {
	case t.lines <- b:
		return
	default:
	}
	timer := time.NewTimer(EnqueueWait)
	defer timer.Stop()
	select {
	case t.lines <- b:
	case <-timer.C:
		t.dropped.Add(1)
		t.report(errors.New("the queue of lines is full: the writer is stuck"))
	}
}

// line makes the call's audit line.
func (t *Trail) line(c *engine.CallInfo, res *toolwirev1.CallResult) *Line {
	l := &Line{
		Time: time.Now().UTC(), BatchID: c.Batch.ID, CallID: c.Call.GetCallId(), Index: c.Index,
		Tool: c.Call.GetName(), Source: "unknown", Decision: "allow", Outcome: "ok",
		DurationMS: float64(res.GetDuration().AsDuration().Microseconds()) / 1000,
		Replayed:   res.GetReplayed(), SessionID: c.Batch.Request.GetSessionId(),
	}
	if id := c.Batch.Caller; id != nil {
		l.Caller, l.AuthMethod = id.ID, id.Method
	}
	if c.Tool != nil {
		l.Source = c.Tool.Source.Name()
	}
	v, canon, err := canonical(c.Call.GetArguments())
	if err == nil {
		sum := sha256.Sum256(canon)
		l.ArgsSHA256 = hex.EncodeToString(sum[:])
		if t.cfg.Arguments {
			l.Arguments, _ = json.Marshal(t.redact1(v))
		}
	} else {
		sum := sha256.Sum256([]byte(c.Call.GetArguments()))
		l.ArgsSHA256 = hex.EncodeToString(sum[:]) // not JSON: hashed as sent, never recorded
	}
	if res.GetIsError() {
		l.Outcome = strings.ToLower(strings.TrimPrefix(res.GetErrorKind().String(), "ERROR_KIND_"))
	}
	var details struct {
		Policy  string          `json:"policy"`
		Sandbox json.RawMessage `json:"sandbox"`
	}
	if d := res.GetDetails(); d != "" {
		_ = json.Unmarshal([]byte(d), &details)
	}
	if res.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED {
		l.Decision = "deny"
		l.Rule = details.Policy // empty: the permissions refused it
	}
	l.Sandbox = details.Sandbox
	return l
}

// canonical parses args and writes them as canonical JSON: object keys
// sorted, no spaces, so equal arguments hash equal however sent. It
// returns the parsed value too, which redact1 may then change.
func canonical(args string) (any, []byte, error) {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	var v any
	d := json.NewDecoder(strings.NewReader(args))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(v)
	return v, b, err
}

// redact1 replaces, in place, the values of the redacted fields of v at
// any depth, and returns v.
func (t *Trail) redact1(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if t.redact[strings.ToLower(k)] {
				v[k] = "[redacted]"
			} else {
				v[k] = t.redact1(x)
			}
		}
	case []any:
		for i, x := range v {
			v[i] = t.redact1(x)
		}
	}
	return v
}

// The rest of engine.Observer: the trail records calls' ends only.

func (*Trail) BatchStarted(ctx context.Context, _ *engine.BatchInfo) context.Context { return ctx }
func (*Trail) LaneStarted(context.Context, *engine.BatchInfo, int)                   {}
func (*Trail) StreamEnded(context.Context, *engine.BatchInfo, string)                {}
func (*Trail) BatchEnded(context.Context, *engine.BatchInfo, engine.BatchCounts, error) {
}
func (*Trail) CallStarted(ctx context.Context, _ *engine.CallInfo) context.Context { return ctx }
func (*Trail) CallRunning(context.Context, *engine.CallInfo)                       {}
func (*Trail) CallAbandoned(context.Context, *engine.CallInfo)                     {}

// Gate is the engine.Admission that refuses every call while the trail is
// not healthy (Config.Required), and otherwise asks Next (nil: admits
// every call), the server's policy.Rules.
type Gate struct {
	Trail *Trail
	Next  engine.Admission
}

// Permitted implements engine.Admission: Next's answer, by name alone.
func (g Gate) Permitted(caller *engine.Identity, tool string) bool {
	return g.Next == nil || g.Next.Permitted(caller, tool)
}

// Decide implements engine.Admission.
func (g Gate) Decide(ctx context.Context, caller *engine.Identity, tl *tools.Tool, args json.RawMessage) engine.Verdict {
	if g.Trail != nil && g.Trail.cfg.Required && !g.Trail.Healthy() {
		return engine.Verdict{Effect: engine.Deny, Rule: "audit_required",
			Reason: "the server cannot write its audit trail, and audit_required refuses calls it cannot record; retry later"}
	}
	if g.Next == nil {
		return engine.Verdict{}
	}
	return g.Next.Decide(ctx, caller, tl, args)
}

var _ engine.Admission = Gate{}

// Instrument reports the trail's counts on mp, as the observable counter
// toolwire.audit.lines by state (written, dropped, failed), so a full disk
// shows on a dashboard as well as in the log.
func (t *Trail) Instrument(mp metric.MeterProvider) error {
	if mp == nil {
		return nil
	}
	_, err := mp.Meter("github.com/toolwire/toolwire/audit").Int64ObservableCounter("toolwire.audit.lines",
		metric.WithUnit("{line}"),
		metric.WithDescription("Audit lines, by state: written, dropped (the writer stuck past the enqueue bound) and failed (the write failed)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			w, d, f := t.Stats()
			o.Observe(w, metric.WithAttributes(attribute.String("state", "written")))
			o.Observe(d, metric.WithAttributes(attribute.String("state", "dropped")))
			o.Observe(f, metric.WithAttributes(attribute.String("state", "failed")))
			return nil
		}))
	return err
}

// Flags registers c's flags on fs; each writes into c.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Log, "audit-log", c.Log, "append one JSON line per call to `file` (\"-\": standard output); see docs/audit.md")
}
