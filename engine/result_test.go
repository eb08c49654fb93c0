package engine

import (
	"strings"
	"testing"
	"unicode/utf8"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

func TestShapeCutsTextOnARuneBoundary(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("é", 100) // 2 bytes each
	for limit := 0; limit <= 12; limit++ {
		var res toolwirev1.CallResult
		shape(&tools.Result{Content: []tools.Content{{Text: text}}}, limit, &res)
		kept := res.GetContent()[0].GetText().GetText()
		if !utf8.ValidString(kept) || len(kept) > limit || len(kept) < limit-1 {
			t.Errorf("limit %d: kept %q (%d bytes); want valid UTF-8 of %d or %d bytes", limit, kept, len(kept), limit-1, limit)
		}
		if !res.GetTruncated() || res.GetOriginalSize() != uint64(len(text)) {
			t.Errorf("limit %d: truncated %v, original size %d", limit, res.GetTruncated(), res.GetOriginalSize())
		}
	}
}

// A result of very many small blocks is cut in blocks, not only in bytes:
// 100,000 empty text blocks were all converted and sent (600,000 of them,
// 15.6 MB from an MCP server, held 210 MB of the server's memory at once).
func TestShapeBoundsTheNumberOfBlocks(t *testing.T) {
	t.Parallel()
	const limit = 2000
	for _, c := range []tools.Content{{Text: ""}, {Text: "x"}, {Data: []byte{}, MIMEType: "image/png"}} {
		in := &tools.Result{Content: make([]tools.Content, 100_000)}
		for i := range in.Content {
			in.Content[i] = c
		}
		var res toolwirev1.CallResult
		shape(in, limit, &res)
		if n := len(res.GetContent()); n > limit/16+1 {
			t.Errorf("%+v: %d blocks kept; want at most %d and a marker", c, n, limit/16)
		}
		marker := res.GetContent()[len(res.GetContent())-1].GetText().GetText()
		if !res.GetTruncated() || !strings.Contains(marker, "content blocks past the first") {
			t.Errorf("%+v: truncated %v, marker %q; want one saying blocks were left out", c, res.GetTruncated(), marker)
		}
	}
}
