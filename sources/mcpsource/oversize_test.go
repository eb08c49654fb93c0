package mcpsource

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// FuzzOversized holds the scan of an oversized line to what decoding the
// line finds: the ID of each message that has one, as written but for the
// space around it, and whether it has a method; fed in pieces of any
// size.
func FuzzOversized(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"result":{"id":1}}`,
		`{"result":{"content":[{"text":"\"id\":2"}]},"id" : "x\"\\y" ,"jsonrpc":"2.0"}`,
		`[{"id":1,"result":{}},{"method":"m","id":2,"params":{"id":3}},{"id":null},4,[{"id":5}]]`,
		`{"id":{"a":[1,2]},"method":"m"}`,
		`{"methods":1,"ids":2,"id":3,"id":4}`,
		`{"\u0069d":1}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, line []byte, piece uint8) {
		if !json.Valid(line) || bytes.Contains(line, []byte(`\u`)) {
			return // the servers' lines are JSON; an escaped key is not looked for
		}
		var want []scannedMessage
		var top any
		_ = json.Unmarshal(line, &top)
		var objs []json.RawMessage
		switch top.(type) {
		case map[string]any:
			objs = []json.RawMessage{line}
		case []any:
			_ = json.Unmarshal(line, &objs)
		}
		for _, raw := range objs {
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) != nil {
				continue // no object: no message
			}
			var sm scannedMessage
			if id, ok := m["id"]; ok {
				var b bytes.Buffer
				_ = json.Compact(&b, id)
				sm.id = b.Bytes()
				sm.bad = len(sm.id) > maxIDBytes
			}
			_, sm.method = m["method"]
			want = append(want, sm)
		}
		// Scanned after another line, reset: what the last kept is reused,
		// as an SSE stream's scan is from event to event.
		o := &oversized{}
		o.Write([]byte(`[{"id":"left over","method":"m"},{"id":12345678},{"id":[1,2,3]}]`))
		o.reset()
		n := int(piece%16) + 1
		for p := line; len(p) > 0; p = p[min(n, len(p)):] {
			o.Write(p[:min(n, len(p))])
		}
		if len(o.msgs) != len(want) {
			t.Fatalf("%d messages scanned in %s; want %d", len(o.msgs), line, len(want))
		}
		for i, m := range o.msgs {
			w := want[i]
			if w.bad {
				if !m.bad {
					t.Errorf("message %d of %s: a %d-byte id kept", i, line, len(w.id))
				}
				continue
			}
			if !slices.Equal(m.id, w.id) || m.method != w.method {
				t.Errorf("message %d of %s: id %s, method %v; want %s, %v", i, line, m.id, m.method, w.id, w.method)
			}
		}
	})
}

// TestOversizedBounded: a line (or an SSE event) of more messages than
// maxScanned keeps maxScanned of them; the rest are counted as dropped. A
// batch without end held about 64 bytes a message, without bound.
func TestOversizedBounded(t *testing.T) {
	const n = 3 * maxScanned
	o := &oversized{}
	o.Write([]byte("["))
	for i := range n {
		fmt.Fprintf(o, `{"jsonrpc":"2.0","id":%d,"result":{}},`, i)
	}
	o.Write([]byte(`{"jsonrpc":"2.0","method":"m"}]`))
	if len(o.msgs) != maxScanned || cap(o.msgs) > 2*maxScanned {
		t.Fatalf("%d messages kept (room for %d); want %d", len(o.msgs), cap(o.msgs), maxScanned)
	}
	stand, dropped := o.answers(true)
	if len(stand) != maxScanned || dropped != n+1-maxScanned {
		t.Errorf("%d stand-ins, %d dropped; want %d, %d", len(stand), dropped, maxScanned, n+1-maxScanned)
	}
	if id := stand[maxScanned-1].(*jsonrpc.Response).ID.Raw(); id != int64(maxScanned-1) {
		t.Errorf("the last stand-in answers %v; want %d", id, maxScanned-1)
	}
}
