package grpcserve

import (
	"context"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// CallTool implements toolwire.v1.ToolService: one call on the engine's
// path for every call (Engine.Call, a batch of one), its result in a unary
// response. Errors go through grpcError, as ExecuteBatch's do; a call that
// fails is a result, not an error.
//
// No tap handle is needed here (see tap.go): the engine's sink for a unary
// call only keeps the result, so no Send can block on a slow reader.
func (s *Server) CallTool(ctx context.Context, req *toolwirev1.CallToolRequest) (*toolwirev1.CallToolResponse, error) {
	res, err := s.engine.Call(withClientTrace(ctx), s.reg.Snapshot(), req.GetCall(), req.GetSessionId())
	if err != nil {
		return nil, grpcError(err)
	}
	return &toolwirev1.CallToolResponse{Result: res}, nil
}
