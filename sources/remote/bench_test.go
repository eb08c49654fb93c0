package remote

import (
	"context"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// BenchmarkCall measures one forwarded call of echo, from the local handler
// through a one-call batch on a loopback toolwire server and back.
func BenchmarkCall(b *testing.B) {
	regB, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	srvB := loopback.Serve(b, regB, grpcserve.Config{})
	reg, _ := tools.NewRegistry()
	m := New(reg, nil)
	defer m.Close()
	if err := m.Sync(context.Background(), []Config{{Name: "b", Target: srvB.Addr, Insecure: true}}); err != nil {
		b.Fatal(err)
	}
	for {
		changed := reg.Changed()
		if _, ok := reg.Snapshot().Lookup("b_echo"); ok {
			break
		}
		<-changed
	}
	tool, _ := reg.Snapshot().Lookup("b_echo")
	args := []byte(`{"text":"hello"}`)
	b.ReportAllocs()
	for b.Loop() {
		res, err := tool.Handler(context.Background(), tools.NewCall("c", "b_echo", args, nil))
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}
