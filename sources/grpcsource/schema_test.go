package grpcsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// everything is the mapping service's message of every kind, and a
// resolver of the types its file describes.
func everything(t testing.TB) (protoreflect.MessageDescriptor, resolver) {
	files := loadMapping(t)
	d, err := files.FindDescriptorByName("toolwire.test.mapping.Everything")
	if err != nil {
		t.Fatal(err)
	}
	return d.(protoreflect.MessageDescriptor), resolver{server: dynamicpb.NewTypes(files)}
}

// schemaTool is a tool with md's input and output schemas, prepared by a
// registry as the engine's are.
func schemaTool(t testing.TB, md protoreflect.MessageDescriptor) *tools.Tool {
	in, err := json.Marshal(inputSchema(md))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(outputSchema(md))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Tool{Name: "t", InputSchema: in, OutputSchema: out,
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }})
	if err != nil {
		t.Fatalf("%s's schemas do not compile: %v\n%s\n%s", md.FullName(), err, in, out)
	}
	tl, _ := reg.Snapshot().Lookup("t")
	return tl
}

// TestFormats holds the schema of each kind of field to what protojson,
// which decodes the arguments of a call, accepts: a value the schema
// accepts decodes, and one protojson refuses is refused by the schema
// first (INVALID_ARGUMENTS naming the field, before anything runs),
// rather than by the call (which would have been the upstream's
// TOOL_ERROR). A few forms protojson also reads are refused on purpose
// ("stricter"): the schema asks for the one form a model should write.
func TestFormats(t *testing.T) {
	t.Parallel()
	md, types := everything(t)
	tl := schemaTool(t, md)
	for _, tc := range []struct {
		field, value string
		ok, stricter bool
		call         bool // the schema accepts it; the call refuses it (INVALID_ARGUMENTS, see TestMapping)
	}{
		{"when", `"2026-12-02T03:04:05Z"`, true, false, false},
		{"when", `"2026-12-02T03:04:05.123456789+05:30"`, true, false, false},
		{"when", `"2024-02-29T00:00:00Z"`, true, false, false},
		{"when", `"2000-02-29T00:00:00Z"`, true, false, false},
		{"when", `"0001-01-01T00:00:00Z"`, true, false, false},
		{"when", `"9999-12-31T23:59:59.999999999Z"`, true, false, false},
		{"when", `"yesterday"`, false, false, false},
		{"when", `"2026-02-30T00:00:00Z"`, false, false, false},
		{"when", `"2023-02-29T00:00:00Z"`, false, false, false},
		{"when", `"1900-02-29T00:00:00Z"`, false, false, false},
		{"when", `"2026-04-31T00:00:00Z"`, false, false, false},
		{"when", `"2026-13-01T00:00:00Z"`, false, false, false},
		{"when", `"2026-12-02T24:00:00Z"`, false, false, false},
		{"when", `"2026-12-02T23:59:60Z"`, false, false, false},
		{"when", `"2026-12-02T03:04:05"`, false, false, false},
		{"when", `"2026-12-02 03:04:05Z"`, false, false, false},
		{"when", `"2026-12-02T03:04:05.1234567890Z"`, false, false, false},
		{"when", `"0000-01-01T00:00:00Z"`, false, false, false},
		{"when", `"2026-12-02T3:04:05Z"`, false, true, false},
		{"when", `1764644645`, false, false, false},
		{"took", `"1.5s"`, true, false, false},
		{"took", `"-0.000000001s"`, true, false, false},
		{"took", `"+2s"`, true, false, false},
		{"took", `"1.s"`, true, false, false},
		{"took", `".5s"`, true, false, false},
		{"took", `"315576000000s"`, true, false, false},
		{"took", `"315576000001s"`, false, false, false},
		{"took", `"01s"`, false, false, false},
		{"took", `"5 minutes"`, false, false, false},
		{"took", `"1.0000000001s"`, false, false, false},
		{"took", `"1e3s"`, false, false, false},
		{"took", `"5m"`, false, false, false},
		{"mask", `"text,inner.name"`, true, false, false},
		{"mask", `" a,b "`, true, false, false},
		{"mask", `""`, true, false, false},
		{"mask", `"inner_name"`, false, false, false},
		{"mask", `"a,,b"`, false, false, false},
		{"mask", `"a, b"`, false, false, false},
		{"mask", `"1a"`, false, false, false},
		{"i64", `"-9223372036854775808"`, true, false, false},
		{"i64", `"9223372036854775807"`, true, false, false},
		{"i64", `"-0"`, true, false, false},
		{"i64", `"9223372036854775808"`, false, false, false},
		{"i64", `"-9223372036854775809"`, false, false, false},
		{"i64", `"99999999999999999999"`, false, false, false},
		{"i64", `"007"`, false, false, false},
		{"i64", `"12.5"`, false, false, false},
		{"i64", `"twelve"`, false, false, false},
		{"i64", `12`, false, true, false},
		{"i64", `"1e3"`, false, true, false},
		{"u64", `"18446744073709551615"`, true, false, false},
		{"u64", `"18446744073709551616"`, false, false, false},
		{"u64", `"-1"`, false, false, false},
		{"f64", `"18446744073709551615"`, true, false, false},
		{"big", `"-5"`, true, false, false},
		{"big", `"9223372036854775808"`, false, false, false},
		{"i32", `2147483647`, true, false, false},
		{"i32", `2147483648`, false, false, false},
		{"f", `3.4028234663852886e38`, true, false, false},
		{"f", `3.5e38`, false, false, false},
		{"f", `"NaN"`, true, false, false},
		{"d", `1e308`, true, false, false},
		{"d", `"-Infinity"`, true, false, false},
		{"data", `"AAEC"`, true, false, false},
		{"data", `"AAE"`, true, false, false},
		{"data", `"AAE="`, true, false, false},
		{"data", `"AA=="`, true, false, false},
		{"data", `"A-_B"`, true, false, false},
		{"data", `"A+/B"`, true, false, false},
		{"data", `""`, true, false, false},
		{"data", `"A"`, false, false, true},
		{"data", `"+-AA"`, false, false, true},
		{"data", `"AA="`, false, false, true},
		{"data", `"not base64!"`, false, false, false},
		{"data", `"AA==="`, false, false, false},
		{"data", `"AA\nAA"`, false, true, false},
		{"inners", `{"-2147483648":{}}`, true, false, false},
		{"inners", `{"five":{}}`, false, false, false},
		{"inners", `{"2147483648":{}}`, false, false, false},
		{"ids", `{"18446744073709551615":"x"}`, true, false, false},
		{"ids", `{"-1":"x"}`, false, false, false},
		{"flags", `{"true":"x","false":"y"}`, true, false, false},
		{"flags", `{"yes":"x"}`, false, false, false},
		{"color", `"COLOR_RED"`, true, false, false},
		{"color", `"COLOR_BLUE"`, false, false, false},
		{"thing", `{"@type":"type.googleapis.com/toolwire.test.mapping.Inner","name":"x"}`, true, false, false},
		{"thing", `{"name":"x"}`, false, false, false},
		{"left", `"L"`, true, false, false},
	} {
		args := fmt.Sprintf(`{%q:%s}`, tc.field, tc.value)
		_, verr := tl.ValidateArguments(args)
		perr := (protojson.UnmarshalOptions{Resolver: types}).Unmarshal([]byte(args), dynamicpb.NewMessage(md))
		switch {
		case tc.call:
			if verr != nil || perr == nil {
				t.Errorf("%s: the schema says %v, protojson %v; want it left to protojson", args, verr, perr)
			}
		case tc.ok && verr != nil:
			t.Errorf("%s: the schema refuses it: %v", args, verr)
		case tc.ok && perr != nil:
			t.Errorf("%s: protojson refuses it (%v): the case is wrong", args, perr)
		case !tc.ok && verr == nil:
			t.Errorf("%s: the schema accepts it (protojson: %v)", args, perr)
		case !tc.ok && tc.stricter && perr != nil:
			t.Errorf("%s: marked stricter than protojson, which refuses it too (%v)", args, perr)
		case !tc.ok && !tc.stricter && perr == nil:
			t.Errorf("%s: protojson accepts it: the case is wrong (mark it stricter)", args)
		case !tc.ok && !strings.Contains(verr.Error(), "/"+tc.field):
			t.Errorf("%s: the error does not name the field: %v", args, verr)
		}
	}
}

