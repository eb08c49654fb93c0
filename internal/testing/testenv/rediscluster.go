package testenv

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisClusterAddrsVar names the environment variable that gives tests the
// seed addresses (host:port,host:port,…) of a real Redis Cluster they may
// use; .ci/run starts one of 3 masters and 3 replicas.
const RedisClusterAddrsVar = "TOOLWIRE_TEST_REDIS_CLUSTER_ADDRS"

// RedisClusterURL returns the redis+cluster:// URL of the shared Redis
// Cluster tests may use, or reports it Missing. Tests that stop or fail
// over nodes start their own (StartRedisCluster) and leave this one be.
func RedisClusterURL(tb testing.TB) string {
	tb.Helper()
	addrs := os.Getenv(RedisClusterAddrsVar)
	if addrs == "" {
		Missing(tb, "a Redis Cluster ("+RedisClusterAddrsVar+")")
	}
	return "redis+cluster://" + addrs
}

// RedisCluster is a Redis Cluster of a test's own: 3 masters and 3
// replicas, each a redis-server on a loopback port with its files in a
// temporary directory, for tests that kill or fail over its nodes.
type RedisCluster struct {
	Nodes []*RedisNode
	// FailoverPatience is how long WaitFailover leaves a dead or frozen
	// master's promotion to Redis before it has a replica take over; 0:
	// 45 s.
	FailoverPatience time.Duration
	tls              bool
}

// RedisNode is one redis-server of a RedisCluster.
type RedisNode struct {
	Addr    string // plain TCP, for the test's own commands
	TLSAddr string // TLS, on a cluster started by StartRedisClusterTLS
	proc    *redisProcess
	dir     string // its files: nodes.conf, redis.log
	frozen  bool   // SIGSTOPped: running, but answers nothing
}

// nodeTimeout is the test cluster's cluster-node-timeout: how long a node
// must not answer before the others fail it over. Short, so a test waits
// little; long enough that a busy machine does not fail nodes over itself.
const nodeTimeout = 2 * time.Second

// StartRedisCluster starts a cluster of 3 masters and 3 replicas (skipping
// as Missing without redis-server and redis-cli), waits until it serves
// every slot, and stops its nodes when the test ends.
func StartRedisCluster(tb testing.TB) *RedisCluster { return startRedisCluster(tb, nil) }

// StartRedisClusterTLS starts a cluster as StartRedisCluster does whose
// nodes also take TLS connections, on the TLSAddr that URL names (with
// rediss+cluster://), and speak TLS among themselves: each presents
// certFile and keyFile, and requires of its clients a certificate that
// caFile's CA signed (tls-auth-clients yes), as clientCert and clientKey
// are (what nodes present to each other, and redis-cli to create the
// cluster).
func StartRedisClusterTLS(tb testing.TB, certFile, keyFile, caFile, clientCert, clientKey string) *RedisCluster {
	return startRedisCluster(tb, []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes", "--tls-cluster", "yes", "--tls-replication", "yes",
		// What a node presents to another, on the bus and to replicate.
		"--tls-client-cert-file", clientCert, "--tls-client-key-file", clientKey},
		"--tls", "--cacert", caFile, "--cert", clientCert, "--key", clientKey)
}

