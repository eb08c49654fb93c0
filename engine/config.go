package engine

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
)

// Config tunes an Engine. The zero value of every field means its default,
// so Config{} is a usable configuration. The json tags are the keys of
// "toolwire serve"'s config file, where these settings sit at the top
// level; Flags registers the flags of the most used, and withDefaults
// applies the defaults.
type Config struct {
	// MaxConcurrentBatches bounds the batches running at once; a batch
	// beyond it is refused with ResourceExhausted, so an overloaded server
	// sheds load instead of queueing it without bound. Default 4096.
	MaxConcurrentBatches int `json:"max_concurrent_batches"`
	// MaxCallsPerBatch bounds the calls in one batch; more is InvalidArgument.
	// Default 1024.
	MaxCallsPerBatch int `json:"max_calls"`
	// MaxArgumentBytes bounds one call's arguments; more is InvalidArgument.
	// Default 1 MiB.
	MaxArgumentBytes int `json:"max_argument_bytes"`
	// MaxResultBytes caps one result's output (text, images, structured
	// content and details together); the rest is cut with a visible marker.
	// It holds for every result, errors included, and for each progress
	// report's message and output together. Default 256 KiB; at most
	// MaxMessageBytes less 64 KiB.
	MaxResultBytes int `json:"max_result_bytes"`
	// DefaultCallTimeout applies to calls whose call and tool set no timeout.
	// Default 60s.
	DefaultCallTimeout time.Duration `json:"call_timeout"`
	// MaxCallTimeout caps every call's timeout. Default 10m.
	MaxCallTimeout time.Duration `json:"max_call_timeout"`
	// IdleTimeout, when positive, times a call out after this long without a
	// progress report; every report extends it, up to the call's deadline.
	// Default off.
	IdleTimeout time.Duration `json:"idle_timeout"`
	// DeadlineMargin is kept free before the caller's deadline (Run's ctx), so a call timed
	// out by it can still send its result. Default 50ms.
	DeadlineMargin time.Duration `json:"deadline_margin"`
	// MaxParallel bounds the calls running at once in one parallel lane; a
	// batch may ask for less. Default 16.
	MaxParallel int `json:"max_parallel"`
	// AbandonGrace is how long a cancelled or timed-out tool may take to
	// return before its result is sent without it and the tool is abandoned.
	// Default 2s.
	AbandonGrace time.Duration `json:"abandon_grace"`
	// DrainTimeout is how long shutdown lets running batches finish before
	// cancelling their calls. Default 30s.
	DrainTimeout time.Duration `json:"drain_timeout"`
	// MaxStreamBufferBytes bounds the encoded size of one batch's events
	// waiting for a slow reader, counting the one being sent; beyond it the
	// batch's calls wait to report (their concurrency slots already given
	// back once their tools have returned). An event larger than the budget
	// is still sent once nothing else waits. Default 1 MiB.
	MaxStreamBufferBytes int `json:"max_stream_buffer_bytes"`
	// MaxBufferedBytes bounds the encoded size of the events waiting for
	// slow readers across all batches: each batch's outbox, within
	// MaxStreamBufferBytes, and the results of its calls waiting to enter
	// it. Reaching it makes no one wait and refuses no batch: the streams
	// of the clients that are not reading, those holding the most first,
	// are ended until what the others hold fits, as SendTimeout ends one
	// (calls cancelled, keyed results recorded, the sink told to stop;
	// Run returns ResourceExhausted), logged and counted. Default 64 MiB
	// (see DefaultMaxBufferedBytes); negative: no server-wide bound.
	MaxBufferedBytes int `json:"max_buffered_bytes"`
	// EventBuffer bounds the number of one batch's events waiting for a slow
	// reader, a second cap beside MaxStreamBufferBytes for many small events.
	// Default 64.
	EventBuffer int `json:"event_buffer"`
	// SendTimeout ends a batch whose sink has been in one Send for this
	// long (a client that reads nothing, so flow control holds the
	// transport): the batch's calls are cancelled, their results still
	// recorded under their idempotency keys, the sink is told to stop (see
	// Stopper), and Run returns DeadlineExceeded. Default 30s.
	SendTimeout time.Duration `json:"send_timeout"`
	// Safe overrides, per tool name, whether a tool's calls may share a
	// parallel lane; by default a tool is safe when it is read-only.
	Safe map[string]bool `json:"safe"`
	// IdempotencyTTL is how long a completed call with an idempotency key
	// is replayed instead of run again. Default 24h.
	IdempotencyTTL time.Duration `json:"idempotency_ttl"`
	// IdempotencyLease is how long a claim on a running call lasts unless
	// renewed (a third of it in, while the tool runs); a replica that dies
	// delays retries of its calls by up to this long. Default 10s.
	IdempotencyLease time.Duration `json:"idempotency_lease"`
	// SessionTTL is how long a session variable lives after it was last
	// set. Default 24h.
	SessionTTL time.Duration `json:"session_ttl"`
	// BatchTTL is how long a detached batch's events are kept once it has
	// finished (or once its replica was lost). Default 24h.
	BatchTTL time.Duration `json:"batch_ttl"`
	// BatchLease is how long the replica running a detached batch holds it
	// unless renewed (a third of it in): when a replica dies, its batches
	// are reported unfinished, their open calls CANCELLED (owner lost), this
	// long after its last renewal. Default 10s.
	BatchLease time.Duration `json:"batch_lease"`
	// Approvers are the callers who may resolve approvals
	// (ResolveApproval); with authentication off, everyone is the
	// anonymous caller and may.
	Approvers []string `json:"approvers"`
	// ApprovalTimeout bounds a call's wait for approval (a call the
	// Admission holds, or a tool's RequestApproval); it then ends TIMEOUT.
	// Default 0: the call's own timeout.
	ApprovalTimeout time.Duration `json:"approval_timeout"`
	// ApproveOwnCalls lets an approver resolve the calls of batches it sent
	// itself; by default it may not, so an agent cannot approve its own
	// calls.
	ApproveOwnCalls bool `json:"approve_own_calls"`

	// RatePerCaller is how many calls a second each caller may start, on
	// average, admitted a batch at a time (see limits.go); 0: no rate
	// limit. Per replica, unless Deps.RateStore is set.
	RatePerCaller float64 `json:"rate_per_caller"`
	// RateBurst is how many calls a caller may start at once, the most
	// one batch may hold; 0: RatePerCaller rounded up, at least 1.
	RateBurst int `json:"rate_burst"`
	// MaxConcurrentCalls bounds the tool calls running at once across the
	// engine. A batch is accepted only once a slot is free for its first
	// call; it waits up to MaxQueueWait for one, then fails with
	// ResourceExhausted. The other calls of an accepted batch wait for a
	// slot up to their own timeout (and the caller's deadline); a call whose
	// wait runs out gets a TIMEOUT result and was not run. Default 4096.
	MaxConcurrentCalls int `json:"max_concurrent_calls"`
	// MaxQueueWait is how long a batch waits for a slot before it is refused
	// with ResourceExhausted, and a listing or search of a large catalog
	// for its turn (see ListTools). Default 5s.
	MaxQueueWait time.Duration `json:"max_queue_wait"`
	// MaxCallsPerCaller bounds the calls of one caller (see CallerFrom)
	// running at once, with the same queueing as MaxConcurrentCalls, so
	// that one busy agent cannot take every slot. Set, it applies to every
	// caller, the anonymous one included. Default 0: a quarter of
	// MaxConcurrentCalls (at least 1) for each authenticated caller, and no
	// cap on the anonymous caller. Negative: no per-caller cap at all.
	MaxCallsPerCaller int `json:"max_calls_per_caller"`
	// MaxMessageBytes is the largest event a sink carries (for gRPC, the
	// message size limit): BatchAccepted must fit in it, and a result is
	// held below it. Default 4 MiB.
	MaxMessageBytes int `json:"max_message_bytes"`
	// MaxListBytes is the most a ListTools response that lists every tool
	// at once may carry (a client that does not page asks for that); one
	// that would carry more is refused with ResourceExhausted, telling the
	// client to page. Pages stay within MaxMessageBytes. Default 64 MiB,
	// and never less than MaxMessageBytes.
	MaxListBytes int `json:"max_list_bytes"`
	// MaxWatches bounds the WatchTools streams open at once on the engine,
	// over every surface; one more is refused with ResourceExhausted. Each
	// holds a goroutine and its stream for as long as its client keeps it,
	// and no other bound counted them (a watch is not a batch). Default
	// 1000, as mcp_max_sessions bounds /mcp's sessions and listen streams.
	MaxWatches int `json:"max_watches"`
	// MaxWatchesPerCaller bounds the WatchTools streams one caller (see
	// CallerFrom) holds open at once; one more is refused with
	// ResourceExhausted. Default 100, as mcp_max_sessions_per_caller.
	MaxWatchesPerCaller int `json:"max_watches_per_caller"`
}

