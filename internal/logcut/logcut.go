// Package logcut bounds what a client sent before a log line quotes it. A
// request's method, path, Host or Origin may each be as long as the
// port's header limit (64 KiB), and a line logged for every refused
// request would copy all of it: an unauthenticated client could then make
// the server write 64 KiB of log per request. Refusal reasons were cut
// already (auth's maxReasonBytes, httpserve's quote); this is the same
// bound for the fields logged beside them.
package logcut

import (
	"strconv"
	"unicode/utf8"
)

// MaxBytes is the most bytes of a client's text a log line holds.
const MaxBytes = 256

// String returns s as a log line may hold it: s itself when it is at most
// MaxBytes long, else its first MaxBytes (cut at a rune's boundary) marked
// with "…" and its full length.
func String(s string) string {
	if len(s) <= MaxBytes {
		return s
	}
	cut := s[:MaxBytes]
	for i := 0; i < utf8.UTFMax-1 && !utf8.ValidString(cut) && utf8.ValidString(s); i++ {
		cut = cut[:len(cut)-1] // a rune cut in two
	}
	return cut + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
