package grpcserve

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func batchOf(calls ...*toolwirev1.ToolCall) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: calls}
}

func TestMessageOverTheSizeLimitIsResourceExhausted(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{MaxMessageBytes: 64 << 10})
	c := s.client(t)
	big := `{"text":"` + strings.Repeat("x", 100<<10) + `"}`
	_, err := (&testServer{client: c}).runErr(context.Background(), batchOf(call("a", "echo", big)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized batch: err = %v, want RESOURCE_EXHAUSTED", err)
	}
	events, err := (&testServer{client: c}).runErr(context.Background(), batchOf(call("a", "echo", `{"text":"small"}`)))
	if err != nil || text(results(t, events)["a"]) != "small" {
		t.Errorf("batch under the limit after an oversized one: %v %v", err, events)
	}
}

func TestClientPingingTooOftenIsSentTooManyPings(t *testing.T) {
	t.Parallel()
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{KeepaliveMinTime: time.Hour}})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The first ping is allowed; each later one within MinTime is a strike,
	// and the third strike ends the connection.
	for i := range 5 {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeEnhanceYourCalm || string(f.DebugData()) != "too_many_pings" {
				t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", f.ErrCode, f.DebugData())
			}
			if _, err := fr.ReadFrame(); err == nil {
				for err == nil { // the connection must close after the GOAWAY
					_, err = fr.ReadFrame()
				}
			}
			return
		}
	}
}

func TestMaxConnectionAgeMakesClientsReconnect(t *testing.T) {
	t.Parallel()
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{MaxConnectionAge: 20 * time.Millisecond, MaxConnectionAgeGrace: time.Minute}})
	c := s.client(t)
	for s.accepts.Load() < 3 {
		if t.Context().Err() != nil {
			t.Fatal("no reconnection")
		}
		if _, err := c.ListTools(context.Background(), &toolwirev1.ListToolsRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("ListTools across connection ages: %v", err)
		}
	}
}
