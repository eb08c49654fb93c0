package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/store"
)

// lossyNode is a fake one-node Redis Cluster (unit tests only): it serves
// the slots of all 16384 and answers what go-redis asks to connect, and
// for every other command counts it and closes the connection without an
// answer, as a master that dies with the command run would.
type lossyNode struct {
	l    net.Listener
	mu   sync.Mutex
	got  map[string]int // commands received, by name
	dies bool           // after the first lost answer, none is answered
	wg   sync.WaitGroup
	done chan struct{}
}

func startLossyNode(t *testing.T) *lossyNode {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &lossyNode{l: l, got: map[string]int{}, done: make(chan struct{})}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(func() { close(n.done); l.Close(); n.wg.Wait() })
	return n
}

func (n *lossyNode) accept() {
	defer n.wg.Done()
	for {
		c, err := n.l.Accept()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer c.Close()
			go func() { <-n.done; c.Close() }()
			n.serve(c)
		}()
	}
}

func (n *lossyNode) serve(c net.Conn) {
	r := bufio.NewReader(c)
	host, port, _ := net.SplitHostPort(n.l.Addr().String())
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToLower(args[0])
		if len(args) > 1 && (name == "cluster" || name == "client") {
			name += " " + strings.ToLower(args[1])
		}
		n.mu.Lock()
		dead := n.dies && len(n.got) > 0
		n.mu.Unlock()
		if dead {
			n.lose(name)
			return
		}
		var reply string
		switch name {
		case "hello":
			reply = "-ERR unknown command 'hello'\r\n"
		case "client setinfo", "client setname":
			reply = "+OK\r\n"
		case "command":
			reply = "*0\r\n"
		case "ping":
			reply = "+PONG\r\n"
		case "cluster info":
			info := "cluster_state:ok\r\n"
			reply = fmt.Sprintf("$%d\r\n%s\r\n", len(info), info)
		case "cluster slots":
			id := strings.Repeat("a", 40)
			reply = fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$%d\r\n%s\r\n:%s\r\n$40\r\n%s\r\n", len(host), host, port, id)
		default:
			n.lose(name)
			return
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// lose counts a command whose answer the node loses (it may have run),
// and the caller closes the connection.
func (n *lossyNode) lose(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got[name]++
}

func (n *lossyNode) count(name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.got[name]
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	count, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	args := make([]string, count)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		buf := make([]byte, size+2)
		if _, err := readFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestClusterDoesNotResendALostAnswer: a command that reached a cluster
// node and got no answer may have run, so the store does not send it
// again — not as one command, not in a pipeline — though go-redis's
// cluster client would (to the same node, then to another). The caller
// gets an error that says so.
func TestClusterDoesNotResendALostAnswer(t *testing.T) {
	node := startLossyNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, "redis+cluster://"+node.l.Addr().String(), Options{BreakerFailures: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	before := node.count("evalsha") // Open's write probe
	_, err = s.TakeRate(ctx, "alice", 1, 10, 1)
	if err == nil || !strings.Contains(err.Error(), "whether the command ran is unknown") {
		t.Errorf("TakeRate = %v; want an error saying the command may have run", err)
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("TakeRate = %v; the breaker was not to open", err)
	}
	if got := node.count("evalsha") - before; got != 1 {
		t.Errorf("the node got the script %d times; want once", got)
	}

	cmds, err := s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, "{a}x", "1", 0)
		p.Set(ctx, "{a}y", "2", 0)
		return nil
	})
	if err == nil || len(cmds) != 2 {
		t.Fatalf("the pipeline = %v (%d commands); want an error", err, len(cmds))
	}
	if got := node.count("set"); got != 1 {
		// The node read the first command and closed the connection.
		t.Errorf("the node got %d SETs of the pipeline; want the one it read before closing, sent once", got)
	}
}

// TestClusterBreaker: a cluster node that keeps failing to answer is not
// sent to for the breaker's cool-down, as a single Redis is not: after 3
// commands in a row got no answer, the next fails at once with
// store.ErrUnavailable without reaching the node.
func TestClusterBreaker(t *testing.T) {
	node := startLossyNode(t)
	node.dies = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, "redis+cluster://"+node.l.Addr().String(), Options{BreakerCooldown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The node's death costs the first command its answer, and the
	// layout's reload (CLUSTER SLOTS) and the next commands theirs.
	open := false
	for i := 0; i < 4 && !open; i++ {
		_, err := s.TakeRate(ctx, "alice", 1, 10, 1)
		if err == nil {
			t.Fatalf("command %d succeeded", i)
		}
		open = errors.Is(err, store.ErrUnavailable)
	}
	if !open {
		t.Fatal("after 4 commands unanswered in a row the store still sends; want store.ErrUnavailable")
	}
	sent := node.count("evalsha")
	if _, err := s.TakeRate(ctx, "alice", 1, 10, 1); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("with the breaker open: %v; want store.ErrUnavailable", err)
	}
	if got := node.count("evalsha"); got != sent {
		t.Errorf("the node got a script while the breaker was open")
	}
}
