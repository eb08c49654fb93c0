package testenv

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeySlot: KeySlot computes the figures of the cluster specification
// and CLUSTER KEYSLOT's page, and what a real cluster's CLUSTER KEYSLOT
// answers, hash tags and their edge cases included.
func TestKeySlot(t *testing.T) {
	t.Run("spec", func(t *testing.T) {
		for key, want := range map[string]int{"123456789": 12739, "somekey": 11058, "foo{hash_tag}": 2515, "hash_tag": 2515} {
			if got := KeySlot(key); got != want {
				t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
			}
		}
		if KeySlot("{}a") == KeySlot("{}b") {
			t.Error("an empty tag must hash the whole key")
		}
	})
	t.Run("cluster", func(t *testing.T) { keySlotsOfTheCluster(t) })
}

func keySlotsOfTheCluster(t *testing.T) {
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

// TestWaitFailoverTakesOverAStalledElection: a frozen master whose replica
// will not start an election (cluster-replica-no-failover) is replaced
// once WaitFailover's patience has passed: its replica takes over, and
// every live node serves every slot again. (WaitFailover once returned
// while the nodes only suspected the master, "fail?", with the replica
// still a replica: this fails then.)
func TestWaitFailoverTakesOverAStalledElection(t *testing.T) {
	c := StartRedisCluster(t)
	c.FailoverPatience = 3 * time.Second
	m := c.Masters(t)[0]
	r := c.replicaOf(t, m)
	r.Do(t, "CONFIG", "SET", "cluster-replica-no-failover", "yes")
	c.WaitReplicated(t, m)
	m.Freeze()
	defer m.Thaw()
	c.WaitFailover(t, m)
	if info := r.Do(t, "INFO", "replication"); !strings.Contains(info, "role:master") {
		t.Fatalf("the replica %s did not take over:\n%s", r.Addr, info)
	}
}
