package grpcserve

import (
	"context"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/serverstatus"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAdminService serves GetServerStatus beside the ToolService when
// Config.Admin is set (here with authentication off: the anonymous caller
// sees every batch), and not otherwise.
func TestAdminService(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{})
	srv, err := New(eng, reg, Config{Admin: serverstatus.New(eng, reg, serverstatus.Config{Open: true})})
	if err != nil {
		t.Fatal(err)
	}
	gs, conn := serveBufconn(t, srv)
	t.Cleanup(func() { conn.Close(); gs.Stop(); eng.Close() })

	ctx, cancel := context.WithCancel(t.Context())
	stream := startBatch(t, ctx, toolwirev1.NewToolServiceClient(conn), &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{call("a", "sleep", `{"ms":600000}`)}})
	admin := toolwirev1.NewAdminServiceClient(conn)
	var got *toolwirev1.GetServerStatusResponse
	// CallStarted is sent as the call sets out; its tool runs a moment later.
	waitFor(t, func() bool {
		var err error
		got, err = admin.GetServerStatus(t.Context(), &toolwirev1.GetServerStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(got.GetBatches()) == 1 && got.GetBatches()[0].GetCallsRunning() == 1
	})
	if !got.GetAllCallers() || len(got.GetBatches()) != 1 || got.GetBatches()[0].GetCallsRunning() != 1 || got.GetEngine() == nil || got.GetRevision() != reg.Snapshot().Revision() {
		t.Errorf("GetServerStatus = %v; want every caller's view with the running batch", got)
	}
	cancel()
	_, _ = drain(stream)

	plain := newTestServer(t, engine.Config{})
	_, err = toolwirev1.NewAdminServiceClient(plain.conn).GetServerStatus(t.Context(), &toolwirev1.GetServerStatusRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("GetServerStatus without Config.Admin: %v; want Unimplemented", err)
	}
}
