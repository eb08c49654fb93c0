// Package audit writes the audit trail: one JSON line per call, whoever
// made it, whatever surface it came by, and however it ended, as an
// engine.Observer. A line names the caller, the batch and the call, the
// tool and its source, a SHA-256 of the canonical arguments (the
// arguments themselves only when configured, with secret fields
// redacted), the policy's decision, the outcome, the duration, whether it
// was replayed, and the sandbox a command ran under.
//
// With Config.Required the trail is also an engine.CallRecorder, as
// HashiCorp Vault's audit devices are: before a call runs, its request
// entry is written to the file and synced (fsync), and a call whose entry
// cannot be written is refused, not run; its outcome line follows when it
// ends. Without it nothing waits for the disk.
//
// Lines go through a queue bounded in lines and in bytes to one writer, which appends whole
// lines only to a file rotated by size (between lines, never inside one),
// reopened when moved or deleted, or to standard output, and syncs every
// SyncEvery, or at once for a request entry a call waits on; an outcome
// line never waits for the disk longer than EnqueueWait. A line that
// cannot be written or queued is counted and reported (a log line,
// Healthy false).
//
// It knows no transport: it must not import gRPC or any surface.
package audit

import (
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
	"github.com/toolwire/toolwire/internal/monotime"
	"github.com/toolwire/toolwire/internal/redact"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"golang.org/x/sync/semaphore"
)

// Config is the audit trail's configuration; its keys sit at the top level
// of serve's config file.
type Config struct {
	// Log is where the lines go: a file path, or "-" for standard output.
	// Empty: no audit trail.
	Log string `json:"audit_log"`
	// Arguments records each call's arguments in its line, beside their
	// hash, with secret fields replaced (see Redact).
	Arguments bool `json:"audit_arguments"`
	// Redact names more argument fields, at any depth, whose values a line
	// never holds (with Arguments), matched without regard to case or
	// separators ("card_number" also names "cardNumber" and "Card-Number").
	// Fields whose names end in a secret's name (password, token, secret,
	// api_key, private_key, cookie, credentials, …: see redact.SecretNames)
	// always are.
	Redact []string `json:"audit_redact"`
	// Required records each call before it runs, written and synced, and
	// refuses a call whose entry cannot be written, rather than run it
	// unaudited.
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
	// queueBytes is how many bytes those lines hold at most: with
	// Arguments a line holds its call's arguments (up to
	// max_argument_bytes), and a writer stuck on the disk let 8,192 of
	// them hold 8 GiB. A line past it waits, and is dropped, as one past
	// queueLines does.
	queueBytes = 64 << 20
	// EnqueueWait is the longest a call's end waits for room in the queue
	// (a writer stuck on a full disk); past it the line is dropped and
	// counted.
	EnqueueWait = 100 * time.Millisecond
	// RecordWait is the longest a call waits for its request entry to be
	// written and synced, with Required; past it the call is refused.
	RecordWait = 5 * time.Second
	// SyncEvery is how often the writer syncs the file while lines come
	// that no call waits on.
	SyncEvery = 100 * time.Millisecond
	// CloseWait is the longest Close waits for the writer to write, sync
	// and close what is queued. A writer stuck in its output (standard
	// output a pipe nobody reads, a hung network filesystem) is left to
	// finish if it ever can; the lines it holds are reported lost.
	CloseWait = 5 * time.Second
	// writeBytes is how many bytes of whole lines the writer gathers
	// before it writes them, when no call waits.
	writeBytes = 64 << 10
)

