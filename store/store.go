// Package store defines where toolwire keeps what must outlive one call,
// as one interface per kind of caller: Idempotency (records that make a call
// an at-least-once runtime sends again replayed, not run twice), Vars
// (scoped variables with a TTL: the engine keeps session variables, and
// the mailboxes of approvals and cross-replica cancels, in them) and
// EventLog (detached batches' events), with Signals beside Vars (a notice
// that wakes the replica waiting on a mailbox at once). Backends live
// in subpackages and implement all four plus io.Closer, which Store
// composes: memory (the default), bolt (a file, for
// one replica across restarts) and redis (shared by replicas); storeurl
// opens one from a URL, and storetest holds the contract suites every
// backend passes, one per interface.
//
// EventLog is the third: the event logs of detached batches, each an
// append-only list of entries written before they are sent, so that any
// replica sharing the store can replay a batch's events, and a dead
// replica's batch is found unfinished once its owner's lease runs out.
//
// This package imports no backend and nothing of the server's.
package store

import (
	"context"
	"errors"
	"io"
	"iter"
	"strconv"
	"time"
)

// Idempotency keeps idempotency records. Every method is safe for
// concurrent use, and atomic: two owners never both hold a claim.
//
// A record lives under an opaque key (the caller scopes it) and holds the
// fingerprint of the arguments it was claimed with. It is in flight while
// its owner's lease is live, completed once the owner stores a result, and
// gone when released or when its TTL passes.
type Idempotency interface {
	// Claim tries to take key for owner. It returns:
	//   - Claimed when there was no record, or its lease had expired (the
	//     previous owner died), or it was released: owner now holds the
	//     key under a lease of the given length, and the record lives ttl;
	//   - Completed, with the stored result, when a call with the same
	//     fingerprint has completed;
	//   - InFlight when another owner holds a live lease with the same
	//     fingerprint;
	//   - Conflict when a completed or live record has another fingerprint.
	Claim(ctx context.Context, key, fingerprint, owner string, lease, ttl time.Duration) (Claim, error)
	// Renew extends owner's lease on key; ErrLeaseLost when another owner
	// has taken the key over.
	Renew(ctx context.Context, key, owner string, lease time.Duration) error
	// Complete stores owner's result under key, to be replayed for ttl;
	// ErrLeaseLost when another owner has taken the key over.
	Complete(ctx context.Context, key, owner string, result []byte, ttl time.Duration) error
	// Release drops owner's claim on key without a result, so the next
	// Claim runs the call again; ErrLeaseLost when owner no longer holds it.
	Release(ctx context.Context, key, owner string) error
	// Wait blocks until the record at key may have stopped being in flight
	// (completed, released, expired, or its lease ran out) or ctx is done.
	// It may return early; callers Claim again to learn the state.
	Wait(ctx context.Context, key string) error
}

// Vars keeps scoped variables: JSON values under a name within a scope,
// each with a TTL. The caller makes the scopes and keeps its users apart
// by them: the engine keeps a session's variables in one scope per
// session, and in scopes of their own the mailboxes through which
// replicas hand each other approval decisions and cancellations. Every
// method is safe for concurrent use.
type Vars interface {
	// GetVar returns the JSON value of the variable name in scope; false
	// when it is not set or has expired.
	GetVar(ctx context.Context, scope, name string) ([]byte, bool, error)
	// SetVar sets the variable to value (JSON) for ttl.
	SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error
	// AddVar sets the variable to value for ttl only if it is not set
	// (or has expired), atomically, and reports whether it did: of two
	// replicas adding one variable at once, one adds it and the other
	// learns that it was first.
	AddVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) (bool, error)
	// DeleteVar removes the variable; deleting a missing one is no error.
	DeleteVar(ctx context.Context, scope, name string) error
}

