package grpcserve

import (
	"context"
	"slices"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding/gzip" // registers gzip, so a client may ask for it and send it
	"google.golang.org/protobuf/proto"
)

// compressAbove is the size from which a listing's response is compressed
// for a client that accepts gzip; below it gzip saves too little to pay.
const compressAbove = 4 << 10

// ListTools implements toolwire.v1.ToolService (Engine.ListTools): every
// tool at once, or a page of them.
func (s *Server) ListTools(ctx context.Context, req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	resp, err := s.engine.ListTools(ctx, s.reg.Snapshot(), req)
	if err != nil {
		return nil, grpcError(err)
	}
	compress(ctx, resp)
	return resp, nil
}

// SearchTools implements toolwire.v1.ToolService (Engine.SearchTools).
func (s *Server) SearchTools(ctx context.Context, req *toolwirev1.SearchToolsRequest) (*toolwirev1.SearchToolsResponse, error) {
	resp, err := s.engine.SearchTools(ctx, s.reg.Snapshot(), req)
	if err != nil {
		return nil, grpcError(err)
	}
	compress(ctx, resp)
	return resp, nil
}

// compress sends resp gzipped when the client says it accepts gzip
// (grpc-accept-encoding) and resp is large enough to gain from it.
// Declarations are JSON Schema and prose, which gzip shrinks several times
// over. A client that compressed its request gets its answer compressed
// the same way already (gRPC's rule), whatever the size.
func compress(ctx context.Context, resp proto.Message) {
	if accepted, err := grpc.ClientSupportedCompressors(ctx); err != nil || !slices.Contains(accepted, gzip.Name) {
		return
	}
	if proto.Size(resp) < compressAbove {
		return
	}
	_ = grpc.SetSendCompressor(ctx, gzip.Name) // it fails only off a gRPC stream (an in-process call): then uncompressed
}
