package deploy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
)

// TestReplicatedRedisDoesNotEvict runs the replicated overlay's Redis as
// its Deployment does (Debian's redis-server with the container's args):
// it has a memory limit below the container's, so that it refuses writes
// when full instead of being killed, and evicts nothing (noeviction), so
// that the store finds nothing to warn of.
func TestReplicatedRedisDoesNotEvict(t *testing.T) {
	t.Parallel()
	d := readYAMLFile(t, "kubernetes/overlays/replicated/redis/deployment.yaml")
	var args []string
	for _, a := range get(d, "spec", "template", "spec", "containers", 0, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	srv := testenv.StartRedis(t, args...)
	info := srv.Do("INFO", "memory")
	if !strings.Contains(info, "maxmemory_policy:noeviction") || strings.Contains(info, "\nmaxmemory:0\r") {
		t.Errorf("the overlay's Redis (args %q): want a memory limit and noeviction; INFO memory:\n%s", args, info)
	}
	s, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w := s.Warnings(); len(w) > 0 {
		t.Errorf("the store warns of the overlay's Redis: %q", w)
	}
}
