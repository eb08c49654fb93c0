package surfacetest_test

import (
	"context"

	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

var _ surfacetest.Lists = (*inProcess)(nil)

func (s *inProcess) ListPage(ctx context.Context, c surfacetest.Caller, pageSize int32, token string) (*toolwirev1.ListToolsResponse, error) {
	ctx, err := s.authenticate(ctx, c)
	if err != nil {
		return nil, err
	}
	return s.e.ListTools(ctx, s.reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: pageSize, PageToken: token})
}

func (s *inProcess) Search(ctx context.Context, c surfacetest.Caller, query string, maxResults int32) (*toolwirev1.SearchToolsResponse, error) {
	ctx, err := s.authenticate(ctx, c)
	if err != nil {
		return nil, err
	}
	return s.e.SearchTools(ctx, s.reg.Snapshot(), &toolwirev1.SearchToolsRequest{Query: query, MaxResults: maxResults})
}
