package sourcetest

import (
	"context"

	"google.golang.org/grpc/stats"
)

// ConnEnds is a gRPC server stats handler that tells of each connection's
// end, one value each: make it with room for every end a test waits for.
type ConnEnds chan struct{}

func (c ConnEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c ConnEnds) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c ConnEnds) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c ConnEnds) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		c <- struct{}{}
	}
}
