package readfile_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/tools/readfile"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// BenchmarkReadFile reads a 1 MiB text file of 80-byte lines: with the
// default caps (the first 2000 lines) and whole.
func BenchmarkReadFile(b *testing.B) {
	var content strings.Builder
	for i := 0; content.Len() < 1<<20; i++ {
		fmt.Fprintf(&content, "%-79s\n", fmt.Sprintf("line %d of a megabyte of text", i))
	}
	e := wt.New(b, map[string]string{"big.txt": content.String()[:1<<20]})
	for _, bb := range []struct {
		name string
		opts readfile.Options
	}{
		{"default caps", readfile.Options{}},
		{"whole", readfile.Options{MaxBytes: 2 << 20, MaxLines: 1 << 20}},
	} {
		run := wt.Runner(b, readfile.New(e.WS, bb.opts))
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res := run(`{"path":"big.txt"}`); res.IsError {
					b.Fatal(wt.Text(res))
				}
			}
		})
	}
}