// Deps are what an Engine is given rather than configured with: the
// stores it keeps its state in, who decides what callers may do, what
// watches it, where it logs, and its name among replicas. A program builds
// them (cmd/toolwire from its settings); none is a key of the config
// file, which Config's fields are. exposure-notifications-server keeps its
// ServerEnv beside each Config for the same reason. The zero Deps is
// usable: each field has a default.
type Deps struct {
	// Idempotency keeps the records that replay calls sent again with an
	// idempotency key, and Vars the scoped variables the engine keeps
	// session variables in, and the mailboxes of approvals and of
	// cancellations between replicas (see vars.go); one backend
	// (store.Store) usually serves both. The caller closes them after the
	// engine has stopped. Default: one new in-memory store (store/memory)
	// for whichever is unset, which the engine does not share.
	Idempotency store.Idempotency
	Vars        store.Vars
	// Signals carries the notices that wake the owner of a batch at once
	// when a cancel or an approval is left in its mailbox (Vars) on
	// another replica (see signals.go); without it the owner only polls
	// its mailboxes. Default: Vars, when it is a store.Signals too (every
	// store backend is).
	Signals store.Signals
	// EventLog keeps the events of detached batches (BatchOptions.detach),
	// written before they are sent, so that AttachBatch and GetBatch work
	// on any replica sharing it; the caller closes it after the engine has
	// stopped. Default: a new in-memory store (store/memory), which the
	// engine does not share.
	EventLog store.EventLog
	// RateStore keeps the callers' allowances (Config.RatePerCaller) where
	// every replica sees them (the Redis store); nil keeps them in this
	// process.
	RateStore RateStore
	// Admission decides which tools each caller (see CallerFrom) may list
	// and call, and each call by its validated arguments: allowed, denied,
	// or held for approval (see Admission; package policy's Rules).
	// Default nil: every caller may call every tool, and no call waits.
	Admission Admission
	// Observer watches the engine's batches and calls: OpenTelemetry
	// (package engine/otelobserver), an audit trail, or several of them
	// (Observers). Default nil: none, at no cost. The debug call log is
	// added when Logger writes debug lines (calllog.go).
	Observer Observer
	// Logger receives the engine's logs, through LogHandler so that lines
	// about a batch or call carry its IDs and trace. Default slog.Default().
	Logger *slog.Logger
	// Replica names this engine as the owner of the detached batches it
	// runs, in the EventLog. Default: a random name, new for each engine.
	Replica string
}

