package grpcserve

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// TestSetGzipLevel: SetGzipLevel sets gRPC's level (grpc-go's SetLevel,
// which refuses a level it cannot use), and the compressor registered
// under "gzip" stays the one that passes a gzip stream through, whose
// output reads back. Not parallel: it changes the process's compressor,
// as a program's init does (gRPC's pool may keep writers of the level
// before, so the bytes are not compared with compress/gzip's).
func TestSetGzipLevel(t *testing.T) {
	data := []byte(strings.Repeat(`{"type":"object","properties":{"owner":{"type":"string"}}}`, 2000))
	if err := SetGzipLevel(gzip.BestSpeed); err != nil {
		t.Fatal(err)
	}
	if _, ok := encoding.GetCompressor("gzip").(*precompressed); !ok {
		t.Fatalf("after SetGzipLevel, gzip is %T", encoding.GetCompressor("gzip"))
	}
	z, err := gzipped(mem.BufferSlice{mem.SliceBuffer(data)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := gzip.NewReader(bytes.NewReader(z.Materialize()))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) || z.Len() >= len(data)/4 {
		t.Errorf("gzipped %d bytes into %d, read back %d bytes (%v)", len(data), z.Len(), len(got), err)
	}
	if err := SetGzipLevel(42); err == nil {
		t.Error("SetGzipLevel(42): no error")
	}
	if _, ok := encoding.GetCompressor("gzip").(*precompressed); !ok {
		t.Fatalf("after a refused SetGzipLevel, gzip is %T", encoding.GetCompressor("gzip"))
	}
}

// TestPassWriter: a gzip stream passes through as it is, in writes of any
// size; anything else is compressed, and reads back.
func TestPassWriter(t *testing.T) {
	t.Parallel()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("already compressed"))
	zw.Close()
	c := encoding.GetCompressor("gzip")
	for _, tc := range []struct {
		name   string
		in     []byte
		chunks int // bytes per write
	}{
		{"gzip whole", gz.Bytes(), 1 << 20},
		{"gzip a byte at a time", gz.Bytes(), 1},
		{"a message", []byte("\x0a\x03abc"), 1 << 20},
		{"a message a byte at a time", []byte("\x0a\x03abc"), 1},
		{"one byte", []byte{0x08}, 1},
	} {
		var out bytes.Buffer
		w, err := c.Compress(&out)
		if err != nil {
			t.Fatal(err)
		}
		for in := tc.in; len(in) > 0; {
			n := min(tc.chunks, len(in))
			if _, err := w.Write(in[:n]); err != nil {
				t.Fatal(err)
			}
			in = in[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := c.Decompress(&out)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := io.ReadAll(r)
		want := tc.in
		if bytes.Equal(tc.in, gz.Bytes()) {
			want = []byte("already compressed")
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: read back %q, %v; want %q", tc.name, got, err, want)
		}
	}
}
