// Package coalesce bounds the progress reports a detached batch writes to
// its event log: reports are merged (figures and message replaced, output
// appended and cut to its last bytes) rather than each written, so a
// chatty tool cannot grow the log without bound.
package coalesce

import (
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// The bounds: a call's first Burst reports are written as they come, then
// at most one every Every, the reports between merged into it; past
// MaxStored reports in one batch, a call's progress is merged and written
// only just before its result.
const (
	Burst     = 64
	Every     = time.Second
	MaxStored = 10_000
)

// Coalescer bounds the progress a detached batch writes; see the package
// comment. Only the batch's writer uses it.
type Coalescer struct {
	stored   int // progress events written, the batch's
	maxBytes int
	calls    []callProgress
}

type callProgress struct {
	n       int       // progress events written for the call
	last    time.Time // when the last one was
	pending *toolwirev1.ExecuteBatchResponse
}

// Init readies c for a batch of calls calls, whose merged output keeps the
// last maxBytes.
func (c *Coalescer) Init(calls, maxBytes int) {
	c.calls = make([]callProgress, calls)
	c.maxBytes = maxBytes
}

// Progress returns the event to write for the progress report ev, made at
// now, or nil when it is merged into the call's pending one instead.
func (c *Coalescer) Progress(ev *toolwirev1.ExecuteBatchResponse, now time.Time) *toolwirev1.ExecuteBatchResponse {
	p := ev.GetProgress()
	cp := &c.calls[p.GetIndex()]
	if cp.pending != nil {
		merge(cp.pending.GetProgress(), p, c.maxBytes)
		ev = cp.pending
	}
	if c.stored >= MaxStored || (cp.n >= Burst && now.Sub(cp.last) < Every) {
		cp.pending = ev
		return nil
	}
	cp.pending = nil
	cp.n++
	cp.last = now
	c.stored++
	return ev
}

// Flush returns call i's pending progress, to be written before its
// result; nil when none is pending.
func (c *Coalescer) Flush(i int) *toolwirev1.ExecuteBatchResponse {
	if i >= len(c.calls) {
		return nil
	}
	p := c.calls[i].pending
	c.calls[i].pending = nil
	return p
}

// merge folds the later report q into p: its figures and message replace
// p's, its output follows p's, which keeps the last maxBytes of it.
func merge(p, q *toolwirev1.CallProgress, maxBytes int) {
	if q.Progress != nil {
		p.Progress, p.Total = q.Progress, q.Total
	}
	if q.GetMessage() != "" {
		p.Message = q.GetMessage()
	}
	out := p.GetOutput() + q.GetOutput()
	if len(out) > maxBytes {
		const mark = "[…earlier output merged away]"
		out = mark + cutUTF8Front(out, maxBytes-len(mark))
	}
	p.Output = out
}

// cutUTF8Front returns the last n bytes of s at most, starting at a rune.
func cutUTF8Front(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := len(s) - n
	for i < len(s) && i > 0 && s[i]&0xC0 == 0x80 {
		i++
	}
	return s[i:]
}
