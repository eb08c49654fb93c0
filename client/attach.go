package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WithReattach makes ExecuteBatch of a detached batch (BatchOptions.detach)
// and Attach re-attach automatically when the stream drops (the server or
// a proxy between went away: UNAVAILABLE, INTERNAL, UNKNOWN or ABORTED, or
// the stream ended before BatchFinished having brought events),
// with AttachBatch from the last seq seen, so that no event is lost or
// yielded twice: an event seen before is skipped, and one out of order (a
// seq that is not the next) ends the sequence with an INTERNAL error. It
// tries up to attempts times in a row (an attempt that yields events
// starts the count again), waiting backoff before the first
// and doubling it, up to 5s, before the next. By default a dropped stream
// is an error the iterator yields. A connection that dies without closing
// is noticed by the client's keepalive (WithKeepalive: by default within
// 30s of silence and 10s more), which fails the stream so it re-attaches.
func WithReattach(attempts int, backoff time.Duration) Option {
	return func(o *options) { o.reattach, o.backoff = attempts, backoff }
}

// Attach streams the events of the detached batch batchID after afterSeq
// (all of them for 0), then its live ones until BatchFinished, as
// ExecuteBatch's iterator does: on any replica sharing the store, while the
// batch runs and for the server's batch_ttl after. NOT_FOUND for an
// unknown, expired or other caller's batch. Breaking out of the loop ends
// only this reader; the batch runs on. With WithReattach it resumes after a
// dropped stream.
func (c *Client) Attach(ctx context.Context, batchID string, afterSeq uint64, opts ...grpc.CallOption) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	return c.follow(ctx, batchID, afterSeq, func(ctx context.Context) (grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse], error) {
		return c.svc.AttachBatch(ctx, &toolwirev1.AttachBatchRequest{BatchId: batchID, AfterSeq: afterSeq}, opts...)
	}, opts)
}

// follow yields a batch's events from the stream open makes, re-attaching
// with AttachBatch after a dropped stream when the client re-attaches and
// the batch's ID is known (from batchID, or its BatchAccepted). It yields
// each seq once, in order: an event seen before is skipped, and one that is
// not the next (a server that skipped or reordered events, or left one
// unnumbered) ends the sequence with an INTERNAL error. A batch whose first
// event is unnumbered is a plain one (its server predates durable
// batches): its events are yielded as they come, and its stream's end is
// the batch's.
func (c *Client) follow(ctx context.Context, batchID string, last uint64, open func(context.Context) (grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse], error), opts []grpc.CallOption) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	return func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		failures, refusals := 0, 0
		backoff := c.backoff
		plain := false // the server predates numbered events (see below)
		for {
			stream, err := open(ctx)
			fresh := 0 // events this stream brought
			for err == nil {
				var ev *toolwirev1.ExecuteBatchResponse
				if ev, err = stream.Recv(); err != nil {
					break
				}
				if plain || (batchID == "" && last == 0 && fresh == 0 && ev.GetSeq() == 0) {
					// A server from before durable batches (met behind a
					// balancer in a rolling upgrade) numbers no events and
					// knows no detach: it runs the batch as a plain one,
					// tied to this stream, with nothing to re-attach to.
					// Its events are handed on as a plain batch's are.
					plain = true
					if !yield(ev, nil) {
						return
					}
					if ev.GetFinished() != nil {
						endStream(stream, cancel)
						return
					}
					continue
				}
				if seq := ev.GetSeq(); seq != 0 && seq <= last {
					continue // seen before a drop
				} else if seq != last+1 {
					// Events are numbered one after another: one that is not
					// the next means the server skipped or reordered some.
					yield(nil, status.Errorf(codes.Internal, "toolwire: the server sent event seq %d after seq %d: the batch's events are not in order (an event would be lost)", seq, last))
					return
				}
				last = ev.GetSeq()
				if a := ev.GetAccepted(); a != nil && batchID == "" {
					batchID = a.GetBatchId()
				}
				failures, backoff = 0, c.backoff
				fresh++
				if !yield(ev, nil) {
					return
				}
				if ev.GetFinished() != nil {
					endStream(stream, cancel)
					return
				}
			}
			if plain {
				if !errors.Is(err, io.EOF) {
					yield(nil, err)
				}
				return
			}
			if errors.Is(err, io.EOF) {
				// A stream that brought events and ended without
				// BatchFinished was cut short (a proxy or server that
				// ended it as if done): a re-attach has the rest. One
				// that brought nothing ends here (nothing follows, as
				// after Attach from the last seq).
				if c.reattach == 0 || batchID == "" || fresh == 0 {
					return
				}
				err = status.Error(codes.Unavailable, "toolwire: the stream ended before BatchFinished")
			}
			if batchID == "" && last == 0 && c.waitToRetry(ctx, err, refusals) {
				refusals++ // refused before BatchAccepted (a rate limit's): nothing ran; send again
				continue
			}
			if failures >= c.reattach || batchID == "" || ctx.Err() != nil || !dropped(err) {
				yield(nil, err)
				return
			}
			failures++
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				yield(nil, err)
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			id, after := batchID, last
			open = func(ctx context.Context) (grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse], error) {
				return c.svc.AttachBatch(ctx, &toolwirev1.AttachBatchRequest{BatchId: id, AfterSeq: after}, opts...)
			}
		}
	}
}

// dropped reports whether err ended a stream the batch outlives.
func dropped(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted:
		return true
	}
	return false
}