// Flags registers the engine's flags on fs; each writes into c. Their
// usage gives each default, which withDefaults applies.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxConcurrentBatches, "max-batches", c.MaxConcurrentBatches, "most batches running at once; more are refused with RESOURCE_EXHAUSTED (0: 4096)")
	fs.IntVar(&c.MaxCallsPerBatch, "max-calls", c.MaxCallsPerBatch, "most calls in one batch (0: 1024)")
	fs.IntVar(&c.MaxArgumentBytes, "max-argument-bytes", c.MaxArgumentBytes, "largest arguments of one call, in bytes (0: 1 MiB)")
	fs.IntVar(&c.MaxResultBytes, "max-result-bytes", c.MaxResultBytes, "cap on one result's output, in bytes (0: 256 KiB)")
	fs.DurationVar(&c.DefaultCallTimeout, "call-timeout", c.DefaultCallTimeout, "timeout of calls that set none (0: 60s)")
	fs.DurationVar(&c.MaxCallTimeout, "max-call-timeout", c.MaxCallTimeout, "cap on every call's timeout (0: 10m)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "time a call out after this long without progress (0: off)")
	fs.IntVar(&c.MaxParallel, "max-parallel", c.MaxParallel, "most calls running at once in a parallel lane (0: 16)")
	fs.DurationVar(&c.AbandonGrace, "abandon-grace", c.AbandonGrace, "how long a cancelled tool may take to return before it is abandoned (0: 2s)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long shutdown lets running batches finish (0: 30s)")
	fs.IntVar(&c.MaxStreamBufferBytes, "max-stream-buffer-bytes", c.MaxStreamBufferBytes, "bytes of one batch's events that may wait for a slow reader (0: 1 MiB)")
	fs.IntVar(&c.MaxBufferedBytes, "max-buffered-bytes", c.MaxBufferedBytes, "bytes of events that may wait for slow readers, all streams together; past it the streams of clients not reading that hold the most are ended (0: 64 MiB; -1: no bound)")
	fs.DurationVar(&c.SendTimeout, "send-timeout", c.SendTimeout, "end a stream whose client has read nothing for this long, cancelling its calls (0: 30s)")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long a completed call with an idempotency key is replayed instead of run (0: 24h)")
	fs.DurationVar(&c.IdempotencyLease, "idempotency-lease", c.IdempotencyLease, "how long a claim on a running call lasts unless renewed; bounds how long retries wait for a replica that died (0: 10s)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", c.SessionTTL, "how long a session variable lives after it was last set (0: 24h)")
	fs.DurationVar(&c.BatchTTL, "batch-ttl", c.BatchTTL, "how long a detached batch's events are kept after it finished (0: 24h)")
	fs.DurationVar(&c.ApprovalTimeout, "approval-timeout", c.ApprovalTimeout, "how long a call waits for approval before it times out (0: its own timeout)")
	fs.DurationVar(&c.BatchLease, "batch-lease", c.BatchLease, "how long the replica running a detached batch holds it unless renewed; bounds how long a dead replica's batch looks running (0: 10s)")
	fs.IntVar(&c.MaxConcurrentCalls, "max-concurrent-calls", c.MaxConcurrentCalls, "most tool calls running at once; more queue (0: 4096)")
	fs.DurationVar(&c.MaxQueueWait, "max-queue-wait", c.MaxQueueWait, "how long a batch waits for a free call slot, or a listing or search of more than 1,000 tools for its turn, before RESOURCE_EXHAUSTED (0: 5s)")
	fs.Float64Var(&c.RatePerCaller, "rate-per-caller", c.RatePerCaller, "calls a second each caller may start, on average; batches beyond it are refused with RESOURCE_EXHAUSTED and a RetryInfo (0: no limit)")
	fs.IntVar(&c.RateBurst, "rate-burst", c.RateBurst, "calls a caller may start at once above --rate-per-caller, the most one batch may hold (0: the rate, rounded up)")
	fs.IntVar(&c.MaxCallsPerCaller, "max-calls-per-caller", c.MaxCallsPerCaller, "most tool calls of one caller running at once (0: a quarter of --max-concurrent-calls for each authenticated caller; -1: no cap)")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest gRPC message received or sent, in bytes (0: 4 MiB)")
}

