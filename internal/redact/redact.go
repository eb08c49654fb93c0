// Package redact keeps what a URL's user information holds (a password, a
// token written as the user name) out of messages: the errors that quote
// an operator's URL reach a terminal, the server's log and whatever
// collects it. It works on the URL as written, so a URL that does not
// parse, the one most likely to be quoted in an error, is redacted too.
package redact

import (
	"strconv"
	"strings"
)

// Mask is what stands in a message for a URL's user information.
const Mask = "xxxxx"

// userinfo returns raw's user information as written: what lies between
// "://" and the last "@". It does not parse raw, so it also finds it in a
// URL that url.Parse refuses, or one whose password holds a character a
// URL may not ("/", "@"). "" when there is none.
func userinfo(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	if at := strings.LastIndex(rest, "@"); at > 0 {
		return rest[:at]
	}
	return ""
}

// URL returns raw with its user information replaced by Mask, for a
// message; raw itself when it has none.
func URL(raw string) string {
	info := userinfo(raw)
	if info == "" {
		return raw
	}
	return strings.Replace(raw, info+"@", Mask+"@", 1)
}

// Error returns err with raw's user information replaced by Mask wherever
// err's message quotes raw, as written or escaped as %q escapes it (as
// url.Parse's errors quote it); err itself when the message does not.
// The result keeps err's chain for errors.Is and errors.As.
func Error(err error, raw string) error {
	info := userinfo(raw)
	if err == nil || info == "" {
		return err
	}
	msg := err.Error()
	clean := strings.ReplaceAll(msg, info+"@", Mask+"@")
	clean = strings.ReplaceAll(clean, quote(info+"@"), Mask+"@")
	// A parser may quote a piece of it alone: url.Parse takes what
	// follows the first ":" of "user:pa/ss@host" for a port, and says
	// `invalid port ":pa"`. The secret's pieces between the characters
	// that end a URL's parts go too, those long enough not to be any
	// word of the message.
	secret := info
	if _, pass, ok := strings.Cut(info, ":"); ok {
		secret = pass
	}
	for _, piece := range strings.FieldsFunc(secret, func(r rune) bool { return strings.ContainsRune(":/?#@[]", r) }) {
		if len(piece) >= minPiece {
			clean = strings.ReplaceAll(clean, piece, Mask)
			clean = strings.ReplaceAll(clean, quote(piece), Mask)
		}
	}
	if clean == msg {
		return err
	}
	return redacted{msg: clean, err: err}
}

// minPiece is the shortest piece of a secret Error looks for alone.
const minPiece = 4

// quote is s as %q writes it inside its quotes.
func quote(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// redacted is an error whose message had a URL's user information taken
// out.
type redacted struct {
	msg string
	err error
}

func (e redacted) Error() string { return e.msg }
func (e redacted) Unwrap() error { return e.err }
