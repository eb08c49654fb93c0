package httpsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// step is one step of a response path: an object member, or an array
// element. A bare number (items.0) may be either; a bracket (items[0]) is an
// array element only.
type step struct {
	key     string
	index   int
	numeric bool // index is set
	bracket bool // written as [n]: never an object member
}

// parsePath parses a response path such as data.items[0].name or
// data.items.0.name.
func parsePath(p string) ([]step, error) {
	if p == "" {
		return nil, nil
	}
	var steps []step
	for seg := range strings.SplitSeq(p, ".") {
		key, rest, bracket := strings.Cut(seg, "[")
		if key == "" && !bracket {
			return nil, errors.New("empty segment; write a.b, a[0] or a.0")
		}
		if key != "" {
			s := step{key: key}
			if n, err := strconv.Atoi(key); err == nil && n >= 0 {
				s.index, s.numeric = n, true
			}
			steps = append(steps, s)
		}
		if !bracket {
			continue
		}
		// rest is "0][1]" for a[0][1].
		for {
			num, after, ok := strings.Cut(rest, "]")
			n, err := strconv.Atoi(num)
			if !ok || err != nil || n < 0 {
				return nil, fmt.Errorf("segment %q: want [n] with n a non-negative integer", seg)
			}
			steps = append(steps, step{index: n, numeric: true, bracket: true})
			if after == "" {
				break
			}
			if !strings.HasPrefix(after, "[") {
				return nil, fmt.Errorf("segment %q: unexpected %q after ]", seg, after)
			}
			rest = after[1:]
		}
	}
	return steps, nil
}

// selectPath follows steps into doc; a step that leads nowhere gives nil
// (JSON null).
func selectPath(doc any, steps []step) any {
	for _, s := range steps {
		switch v := doc.(type) {
		case map[string]any:
			if s.bracket {
				return nil
			}
			doc = v[s.key]
		case []any:
			if !s.numeric || s.index >= len(v) {
				return nil
			}
			doc = v[s.index]
		default:
			return nil
		}
	}
	return doc
}

// resultText is how a selected value reads: a string as itself, anything
// else as JSON text.
func resultText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
