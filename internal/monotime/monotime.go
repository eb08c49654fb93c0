// Package monotime is the clock for durations a process measures between
// two of its own instants and keeps as a number (in an atomic.Int64, to be
// compared by a watchdog's tick): nanoseconds on the monotonic clock.
//
// time.Now().UnixNano() drops the monotonic reading time.Now carries, so a
// duration taken as the difference of two of them is a difference of wall
// clock readings, and a step of the wall clock (NTP correcting a drifted
// clock, a VM resumed from a snapshot, an operator's date -s) passes for
// time spent: a step of minutes forward made every Send under way look
// stalled past send_timeout, and one backward kept a stalled client's
// stream for as long as the step. Nanoseconds since the process began, read
// through time.Since, do not step.
//
// Instants kept across processes (leases and TTLs in a shared store) are
// another matter: only the wall clock is shared, and the store keeps them.
package monotime

import "time"

// start is the origin of Now; only differences of Now mean anything.
var start = time.Now()

// Now returns the nanoseconds since the process began on the monotonic
// clock, never 0 (which callers keep to mean "not set").
func Now() int64 { return int64(time.Since(start)) + 1 }

// Since returns the time elapsed since t, a value Now returned.
func Since(t int64) time.Duration { return time.Duration(Now() - t) }