// TestOneofConflict: setting two fields of one oneof is refused with a
// message naming both, not "'not' failed".
func TestOneofConflict(t *testing.T) {
	t.Parallel()
	md, _ := everything(t)
	tl := schemaTool(t, md)
	_, err := tl.ValidateArguments(`{"left":"a","right":1}`)
	var ae *tools.ArgumentError
	if !errors.As(err, &ae) || len(ae.Violations) != 1 || ae.Violations[0] != `/right: "right" cannot be set together with "left": set at most one of them` {
		t.Errorf("a oneof's two fields: %v", err)
	}
	// Deep inside, too: the child's oneof.
	_, err = tl.ValidateArguments(`{"child":{"child":{"left":"a","right":1}}}`)
	if err == nil || !strings.Contains(err.Error(), `/child/child/right: "right" cannot be set together with "left"`) {
		t.Errorf("a nested oneof's two fields: %v", err)
	}
	var s map[string]any
	if err := json.Unmarshal(tl.InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	props := s["properties"].(map[string]any)
	if d, _ := props["right"].(map[string]any)["description"].(string); !strings.HasSuffix(d, "Part of oneof choice: set at most one of its fields.") {
		t.Errorf("right's description does not say it is one of a oneof: %q", d)
	}
}

// TestRecursion: a message inside itself refers to its one definition (the
// root's is "#"), so arguments are checked at any depth, and the schema
// does not grow with it.
func TestRecursion(t *testing.T) {
	t.Parallel()
	md, types := everything(t)
	tl := schemaTool(t, md)
	var s struct {
		Properties map[string]map[string]any
		Defs       map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(tl.InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	if s.Properties["child"]["$ref"] != "#" {
		t.Errorf("child: %v; want a $ref to the root", s.Properties["child"])
	}
	// Inner holds a list of Inner and is used by two fields: one $defs entry.
	if s.Defs["toolwire.test.mapping.Inner"] == nil || s.Properties["inner"]["$ref"] != "#/$defs/toolwire.test.mapping.Inner" {
		t.Errorf("Inner is not one $defs entry: %s", tl.InputSchema)
	}
	deep := `{"i64":"1"}`
	for range 100 {
		deep = `{"child":` + deep + `,"inner":{"more":[{"more":[{"name":"x"}]}]}}`
	}
	if _, err := tl.ValidateArguments(deep); err != nil {
		t.Errorf("100 levels deep: %v", err)
	}
	if err := (protojson.UnmarshalOptions{Resolver: types}).Unmarshal([]byte(deep), dynamicpb.NewMessage(md)); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(deep, `"i64":"1"`, `"i64":"one"`, 1)
	if _, err := tl.ValidateArguments(bad); err == nil || !strings.Contains(err.Error(), strings.Repeat("/child", 100)+"/i64") {
		t.Errorf("a bad value 100 levels deep: %v", err)
	}
}

// chain is a file of n message types T0 … T(n-1), each with the given
// fields of the next type.
func chain(t *testing.T, n int, fields ...string) protoreflect.FileDescriptor {
	t.Helper()
	fd := &descriptorpb.FileDescriptorProto{Name: proto.String("chain.proto"), Package: proto.String("chain"), Syntax: proto.String("proto3")}
	for i := range n {
		m := &descriptorpb.DescriptorProto{Name: proto.String(fmt.Sprintf("T%d", i))}
		if i+1 < n {
			for j, name := range fields {
				m.Field = append(m.Field, &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name),
					Number: proto.Int32(int32(j + 1)), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
					Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(fmt.Sprintf(".chain.T%d", i+1))})
			}
		}
		fd.MessageType = append(fd.MessageType, m)
	}
	file, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// jsonDepth is how deeply js nests objects and arrays.
func jsonDepth(js []byte) int {
	depth, deepest := 0, 0
	for _, c := range js {
		switch c {
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// TestSchemaGrowsWithTypes: types that each use the next twice (a
// diamond chain, 2^n paths) give a schema linear in their number, with
// every type defined once; types that each use the next once nest inline
// only so deep, then continue in $defs.
func TestSchemaGrowsWithTypes(t *testing.T) {
	t.Parallel()
	const n = 30
	tl := schemaTool(t, chain(t, n, "left", "right").Messages().ByName("T0"))
	if got := strings.Count(string(tl.InputSchema), `"properties"`); got != n {
		t.Errorf("%d object schemas for %d types:\n%s", got, n, tl.InputSchema)
	}
	if len(tl.InputSchema) > 200*n {
		t.Errorf("the schema of %d types is %d bytes", n, len(tl.InputSchema))
	}
	deep := `{}`
	for range n - 1 {
		deep = `{"left":` + deep + `,"right":` + deep + `}`
		if len(deep) > 1<<16 {
			break
		}
	}
	if _, err := tl.ValidateArguments(deep); err != nil {
		t.Errorf("arguments down the chain: %v", err)
	}

	const long = 100
	tl = schemaTool(t, chain(t, long, "next").Messages().ByName("T0"))
	if d := jsonDepth(tl.InputSchema); d > 2*maxDepth+8 {
		t.Errorf("a chain of %d types nests %d deep", long, d)
	}
	deep = `{}`
	for range long - 1 {
		deep = `{"next":` + deep + `}`
	}
	if _, err := tl.ValidateArguments(deep); err != nil {
		t.Errorf("arguments down the chain: %v", err)
	}
	if _, err := tl.ValidateArguments(strings.Replace(deep, `{}`, `{"x":1}`, 1)); err == nil || !strings.Contains(err.Error(), strings.Repeat("/next", long-1)) {
		t.Errorf("a wrong value at the chain's end: %v", err)
	}
}

// TestDecimalUpTo checks the patterns of integer ranges against every
// number near their bounds and all numbers up to a small bound.
func TestDecimalUpTo(t *testing.T) {
	t.Parallel()
	for _, max := range []string{"0", "9", "10", "305", "1000", "2147483647", "18446744073709551615"} {
		re := regexp.MustCompile("^" + decimalUpTo(max) + "$")
		limit, _ := new(big.Int).SetString(max, 10)
		check := func(n *big.Int) {
			if got, want := re.MatchString(n.String()), n.Sign() >= 0 && n.Cmp(limit) <= 0; got != want {
				t.Errorf("up to %s: %s matches %v", max, n, got)
			}
		}
		for i := range int64(1100) {
			check(big.NewInt(i))
		}
		for d := int64(-120); d <= 120; d++ {
			check(new(big.Int).Add(limit, big.NewInt(d)))
		}
		for _, s := range []string{"", "00", "01", "-1", "+1", " 1", "1 ", "0" + max} {
			if re.MatchString(s) {
				t.Errorf("up to %s: %q matches", max, s)
			}
		}
	}
	for _, tc := range []struct {
		pattern string
		min     int64
		max     uint64
	}{{int32Pattern, -2147483648, 2147483647}, {uint32Pattern, 0, 4294967295}} {
		re := regexp.MustCompile(tc.pattern)
		for _, n := range []int64{tc.min - 1, tc.min, tc.min + 1, -1, 0, 1, int64(tc.max) - 1, int64(tc.max), int64(tc.max) + 1} {
			if got, want := re.MatchString(strconv.FormatInt(n, 10)), n >= tc.min && n <= int64(tc.max); got != want {
				t.Errorf("%s: %d matches %v", tc.pattern, n, got)
			}
		}
	}
}

// FuzzArguments: arguments the Everything schema accepts, protojson (which
// decodes them for the call) accepts too, apart from what no schema can
// say (a key given twice, an Any's content, text that is not UTF-8, a
// time whose zone moves it past year 1 or 9999) or leaves to protojson
// (base64 of a wrong length or of both alphabets). Those still end
// INVALID_ARGUMENTS, from the call.
func FuzzArguments(f *testing.F) {
	md, types := everything(f)
	tl := schemaTool(f, md)
	for _, seed := range []string{
		`{"i32":-3,"i64":"-9007199254740993","u64":"18446744073709551615","s32":-1,"f64":"7","d":1.5,"f":"NaN","b":true}`,
		`{"text":"héllo","data":"AAEC","color":"COLOR_RED","tags":["a","b"],"counts":{"x":"1"},"inners":{"5":{"name":"five","more":[{"name":"six"}]}}}`,
		`{"inner":{"name":"in"},"left":"L","when":"2026-12-02T03:04:05Z","took":"1.5s","meta":{"k":[1,"two",null]},"anyValue":{"a":true}}`,
		`{"big":"42","maybe":false,"mask":"text,inner.name","child":{"text":"kid","child":{"i32":1}},"note":"","flags":{"true":"t"},"ids":{"7":"s"}}`,
		`{"when":"2024-02-29T23:59:59.999999999-23:59","took":"-315576000000.999999999s","data":"A-_B","inners":{"-2147483648":{}}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, args string) {
		valid, err := tl.ValidateArguments(args)
		if err != nil || len(valid) == 0 || duplicateKeys(valid) {
			return // refused; none, which the call sends as an empty message; or a key twice, which protojson reports in its own way
		}
		err = (protojson.UnmarshalOptions{Resolver: types}).Unmarshal(valid, dynamicpb.NewMessage(md))
		if err == nil {
			return
		}
		for _, unsayable := range []string{"invalid UTF-8", "invalid value for bytes field", "google.protobuf.Timestamp value out of range", "google.protobuf.Any", "@type", "unable to resolve"} {
			if strings.Contains(err.Error(), unsayable) {
				return
			}
		}
		t.Errorf("the schema accepts %s, protojson refuses it: %v", args, err)
	})
}

// duplicateKeys reports whether an object in the JSON text js has a key
// twice.
func duplicateKeys(js []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(js))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{keys: map[string]bool{}, object: tok == '{', key: tok == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.object && top.key {
				if top.keys[tok] {
					return true
				}
				top.keys[tok] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}