func startRedisCluster(tb testing.TB, tlsArgs []string, cliTLS ...string) *RedisCluster {
	tb.Helper()
	LookPath(tb, "redis-server")
	cli := LookPath(tb, "redis-cli")
	c := &RedisCluster{tls: tlsArgs != nil}
	// The nodes' directory first: its removal, registered first, runs
	// after the nodes have stopped (cleanups run last first), not while
	// they still write to it.
	root := tb.TempDir()
	tb.Cleanup(c.stop)
	var addrs []string
	for i := range 6 {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
		var n *RedisNode
		err := retryPorts(tb, func() (err error) { n, err = startNode(dir, tlsArgs); return err })
		if err != nil {
			tb.Fatal(err)
		}
		c.Nodes = append(c.Nodes, n)
		// The cluster's bus is on the port of the nodes' addresses that
		// redis-cli joins: the TLS one when the bus speaks TLS.
		addrs = append(addrs, cmp.Or(n.TLSAddr, n.Addr))
		// A failed test shows what the node logged (registered after
		// TempDir's removal, so it runs before it).
		tb.Cleanup(func() {
			if tb.Failed() {
				logTail(tb, n.Addr, logPath(dir), 60)
			}
		})
	}
	// redis-cli waits for the nodes to join for as long as it takes.
	ctx, cancel := context.WithDeadline(context.Background(), Deadline(tb))
	defer cancel()
	create := exec.CommandContext(ctx, cli, append(append(append(cliTLS, "--cluster", "create"), addrs...), "--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// cluster_state:ok can come before every node knows the replicas, and
	// a replica serves a failover only once it has synced.
	for _, n := range c.Nodes {
		waitUntil(tb, "cluster_state:ok and 3 replicas on "+n.Addr, func() bool {
			nodes, err := command(n.Addr, "CLUSTER", "NODES")
			return err == nil && n.stateOK() && strings.Count(nodes, "slave") == 3
		})
		waitUntil(tb, n.Addr+" in sync", func() bool {
			info, err := command(n.Addr, "INFO", "replication")
			return err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"))
		})
	}
	return c
}

// startNode starts one cluster-enabled redis-server in dir, on free ports
// (its own, its cluster bus's, and with tlsArgs one for TLS), and returns
// once it answers.
func startNode(dir string, tlsArgs []string) (*RedisNode, error) {
	port, err := listenable()
	if err != nil {
		return nil, err
	}
	// The bus's port is the node's plus 10,000 unless told: past the
	// range for a node on a port above 55535, and nobody reserved it.
	bus, err := listenable()
	if err != nil {
		return nil, err
	}
	n := &RedisNode{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	if tlsArgs != nil {
		tlsPort, err := listenable()
		if err != nil {
			return nil, err
		}
		n.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
		tlsArgs = append([]string{"--tls-port", strconv.Itoa(tlsPort)}, tlsArgs...)
	}
	// A node that could not bind its bus may have written its nodes.conf
	// first, naming the ports it failed on: each attempt starts without.
	if err := os.Remove(filepath.Join(dir, "nodes.conf")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(bus), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout.Milliseconds())),
		// A replica takes over however long it was apart from its master.
		"--cluster-replica-validity-factor", "0",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logPath(dir)}
	n.proc, err = launchRedis(n.Addr, logPath(dir), append(args, tlsArgs...))
	if err != nil {
		return nil, err
	}
	return n, nil
}

// URL is the cluster's redis+cluster:// URL, naming every node
// (rediss+cluster:// and their TLS addresses for StartRedisClusterTLS's).
func (c *RedisCluster) URL() string {
	var addrs []string
	for _, n := range c.Nodes {
		if c.tls {
			addrs = append(addrs, n.TLSAddr)
		} else {
			addrs = append(addrs, n.Addr)
		}
	}
	if c.tls {
		return "rediss+cluster://" + strings.Join(addrs, ",")
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// MasterOf returns the node that serves key's slot now, as a live node
// sees the cluster.
func (c *RedisCluster) MasterOf(tb testing.TB, key string) *RedisNode {
	tb.Helper()
	return c.masterOfSlot(tb, KeySlot(key))
}

// WaitFailover waits until the cluster serves every slot again with old no
// longer among its masters (a replica promoted in its place), as every
// live node sees it.
//
// Redis promotes the replica of a master that stopped answering within a
// few seconds here (cluster-node-timeout, then an election). Once in
// about eight CI runs of the engine's tests (never in 16 runs of the test
// alone under load), the election of a frozen master's replica stalled
// for the rest of the test; why is not known. Past failoverPatience the
// replica is told to take over (CLUSTER FAILOVER TAKEOVER, what an
// operator does then), and the test logs it with the nodes' view and the
// replica's log: what the tests check is the client's side across a
// promotion, however it came.
func (c *RedisCluster) WaitFailover(tb testing.TB, old *RedisNode) {
	tb.Helper()
	patience := time.Now().Add(cmp.Or(c.FailoverPatience, failoverPatience))
	nudged := false
	replaced := func(n *RedisNode) bool {
		nodes, err := command(n.Addr, "CLUSTER", "NODES")
		if err != nil || !n.stateOK() {
			return false
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			// "fail?" (PFAIL: this node alone has not heard from it) is
			// not "fail" (the cluster agreed): in between the node still
			// says cluster_state:ok, and the master has not been replaced.
			if len(f) > 8 && strings.HasPrefix(f[1], old.Addr+"@") && strings.Contains(f[2], "master") && !failed(f[2]) {
				return false // still a master with slots, not failed
			}
		}
		return true
	}
	for _, n := range c.Nodes {
		if !n.answers() {
			continue
		}
		waitUntil(tb, n.Addr+" to see "+old.Addr+" replaced", func() bool {
			if replaced(n) {
				return true
			}
			if !nudged && !old.answers() && time.Now().After(patience) {
				nudged = true
				c.takeOver(tb, old)
			}
			return false
		})
	}
}

// failed tells whether a node's CLUSTER NODES flags say the cluster
// agreed it failed ("fail"), not that one node suspects it ("fail?").
func failed(flags string) bool { return slices.Contains(strings.Split(flags, ","), "fail") }

// failoverPatience is how long WaitFailover leaves the promotion to Redis
// unless RedisCluster.FailoverPatience says.
const failoverPatience = 45 * time.Second

// takeOver has a running replica of old, which no longer answers, take
// its place without an election, and logs why.
func (c *RedisCluster) takeOver(tb testing.TB, old *RedisNode) {
	tb.Helper()
	live := c.live(tb)
	nodes, err := command(live.Addr, "CLUSTER", "NODES")
	if err != nil {
		tb.Fatal(err)
	}
	var oldID string
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], old.Addr+"@") {
			oldID = f[0]
		}
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) <= 3 || f[3] != oldID || !strings.Contains(f[2], "slave") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, n := range c.Nodes {
			if n.Addr == addr && n.answers() {
				tb.Logf("%s was not replaced in time; its replica %s is told to take over. The cluster as %s sees it:\n%s", old.Addr, addr, live.Addr, nodes)
				if n.dir != "" {
					logTail(tb, addr, logPath(n.dir), 40)
				}
				if _, err := command(addr, "CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
					tb.Fatal(err)
				}
				return
			}
		}
	}
	tb.Fatalf("%s was not replaced in time and has no running replica to take over:\n%s", old.Addr, nodes)
}

