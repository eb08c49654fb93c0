// Package envref expands {{ENV_VAR}} references in configuration values, so
// secrets such as tokens and API keys stay in the environment and out of
// configuration files, logs and errors.
//
// It imports only the standard library, so any package may use it.
package envref

import (
	"fmt"
	"os"
	"regexp"
)

var ref = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Check reports the first malformed reference in s, such as {{1BAD}}, without
// reading the environment.
func Check(s string) error {
	for _, m := range ref.FindAllStringSubmatch(s, -1) {
		if !validName.MatchString(m[1]) {
			return fmt.Errorf("bad environment variable name %q in {{...}}", m[1])
		}
	}
	return nil
}

// single is {NAME}, one brace each side, as a reference is mistyped.
var single = regexp.MustCompile(`\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}`)

// CheckSecret is Check for a value that holds a secret (a header, a
// token), where a single-braced {NAME} outside any {{...}} is surely a
// reference mistyped: "Bearer {TOKEN}" was sent as those very characters,
// and the upstream refused them, far from the typo.
func CheckSecret(s string) error {
	if err := Check(s); err != nil {
		return err
	}
	if m := single.FindStringSubmatch(ref.ReplaceAllString(s, "")); m != nil {
		return fmt.Errorf("%s would be sent as it is written; an environment variable is written {{%s}}", m[0], m[1])
	}
	return nil
}

// Expand replaces every {{NAME}} in s with the value of the environment
// variable NAME. An unset variable is an error naming it; the error never
// contains s or any value, so it is safe to log.
func Expand(s string) (string, error) {
	return expand(s, os.LookupEnv)
}

func expand(s string, lookup func(string) (string, bool)) (string, error) {
	var err error
	out := ref.ReplaceAllStringFunc(s, func(m string) string {
		name := ref.FindStringSubmatch(m)[1]
		if err != nil {
			return ""
		}
		if !validName.MatchString(name) {
			err = fmt.Errorf("bad environment variable name %q in {{...}}", name)
			return ""
		}
		v, ok := lookup(name)
		if !ok {
			err = fmt.Errorf("environment variable %s is not set", name)
			return ""
		}
		return v
	})
	if err != nil {
		return "", err
	}
	return out, nil
}

// ExpandMap expands every value of m into a new map; see Expand.
func ExpandMap(m map[string]string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		e, err := Expand(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = e
	}
	return out, nil
}
