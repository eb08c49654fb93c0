// Package store defines where toolwire keeps what must outlive one call:
// idempotency records (so a call an at-least-once runtime sends again is
// replayed, not run twice) and session variables. Backends live in
// subpackages: memory (the default), bolt (a file, for one replica across
// restarts) and redis (shared by replicas); storeurl opens one from a URL,
// and storetest is the contract every backend passes.
package store

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Store keeps idempotency records and session variables. Every method is
// safe for concurrent use, and atomic: two owners never both hold a claim.
//
// An idempotency record lives under an opaque key (the caller scopes it) and
// holds the fingerprint of the arguments it was claimed with. It is in
// flight while its owner's lease is live, completed once the owner stores a
// result, and gone when released or when its TTL passes.
type Store interface {
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

	// GetVar returns the JSON value of the session variable name in scope;
	// false when it is not set or has expired.
	GetVar(ctx context.Context, scope, name string) ([]byte, bool, error)
	// SetVar sets the variable to value (JSON) for ttl.
	SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error
	// DeleteVar removes the variable; deleting a missing one is no error.
	DeleteVar(ctx context.Context, scope, name string) error

	// Close releases the store's resources. The store must not be used
	// afterwards.
	Close() error
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

// Claim is the answer to Store.Claim.
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