// DefaultMaxBufferedBytes is MaxBufferedBytes' default. What it bounds
// costs more RSS than its size: Go's collector lets the heap grow to about
// twice what is live, and each stalled stream also holds memory the budget
// does not count (what the transport accepted of it, its calls' state).
// Measured with "toolwire serve", 200 or 2,000 clients reading nothing of
// 100 KiB results added about 4 MB of RSS per MiB of budget: 64 MiB, about
// 260 MB.
const DefaultMaxBufferedBytes = 64 << 20

// Validate reports settings that cannot work together. Zero values are
// defaults and always valid.
func (c *Config) Validate() error {
	if c.RatePerCaller < 0 || c.RateBurst < 0 {
		return fmt.Errorf("rate_per_caller (%g) and rate_burst (%d) cannot be negative", c.RatePerCaller, c.RateBurst)
	}
	if c.MaxBufferedBytes > 0 {
		stream := c.MaxStreamBufferBytes
		if stream <= 0 {
			stream = 1 << 20
		}
		if c.MaxBufferedBytes < stream {
			return fmt.Errorf("max_buffered_bytes (%d) is less than max_stream_buffer_bytes (%d): a client would be cut off before its own stream's buffer is full; raise it, or lower max_stream_buffer_bytes", c.MaxBufferedBytes, stream)
		}
	}
	return nil
}