// Signals carries notices between the handles of one store, that is
// between the replicas sharing it: a replica that writes another's
// mailbox (a variable in Vars) signals the mailbox's topic, and the
// replica watching that topic is woken at once instead of at its next
// look. A notice carries nothing but its topic; the variable is the
// record.
//
// A notice is a hint and may be lost: a shared store's subscription can
// drop, its server restart, a message go missing while it reconnects. So
// a watcher still looks at its mailbox now and then (slowly), and the
// store wakes every watcher whenever it may have missed notices (when its
// subscription is established again), so that one look then covers them.
// Every method is safe for concurrent use.
type Signals interface {
	// Signal wakes the watchers of topic on every handle of the store
	// (every replica sharing it), this one included. An error means the
	// notice may not have gone out; the watchers' own looks cover it.
	Signal(ctx context.Context, topic string) error
	// Watch calls wake each time topic is signalled, and whenever notices
	// may have been missed, until stop is called; wake may run once more
	// while stop returns. wake runs on the store's own goroutine (or the
	// signaller's): it must return at once, handing the work off. Watch
	// never waits for the store's server. ok is false, and wake never
	// called, when the store already watches as many topics as it keeps
	// (a bound, so that watchers cannot grow without one): the caller
	// looks at its mailbox as often as it would without notices.
	Watch(topic string, wake func()) (stop func(), ok bool)
	// Listening tells whether a notice signalled now would reach this
	// handle's watchers: false while the store cannot receive notices
	// (its subscription is being made again, or its server refuses it: a
	// Redis user without the channel's permission, a proxy without
	// pub/sub). Its watchers then look at their mailboxes as often as
	// they would without notices, not at the slow fallback.
	Listening() bool
}

