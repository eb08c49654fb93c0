package connectserve_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/protobuf/proto"
)

// TestStalledCallToolIsEnded: a client that reads nothing of CallTool's
// unary result (16 MiB, more than the sockets hold) no longer holds the
// server's write for good: after the engine's SendTimeout the response is
// ended and its connection closed, while other callers are served.
func TestStalledCallToolIsEnded(t *testing.T) {
	t.Parallel()
	blob := tools.Tool{Name: "blob", Description: "returns 16 MiB", Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", 16<<20)), nil
		}}
	reg, err := tools.NewRegistry(append(diag.Tools(), blob)...)
	if err != nil {
		t.Fatal(err)
	}
	log := &logbuf.Buffer{}
	eng := engine.New(engine.Config{SendTimeout: 300 * time.Millisecond, DrainTimeout: time.Second,
		MaxMessageBytes: 64 << 20, MaxResultBytes: 32 << 20}, engine.Deps{Logger: slog.New(slog.NewTextHandler(log, nil))})
	t.Cleanup(eng.Close)
	url := serveSurface(t, eng, reg, []surfacetest.Caller{{Name: "alice", Token: token}}, httpserve.Config{})
	body, err := proto.Marshal(&toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: "blob"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Small, but not below a loopback segment: once the test reads, what
	// the server's kernel still holds comes at once, not a probe at a time.
	_ = conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	if _, err := io.WriteString(conn, "POST /toolwire.v1.ToolService/CallTool HTTP/1.1\r\nHost: "+strings.TrimPrefix(url, "http://")+"\r\nContent-Type: application/proto\r\n"+
		"Authorization: Bearer "+token+"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+string(body)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), "Connect response: the client read nothing for the send timeout") {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled response was not ended; log:\n%s", log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	callEcho(t, url)
	// The server closed the connection: what its kernel had taken, then
	// the end.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %d bytes", n)
	}
	if n >= 16<<20 {
		t.Errorf("read %d bytes: the whole result was sent", n)
	}
}
