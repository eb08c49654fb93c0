package mcpserve

import (
	"fmt"

	"github.com/toolwire/toolwire/internal/holds"
)

// A 2026-07-28 subscriptions/listen stream is the stateless revision's
// GET stream: a request held open for the server's notices, for as long
// as its client keeps it. Each costs the server an SDK session of its own
// and its goroutines (about 80 KB of RSS and three goroutines, measured),
// and nothing bounded how many one caller held: 1,000 streams over four
// HTTP/2 connections took a server from 79 MB to 159 MB and 3,045
// goroutines, and http_max_connections connections of 250 streams each
// could hold a million. So they are bounded as 2025-11-25 sessions are
// (sessions.go): a caller holds at most MaxSessionsPerCaller streams open,
// the server MaxSessions; one past either is answered with a JSON-RPC
// error (CodeResourceExhausted) naming the bound. A stream is not closed
// for another, as a session holding a GET stream is not: its client is
// there.

// listens counts the subscriptions/listen streams open, by caller.
type listens struct{ holds.Counter }

func newListens(max, perCaller int) *listens {
	return &listens{holds.Counter{Max: max, PerHolder: perCaller}}
}

// take takes a place for a stream of caller, and returns the function
// that gives it back (call it once), or the error refusing it.
func (l *listens) take(caller string) (release func(), err error) {
	release, full := l.Take(caller)
	switch {
	case full == nil:
		return release, nil
	case full.Total:
		return nil, &errSessionBound{fmt.Sprintf("the server has %d subscriptions/listen streams open (mcp_max_sessions); retry later", full.Held)}
	}
	return nil, &errSessionBound{fmt.Sprintf("this caller has %d subscriptions/listen streams open (mcp_max_sessions_per_caller); end one before opening another", full.Held)}
}
