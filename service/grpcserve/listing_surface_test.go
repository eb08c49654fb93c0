package grpcserve_test

import (
	"context"

	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// The gRPC surface lists a page at a time and searches: it runs the
// suite's Lists subtests.
var _ surfacetest.Lists = (*grpcSurface)(nil)

func (s *grpcSurface) ListPage(ctx context.Context, caller surfacetest.Caller, pageSize int32, token string) (*toolwirev1.ListToolsResponse, error) {
	return s.client.ListTools(withCaller(ctx, caller), &toolwirev1.ListToolsRequest{PageSize: pageSize, PageToken: token})
}

func (s *grpcSurface) Search(ctx context.Context, caller surfacetest.Caller, query string, maxResults int32) (*toolwirev1.SearchToolsResponse, error) {
	return s.client.SearchTools(withCaller(ctx, caller), &toolwirev1.SearchToolsRequest{Query: query, MaxResults: maxResults})
}
