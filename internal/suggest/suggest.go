// Package suggest finds, for a name that names nothing (a misspelt tool
// name), the known name it was most likely meant to be. It imports none of
// toolwire's packages. (internal/configfile, which may import none either,
// keeps its own copy of the distance for a misspelt key.)
package suggest

import "slices"

// MaxEdits is how far a name may be from the one Nearest suggests: more
// is another word.
const MaxEdits = 2

// Nearest returns the one of names nearest to name, ignoring ASCII case,
// when it is within MaxEdits edits, and whether there is one; ties go to
// the first in sorted order, the same every time. It reads each name once,
// in time linear in the two names' lengths (only names within MaxEdits of
// name's length are compared at all), and copies names only when they are
// not sorted: a catalog of tens of thousands of tools is looked through in
// a millisecond or two.
func Nearest(name string, names []string) (string, bool) {
	if !slices.IsSorted(names) {
		names = slices.Sorted(slices.Values(names))
	}
	best, bestD := "", MaxEdits+1
	var counts [64]int
	for i := range len(name) {
		counts[lowerASCII(name[i])&63]++
	}
	for _, k := range names {
		if abs(len(k)-len(name)) >= bestD || apart(counts, k) >= bestD {
			continue // at least that many edits
		}
		if d := within(name, k, bestD-1); d < bestD {
			best, bestD = k, d
			if d == 0 {
				break
			}
		}
	}
	return best, best != ""
}

// apart is a lower bound of the edits between k and the name whose bytes
// counts counts (folded into 64 classes): each edit changes the counts by
// at most two.
func apart(counts [64]int, k string) int {
	for i := range len(k) {
		counts[lowerASCII(k[i])&63]--
	}
	diff := 0
	for _, c := range counts {
		diff += abs(c)
	}
	return (diff + 1) / 2
}

// within returns the edit distance of a and b, ignoring ASCII case, when
// it is at most k, and k+1 when it is more: only the cells within k of
// the diagonal are computed, and the rows stop once none is within k.
func within(a, b string, k int) int {
	inf := k + 1
	if abs(len(a)-len(b)) > k {
		return inf
	}
	var rows [2][130]int // names of up to 128 bytes need no allocation
	prev, cur := rows[0][:], rows[1][:]
	if len(b)+2 > len(prev) {
		prev, cur = make([]int, len(b)+2), make([]int, len(b)+2)
	}
	for j := 0; j <= len(b)+1; j++ {
		prev[j] = min(j, inf)
	}
	for i := 1; i <= len(a); i++ {
		lo, hi := max(1, i-k), min(len(b), i+k)
		cur[lo-1] = inf
		if lo == 1 {
			cur[0] = min(i, inf)
		}
		rowMin := cur[lo-1]
		for j := lo; j <= hi; j++ {
			cost := 1
			if lowerASCII(a[i-1]) == lowerASCII(b[j-1]) {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost, inf)
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		cur[hi+1] = inf // the next row reads one cell past this one's band
		if rowMin > k {
			return inf
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func abs(n int) int { return max(n, -n) }
