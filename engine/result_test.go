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