// DrainBound is the longest Drain takes with c: DrainTimeout, then
// AbandonGrace and DrainAfterCancel for the calls it cancelled.
func (c Config) DrainBound() time.Duration {
	c = c.withDefaults()
	return c.DrainTimeout + c.AbandonGrace + DrainAfterCancel
}

// Leases are the idempotency and batch leases c runs with, defaults
// applied.
func (c Config) Leases() (idempotency, batch time.Duration) {
	c = c.withDefaults()
	return c.IdempotencyLease, c.BatchLease
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxConcurrentBatches, 4096)
	def(&c.MaxCallsPerBatch, 1024)
	def(&c.MaxArgumentBytes, 1<<20)
	def(&c.MaxResultBytes, 256<<10)
	def(&c.MaxParallel, 16)
	def(&c.EventBuffer, 64)
	def(&c.MaxStreamBufferBytes, 1<<20)
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes // negative stays: no bound
	}
	defDur(&c.SendTimeout, 30*time.Second)
	defDur(&c.DefaultCallTimeout, 60*time.Second)
	defDur(&c.MaxCallTimeout, 10*time.Minute)
	defDur(&c.DeadlineMargin, 50*time.Millisecond)
	defDur(&c.AbandonGrace, 2*time.Second)
	defDur(&c.DrainTimeout, 30*time.Second)
	defDur(&c.IdempotencyTTL, 24*time.Hour)
	defDur(&c.IdempotencyLease, 10*time.Second)
	defDur(&c.SessionTTL, 24*time.Hour)
	defDur(&c.BatchTTL, 24*time.Hour)
	defDur(&c.BatchLease, 10*time.Second)
	def(&c.MaxConcurrentCalls, 4096)
	def(&c.MaxMessageBytes, 4<<20)
	def(&c.MaxListBytes, 64<<20)
	def(&c.MaxWatches, DefaultMaxWatches)
	def(&c.MaxWatchesPerCaller, DefaultMaxWatchesPerCaller)
	c.MaxListBytes = max(c.MaxListBytes, c.MaxMessageBytes)
	defDur(&c.MaxQueueWait, 5*time.Second)
	// A result must fit in a message with room to spare for its framing,
	// its IDs and a truncation marker.
	c.MaxResultBytes = min(c.MaxResultBytes, max(c.MaxMessageBytes-64<<10, c.MaxMessageBytes/2))
	return c
}

// withDefaults returns d with every unset field set to its default.
func (d Deps) withDefaults() Deps {
	if d.EventLog == nil {
		d.EventLog = memory.New(memory.Options{})
	}
	if d.Replica == "" {
		d.Replica = "replica-" + newID()
	}
	if d.Idempotency == nil || d.Vars == nil {
		m := memory.New(memory.Options{})
		if d.Idempotency == nil {
			d.Idempotency = m
		}
		if d.Vars == nil {
			d.Vars = m
		}
	}
	if d.Signals == nil {
		d.Signals, _ = d.Vars.(store.Signals)
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = slog.New(LogHandler(d.Logger.Handler()))
	return d
}

// callerShare returns the per-caller cap (0: none) and whether it applies
// to the anonymous caller; see MaxCallsPerCaller.
func (c *Config) callerShare() (perCaller int, anonymous bool) {
	switch {
	case c.MaxCallsPerCaller > 0:
		return c.MaxCallsPerCaller, true
	case c.MaxCallsPerCaller < 0:
		return 0, false
	}
	return max(c.MaxConcurrentCalls/4, 1), false
}
