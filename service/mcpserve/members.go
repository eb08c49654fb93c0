package mcpserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/toolwire/toolwire/internal/jsonkeys"
)

// toolwire reads a request's body before the go-sdk does (sessions.go: is
// it an initialize, which must take a place in the sessions' bounds?;
// fastcall.go: is it a plain tools/call?), so the two must read it alike.
// They did not: encoding/json matches member names to a struct's fields
// whatever their case, the last of two winning, and json.Unmarshal
// refuses what follows the value; the SDK's decoder (segmentio's, with
// DontMatchCaseInsensitiveStructFields) matches names exactly and reads
// one value, ignoring the rest. {"method":"initialize","Method":"ping",…}
// was a ping to toolwire and an initialize to the SDK: a session no bound
// counted and no idle timeout closed.
//
// So a POST's body must be one JSON value and nothing after it
// (json.Valid), and a message must not hold two members whose names are
// the same, exactly or but for case, in the message, its params, or
// anywhere in params._meta: what both parsers read. Such a body is
// refused (400, a JSON-RPC error naming the member) before either reads
// it, and toolwire's own reads match names exactly (maps, not structs).
// Tool arguments are not looked into: the engine reads them, not the SDK.

// errMembers is a JSON-RPC message with a member name repeated.
type errMembers struct{ first, second, where string }

func (e *errMembers) Error() string {
	if e.first == e.second {
		return fmt.Sprintf("the JSON-RPC message has the member %q twice%s: JSON parsers differ on which one counts; send each member once", e.first, e.where)
	}
	return fmt.Sprintf("the JSON-RPC message has members %q and %q%s, names that differ only by case: JSON parsers differ on which one counts; send each member once, in lower case as MCP spells it", e.first, e.second, e.where)
}

// checkMembers reports the first name repeated (exactly or but for case)
// in a JSON-RPC message or batch of them, b, which is valid JSON.
func checkMembers(b []byte) error {
	// One scan of the text without allocating finds no repeated name in
	// almost every body; only one that has some (anywhere: a tool's
	// arguments' are the engine's to refuse) is read again, by tokens, to
	// tell where.
	if _, _, ok := jsonkeys.Repeated(unsafe.String(unsafe.SliceData(b), len(b)), nil); !ok {
		return nil
	}
	// One pass over the tokens, each container's place known from its
	// parent's: reading each nested value again from its text, as this
	// once did, cost the body's size once per level (a 1 MB body nested
	// 1,000 deep in _meta allocated 1 GB and took 17 s; 3 MB nested 9,000
	// deep took a server past 20 GB).
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var stack []*container
	for {
		t, err := d.Token()
		if err != nil {
			return nil // the end, or what the SDK refuses
		}
		var top *container
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantName {
			if t == json.Delim('}') {
				stack = stack[:len(stack)-1]
				valueRead(stack)
				continue
			}
			name, _ := t.(string)
			if top.seen != nil {
				f := fold(name)
				if prev, ok := top.seen[f]; ok {
					return &errMembers{prev, name, where[top.level]}
				}
				top.seen[f] = name
			}
			top.name, top.wantName = name, false
			continue
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			c := &container{object: t == json.Delim('{'), level: top.inner(t == json.Delim('{'))}
			c.wantName = c.object
			if c.object && c.level != unchecked {
				c.seen = map[string]string{}
			}
			stack = append(stack, c)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueRead(stack)
		default:
			valueRead(stack)
		}
	}
}

// The places checkMembers looks into.
const (
	unchecked = iota
	batch     // the body's array of messages
	envelope  // a message: its params are looked into
	params    // its params: _meta is looked into
	meta      // _meta and everything in it
)

// where names each checked place for an error.
var where = [...]string{envelope: "", params: " in params", meta: " in params._meta"}

// container is an object or array checkMembers is in.
type container struct {
	object   bool
	level    int
	seen     map[string]string // the names seen, by fold; nil: not checked
	name     string            // the member whose value is read (an object)
	wantName bool              // a name comes next (an object)
}

// inner is the place of a value in c (the body's own value when c is
// nil), an object when object.
func (c *container) inner(object bool) int {
	switch {
	case c == nil && object:
		return envelope
	case c == nil:
		return batch
	case c.level == batch && object:
		return envelope
	case c.level == envelope && c.name == "params" && object:
		return params
	case c.level == params && c.name == "_meta", c.level == meta:
		return meta
	}
	return unchecked
}

// valueRead notes that a value of the innermost container was read: in
// an object, a name comes next.
func valueRead(stack []*container) {
	if len(stack) > 0 && stack[len(stack)-1].object {
		stack[len(stack)-1].wantName = true
	}
}

// fold is name as encoding/json compares names to a struct's fields (its
// foldName): two names with the same fold match the same field.
func fold(name string) string {
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name); {
		if c := name[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			b = append(b, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(name[i:])
		b = utf8.AppendRune(b, unicode.ToUpper(unicode.ToLower(r)))
		i += n
	}
	return string(b)
}