// Failover has master's replica take its place by CLUSTER FAILOVER (the
// graceful kind an operator starts: the replica catches up first, then
// the old master turns replica and answers MOVED), and waits until the
// cluster agrees.
func (c *RedisCluster) Failover(tb testing.TB, master *RedisNode) {
	tb.Helper()
	r := c.replicaOf(tb, master)
	if _, err := command(r.Addr, "CLUSTER", "FAILOVER"); err != nil {
		tb.Fatal(err)
	}
	c.WaitFailover(tb, master)
}

// KeySlot is key's hash slot, as Redis Cluster computes it: CRC16
// (XMODEM) of the key's hash tag (what its first braces hold, when they
// hold something) or of the whole key, modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// MigrateSlot moves slot from its master to the master to, as
// redis-cli --cluster reshard moves each slot it moves: to IMPORTING,
// its master MIGRATING, the slot's keys moved (MIGRATE) one at a time with
// between called after each, so that what a test runs meanwhile meets the
// slot half moved (ASK for a key already gone, TRYAGAIN for a command
// whose keys are split); then the slot given to to on every master, and
// waited for until every node agrees.
func (c *RedisCluster) MigrateSlot(tb testing.TB, slot int, to *RedisNode, between func()) {
	tb.Helper()
	s := strconv.Itoa(slot)
	from := c.masterOfSlot(tb, slot)
	if from == to {
		tb.Fatalf("slot %d is already %s's", slot, to.Addr)
	}
	fromID, toID := from.id(tb), to.id(tb)
	must := func(n *RedisNode, args ...string) string {
		tb.Helper()
		out, err := command(n.Addr, args...)
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	must(to, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID)
	must(from, "CLUSTER", "SETSLOT", s, "MIGRATING", toID)
	host, port, _ := net.SplitHostPort(to.Addr)
	for {
		key := must(from, "CLUSTER", "GETKEYSINSLOT", s, "1")
		if key == "" {
			break
		}
		// A key that expired or moved meanwhile answers NOKEY: not an error.
		if out, err := command(from.Addr, "MIGRATE", host, port, "", "0", "5000", "KEYS", key); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			tb.Fatalf("MIGRATE %q: %v", key, err)
		} else if out != "OK" && out != "NOKEY" {
			tb.Fatalf("MIGRATE %q: %q", key, out)
		}
		between()
	}
	// The new owner first, then the old (which then answers MOVED), then
	// the others, as redis-cli does.
	must(to, "CLUSTER", "SETSLOT", s, "NODE", toID)
	must(from, "CLUSTER", "SETSLOT", s, "NODE", toID)
	for _, n := range c.Masters(tb) {
		if n != to && n != from && n.answers() {
			must(n, "CLUSTER", "SETSLOT", s, "NODE", toID)
		}
	}
	for _, n := range c.Nodes {
		if n.answers() {
			waitUntil(tb, n.Addr+" to see slot "+s+" on "+to.Addr, func() bool { return n.masterOf(tb, slot) == to.Addr })
		}
	}
}

