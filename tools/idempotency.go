package tools

import "encoding/json"

// KeyFrom adapts a function of a tool's typed arguments into a
// Tool.IdempotencyKey, for tools built with Typed: the arguments are decoded
// into In, and fn says which of them identify the effect (an order ID, a
// message ID). Arguments that do not decode yield no key.
func KeyFrom[In any](fn func(in In) (key string, ok bool)) func(json.RawMessage) (string, bool) {
	return func(args json.RawMessage) (string, bool) {
		var in In
		if err := json.Unmarshal(args, &in); err != nil {
			return "", false
		}
		return fn(in)
	}
}