// EventLog keeps append-only logs of opaque entries, in the shape of the
// MCP go-sdk's EventStore (Append, After as an iterator, an explicit error
// when entries were dropped), with what a log written by one replica and
// read by others needs beside: an owner holding a lease while it writes,
// the end of the log, and a TTL once it has ended. Every method is safe for
// concurrent use.
//
// A log lives under an opaque name (the caller scopes it). Its entries are
// numbered from 1 in the order appended. While unfinished it lives as long
// as its owner renews its lease, and ttl after the lease last ran out when
// the owner dies; once finished, ttl after Finish. Then it is gone, entries
// and all.
//
// A backend may keep a bounded number of entries per log (MaxEntries of its
// Options): past it, the oldest are dropped, and After reports ErrDropped
// rather than skip them. A backend may also bound what all its logs hold
// together (memory and bolt do): past it, finished logs go before their
// ttl, as if expired; an unfinished log never does.
type EventLog interface {
	// Open creates the log name for owner, holding a lease of the given
	// length, with data as its first entries (numbered from 1), in one
	// write; the log lives ttl past the lease. ErrLogExists when a log of
	// that name exists.
	Open(ctx context.Context, name, owner string, lease, ttl time.Duration, data ...[]byte) error
	// Append appends data, in order, as the log's next entries and returns
	// the index of the last (with no data, it appends nothing and returns
	// the last index). The entries go in one write (one transaction, one
	// round trip): an error means none of them was appended, or, when the
	// answer was lost (a timeout), that all of them may have been, which
	// Stat tells. Only the owner of an unfinished log appends:
	// ErrLeaseLost otherwise (another owner took it over, or it is
	// finished); ErrLogNotFound when it does not exist or has expired.
	Append(ctx context.Context, name, owner string, data ...[]byte) (uint64, error)
	// After iterates over the entries after index, in order, up to the last
	// one appended when it is called; it does not wait for more (WaitLog
	// does). Once it yields an error it stops: ErrLogNotFound, or
	// ErrDropped when an entry after index is no longer kept; it never
	// yields part of the entries after index.
	After(ctx context.Context, name string, index uint64) iter.Seq2[Entry, error]
	// WaitLog blocks until the log may have an entry after index, may have
	// finished or lost its owner, or ctx is done. It may return early;
	// callers look again.
	WaitLog(ctx context.Context, name string, index uint64) error
	// RenewLog extends owner's lease on the unfinished log; ErrLeaseLost when
	// another owner has taken it over or it is finished.
	RenewLog(ctx context.Context, name, owner string, lease time.Duration) error
	// TakeOver makes owner the owner of an unfinished log whose lease has
	// run out (its owner died), under a new lease; ErrLeaseLost when the
	// lease is live or the log is finished. One of several replicas trying
	// at once succeeds.
	TakeOver(ctx context.Context, name, owner string, lease time.Duration) error
	// Finish appends data as the log's last entries and ends it, in one
	// write, as Append writes: no entry follows, and it lives ttl more.
	// ErrLeaseLost when owner no longer holds it.
	Finish(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error
	// Stat returns what is known of the log; ErrLogNotFound when it does
	// not exist or has expired.
	Stat(ctx context.Context, name string) (LogInfo, error)
}

// LogRenewer is an EventLog that renews the leases of many logs of one
// owner in one write, as a replica renews those of all the detached
// batches it runs at each tick rather than one write a batch: memory,
// bolt and Redis are. It is optional (RenewLogs falls back to RenewLog a
// log at a time) so that a wrapper embedding an EventLog to change what
// RenewLog does, as tests' faulty stores do, is not bypassed by a method
// it does not know of.
type LogRenewer interface {
	// RenewLogs extends owner's lease on each of the logs names as
	// RenewLog does, in one write (one transaction, one pipeline): errs
	// holds one answer per name, in order, nil, ErrLeaseLost or
	// ErrLogNotFound (or an error of its own for a log whose part of a
	// shared store did not answer); err, with no errs, when the store
	// did not answer at all.
	RenewLogs(ctx context.Context, owner string, lease time.Duration, names ...string) (errs []error, err error)
}

// LogOpenFinisher is an EventLog that writes a whole log in one write: a
// detached batch that ended before its log was opened (read-only calls
// that finished at once) stores all its events together, one round trip
// or one commit where Open and Finish are two. Memory, bolt and Redis are
// LogOpenFinishers; it is optional for the reason LogRenewer is, and the
// engine opens every log first on a store that is not one.
type LogOpenFinisher interface {
	// OpenFinished creates the log name as Open does, with data as its
	// entries (numbered from 1), already finished as Finish leaves it
	// (no lease; it lives ttl), in one write. ErrLogExists when a log of
	// that name exists.
	OpenFinished(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error
}

// RenewLogs renews owner's leases on the logs names as LogRenewer does:
// in one write when el is a LogRenewer, else a RenewLog per log, in
// order, within ctx.
func RenewLogs(ctx context.Context, el EventLog, owner string, lease time.Duration, names ...string) ([]error, error) {
	if r, ok := el.(LogRenewer); ok {
		return r.RenewLogs(ctx, owner, lease, names...)
	}
	errs := make([]error, len(names))
	for i, name := range names {
		errs[i] = el.RenewLog(ctx, name, owner, lease)
	}
	return errs, nil
}

// Entry is one entry of an EventLog.
type Entry struct {
	Index uint64 // from 1, in the order appended
	Data  []byte
}

// LogInfo is the state of an EventLog's log.
type LogInfo struct {
	Last     uint64 // the index of the last entry appended; 0 before the first
	Finished bool   // Finish was called
	Owned    bool   // unfinished, and its owner's lease is live
	// Opened is when Open created the log, by the clock of the process
	// that opened it (zero when the store does not know).
	Opened time.Time
}

// Errors of an EventLog.
var (
	ErrLogExists   = errors.New("store: the log exists")
	ErrLogNotFound = errors.New("store: no such log (never opened, or expired)")
	ErrDropped     = errors.New("store: entries of the log were dropped")
)

// Store is a backend: the four interfaces, and Close, which releases its
// resources (the store must not be used afterwards). It is what storeurl
// opens and what the binary hands, once per interface, to the code that
// needs each.
type Store interface {
	Idempotency
	Vars
	Signals
	EventLog
	io.Closer
}

// State is what Claim found.
type State int

// States of a claim.
const (
	Claimed State = iota + 1
	Completed
	InFlight
	Conflict
)

func (s State) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case Completed:
		return "completed"
	case InFlight:
		return "in flight"
	case Conflict:
		return "conflict"
	}
	return "unknown"
}

// Claim is the answer to Idempotency.Claim.
type Claim struct {
	State  State
	Result []byte // the stored result, when State is Completed
}

// ErrLeaseLost means another owner took over a key whose lease had expired:
// the caller's claim is void and its result is not stored.
var ErrLeaseLost = errors.New("store: the claim's lease was lost to another owner")

// ErrClosed is returned by a store's methods after Close.
var ErrClosed = errors.New("store: closed")

// ErrUnavailable is returned, wrapped, by a shared store that has stopped
// sending to its server for a short cool-down after it kept failing to
// answer (a circuit breaker): the operation was not attempted. Callers
// treat it as they treat a timeout.
var ErrUnavailable = errors.New("store: unavailable (it kept failing to answer; not asked again until a short cool-down passes)")

// ScopedName joins a session scope and a variable name into one string no
// other pair produces, for backends that keep one flat key space.
func ScopedName(scope, name string) string {
	return strconv.Itoa(len(scope)) + ":" + scope + name
}
