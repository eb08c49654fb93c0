package runcommand

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/toolwire/toolwire/tools"
)

// output takes a command's output as it is read from the pipe. It keeps the
// head and tail for the result, and streams complete lines to the call at
// most once per interval. Write never blocks on the client, so the pipe
// keeps draining however slowly the stream is read.
type output struct {
	call     *tools.Call
	interval time.Duration
	half     int // bytes kept of the head, and of the tail

	// Written only by Write, read after close.
	head, tail []byte
	total      int64

	mu      sync.Mutex
	pending []byte // waiting to be streamed
	dropped int    // bytes left out of the stream since the last chunk
	stale   bool   // pending has held a partial line for a whole interval
	limit   int    // cap on pending
	done    chan struct{}
	wg      sync.WaitGroup
}

func newOutput(call *tools.Call, opts Options) *output {
	o := &output{
		call:     call,
		interval: opts.OutputInterval,
		half:     max(opts.MaxOutputBytes/2, 1),
		limit:    opts.MaxStreamBytes,
		done:     make(chan struct{}),
	}
	o.wg.Add(1)
	go o.stream()
	return o
}

// Write records p; it never fails.
func (o *output) Write(p []byte) (int, error) {
	o.total += int64(len(p))
	rest := p
	if room := o.half - len(o.head); room > 0 {
		n := min(room, len(rest))
		o.head = append(o.head, rest[:n]...)
		rest = rest[n:]
	}
	o.tail = append(o.tail, rest...)
	if len(o.tail) > 2*o.half {
		o.tail = o.tail[:copy(o.tail, o.tail[len(o.tail)-o.half:])]
	}

	// Past the limit the oldest output waiting is left out of the stream,
	// not the newest: what a person watching needs last is how the
	// command ended (its error, its summary), and the stream's last chunk
	// then carries it.
	o.mu.Lock()
	o.pending = append(o.pending, p...)
	if over := len(o.pending) - o.limit; over > 0 {
		o.pending = o.pending[:copy(o.pending, o.pending[over:])]
		o.dropped += over
	}
	o.mu.Unlock()
	return len(p), nil
}

// stream sends what is pending once per interval until close.
func (o *output) stream() {
	defer o.wg.Done()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for {
		select {
		case <-o.done:
			o.flush(true)
			return
		case <-tick.C:
			o.flush(false)
		}
	}
}

// flush streams the complete lines pending, or everything when final or
// when a partial line (a prompt, a progress bar) has waited a whole interval.
func (o *output) flush(final bool) {
	o.mu.Lock()
	n := len(o.pending)
	if i := bytes.LastIndexByte(o.pending, '\n'); !final && !o.stale && o.dropped == 0 && i+1 < n {
		n = i + 1
	}
	o.stale = n == 0 && len(o.pending) > 0
	chunk := string(o.pending[:n])
	o.pending = o.pending[:copy(o.pending, o.pending[n:])]
	dropped := o.dropped
	o.dropped = 0
	o.mu.Unlock()

	if dropped > 0 {
		chunk = fmt.Sprintf("\n[%d bytes of output not streamed: the client reads slower than the command writes]\n", dropped) + chunk
	}
	if chunk != "" {
		// Outside the lock: Output blocks while the client is slow, and
		// Write must not.
		o.call.Output(strings.ToValidUTF8(chunk, "\uFFFD"))
	}
}

// close streams what is left and stops streaming. Call it after the last
// Write.
func (o *output) close() {
	close(o.done)
	o.wg.Wait()
}

// result returns the output kept for the result (valid UTF-8), the bytes
// written, and whether the middle was left out.
func (o *output) result() (text string, total int64, truncated bool) {
	if o.total <= int64(2*o.half) {
		return strings.ToValidUTF8(string(o.head)+string(o.tail), "\uFFFD"), o.total, false
	}
	tail := o.tail[len(o.tail)-o.half:]
	marker := fmt.Sprintf("\n[... %d bytes of output left out ...]\n", o.total-int64(len(o.head)+len(tail)))
	return strings.ToValidUTF8(string(o.head)+marker+string(tail), "\uFFFD"), o.total, true
}

// pump is a command's output pipe: the child writes to w (stdout and stderr
// both, so they keep the order they were written in); a goroutine of its
// own copies r into the output as it arrives.
type pump struct {
	r, w *os.File
	out  *output
	read chan struct{} // closed once r is drained (or closed)
}

func newPump(call *tools.Call, opts Options) (*pump, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &pump{r: r, w: w, out: newOutput(call, opts), read: make(chan struct{})}, nil
}

// started closes the server's copy of the write end, once the child has its
// own (EOF comes when every holder closes it), and starts copying; with a
// start error, it lets go of the pipe instead.
func (p *pump) started(err error) {
	p.w.Close()
	if err != nil {
		p.r.Close()
		p.out.close()
		close(p.read)
		return
	}
	go func() {
		defer close(p.read)
		_, _ = io.Copy(p.out, p.r)
	}()
}

// drain waits up to wait for the output's end (every process holding the
// pipe gone), then closes the read end, which only a process that escaped
// the command's ending can still be writing to, and stops streaming.
func (p *pump) drain(wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.read:
	case <-t.C:
	}
	p.r.Close()
	<-p.read
	p.out.close()
}
