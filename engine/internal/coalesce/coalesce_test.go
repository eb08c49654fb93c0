package coalesce

import (
	"strings"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

func report(i int, msg, out string) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
		Index: uint32(i), Message: msg, Output: out}}}
}

// TestCoalescer: a call's first Burst reports are written as they come;
// the next ones within Every merge into one pending report (the last
// message, the output appended and cut to its last bytes), which Flush
// hands over before the result, once.
func TestCoalescer(t *testing.T) {
	t.Parallel()
	var c Coalescer
	c.Init(2, 100)
	now := time.Unix(0, 0)
	for n := range Burst {
		if c.Progress(report(0, "m", "x"), now) == nil {
			t.Fatalf("report %d of the burst was merged, want written", n)
		}
	}
	if ev := c.Progress(report(0, "first", strings.Repeat("a", 60)), now); ev != nil {
		t.Fatal("a report past the burst within Every was written, want merged")
	}
	if ev := c.Progress(report(0, "second", strings.Repeat("b", 60)), now); ev != nil {
		t.Fatal("a second report past the burst was written, want merged")
	}
	if c.Flush(1) != nil {
		t.Error("another call has pending progress")
	}
	p := c.Flush(0).GetProgress()
	if p.GetMessage() != "second" || len(p.GetOutput()) > 100 || !strings.HasSuffix(p.GetOutput(), strings.Repeat("b", 60)) || !strings.HasPrefix(p.GetOutput(), "[…earlier output merged away]") {
		t.Errorf("merged report: message %q, output %q; want the last message and the output's last 100 bytes, marked", p.GetMessage(), p.GetOutput())
	}
	if c.Flush(0) != nil {
		t.Error("Flush handed the pending report over twice")
	}
	if c.Progress(report(0, "later", ""), now.Add(Every)) == nil {
		t.Error("a report Every later was merged, want written")
	}
	if c.Flush(5) != nil {
		t.Error("Flush of an index past the batch's calls")
	}
}
