package engine

import (
	"context"
	"sync"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// eventLog is a detached batch's events as its one writer appends them,
// numbered from 1 in the order appended (batch.seq): the seam between a
// batch's run and the streams that read it. Only a detached batch has one
// (batch.log): a batch that dies with its stream has one reader, which the
// writer serves directly (batch.write), and keeping its events would only
// cost.
//
// Readers (attachments) each read from a seq of their own at their own
// pace: the writer never waits for them. A kept log lives in memory, on
// the replica that runs the batch, until the batch ends.
type eventLog struct {
	mu   sync.Mutex
	kept []*toolwirev1.ExecuteBatchResponse // kept[i] has seq i+1
	done bool                               // the last event (BatchFinished) is appended, or none will be
	wake chan struct{}                      // closed at the next append or end; nil while no reader waits
}

// append keeps ev, the next event in the writer's numbering, for the
// readers, waking those that wait.
func (l *eventLog) append(ev *toolwirev1.ExecuteBatchResponse) {
	l.mu.Lock()
	l.kept = append(l.kept, ev)
	l.wakeReaders()
	l.mu.Unlock()
}

// last is the seq of the last event appended; 0 before the first.
func (l *eventLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.kept))
}

// end says no event follows, and wakes the readers.
func (l *eventLog) end() {
	l.mu.Lock()
	l.done = true
	l.wakeReaders()
	l.mu.Unlock()
}

// wakeReaders wakes the readers waiting for an event; l.mu is held.
func (l *eventLog) wakeReaders() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// after returns the kept events after seq, whether the log has ended, and,
// when there are none yet and it has not, a channel closed when there may
// be.
func (l *eventLog) after(seq uint64) (evs []*toolwirev1.ExecuteBatchResponse, done bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < uint64(len(l.kept)) {
		// The slice's elements up to its length are never written again:
		// appends go past it, so the reader may use it without the lock.
		return l.kept[seq:len(l.kept):len(l.kept)], l.done, nil
	}
	if l.done {
		return nil, true, nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return nil, false, l.wake
}

// read sends sink the events after seq, then the live ones as they are
// appended, until the log ends (nil) or ctx does or a Send fails (that
// error). It is one attachment; any number may read one log at once.
func (l *eventLog) read(ctx context.Context, seq uint64, sink Sink) error {
	for {
		evs, done, wait := l.after(seq)
		for _, ev := range evs {
			if err := ctx.Err(); err != nil {
				return contextError(err)
			}
			if err := sink.Send(ev); err != nil {
				return err
			}
			seq++
		}
		switch {
		case len(evs) > 0:
		case done:
			return nil
		default:
			select {
			case <-wait:
			case <-ctx.Done():
				return contextError(ctx.Err())
			}
		}
	}
}
