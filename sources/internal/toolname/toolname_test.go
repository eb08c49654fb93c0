package toolname

import (
	"regexp"
	"strings"
	"testing"
)

func TestMake(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	taken := map[string]bool{}
	for _, tc := range []struct{ base, key, want string }{
		{"getPet", "GET /pet", "p_getPet"},
		{"get.item", "GET /a", "p_get_item"},
		{"get_item", "GET /b", "p_get_item_"}, // taken: told apart by a hash
		{"Health_Check", "grpc.health.v1.Health/Check", "p_Health_Check"},
		{"//weird {x}//", "GET //weird", "p_weird_x"},
		{strings.Repeat("long", 30), "GET /long", "p_longlong"},
	} {
		got := Make("p", tc.base, tc.key, taken)
		if !strings.HasPrefix(got, tc.want) || !valid.MatchString(got) || taken[got] {
			t.Errorf("Make(%q) = %q; want a new valid name starting %q", tc.base, got, tc.want)
		}
		taken[got] = true
	}
	if a, b := Make("p", strings.Repeat("x", 80), "GET /1", nil), Make("p", strings.Repeat("x", 80), "GET /2", nil); a == b || len(a) != MaxLen {
		t.Errorf("two long names cut alike: %q, %q", a, b)
	}
	if a, b := Make("p", "get_item", "GET /b", map[string]bool{"p_get_item": true}), Make("p", "get_item", "GET /b", map[string]bool{"p_get_item": true}); a != b {
		t.Errorf("the same name differs between loads: %q, %q", a, b)
	}
}
