package connectserve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/service/connectserve"
	"github.com/toolwire/toolwire/service/serverstatus"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// TestAdminService serves GetServerStatus over Connect's JSON for the
// caller the middleware put in the context.
func TestAdminService(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{})
	t.Cleanup(eng.Close)
	h := connectserve.NewAdmin(serverstatus.New(eng, reg, serverstatus.Config{}))
	// A stand-in for auth.RequireCredentials: the caller is alice.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(engine.WithCaller(r.Context(), "alice")))
	}))
	t.Cleanup(web.Close)
	c := toolwirev1connect.NewAdminServiceClient(web.Client(), web.URL, connect.WithProtoJSON())
	resp, err := c.GetServerStatus(context.Background(), connect.NewRequest(&toolwirev1.GetServerStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg
	if got.GetCallerId() != "alice" || got.GetAllCallers() || got.GetRevision() != reg.Snapshot().Revision() || got.GetToolCount() != 3 {
		t.Errorf("GetServerStatus = %v; want alice's view (not every caller's) of 3 tools at %s", got, reg.Snapshot().Revision())
	}
}
