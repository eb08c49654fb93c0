package client

import (
	"encoding/json"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// Call returns a call of the named tool. args is sent as JSON text: a
// string, []byte or json.RawMessage is taken to be JSON already and passed
// through unchanged; nil means no arguments ({}); anything else is marshalled
// with encoding/json. Call panics when args cannot be marshalled, which is a
// programming error such as passing a channel.
func Call(id, name string, args any) *toolwirev1.ToolCall {
	var text string
	switch a := args.(type) {
	case nil:
	case string:
		text = a
	case []byte:
		text = string(a)
	case json.RawMessage:
		text = string(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			panic(fmt.Sprintf("client.Call(%q, %q): arguments: %v", id, name, err))
		}
		text = string(b)
	}
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: text}
}
