package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestRun measures a few rounds on the shared Redis and Redis Cluster and
// checks that every row is there; it checks no speed.
func TestRun(t *testing.T) {
	single := "redis://" + testenv.RedisAddr(t) + "/0"
	cluster := testenv.RedisClusterURL(t)
	var out bytes.Buffer
	if err := run(context.Background(), single, cluster, 10, &out); err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for line := range strings.Lines(out.String()) {
		if f := strings.Fields(line); len(f) == 6 {
			rows[f[0]+" "+f[1]] = true
		}
	}
	for _, row := range []string{"detached redis", "detached redis-cluster", "keyed redis", "keyed redis-cluster"} {
		if !rows[row] {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
}
