// Package store defines where toolwire keeps what must outlive one call,
// as one interface per kind of caller: Idempotency (records that make a call
// an at-least-once runtime sends again replayed, not run twice) and Sessions
// (session variables). Backends live in subpackages and implement both plus
// io.Closer, which Store composes: memory (the default), bolt (a file, for
// one replica across restarts) and redis (shared by replicas); storeurl
// opens one from a URL, and storetest holds the contract suites every
// backend passes, one per interface.
//
// The batch event log that detached batches need (a batch's events written
// before they are sent, so any replica can replay them) will be a third
// interface here, EventLog, beside Idempotency and Sessions: its own
// contract suite in storetest, implemented by the backends that can share
// it between replicas, and taken by the code that runs detached batches as
// its own Config field. Store would then compose it too. Its methods are
// not designed yet.
//
// This package imports no backend and nothing of the server's.
package store

import (
	"context"
	"errors"
	"io"
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

// Sessions keeps session variables: JSON values under a name within a
// scope (the caller makes one per session), each with a TTL. Every method
// is safe for concurrent use.
type Sessions interface {
	// GetVar returns the JSON value of the session variable name in scope;
	// false when it is not set or has expired.
	GetVar(ctx context.Context, scope, name string) ([]byte, bool, error)
	// SetVar sets the variable to value (JSON) for ttl.
	SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error
	// DeleteVar removes the variable; deleting a missing one is no error.
	DeleteVar(ctx context.Context, scope, name string) error
}

// Store is a backend: both interfaces, and Close, which releases its
// resources (the store must not be used afterwards). It is what storeurl
// opens and what the binary hands, once per interface, to the code that
// needs each.
type Store interface {
	Idempotency
	Sessions
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

// ScopedName joins a session scope and a variable name into one string no
// other pair produces, for backends that keep one flat key space.
func ScopedName(scope, name string) string {
	return strconv.Itoa(len(scope)) + ":" + scope + name
}