// Masters returns the nodes that are masters now, as a live node sees the
// cluster.
func (c *RedisCluster) Masters(tb testing.TB) []*RedisNode {
	tb.Helper()
	nodes, err := command(c.live(tb).Addr, "CLUSTER", "NODES")
	if err != nil {
		tb.Fatal(err)
	}
	var out []*RedisNode
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "master") || failed(f[2]) {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, n := range c.Nodes {
			if n.Addr == addr {
				out = append(out, n)
			}
		}
	}
	return out
}

// masterOfSlot is the node serving slot now.
func (c *RedisCluster) masterOfSlot(tb testing.TB, slot int) *RedisNode {
	tb.Helper()
	addr := c.live(tb).masterOf(tb, slot)
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	tb.Fatalf("slot %d is served by %q, not a node of this cluster", slot, addr)
	return nil
}

// id is the node's cluster ID (CLUSTER MYID).
func (n *RedisNode) id(tb testing.TB) string {
	tb.Helper()
	id, err := command(n.Addr, "CLUSTER", "MYID")
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// WaitReplicated waits until every replica of master has acknowledged all
// that master has written (INFO replication), so that killing master
// then loses nothing: Redis replicates asynchronously, and a crash loses
// what its replica had not yet received.
func (c *RedisCluster) WaitReplicated(tb testing.TB, master *RedisNode) {
	tb.Helper()
	waitUntil(tb, "the replicas of "+master.Addr+" to catch up", func() bool {
		info, err := command(master.Addr, "INFO", "replication")
		if err != nil {
			return false
		}
		var offset string
		replicas := 0
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				offset = v
			}
		}
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "slave") && strings.Contains(line, "offset=") {
				replicas++
				if !strings.Contains(line, ",offset="+offset+",") {
					return false
				}
			}
		}
		return replicas > 0 && offset != ""
	})
}

// replicaOf returns a running replica of master.
func (c *RedisCluster) replicaOf(tb testing.TB, master *RedisNode) *RedisNode {
	tb.Helper()
	nodes, err := command(master.Addr, "CLUSTER", "NODES")
	if err != nil {
		tb.Fatal(err)
	}
	var id string
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(f[2], "myself") {
			id = f[0]
		}
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == id && strings.Contains(f[2], "slave") {
			addr, _, _ := strings.Cut(f[1], "@")
			for _, n := range c.Nodes {
				if n.Addr == addr && n.answers() {
					return n
				}
			}
		}
	}
	tb.Fatalf("%s has no running replica:\n%s", master.Addr, nodes)
	return nil
}

