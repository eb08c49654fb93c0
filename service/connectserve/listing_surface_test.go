package connectserve_test

import (
	"context"

	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// The Connect surface lists a page at a time and searches, in each
// protocol: it runs the suite's Lists subtests.
var _ surfacetest.Lists = (*connectSurface)(nil)

func (s *connectSurface) ListPage(ctx context.Context, caller surfacetest.Caller, pageSize int32, token string) (*toolwirev1.ListToolsResponse, error) {
	resp, err := s.client.ListTools(ctx, request(caller, &toolwirev1.ListToolsRequest{PageSize: pageSize, PageToken: token}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func (s *connectSurface) Search(ctx context.Context, caller surfacetest.Caller, query string, maxResults int32) (*toolwirev1.SearchToolsResponse, error) {
	resp, err := s.client.SearchTools(ctx, request(caller, &toolwirev1.SearchToolsRequest{Query: query, MaxResults: maxResults}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}
