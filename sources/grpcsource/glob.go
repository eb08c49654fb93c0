package grpcsource

import (
	"errors"
	"log/slog"
	"regexp"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// A glob is an include or exclude pattern, matched against a method's
// full name ("grpc.health.v1.Health/Check") and its service's
// ("grpc.health.v1.Health"), a leading "/" ignored:
//
//   - any run of characters but "/": "grpc.health.v1.Health/*", "*.Health"
//     **     any run of characters: "google.api.expr.**", "**/List*"
//     ?      one character but "/"
//     [a-z]  one character of a class ([!a-z] or [^a-z]: not of it)
//     {a,b}  one of the alternatives, which may hold patterns
//     \x     x itself
//
// Protobuf names are dotted and a method follows its service after "/",
// so "**" may match inside a name: doublestar's rule, that "**" is a
// whole path segment, made "google.api.expr.**" match nothing.
type glob struct {
	text string
	re   *regexp.Regexp
}

func compileGlob(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^(?:")
	depth := 0 // open braces
	p := strings.TrimPrefix(pattern, "/")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '\\':
			if i+1 == len(p) {
				return nil, errors.New(`it ends in "\"`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		case '*':
			if i+1 < len(p) && p[i+1] == '*' {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			end := strings.IndexByte(p[i+1:], ']')
			if end == 0 { // "[]...]": the first "]" is a member
				if e := strings.IndexByte(p[i+2:], ']'); e >= 0 {
					end = e + 1
				} else {
					end = -1
				}
			}
			if end < 0 {
				return nil, errors.New(`a "[" is not closed`)
			}
			class := p[i+1 : i+1+end]
			i += end + 1
			b.WriteByte('[')
			if class[0] == '!' || class[0] == '^' {
				b.WriteByte('^')
				class = class[1:]
			}
			for j := 0; j < len(class); j++ {
				switch class[j] {
				case '\\', '[', ']', '^':
					b.WriteByte('\\')
				}
				b.WriteByte(class[j])
			}
			b.WriteByte(']')
		case '{':
			depth++
			b.WriteString("(?:")
		case '}':
			if depth == 0 {
				return nil, errors.New(`a "}" has no "{"`)
			}
			depth--
			b.WriteByte(')')
		case ',':
			if depth > 0 {
				b.WriteByte('|')
			} else {
				b.WriteByte(',')
			}
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	if depth > 0 {
		return nil, errors.New(`a "{" is not closed`)
	}
	b.WriteString(")$")
	return regexp.Compile(b.String())
}

// selector decides which methods a server's entry offers, and remembers
// which of its patterns matched anything.
type selector struct {
	include, exclude []glob
	matched          map[string]bool // "include"/"exclude" + "\x00" + pattern
}

// selector compiles c's patterns, which Validate has checked.
func (c Config) selector() *selector {
	s := &selector{matched: map[string]bool{}}
	compile := func(patterns []string) []glob {
		var out []glob
		for _, p := range patterns {
			if re, err := compileGlob(p); err == nil {
				out = append(out, glob{text: p, re: re})
			}
		}
		return out
	}
	s.include, s.exclude = compile(c.Include), compile(c.Exclude)
	return s
}

// selects reports whether the method of full name "package.Service/Method"
// of service svc is offered. It tries every pattern, so that all that
// match are remembered.
func (s *selector) selects(svc protoreflect.FullName, full string) bool {
	match := func(list string, globs []glob) bool {
		hit := false
		for _, g := range globs {
			if g.re.MatchString(full) || g.re.MatchString(string(svc)) {
				s.matched[list+"\x00"+g.text] = true
				hit = true
			}
		}
		return hit
	}
	included := match("include", s.include)
	excluded := match("exclude", s.exclude)
	return (len(s.include) == 0 || included) && !excluded
}

// logUnmatched logs each pattern that matched none of the server's
// methods: a typo, or a service the server no longer has, would
// otherwise select nothing (or exclude nothing) without a word.
func (s *selector) logUnmatched(log *slog.Logger, services []string) {
	for _, l := range []struct {
		name  string
		globs []glob
	}{{"include", s.include}, {"exclude", s.exclude}} {
		for _, g := range l.globs {
			if !s.matched[l.name+"\x00"+g.text] {
				log.Warn("gRPC "+l.name+" pattern matches no method of the server", "pattern", g.text, "services", services)
			}
		}
	}
}
