package mcpserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A client matches each answer to its request by the request's ID, so an
// answer must carry the ID as it was sent. The go-sdk reads a message's
// numbers as float64 and answers under the integer it makes of the ID: a
// request of ID 1.5 was answered as 1, 9007199254740993 as
// 9007199254740992, 1.2e22 as -9223372036854775808. The client never saw
// its answer; a tools/call so sent ran, and its result went to an ID no
// one waited for. The same rounding made a notifications/cancelled's
// requestId name another request of the session, and a progress token
// another token. And in a JSON-RPC batch (2025-03-26 and older), two
// requests of one ID both ran, but the response ended at the first answer
// and the second was dropped.
//
// So every number that names a request or a token (a request's id, a
// notifications/cancelled's params.requestId, params._meta.progressToken)
// must be an integer the SDK keeps as it is, of magnitude at most 2^53,
// and the requests of a batch must have IDs of their own; a body that
// breaks either is refused (400, a JSON-RPC error naming the value)
// before the SDK reads it. Strings are kept as sent, and other types are
// the SDK's to refuse.

// maxExactID is the largest magnitude of an integer every JSON parser
// that reads numbers as float64 (the go-sdk's, JavaScript's) keeps.
const maxExactID = 1 << 53

// idError is a body refused for a number that names a request or token,
// or for an ID used twice in a batch.
type idError struct {
	id      json.RawMessage // the ID to answer, or nil (null)
	code    int64
	message string
}

// checkIDs checks the JSON-RPC message or batch b, valid JSON whose
// messages name no member twice (readBody), as above.
func checkIDs(b []byte) *idError {
	b = bytes.TrimLeft(b, " \t\r\n")
	var msgs []json.RawMessage
	if len(b) > 0 && b[0] == '[' {
		if json.Unmarshal(b, &msgs) != nil {
			return nil // not a batch of messages: the SDK refuses it
		}
	} else {
		msgs = []json.RawMessage{b}
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		var msg map[string]json.RawMessage
		if json.Unmarshal(m, &msg) != nil {
			continue // not a message: the SDK refuses it
		}
		raw, isRequest := msg["method"]
		if !isRequest {
			continue // a response of the client's
		}
		var answer json.RawMessage // the ID the refusal answers
		if id, ok := msg["id"]; ok {
			key, exact := idKey(id)
			if !exact {
				return &idError{nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("the request's id %s is a number this server cannot answer under as it was sent (JSON-RPC parsers read numbers as 64-bit floats): send a string, or an integer between -2^53 and 2^53", id)}
			}
			if key != "" {
				if seen[key] {
					return &idError{id, jsonrpc.CodeInvalidRequest, fmt.Sprintf("the batch has two requests of the id %s: each request needs an id of its own, or only one of them gets its answer", id)}
				}
				seen[key] = true
				answer = id
			}
		}
		var method string
		_ = json.Unmarshal(raw, &method)
		var params, meta map[string]json.RawMessage
		if json.Unmarshal(msg["params"], &params) != nil {
			continue // the SDK's to refuse
		}
		_ = json.Unmarshal(params["_meta"], &meta)
		if req, ok := params["requestId"]; ok && method == "notifications/cancelled" {
			if _, exact := idKey(req); !exact {
				return &idError{answer, jsonrpc.CodeInvalidParams, fmt.Sprintf("params.requestId %s is a number this server cannot read as it was sent, so it would cancel another request: name the request by the id it was sent with", req)}
			}
		}
		if tok, ok := meta["progressToken"]; ok {
			if _, exact := idKey(tok); !exact {
				return &idError{answer, jsonrpc.CodeInvalidParams, fmt.Sprintf("params._meta.progressToken %s is a number this server cannot send back as it was sent: send a string, or an integer between -2^53 and 2^53", tok)}
			}
		}
	}
	return nil
}

// idKey is the ID raw as the SDK tells IDs apart ("" for one that is not
// a string or a number), and false for a number the SDK would not keep
// as it was sent.
func idKey(raw json.RawMessage) (key string, exact bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", true
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", true
		}
		return "s" + s, true
	case c == '-' || '0' <= c && c <= '9':
		n, ok := exactInteger(string(raw))
		return "n" + strconv.FormatInt(n, 10), ok
	}
	return "", true
}

// exactInteger is the JSON number n as an integer, and whether n is
// exactly that integer, of magnitude at most maxExactID.
func exactInteger(n string) (int64, bool) {
	if i, err := strconv.ParseInt(n, 10, 64); err == nil {
		return i, -maxExactID <= i && i <= maxExactID
	}
	// A fraction or an exponent (or an integer too large for int64). A
	// decimal of at most 15 significant digits parses to a float64 that no
	// other such decimal does (DBL_DIG), and an integer below 10^15 is one:
	// so for those, a whole float means a whole number. Zero is checked
	// apart, since a tiny number underflows to it.
	digits := significantDigits(n)
	if digits > 15 {
		return 0, false
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxExactID || (f == 0 && digits > 0) {
		return 0, false
	}
	return int64(f), true
}

// significantDigits counts the digits of the JSON number n's mantissa
// between its first and last digit other than zero.
func significantDigits(n string) int {
	first, last, i := -1, -1, 0
	for pos := 0; pos < len(n) && n[pos] != 'e' && n[pos] != 'E'; pos++ {
		c := n[pos]
		if c < '0' || c > '9' {
			continue
		}
		if c != '0' {
			if first < 0 {
				first = i
			}
			last = i
		}
		i++
	}
	if first < 0 {
		return 0
	}
	return last - first + 1
}
