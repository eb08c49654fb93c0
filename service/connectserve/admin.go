package connectserve

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/service/serverstatus"
)

// AdminPath is the path prefix of toolwire.v1.AdminService's procedures.
const AdminPath = "/" + toolwirev1connect.AdminServiceName + "/"

// adminServer is toolwire.v1.AdminService over Connect: package serverstatus's
// read-only view, for the caller the HTTP port's middleware authenticated.
type adminServer struct {
	toolwirev1connect.UnimplementedAdminServiceHandler
	view *serverstatus.View
}

// NewAdmin returns the handler of AdminService for AdminPath: the view of
// v, behind the same middleware as the ToolService's (the caller wraps it).
func NewAdmin(v *serverstatus.View) http.Handler {
	_, h := toolwirev1connect.NewAdminServiceHandler(adminServer{view: v},
		connect.WithReadMaxBytes(adminReadMaxBytes), withGzip(adminReadMaxBytes))
	return h
}

// adminReadMaxBytes bounds an AdminService request (GetServerStatus's is
// empty). Without a bound connect-go reads a message whole, decompressed:
// 4 MB of gzip would have been 4 GB held.
const adminReadMaxBytes = 64 << 10

// GetServerStatus implements toolwire.v1.AdminService.
func (a adminServer) GetServerStatus(ctx context.Context, _ *connect.Request[toolwirev1.GetServerStatusRequest]) (*connect.Response[toolwirev1.GetServerStatusResponse], error) {
	resp, err := a.view.Status(ctx)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}