// Do sends the node one command and returns its answer as text (see
// command); an error reply fails the test.
func (n *RedisNode) Do(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := command(n.Addr, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// Freeze stops the node (SIGSTOP) without closing its connections, as a
// stalled machine would: what is sent to it waits unanswered, until Thaw.
func (n *RedisNode) Freeze() {
	if n.proc != nil && !n.frozen {
		n.proc.signal(syscall.SIGSTOP)
		n.frozen = true
	}
}

// Thaw lets a frozen node go on (SIGCONT): it answers what waited, then
// learns from the others what happened meanwhile (a master failed over
// in its absence turns replica).
func (n *RedisNode) Thaw() {
	if n.proc != nil && n.frozen {
		n.proc.signal(syscall.SIGCONT)
		n.frozen = false
	}
}

// answers tells whether the node is running and not frozen.
func (n *RedisNode) answers() bool { return n.proc != nil && !n.frozen }

// Kill ends the node at once (SIGKILL), as a crash would.
func (n *RedisNode) Kill() {
	if n.proc == nil {
		return
	}
	n.proc.kill()
	n.proc, n.frozen = nil, false
}

func (c *RedisCluster) stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// live is a node still running and not frozen.
func (c *RedisCluster) live(tb testing.TB) *RedisNode {
	for _, n := range c.Nodes {
		if n.answers() {
			return n
		}
	}
	tb.Fatal("no node of the cluster is running")
	return nil
}

// stateOK tells whether the node says cluster_state:ok.
func (n *RedisNode) stateOK() bool {
	info, err := command(n.Addr, "CLUSTER", "INFO")
	return err == nil && strings.Contains(info, "cluster_state:ok")
}

// masterOf reads CLUSTER NODES on n for the address of slot's master.
func (n *RedisNode) masterOf(tb testing.TB, slot int) string {
	tb.Helper()
	nodes, err := command(n.Addr, "CLUSTER", "NODES")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") || failed(f[2]) {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				addr, _, _ := strings.Cut(f[1], "@")
				return addr
			}
		}
	}
	tb.Fatalf("no master serves slot %d:\n%s", slot, nodes)
	return ""
}

// command sends one command to addr and returns its answer: a status,
// an integer or a bulk string, as text; an error reply is an error.
func command(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case line == "":
		return "", errors.New("empty reply")
	case line[0] == '+', line[0] == ':':
		return line[1:], nil
	case line[0] == '-':
		return "", fmt.Errorf("%s %v: %s", addr, args, line[1:])
	case line[0] == '$':
		return bulk(r, line, addr, args)
	case line[0] == '*':
		// An array of bulk strings (CLUSTER GETKEYSINSLOT), a line each.
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("%s %v: reply %q", addr, args, line)
		}
		var items []string
		for range n {
			head, err := r.ReadString('\n')
			if err != nil {
				return "", err
			}
			item, err := bulk(r, strings.TrimSuffix(head, "\r\n"), addr, args)
			if err != nil {
				return "", err
			}
			items = append(items, item)
		}
		return strings.Join(items, "\n"), nil
	}
	return "", fmt.Errorf("%s %v: reply %q", addr, args, line)
}

// bulk reads the bulk string whose header is line.
func bulk(r *bufio.Reader, line, addr string, args []string) (string, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(line, "$"))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return "", fmt.Errorf("%s %v: reply %q", addr, args, line)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// waitUntil polls cond every 20 ms, failing the test just before its
// deadline (Deadline).
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := Deadline(tb); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting for %s", what)
		}
	}
}

// logTail logs the last lines of the log of the redis-server at addr.
func logTail(tb testing.TB, addr, path string, lines int) {
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Logf("redis-server %s: its log: %v", addr, err)
		return
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	tb.Logf("redis-server %s, the last %d lines of its log:\n%s", addr, min(lines, len(all)), strings.Join(all[max(0, len(all)-lines):], "\n"))
}