// Line is one audit line: a call's outcome, or, with Config.Required, the
// request entry written before the call runs (Stage "request": no
// decision, outcome or duration yet).
type Line struct {
	Time       time.Time       `json:"time"`
	Stage      string          `json:"stage"` // "request" (before the call runs) or "outcome"
	Caller     string          `json:"caller"`
	AuthMethod string          `json:"auth_method,omitempty"`
	BatchID    string          `json:"batch_id"`
	CallID     string          `json:"call_id"`
	Index      int             `json:"index"`
	Tool       string          `json:"tool"`
	Source     string          `json:"source"`
	ArgsSHA256 string          `json:"args_sha256"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Decision   string          `json:"decision,omitempty"` // "allow", or "deny" by a permission, a policy or audit_required
	Rule       string          `json:"rule,omitempty"`
	Outcome    string          `json:"outcome,omitempty"`     // "ok" or the error kind, lower case
	DurationMS *float64        `json:"duration_ms,omitempty"` // absent from a request entry
	Replayed   bool            `json:"replayed,omitempty"`
	Approval   string          `json:"approval,omitempty"`    // a call held for approval that a person decided: "approved" or "denied"
	Approver   string          `json:"approver,omitempty"`    // who decided, as the decision named them
	ResolvedBy string          `json:"resolved_by,omitempty"` // the authenticated caller who sent the decision
	Sandbox    json.RawMessage `json:"sandbox,omitempty"`
	SessionID  string          `json:"session_id,omitempty"`

	durationMS float64 // what DurationMS points to, in the same allocation
}

// The stages of a line.
const (
	StageRequest = "request"
	StageOutcome = "outcome"
)

// RuleRequired is the rule an outcome line names for a call refused because
// its request entry could not be written.
const RuleRequired = "audit_required"

// Trail is a running audit trail: an engine.Observer, and with
// Config.Required an engine.CallRecorder.
type Trail struct {
	cfg    Config
	redact redact.Fields
	log    *slog.Logger
	out    io.WriteCloser
	lines  chan entry
	room   *semaphore.Weighted // the queue's bytes: taken by enqueue, given back as the writer takes each line
	max    int64               // room's size
	done   chan struct{}

	// mu orders line sends before Close closes the queue: a call that
	// ends after Close (a detached batch's, an abandoned tool's) is
	// dropped, not a send on a closed channel.
	mu     sync.RWMutex
	closed bool

	recordWait time.Duration // RecordWait; tests shorten it
	closeWait  time.Duration // CloseWait; tests shorten it
	closeErr   error         // the output's Close, by the writer before done closes

	written, dropped, failed atomic.Int64
	healthy                  atomic.Bool
	lastReport               atomic.Int64 // monotime.Now of the last failure logged; 0: none yet
}

// entry is a line for the writer, without its newline (the writer adds
// it: appending it here would copy most lines once more); done, for a
// request entry a call waits on, is answered once the line is written and
// synced, or could not be.
type entry struct {
	line []byte
	done chan<- error
}

// weight is what e takes of the queue's room: its bytes, and all of the
// room for a line larger than the whole of it, which then waits for the
// queue to empty rather than for ever.
func (e entry) weight(max int64) int64 { return min(int64(len(e.line))+1, max) }

var (
	_ engine.Observer     = (*Trail)(nil)
	_ engine.CallRecorder = (*Trail)(nil)
)

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
	return start(cfg, out, log, queueLines, queueBytes), nil
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// start runs a trail writing to out, queueing at most queue lines and
// queueBytes of them.
func start(cfg Config, out io.WriteCloser, log *slog.Logger, queue int, queueBytes int64) *Trail {
	t := &Trail{cfg: cfg, log: log, out: out, lines: make(chan entry, queue), room: semaphore.NewWeighted(queueBytes), max: queueBytes,
		done: make(chan struct{}), redact: redact.NewFields(cfg.Redact), recordWait: RecordWait, closeWait: CloseWait}
	t.healthy.Store(true)
	go t.write()
	return t
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// syncer is a writer that can flush to stable storage.
type syncer interface{ Sync() error }

// write is the trail's one writer. It gathers whole lines and writes them
// in one Write: at once, and synced, when a call waits on one of them (the
// entries that wait meanwhile share the next Write and sync: a group
// commit); otherwise once writeBytes are gathered, and every SyncEvery,
// synced; and once more when the queue closes, before it closes the
// output. Only whole lines reach the output, so a rotation or a failed
// write never splits one.
func (t *Trail) write() {
	defer close(t.done)
	// The writer closes the output, after its last write: only it knows
	// when no Write is under way (see Close).
	defer func() { t.closeErr = t.out.Close() }()
	var (
		buf      []byte         // whole lines gathered, not yet written
		n        int64          // how many
		waiters  []chan<- error // the calls waiting on some of them
		unsynced bool           // lines written since the last sync
	)
	tick := time.NewTicker(SyncEvery)
	defer tick.Stop()
	flush := func(sync bool) {
		if len(buf) == 0 && !(sync && unsynced) {
			return
		}
		var err error
		if len(buf) > 0 {
			if _, err = t.out.Write(buf); err == nil {
				unsynced = true
			}
		}
		if err == nil && sync && unsynced {
			if s, ok := t.out.(syncer); ok {
				err = s.Sync()
			}
			unsynced = false
		}
		if err != nil {
			t.failed.Add(n)
		} else {
			t.written.Add(n)
		}
		t.report(err) // before the waiting calls learn of it, so Healthy agrees with them
		for _, w := range waiters {
			w <- err
		}
		if cap(buf) > 4*writeBytes {
			buf = nil // a huge line passed: do not keep its room
		}
		buf, n, waiters = buf[:0], 0, waiters[:0]
	}
	add := func(e entry) {
		t.room.Release(e.weight(t.max))
		buf = append(append(buf, e.line...), '\n')
		n++
		if e.done != nil {
			waiters = append(waiters, e.done)
		}
	}
	for {
		select {
		case e, ok := <-t.lines:
			if !ok {
				flush(true)
				return
			}
			add(e)
			// Take what else waits, so that calls waiting together share
			// one write and one sync.
		more:
			for len(buf) < writeBytes {
				select {
				case e, ok := <-t.lines:
					if !ok {
						flush(true)
						return
					}
					add(e)
				default:
					break more
				}
			}
			if len(waiters) > 0 || len(buf) >= writeBytes {
				flush(len(waiters) > 0)
			}
		case <-tick.C:
			flush(true)
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
	now := monotime.Now()
	if last := t.lastReport.Load(); (last == 0 || now-last > int64(10*time.Second)) && t.lastReport.CompareAndSwap(last, now) {
		t.log.Error("the audit trail cannot be written", "audit_log", t.cfg.Log, "error", err.Error(),
			"dropped", t.dropped.Load(), "failed", t.failed.Load(), "refusing_calls", t.cfg.Required)
	}
}

// Healthy reports whether the last write succeeded and no line was
// dropped since.
func (t *Trail) Healthy() bool { return t.healthy.Load() }

// Stats are the trail's counts: lines written, dropped (the queue full
// past EnqueueWait, or RecordWait for a request entry) and failed (the
// write failed).
func (t *Trail) Stats() (written, dropped, failed int64) {
	return t.written.Load(), t.dropped.Load(), t.failed.Load()
}

// Close writes what is queued, syncs, and closes the file. Lines of calls
// ending after Close are dropped; calls recorded after Close are refused.
// It waits for the writer at most CloseWait: a writer stuck in its output
// is left with the output open (closing a file under a Write could have
// its descriptor reused, and lines written elsewhere), and Close logs and
// returns an error saying how many lines were still queued.
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
	timer := time.NewTimer(t.closeWait)
	defer timer.Stop()
	select {
	case <-t.done:
		return t.closeErr
	case <-timer.C:
	}
	err := fmt.Errorf("the audit trail's writer is stuck in its output (a pipe nobody reads, a filesystem that does not answer) after %s: the lines it is writing and %d queued are not recorded", t.closeWait, len(t.lines))
	t.log.Error(err.Error(), "audit_log", t.cfg.Log)
	return err
}

var (
	errClosed = errors.New("the audit trail is closed")
	errStuck  = errors.New("the queue of lines is full: the writer is stuck")
)

// enqueue hands e to the writer, waiting for room, in lines and in bytes,
// until wait fires or stop closes.
func (t *Trail) enqueue(e entry, wait func() <-chan time.Time, stop <-chan struct{}) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errClosed
	}
	n := e.weight(t.max)
	if t.room.TryAcquire(n) {
		select {
		case t.lines <- e:
			return nil
		default:
		}
	} else {
		// Waiting for bytes: the semaphore takes a context, which ends
		// when wait fires or stop closes.
		waited := wait()
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			select {
			case <-waited:
			case <-stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		err := t.room.Acquire(ctx, n)
		cancel()
		<-ended
		if err != nil {
			if isClosed(stop) {
				return context.Canceled
			}
			return errStuck
		}
		wait = func() <-chan time.Time { return waited }
	}
	select {
	case t.lines <- e:
		return nil
	case <-wait():
		t.room.Release(n)
		return errStuck
	case <-stop:
		t.room.Release(n)
		return context.Canceled
	}
}

// isClosed reports whether c is closed; a nil c never is.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// callNote is what the trail keeps of a call, with Required, in the
// context its CallStarted returns.
type callNote struct {
	refused bool // its request entry could not be written
}

type callNoteKey struct{}

// CallStarted implements engine.Observer: with Required, it keeps a note
// of the call in the returned context.
func (t *Trail) CallStarted(ctx context.Context, _ *engine.CallInfo) context.Context {
	if !t.cfg.Required {
		return ctx
	}
	return context.WithValue(ctx, callNoteKey{}, &callNote{})
}

// RecordCall implements engine.CallRecorder: with Required, it writes the
// call's request entry and returns once it is written and synced; an
// error, which names the audit trail, refuses the call. Without Required
// it records nothing and returns at once.
func (t *Trail) RecordCall(ctx context.Context, c *engine.CallInfo) error {
	if !t.cfg.Required {
		return nil
	}
	err := t.record(ctx, c)
	if err == nil {
		return nil
	}
	if note, _ := ctx.Value(callNoteKey{}).(*callNote); note != nil {
		note.refused = true
	}
	if ctx.Err() != nil {
		return fmt.Errorf("the call was cancelled before the audit trail recorded it: %w", ctx.Err())
	}
	return fmt.Errorf("the audit trail cannot record this call (%v), and audit_required refuses calls it cannot record; retry later", err)
}

func (t *Trail) record(ctx context.Context, c *engine.CallInfo) error {
	l := t.newLine(c)
	l.Stage = StageRequest
	b, err := json.Marshal(l)
	if err != nil {
		t.failed.Add(1)
		t.report(err)
		return err
	}
	done := make(chan error, 1)
	timer := time.NewTimer(t.recordWait)
	defer timer.Stop()
	if err := t.enqueue(entry{b, done}, func() <-chan time.Time { return timer.C }, ctx.Done()); err != nil {
		if err == errStuck {
			t.dropped.Add(1)
			t.report(err)
		}
		return err
	}
	select {
	case err := <-done:
		return err
	case <-timer.C:
		err := fmt.Errorf("its entry was not written within %s: the writer is stuck", t.recordWait)
		t.report(err)
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CallEnded writes the call's outcome line.
func (t *Trail) CallEnded(ctx context.Context, c *engine.CallInfo, res *toolwirev1.CallResult) {
	l := t.line(c, res)
	if note, _ := ctx.Value(callNoteKey{}).(*callNote); note != nil && note.refused {
		l.Rule = RuleRequired
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.failed.Add(1)
		t.report(err)
		return
	}
	var timer *time.Timer
	wait := func() <-chan time.Time { // made only when the queue is full
		timer = time.NewTimer(EnqueueWait)
		return timer.C
	}
	switch err := t.enqueue(entry{line: b}, wait, nil); err {
	case nil:
	case errClosed:
		t.dropped.Add(1)
	default:
		t.dropped.Add(1)
		t.report(err)
	}
	if timer != nil {
		timer.Stop()
	}
}

// newLine fills the fields a call's request entry and outcome line share.
func (t *Trail) newLine(c *engine.CallInfo) *Line {
	l := &Line{
		Time: time.Now().UTC(), BatchID: c.Batch.ID, CallID: c.Call.GetCallId(), Index: c.Index,
		Tool: c.Call.GetName(), Source: "unknown", SessionID: c.Batch.Request.GetSessionId(),
	}
	if id := c.Batch.Caller; id != nil {
		l.Caller, l.AuthMethod = id.ID, id.Method
	}
	if c.Tool != nil {
		l.Source = c.Tool.Source.Name()
	}
	if a, ok := c.Approval(); ok {
		l.Approval, l.Approver, l.ResolvedBy = "denied", a.Approver, a.By
		if a.Approved {
			l.Approval = "approved"
		}
	}
	v, canon, err := canonical(c.Call.GetArguments())
	if err == nil {
		sum := sha256.Sum256(canon)
		l.ArgsSHA256 = hex.EncodeToString(sum[:])
		if t.cfg.Arguments {
			l.Arguments, _ = json.Marshal(t.redact.Apply(v))
		}
	} else {
		sum := sha256.Sum256([]byte(c.Call.GetArguments()))
		l.ArgsSHA256 = hex.EncodeToString(sum[:]) // not JSON: hashed as sent, never recorded
	}
	return l
}

// line makes the call's outcome line.
func (t *Trail) line(c *engine.CallInfo, res *toolwirev1.CallResult) *Line {
	l := t.newLine(c)
	l.durationMS = float64(res.GetDuration().AsDuration().Microseconds()) / 1000
	l.Stage, l.Decision, l.Outcome, l.DurationMS, l.Replayed = StageOutcome, "allow", "ok", &l.durationMS, res.GetReplayed()
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
	switch res.GetErrorKind() {
	case toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED:
		l.Decision = "deny"
		l.Rule = details.Policy // empty: the permissions refused it
	case toolwirev1.ErrorKind_ERROR_KIND_DENIED:
		l.Decision = "deny" // by a person: approval, approver and resolved_by say who
	}
	l.Sandbox = details.Sandbox
	return l
}

// canonical parses args and writes them as canonical JSON: object keys
// sorted, no spaces, so equal arguments hash equal however sent. It
// returns the parsed value too, which Fields.Apply may then change.
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

// The rest of engine.Observer: the trail records calls only.

func (*Trail) BatchStarted(ctx context.Context, _ *engine.BatchInfo) context.Context { return ctx }
func (*Trail) LaneStarted(context.Context, *engine.BatchInfo, int)                   {}
func (*Trail) StreamEnded(context.Context, *engine.BatchInfo, string)                {}
func (*Trail) BatchEnded(context.Context, *engine.BatchInfo, engine.BatchCounts, error) {
}
func (*Trail) CallRunning(context.Context, *engine.CallInfo)   {}
func (*Trail) CallAbandoned(context.Context, *engine.CallInfo) {}

// Gate is the engine.Admission a required trail was once put in front of:
// it asks Next (nil: admits every call), the server's policy.Rules.
//
// Deprecated: with Config.Required the trail refuses a call it cannot
// record itself, as an engine.CallRecorder, before the call runs; pass
// the policy.Rules as the Admission. Gate stays so that code that wraps
// them still builds, and adds nothing.
type Gate struct {
	Trail *Trail
	Next  engine.Admission
}

// Permitted implements engine.Admission: Next's answer, by name alone.
func (g Gate) Permitted(caller *engine.Identity, tool string) bool {
	return g.Next == nil || g.Next.Permitted(caller, tool)
}

// Decide implements engine.Admission: Next's verdict.
func (g Gate) Decide(ctx context.Context, caller *engine.Identity, tl *tools.Tool, args json.RawMessage) engine.Verdict {
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
