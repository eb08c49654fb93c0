package connectserve

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// gzipBomb is size zero bytes, gzipped (about a thousandth of it).
func gzipBomb(t testing.TB, size int) []byte {
	t.Helper()
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	zeros := make([]byte, 1<<20)
	for n := 0; n < size; n += len(zeros) {
		if _, err := w.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// counter counts what is written to it.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// TestBoundedGzipStops: read as connect-go reads a message (up to the
// limit plus one byte, then on to the end to size what is over), a gzip
// bomb produces at most the limit plus one byte, and the read past it
// fails; a message within the limit is read whole, and the decompressor,
// reset, serves the next.
func TestBoundedGzipStops(t *testing.T) {
	t.Parallel()
	const max = 1 << 20
	bomb := gzipBomb(t, 64<<20)
	g := &boundedGzip{max: max}
	if err := g.Reset(bytes.NewReader(bomb)); err != nil {
		t.Fatal(err)
	}
	var produced counter
	n, err := io.Copy(&produced, io.LimitReader(g, max+1)) // compressionPool.Decompress's first read
	if err != nil || n != max+1 {
		t.Fatalf("the first read: %d bytes, %v; want %d", n, err, max+1)
	}
	rest, err := io.Copy(&produced, g) // its io.Copy(io.Discard, decompressor)
	if err == nil || !strings.Contains(err.Error(), "not decompressed further") {
		t.Errorf("the read past the limit: %d bytes, %v; want an error", rest, err)
	}
	if produced.n > max+1 {
		t.Errorf("a 64 MiB bomb produced %d bytes; want at most %d", produced.n, max+1)
	}

	small := gzipBomb(t, max)
	if err := g.Reset(bytes.NewReader(small)); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, g); err != nil || n != max {
		t.Errorf("a message of the limit, after Reset: %d bytes, %v; want %d", n, err, max)
	}
}

// TestGzipBombRefused: a gzip bomb sent to any of the Connect handler
// sets, in Connect's unary and streaming shapes and gRPC-Web's, is
// refused as over the limit without being decompressed to its end
// (connect-go's own message, which sizes it, said how large it was).
func TestGzipBombRefused(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: time.Second, MaxMessageBytes: 1 << 20}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	s, err := New(eng, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, s)
	mux.Handle(AdminPath, NewAdmin(nil)) // refused before it is asked
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); s.Shutdown() })

	// Under 64 KiB gzipped: within what every handler reads before it
	// decompresses. The envelope's flag 1: compressed.
	bomb := gzipBomb(t, 16<<20)
	envelope := binary.BigEndian.AppendUint32([]byte{1}, uint32(len(bomb)))
	envelope = append(envelope, bomb...)
	for _, c := range []struct {
		name, path string
		header     map[string]string
		body       []byte
	}{
		{"Connect unary, CallTool", toolwirev1connect.ToolServiceCallToolProcedure,
			map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb},
		{"Connect unary, ListTools", toolwirev1connect.ToolServiceListToolsProcedure,
			map[string]string{"Content-Type": "application/proto", "Content-Encoding": "gzip"}, bomb},
		{"Connect unary, AdminService", toolwirev1connect.AdminServiceGetServerStatusProcedure,
			map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb},
		{"Connect streaming, ExecuteBatch", toolwirev1connect.ToolServiceExecuteBatchProcedure,
			map[string]string{"Content-Type": "application/connect+json", "Connect-Content-Encoding": "gzip", "Connect-Accept-Encoding": "identity"}, envelope},
		{"gRPC-Web, CallTool", toolwirev1connect.ToolServiceCallToolProcedure,
			map[string]string{"Content-Type": "application/grpc-web+proto", "Grpc-Encoding": "gzip"}, envelope},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+c.path, bytes.NewReader(c.body))
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Connect answers in its body; gRPC-Web in its trailers,
			// which a Trailers-Only response sends as headers.
			got := string(unenvelope(body)) + " " + resp.Header.Get("Grpc-Message") + " " + resp.Header.Get("Grpc-Status")
			if !strings.Contains(got, "resource_exhausted") && !strings.Contains(got, " 8") {
				t.Errorf("%d %.300s; want resource_exhausted", resp.StatusCode, got)
			}
			if !strings.Contains(got, "not decompressed further") {
				t.Errorf("%d %.300s; want it refused without being decompressed to its end", resp.StatusCode, got)
			}
		})
	}
}

// unenvelope is the messages of a Connect streaming response, decompressed,
// one after another; any other body as it is.
func unenvelope(b []byte) []byte {
	var out []byte
	for rest := b; len(rest) >= 5; {
		flags, n := rest[0], binary.BigEndian.Uint32(rest[1:5])
		if flags&^3 != 0 || int(n) > len(rest)-5 {
			return b
		}
		msg := rest[5 : 5+n]
		if flags&1 != 0 {
			r, err := gzip.NewReader(bytes.NewReader(msg))
			if err != nil {
				return b
			}
			msg, _ = io.ReadAll(r)
		}
		out = append(out, msg...)
		rest = rest[5+n:]
	}
	if out == nil {
		return b
	}
	return out
}
