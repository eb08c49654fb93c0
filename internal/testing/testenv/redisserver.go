package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a redis-server of a test's own, on a loopback port, for
// fault tests that stop, restart, freeze and thaw it. It persists to an
// append-only file (fsync always) in a temporary directory, as a store
// that survives restarts would, so a restart keeps what was written.
type RedisServer struct {
	tb   testing.TB
	Addr string
	dir  string
	port int
	// tlsPort takes TLS connections presenting tlsArgs's files, when
	// tlsArgs is not nil.
	tlsPort int
	tlsArgs []string
	args    []string // more of redis-server's arguments
	proc    *redisProcess
}

// StartRedis starts a redis-server (skipping as Missing when there is
// none) and stops it when the test ends, thawing it first if the test
// froze it. args are more of redis-server's arguments, after its own
// (a later setting wins: "--appendonly", "no").
func StartRedis(tb testing.TB, args ...string) *RedisServer { return startRedis(tb, nil, args...) }

// StartRedisTLS starts a redis-server as StartRedis does that also takes
// TLS connections, at the address it returns: its certificate and key in
// certFile and keyFile, and it requires a client certificate that caFile's
// CA signed (Redis's default, tls-auth-clients yes). Addr stays plain, for
// the test's own commands.
func StartRedisTLS(tb testing.TB, certFile, keyFile, caFile string) (s *RedisServer, tlsAddr string) {
	tb.Helper()
	s = startRedis(tb, []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes"})
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

func startRedis(tb testing.TB, tlsArgs []string, args ...string) *RedisServer {
	tb.Helper()
	LookPath(tb, "redis-server")
	s := &RedisServer{tb: tb, dir: tb.TempDir(), tlsArgs: tlsArgs, args: args}
	tb.Cleanup(s.kill)
	err := retryPorts(tb, func() error {
		s.port, s.tlsPort = freePort(tb), 0
		if tlsArgs != nil {
			s.tlsPort = freePort(tb)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		return s.start()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// freePort returns a loopback port nothing listened on a moment ago that
// this process has not handed out before.
func freePort(tb testing.TB) int {
	tb.Helper()
	port, err := listenable()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// Start starts the server again after Stop, on its port, and returns once
// it accepts connections.
func (s *RedisServer) Start() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatal(err)
	}
}

func (s *RedisServer) start() error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir,
		"--logfile", logPath(s.dir)}
	if s.tlsArgs != nil {
		args = append(append(args, "--tls-port", strconv.Itoa(s.tlsPort)), s.tlsArgs...)
	}
	p, err := launchRedis(s.Addr, logPath(s.dir), append(args, s.args...))
	s.proc = p
	return err
}

// Flush empties the server (FLUSHALL), as a restart without persistence
// would leave it.
func (s *RedisServer) Flush() {
	s.tb.Helper()
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		s.tb.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("FLUSHALL\r\n")); err != nil {
		s.tb.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+OK\r\n" {
		s.tb.Fatalf("FLUSHALL: %q %v", line, err)
	}
}

// Do sends the server one command and returns its answer as text (see
// command); an error reply fails the test.
func (s *RedisServer) Do(args ...string) string {
	s.tb.Helper()
	out, err := command(s.Addr, args...)
	if err != nil {
		s.tb.Fatal(err)
	}
	return out
}

// Stop stops the server (SIGTERM: it shuts down as an operator's restart
// would) and waits for it to exit: connections are refused until Start.
func (s *RedisServer) Stop() {
	s.tb.Helper()
	if s.proc == nil {
		return
	}
	s.proc.signal(syscall.SIGCONT)
	if err := s.proc.signal(syscall.SIGTERM); err != nil {
		s.tb.Fatal(err)
	}
	<-s.proc.exited
	s.proc = nil
}

// Freeze stops the server's process (SIGSTOP): connections stay open and
// new ones are accepted by the kernel, but nothing is answered until Thaw.
func (s *RedisServer) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *RedisServer) Thaw() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig os.Signal) {
	s.tb.Helper()
	if s.proc == nil {
		s.tb.Fatal("redis-server is not running")
	}
	if err := s.proc.signal(sig); err != nil {
		s.tb.Fatal(err)
	}
}

// kill ends the server for good, thawed first so that it can die.
func (s *RedisServer) kill() {
	if s.proc == nil {
		return
	}
	s.proc.kill()
	s.proc = nil
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return fmt.Sprintf("redis://%s/0", s.Addr) }
