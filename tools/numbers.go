package tools

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxNumberDigits bounds a JSON number in a value checked against a
// schema: at most this many digits, and an exponent within as many either
// way. The validator compares numbers exactly, as math/big rationals: a
// number whose exponent is past a million (1e9999999, 9 bytes) is one
// math/big will not build, and the validator then dereferenced nil and
// crashed the server, from a call's arguments or an upstream's structured
// content, for any schema with a minimum, maximum or multipleOf; one just
// under it (1.5e999999) cost 50 ms to build, each, so arguments of such
// numbers held a core for hours. Past this bound no tool could mean the
// number (a float64 holds exponents to ±308; a 128-bit integer has 39
// digits), and checking one costs microseconds. A schema's numbers are
// bounded alike: a multipleOf of 1e-9999999 crashed the compiler, from an
// upstream's listing.
const MaxNumberDigits = 400

// checkNumbers returns an *ArgumentError naming the first number in v
// past MaxNumberDigits (what names v: "arguments", "structured content",
// "schema").
func checkNumbers(v any, what string) error {
	var path []string
	var bad string
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case json.Number:
			if !numberWithin(string(v)) {
				bad = string(v)
				return false
			}
		case map[string]any:
			for k, e := range v {
				path = append(path, k)
				if !walk(e) {
					return false
				}
				path = path[:len(path)-1]
			}
		case []any:
			for i, e := range v {
				path = append(path, strconv.Itoa(i))
				if !walk(e) {
					return false
				}
				path = path[:len(path)-1]
			}
		}
		return true
	}
	if walk(v) {
		return nil
	}
	if len(bad) > 40 {
		bad = bad[:20] + "…" + bad[len(bad)-10:]
	}
	return &ArgumentError{Reason: fmt.Sprintf("a number in the %s cannot be checked, at /%s (%s): a number here has at most %d digits and an exponent within ±%d",
		what, strings.Join(path, "/"), bad, MaxNumberDigits, MaxNumberDigits)}
}

// numberWithin reports whether the JSON number text n has at most
// MaxNumberDigits digits and an exponent within as many either way.
func numberWithin(n string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(n), "e")
	digits := 0
	for _, c := range mant {
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	if digits > MaxNumberDigits {
		return false
	}
	if !hasExp {
		return true
	}
	e, err := strconv.Atoi(strings.TrimPrefix(exp, "+"))
	return err == nil && e >= -MaxNumberDigits && e <= MaxNumberDigits
}

// compile compiles url from c. A panic of the compiler, on a schema
// nobody foresaw from an upstream, is the schema's refusal.
func compile(c *jsonschema.Compiler, url string) (s *jsonschema.Schema, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("the schema compiler failed on it (%.200v)", p)
		}
	}()
	return c.Compile(url)
}

// validate checks doc against s. A panic of the validator (a bug of its
// own, on a value nobody foresaw) is the value's refusal, not the
// server's end: the value came from a call or an upstream.
func validate(s *jsonschema.Schema, doc any, what string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &ArgumentError{Reason: fmt.Sprintf("%s could not be checked against the schema: the validator failed on them (%.200v)", what, p)}
		}
	}()
	return s.Validate(doc)
}
