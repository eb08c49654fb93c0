package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	args []string // more of redis-server's arguments
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server (skipping as Missing when there is
// none) and stops it when the test ends, thawing it first if the test
// froze it. args are more of redis-server's arguments, after its own
// (a later setting wins: "--appendonly", "no").
func StartRedis(tb testing.TB, args ...string) *RedisServer { return startRedis(tb, args...) }

// StartRedisTLS starts a redis-server as StartRedis does that also takes
// TLS connections, at the address it returns: its certificate and key in
// certFile and keyFile, and it requires a client certificate that caFile's
// CA signed (Redis's default, tls-auth-clients yes). Addr stays plain, for
// the test's own commands.
func StartRedisTLS(tb testing.TB, certFile, keyFile, caFile string) (s *RedisServer, tlsAddr string) {
	tb.Helper()
	port := freePort(tb)
	s = startRedis(tb, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func startRedis(tb testing.TB, args ...string) *RedisServer {
	tb.Helper()
	LookPath(tb, "redis-server")
	port := freePort(tb)
	s := &RedisServer{tb: tb, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: tb.TempDir(), port: port, args: args}
	s.Start()
	tb.Cleanup(s.kill)
	return s
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	port, err := listenable()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// Start starts the server (again, after Stop), and returns once it
// accepts connections.
func (s *RedisServer) Start() {
	s.tb.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"))
	cmd.Args = append(cmd.Args, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	s.cmd = cmd
	for i := 0; ; i++ {
		if s.ping() {
			return
		}
		if i == 500 {
			s.tb.Fatalf("redis-server on %s did not answer PING", s.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// ping tells whether the server answers PING.
func (s *RedisServer) ping() bool {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// Stop stops the server (SIGTERM: it shuts down as an operator's restart
// would) and waits for it to exit: connections are refused until Start.
func (s *RedisServer) Stop() {
	s.tb.Helper()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.tb.Fatal(err)
	}
	s.cmd.Wait()
	s.cmd = nil
}

// Freeze stops the server's process (SIGSTOP): connections stay open and
// new ones are accepted by the kernel, but nothing is answered until Thaw.
func (s *RedisServer) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *RedisServer) Thaw() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig os.Signal) {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatal("redis-server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatal(err)
	}
}

// kill ends the server for good, thawed first so that it can die.
func (s *RedisServer) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return fmt.Sprintf("redis://%s/0", s.Addr) }
