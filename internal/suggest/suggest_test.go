package suggest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// distance is the plain Levenshtein distance, in bytes: what within must
// agree with.
func distance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
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

func TestWithin(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		k    int
		want int
	}{
		{"", "", 2, 0}, {"max_calls", "max_calls", 2, 0}, {"max_cals", "max_calls", 2, 1},
		{"methd", "method", 2, 1}, {"kitten", "sitting", 3, 3}, {"kitten", "sitting", 2, 3},
		{"", "abc", 2, 3}, {"ECHO", "echo", 2, 0}, {"Read_File", "read_fil", 2, 1},
	} {
		if got := within(tt.a, tt.b, tt.k); got != tt.want {
			t.Errorf("within(%q, %q, %d) = %d; want %d", tt.a, tt.b, tt.k, got, tt.want)
		}
	}
	// Against the plain distance, for names near and far, short and past
	// the rows kept on the stack.
	r := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteByte("abc_"[r.IntN(4)])
		}
		return sb.String()
	}
	for range 20000 {
		a := word(r.IntN(12))
		b := a
		for range r.IntN(4) { // a few edits, so that many are within k
			i := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0:
				b = b[:i] + word(1) + b[i:]
			case 1:
				if i < len(b) {
					b = b[:i] + b[i+1:]
				}
			default:
				if i < len(b) {
					b = b[:i] + word(1) + b[i+1:]
				}
			}
		}
		if r.IntN(50) == 0 {
			a, b = strings.Repeat(a, 30), strings.Repeat(b, 30)
		}
		k := r.IntN(4)
		if got, want := within(a, b, k), min(distance(a, b), k+1); got != want {
			t.Fatalf("within(%q, %q, %d) = %d; want %d", a, b, k, got, want)
		}
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	names := []string{"read_file", "write_file", "edit_file", "echo", "list_files"}
	for _, tt := range []struct{ name, want string }{
		{"reed_file", "read_file"}, {"READ_FILE", "read_file"}, {"ech", "echo"}, {"list_file", "list_files"},
		{"delete_everything", ""}, {"", ""}, {"rite_file", "write_file"},
		{"xdit_file", "edit_file"}, // one edit from edit_file, two from read_file and write_file
		{"ead_file", "read_file"},  // one from read_file only
		{"_file", ""},              // three and more from each
	} {
		got, ok := Nearest(tt.name, names)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("Nearest(%q) = %q, %v; want %q", tt.name, got, ok, tt.want)
		}
	}
	// Ties go to the first in sorted order, however names come.
	if got, _ := Nearest("ab", []string{"ad", "ac"}); got != "ac" {
		t.Errorf("Nearest(ab) of a tie = %q; want ac", got)
	}
}

// BenchmarkNearest looks through 50,000 names of the lengths a catalog
// has, sorted as a snapshot keeps them, for a name near none of them: what one misspelt call costs.
func BenchmarkNearest(b *testing.B) {
	names := make([]string, 50000)
	for i := range names {
		names[i] = fmt.Sprintf("service%d_operation_%05d", i%40, i)
	}
	slices.Sort(names) // as a snapshot keeps them
	for b.Loop() {
		if _, ok := Nearest("service7_operatoin_xyzzy", names); ok {
			b.Fatal("found a name")
		}
	}
}
