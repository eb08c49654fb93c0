package engine

import (
	"errors"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// A reader of a detached batch that reads nothing (AttachBatch's, and
// Run's own stream of a detached batch) is ended after SendTimeout, its
// Stopper asked to end the Send, and the batch runs on. Such a reader
// used to wait in its Send for as long as its client kept the connection
// (measured on a real server: an AttachBatch whose client left its HTTP/2
// window shut was still in Send 15 s after a 2 s send_timeout).
func TestStalledReaderOfADetachedBatchIsEnded(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{SendTimeout: 20 * time.Millisecond})
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", ""), call("b", "echo", `{"text":"hi"}`)},
		Options: &toolwirev1.BatchOptions{Detach: true}}

	// Run's own stream: BatchAccepted goes through, then nothing is read.
	own := newStalledSink()
	done := make(chan error, 1)
	go func() { done <- te.e.Run(as("alice"), te.reg.Snapshot(), req, own) }()
	var err error
	select {
	case err = <-done:
	case <-testDeadline(t):
		own.StopSend(errors.New("test over"))
		<-done
		t.Fatal("Run's stream of a detached batch, not read, was not ended by the test's deadline")
	}
	if CodeOf(err) != DeadlineExceeded || !errors.Is(own.stoppedBy(), ErrSendTimeout) {
		t.Fatalf("Run: %v, stopped by %v; want DeadlineExceeded, stopped by ErrSendTimeout", err, own.stoppedBy())
	}
	if got := te.e.Stats().Batches; got != 1 {
		t.Fatalf("batches running once its stream was ended: %d, want 1 (the batch runs on)", got)
	}

	// An attachment that reads the first event, then nothing.
	var id string
	te.e.mu.Lock()
	for id = range te.e.batches {
	}
	te.e.mu.Unlock()
	att := newStalledSink()
	go func() { done <- te.e.Attach(as("alice"), id, 0, att) }()
	select {
	case err = <-done:
	case <-testDeadline(t):
		att.StopSend(errors.New("test over"))
		<-done
		t.Fatal("an attachment, not read, was not ended by the test's deadline")
	}
	if CodeOf(err) != DeadlineExceeded || !errors.Is(att.stoppedBy(), ErrSendTimeout) {
		t.Fatalf("Attach: %v, stopped by %v; want DeadlineExceeded, stopped by ErrSendTimeout", err, att.stoppedBy())
	}
	if got := te.e.Stats().Batches; got != 1 {
		t.Fatalf("batches running once an attachment was ended: %d, want 1", got)
	}

	// A reader that reads gets the batch to its end.
	if err := te.e.Cancel(as("alice"), id, "test over"); err != nil {
		t.Fatal(err)
	}
	var all recorder
	if err := te.e.Attach(as("alice"), id, 0, &all); err != nil {
		t.Fatalf("Attach that reads: %v", err)
	}
	if evs := all.get(); len(evs) == 0 || evs[len(evs)-1].GetFinished() == nil {
		t.Fatalf("Attach that reads: %d events, want them ending with BatchFinished", len(evs))
	}
}
