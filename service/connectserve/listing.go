package connectserve

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
)

// listHandler serves ListTools and SearchTools with hopts but no limit on
// what it sends: the engine bounds their responses (a page within
// MaxMessageBytes, every tool at once within ListLimit, in protobuf bytes),
// and the same response in Connect's JSON is larger than in protobuf, by
// how much depends on the text, so a byte limit on the wire would refuse
// some pages the engine made. What it reads stays bounded as hopts say.
// It compresses a response of compressAbove bytes or more for a client
// that accepts gzip.
func (s *Server) listHandler(hopts []connect.HandlerOption) http.Handler {
	opts := append(hopts[:len(hopts):len(hopts)], connect.WithSendMaxBytes(0),
		// gzip (withGzip, in hopts: at its fastest) only what gains from
		// it, as the gRPC port does (cmd/toolwire's compression.go,
		// service's listing.go).
		connect.WithCompressMinBytes(compressAbove))
	_, h := toolwirev1connect.NewToolServiceHandler(s, opts...)
	return h
}

// compressAbove is the size from which a listing's response is gzipped.
const compressAbove = 4 << 10

// ListTools implements toolwire.v1.ToolService (Engine.ListTools): the
// caller's permitted tools, all at once or a page of them.
func (s *Server) ListTools(ctx context.Context, req *connect.Request[toolwirev1.ListToolsRequest]) (*connect.Response[toolwirev1.ListToolsResponse], error) {
	resp, err := s.engine.ListTools(ctx, s.reg.Snapshot(), req.Msg)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}

// SearchTools implements toolwire.v1.ToolService (Engine.SearchTools).
func (s *Server) SearchTools(ctx context.Context, req *connect.Request[toolwirev1.SearchToolsRequest]) (*connect.Response[toolwirev1.SearchToolsResponse], error) {
	resp, err := s.engine.SearchTools(ctx, s.reg.Snapshot(), req.Msg)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}
