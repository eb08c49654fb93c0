// Package suggest finds, for a name that names nothing (a misspelt tool
// name), the known name it was most likely meant to be. It imports none of
// toolwire's packages. (internal/configfile, which may import none either,
// keeps its own copy of the distance for a misspelt key.)
package suggest

import (
	"slices"
	"strings"
)

// Nearest returns the one of names nearest to name, ignoring case, when
// it is within 2 edits (more is another word), and whether there is one;
// ties go to the first in sorted order, the same every time.
func Nearest(name string, names []string) (string, bool) {
	best, bestD := "", 3
	lower := strings.ToLower(name)
	for _, k := range slices.Sorted(slices.Values(names)) {
		if abs(len(k)-len(name)) >= bestD {
			continue // at least that many edits
		}
		if d := Distance(lower, strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best, best != ""
}

func abs(n int) int { return max(n, -n) }

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
