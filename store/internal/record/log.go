package record

import (
	"time"

	"github.com/toolwire/toolwire/store"
)

// Log is the state of an event log (store.EventLog) as the memory and bolt
// stores keep it beside its entries.
type Log struct {
	Owner      string `json:"o"`
	LeaseUntil int64  `json:"l"` // Unix ns
	TTL        int64  `json:"t"` // ns: how long the log lives past its lease, or its Finish
	Finished   bool   `json:"f"`
	Expires    int64  `json:"e"` // Unix ns
	First      uint64 `json:"a"` // the index of the first entry kept; 0 while none is
	Last       uint64 `json:"z"` // the index of the last entry appended
	Opened     int64  `json:"s"` // Unix ns: when it was opened
}

// NewLog is a log opened now by owner.
func NewLog(owner string, now time.Time, lease, ttl time.Duration) *Log {
	l := &Log{Owner: owner, TTL: int64(ttl), Opened: now.UnixNano()}
	l.Lease(now, lease)
	return l
}

// Lease gives the log's owner a lease from now; the log lives TTL past it.
func (l *Log) Lease(now time.Time, lease time.Duration) {
	l.LeaseUntil = now.Add(lease).UnixNano()
	l.Expires = l.LeaseUntil + l.TTL
}

// Finish ends the log now; it lives ttl more.
func (l *Log) Finish(now time.Time, ttl time.Duration) {
	l.Finished = true
	l.LeaseUntil = 0
	l.Expires = now.Add(ttl).UnixNano()
}

// Info is the log's store.LogInfo at now.
func (l *Log) Info(now time.Time) store.LogInfo {
	info := store.LogInfo{Last: l.Last, Finished: l.Finished, Owned: l.Owned(now)}
	if l.Opened != 0 {
		info.Opened = time.Unix(0, l.Opened)
	}
	return info
}

// Expired reports whether the log is gone at now.
func (l *Log) Expired(now time.Time) bool { return now.UnixNano() >= l.Expires }

// Owned reports whether the log is unfinished and its owner's lease live.
func (l *Log) Owned(now time.Time) bool { return !l.Finished && now.UnixNano() < l.LeaseUntil }

// Writable reports whether owner may append to (or renew, or finish) the
// log: it is unfinished and owner's. A lease that ran out without a
// takeover still counts: nobody else has written.
func (l *Log) Writable(owner string) bool { return !l.Finished && l.Owner == owner }

// Append counts one more entry, of which at most max are kept (0: no
// bound), and returns its index and how many of the oldest entries to drop.
func (l *Log) Append(max int) (index uint64, drop int) {
	l.Last++
	if l.First == 0 {
		l.First = l.Last
	}
	if kept := int(l.Last - l.First + 1); max > 0 && kept > max {
		drop = kept - max
		l.First += uint64(drop)
	}
	return l.Last, drop
}

// Next is when a reader waiting for the log should look again though no
// entry came: when its lease runs out, if it is unfinished (now is the
// store's Clock.Now).
func (l *Log) Next(now time.Time) time.Time {
	if l.Finished {
		return now.Add(time.Hour)
	}
	return time.Unix(0, l.LeaseUntil)
}
