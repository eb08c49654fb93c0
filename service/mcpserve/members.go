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
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return nil
	}
	if b[0] != '[' {
		return checkObject(b, "", envelope)
	}
	var msgs []json.RawMessage
	if json.Unmarshal(b, &msgs) != nil {
		return nil
	}
	for _, m := range msgs {
		if err := checkObject(m, "", envelope); err != nil {
			return err
		}
	}
	return nil
}

// The objects checkMembers looks into.
const (
	envelope = iota // the message: recurse into params
	params          // its params: recurse into _meta
	meta            // _meta and everything in it
)

// checkObject checks the names of raw, if it is an object, at level
// (where names it for the error), and of the objects under it that the
// level reaches.
func checkObject(raw json.RawMessage, where string, level int) error {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return nil
	}
	if raw[0] == '[' {
		if level != meta {
			return nil
		}
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for _, it := range items {
			if err := checkObject(it, where, meta); err != nil {
				return err
			}
		}
		return nil
	}
	if raw[0] != '{' {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if _, err := d.Token(); err != nil {
		return nil
	}
	seen := map[string]string{}
	var v json.RawMessage
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		f := fold(name)
		if prev, ok := seen[f]; ok {
			return &errMembers{prev, name, where}
		}
		seen[f] = name
		if err := d.Decode(&v); err != nil {
			return nil
		}
		switch {
		case level == envelope && name == "params":
			err = checkObject(v, " in params", params)
		case level == params && name == "_meta":
			err = checkObject(v, " in params._meta", meta)
		case level == meta:
			err = checkObject(v, where, meta)
		}
		if err != nil {
			return err
		}
	}
	return nil
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
