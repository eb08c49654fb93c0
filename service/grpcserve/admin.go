package grpcserve

import (
	"context"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/serverstatus"
)

// adminServer serves toolwire.v1.AdminService over gRPC: the read-only
// view of package admin, for the caller the interceptors authenticated.
type adminServer struct {
	toolwirev1.UnimplementedAdminServiceServer
	view *serverstatus.View
}

var _ toolwirev1.AdminServiceServer = adminServer{}

// GetServerStatus implements toolwire.v1.AdminService.
func (a adminServer) GetServerStatus(ctx context.Context, _ *toolwirev1.GetServerStatusRequest) (*toolwirev1.GetServerStatusResponse, error) {
	resp, err := a.view.Status(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}
