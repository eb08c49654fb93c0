package deploy

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/store/redis"
)

// TestReplicatedRedisDoesNotEvict runs the replicated overlay's Redis as
// its Deployment does (Debian's redis-server with the container's args):
// it has a memory limit below the container's, so that it refuses writes
// when full instead of being killed, and evicts nothing (noeviction), so
// that the store finds nothing to warn of.
func TestReplicatedRedisDoesNotEvict(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	d := readYAMLFile(t, "kubernetes/overlays/replicated/redis/deployment.yaml")
	var args []string
	for _, a := range get(d, "spec", "template", "spec", "containers", 0, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", t.TempDir()}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	var info string
	for {
		if info, err = c.Info(t.Context(), "memory").Result(); err == nil {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("the overlay's redis-server (args %q) never answered: %v", args, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.Contains(info, "maxmemory_policy:noeviction") || strings.Contains(info, "\nmaxmemory:0\r") {
		t.Errorf("the overlay's Redis (args %q): want a memory limit and noeviction; INFO memory:\n%s", args, info)
	}
	s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w := s.Warnings(); len(w) > 0 {
		t.Errorf("the store warns of the overlay's Redis: %q", w)
	}
}
