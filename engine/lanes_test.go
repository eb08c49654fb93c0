package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInvariant2_LanePlan(t *testing.T) {
	t.Parallel()
	const S, U = true, false
	p := func(calls ...int) Lane { return Lane{Calls: calls, Parallel: true} }
	s := func(call int) Lane { return Lane{Calls: []int{call}} }
	tests := []struct {
		name       string
		safe       []bool
		sequential bool
		want       []Lane
	}{
		{"empty", nil, false, nil},
		{"one safe", []bool{S}, false, []Lane{p(0)}},
		{"one unsafe", []bool{U}, false, []Lane{s(0)}},
		{"issue example", []bool{S, S, U, S}, false, []Lane{p(0, 1), s(2), p(3)}},
		{"unsafe calls stay alone", []bool{U, U, U}, false, []Lane{s(0), s(1), s(2)}},
		{"all safe share one lane", []bool{S, S, S, S}, false, []Lane{p(0, 1, 2, 3)}},
		{"unsafe splits safe runs", []bool{S, U, S, S, U, U, S}, false, []Lane{p(0), s(1), p(2, 3), s(4), s(5), p(6)}},
		{"sequential", []bool{S, S, U}, true, []Lane{s(0), s(1), s(2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, Plan(tt.safe, tt.sequential)); diff != "" {
				t.Errorf("Plan(%v, %v) mismatch (-want +got):\n%s", tt.safe, tt.sequential, diff)
			}
		})
	}
}
