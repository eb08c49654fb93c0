// Package toolname makes the names of tools a source derives from what
// someone else named (an OpenAPI operation, a gRPC method): valid for
// every model provider, distinct within the source, and the same from
// one load to the next. It imports only the standard library.
package toolname

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// MaxLen is the longest name OpenAI's function names allow
// (^[a-zA-Z0-9_-]{1,64}$), which every derived name matches.
const MaxLen = 64

var notNameChar = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Make returns prefix_base with every run of characters OpenAI's function
// names refuse replaced by "_". A name longer than MaxLen, or one taken
// already holds, keeps its first 55 characters and ends in "_" and 8 hex
// digits of a SHA-256 of key, which must identify what is named within
// the source (an operation's "METHOD /path", a method's full name). The
// caller adds the name to taken.
func Make(prefix, base, key string, taken map[string]bool) string {
	name := prefix + "_" + strings.Trim(notNameChar.ReplaceAllString(base, "_"), "_")
	if len(name) <= MaxLen && !taken[name] {
		return name
	}
	sum := sha256.Sum256([]byte(key))
	suffix := "_" + hex.EncodeToString(sum[:4])
	return name[:min(len(name), MaxLen-len(suffix))] + suffix
}
