// Package search finds tools by a query: the reference matching and
// ranking of toolwire's tool search (the SearchTools RPC), which the web
// console's filter follows. docs/contract.md states the same rules in
// prose, and testdata/cases.json holds cases any other implementation (the
// console's JavaScript) can be checked against.
//
// A query is terms: words separated by white space, and phrases in double
// quotes (an unclosed quote runs to the end). A tool matches when every
// term occurs, ignoring case (Unicode simple lower case), in its name,
// title, description or source: its kind ("builtin", "http", "mcp",
// "remote") and its owner in the registry ("openapi:github", "mcp:files").
// So a one-word query matches what the console's filter always matched, a
// substring of the name, title or description, and more words narrow it.
//
// Matches are ranked by the sum, over the terms, of where each term is best
// found (see the weights below); a term found at the start of a word (the
// field's start, or after anything but a letter or digit) counts more than
// one inside a word. Equal scores keep name order.
package search

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolwire/toolwire/tools"
)

// The bounds of a query.
const (
	MaxQueryBytes = 1024
	MaxTerms      = 32
)

// Weights: what one term scores where it is best found.
const (
	nameExact     = 100 // the whole name
	nameWordStart = 60
	nameInside    = 40
	titleStart    = 30
	titleInside   = 20
	sourceAny     = 15
	descStart     = 10
	descInside    = 5
)

// Query is a parsed query: its terms, lower-cased.
type Query struct {
	terms []string
}

// ErrEmpty is Parse's error for a query with no terms.
var ErrEmpty = errors.New("the query is empty: give a word or a phrase to look for")

// Parse reads q into terms. A query over MaxQueryBytes, or of more than
// MaxTerms terms, or with none, is an error whose text says which.
func Parse(q string) (Query, error) {
	if len(q) > MaxQueryBytes {
		return Query{}, fmt.Errorf("the query is %d bytes, over the limit of %d", len(q), MaxQueryBytes)
	}
	if !utf8.ValidString(q) {
		return Query{}, errors.New("the query is not UTF-8")
	}
	var terms []string
	rest := q
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			break
		}
		var term string
		if rest[0] == '"' {
			var ok bool
			term, rest, ok = strings.Cut(rest[1:], `"`)
			if !ok {
				rest = ""
			}
			term = strings.TrimSpace(term)
		} else {
			end := strings.IndexFunc(rest, func(r rune) bool { return unicode.IsSpace(r) || r == '"' })
			if end < 0 {
				end = len(rest)
			}
			term, rest = rest[:end], rest[end:]
		}
		if term == "" {
			continue
		}
		term = strings.ToLower(term)
		if !slices.Contains(terms, term) {
			terms = append(terms, term)
		}
		if len(terms) > MaxTerms {
			return Query{}, fmt.Errorf("the query has more than %d terms", MaxTerms)
		}
	}
	if len(terms) == 0 {
		return Query{}, ErrEmpty
	}
	return Query{terms: terms}, nil
}

// Terms returns the query's terms, lower-cased, each once, in the order
// given.
func (q Query) Terms() []string { return slices.Clone(q.terms) }

// Index is what a search reads of one snapshot's tools: their fields,
// lower-cased once. It is safe for concurrent use.
type Index struct {
	snap *tools.Snapshot
	docs []doc // in the snapshot's order, by name
}

type doc struct {
	tool                             *tools.Tool
	name, title, description, source string
}

// NewIndex returns the index of snap's tools.
func NewIndex(snap *tools.Snapshot) *Index {
	ts := snap.Tools()
	ix := &Index{snap: snap, docs: make([]doc, len(ts))}
	for i, t := range ts {
		ix.docs[i] = doc{
			tool:        t,
			name:        strings.ToLower(t.Name),
			title:       strings.ToLower(t.Title),
			description: strings.ToLower(t.Description),
			source:      Source(snap, t),
		}
	}
	return ix
}

// Snapshot returns the snapshot ix was made of.
func (ix *Index) Snapshot() *tools.Snapshot { return ix.snap }

// Source is what a query's terms are matched against as t's source: its
// kind and its owner in snap, lower-cased, such as "http openapi:github".
func Source(snap *tools.Snapshot, t *tools.Tool) string {
	kind, owner := t.Source.Name(), strings.ToLower(snap.Owner(t.Name))
	if owner == "" || owner == kind {
		return kind
	}
	return kind + " " + owner
}

// Find returns the positions in the snapshot's Tools of the tools that
// match q and that keep accepts (nil keeps every one), best first, at most
// limit of them, and how many matched in all.
func (ix *Index) Find(q Query, keep func(*tools.Tool) bool, limit int) (best []int, total int) {
	type hit struct{ score, i int }
	var hits []hit
	for i := range ix.docs {
		d := &ix.docs[i]
		score := d.score(q.terms)
		if score == 0 || (keep != nil && !keep(d.tool)) {
			continue
		}
		hits = append(hits, hit{score, i})
	}
	// Stable on the snapshot's order: equal scores stay in name order.
	slices.SortStableFunc(hits, func(a, b hit) int { return b.score - a.score })
	best = make([]int, min(len(hits), max(limit, 0)))
	for j := range best {
		best[j] = hits[j].i
	}
	return best, len(hits)
}

// score is the sum of each term's best place in d, or 0 when a term is
// found nowhere.
func (d *doc) score(terms []string) int {
	total := 0
	for _, term := range terms {
		s := 0
		switch {
		case d.name == term:
			s = nameExact
		default:
			s = found(d.name, term, nameWordStart, nameInside)
			s = max(s, found(d.title, term, titleStart, titleInside))
			if s < sourceAny && strings.Contains(d.source, term) {
				s = sourceAny
			}
			if s < descStart {
				s = max(s, found(d.description, term, descStart, descInside))
			}
		}
		if s == 0 {
			return 0
		}
		total += s
	}
	return total
}

// found scores term in field: atStart when it occurs at the start of a
// word, inside when only within one, 0 when not at all.
func found(field, term string, atStart, inside int) int {
	best := 0
	for off := 0; ; {
		i := strings.Index(field[off:], term)
		if i < 0 {
			return best
		}
		i += off
		if wordStart(field, i) {
			return atStart
		}
		best = inside
		_, size := utf8.DecodeRuneInString(field[i:])
		off = i + size
	}
}

// wordStart reports whether position i of s starts a word: it is the
// start of s, or follows a rune that is neither a letter nor a digit.
func wordStart(s string, i int) bool {
	if i == 0 {
		return true
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return !unicode.IsLetter(r) && !unicode.IsDigit(r)
}
