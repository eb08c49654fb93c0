package testenv

import (
	"strconv"
	"strings"
	"testing"
)

// TestKeySlot: KeySlot computes what the cluster's CLUSTER KEYSLOT
// answers, hash tags and their edge cases included.
func TestKeySlot(t *testing.T) {
	addr, _, _ := strings.Cut(strings.TrimPrefix(RedisClusterURL(t), "redis+cluster://"), ",")
	for _, k := range []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", `p:log:{"alice"/abc}`, "{}x", "x}{y", "%"} {
		out, err := command(addr, "CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatal(err)
		}
		if got := KeySlot(k); strconv.Itoa(got) != out {
			t.Errorf("KeySlot(%q) = %d; the cluster says %s", k, got, out)
		}
	}
}
