package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// TestSandboxSurvivesNoServerKill runs the real binary with the sandbox
// required, starts a command that leaves background, setsid and
// double-forked processes running, and kills the server with SIGKILL: every
// one of them must be gone soon after, and the command must not go on to
// write its file.
func TestSandboxSurvivesNoServerKill(t *testing.T) {
	if _, _, err := sandbox.New(sandbox.Config{Mode: sandbox.Required, Accept: []string{sandbox.GapOwnerFiles}}); err != nil {
		testenv.Missing(t, "a kernel that enforces the whole sandbox ("+err.Error()+")")
	}
	bin := buildToolwire(t)
	t.Parallel()
	ws := t.TempDir()
	// One workspace: its commands have the server's uid, a gap accepted by name.
	cfg := writeFile(t, "toolwire.yaml", "sandbox: {accept: [owner_files]}\n")
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--workspace", ws, "--run-command", "--run-command-shell", "--sandbox", "required")
	serve := startChild(t, cmd)
	if !strings.Contains(serve.log.String(), "every restriction enforced") {
		t.Errorf("the log does not say what the sandbox enforces:\n%s", serve.log)
	}
	c, err := client.New(serve.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	// The sleeps are 7401.PID … 7404.PID seconds, PID this test binary's,
	// so that the processes it looks for are its own, not another run's of
	// this test on the machine (whose "sleep 7401" would have kept it
	// waiting, and failed it).
	tag := fmt.Sprint(os.Getpid())
	var markers []string
	for i := 1; i <= 4; i++ {
		markers = append(markers, fmt.Sprintf("sleep\x00740%d.%s\x00", i, tag))
	}
	started := make(chan error, 1)
	go func() {
		_, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
			client.Call("c", "run_command", map[string]any{"command": fmt.Sprintf(
				"sleep 7401.%[1]s & setsid sleep 7402.%[1]s & (sleep 7403.%[1]s &); sleep 7404.%[1]s; echo late > late.txt", tag)}),
		}}))
		started <- err
	}()
	for _, m := range markers {
		waitFor(t, m, func() bool { return len(testenv.Processes(m)) > 0 })
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	serve.stopped = true
	<-started // the RPC fails with the server gone
	deadline := time.Now().Add(testTimeout)
	for {
		var left []string
		for _, m := range markers {
			left = append(left, testenv.Processes(m)...)
		}
		left = append(left, testenv.Processes(bin+"\x00"+sandbox.Command)...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes outlived the killed server: %q", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(ws, "late.txt")); err == nil {
		t.Error("the command went on to write late.txt after the server died")
	}
}

// TestSandboxConfig checks the sandbox's flags and config keys reach its
// configuration, and that bad values are refused with the key's name.
func TestSandboxConfig(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", `sandbox:
  mode: required
  network: allow
  read_only_paths: [/usr, /etc]
  cpu_seconds: 5
  memory_bytes: 1073741824
  max_open_files: 100
  max_file_bytes: 2048
  max_processes: 50
`)
	cfg, _, err := parseServeArgs([]string{"--config", path, "--sandbox", "auto"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Config{Mode: sandbox.Auto, Network: "allow", ReadOnlyPaths: []string{"/usr", "/etc"}, CPUSeconds: 5, MemoryBytes: 1 << 30, MaxOpenFiles: 100, MaxFileBytes: 2048, MaxProcesses: 50}
	if got := cfg.Sandbox; got.Mode != want.Mode || got.Network != want.Network || strings.Join(got.ReadOnlyPaths, ",") != "/usr,/etc" ||
		got.CPUSeconds != 5 || got.MemoryBytes != 1<<30 || got.MaxOpenFiles != 100 || got.MaxFileBytes != 2048 || got.MaxProcesses != 50 {
		t.Errorf("sandbox config %+v; want %+v", got, want)
	}
	if _, _, err := parseServeArgs([]string{"--sandbox", "maybe"}, &strings.Builder{}); err == nil {
		t.Error("--sandbox maybe was accepted")
	}
	if _, _, err := parseServeArgs([]string{"--sandbox-network", "some"}, &strings.Builder{}); err == nil {
		t.Error("--sandbox-network some was accepted")
	}
	bad := writeFile(t, "bad.yaml", "sandbox: {read_only_paths: [usr]}\n")
	err = run(t.Context(), []string{"serve", "--config", bad, "--run-command", "--workspace", t.TempDir(), "--listen", "127.0.0.1:0"}, &strings.Builder{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "sandbox.read_only_paths") {
		t.Errorf("serve with a relative read-only path: %v; want an error naming sandbox.read_only_paths", err)
	}
}

// TestSandboxOffIsLoggedUnsafe checks that --sandbox off says so.
func TestSandboxOffIsLoggedUnsafe(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--no-workspace=false", "--workspace", t.TempDir(), "--run-command", "--sandbox", "off")
	if !strings.Contains(s.stderr.String(), "UNSAFE") {
		t.Errorf("the log does not call sandbox off unsafe:\n%s", s.stderr)
	}
}

// TestSandboxReadOnlyPathHoldingSessions checks that a read-only path
// holding the sessions' folders, which would let every session's commands
// read the others', stops a required sandbox with a message naming it and
// is warned about in auto.
func TestSandboxReadOnlyPathHoldingSessions(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	ws := filepath.Join(parent, "sessions")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "toolwire.yaml", "sandbox: {read_only_paths: [/usr, "+parent+"]}\n")
	args := []string{"serve", "--config", cfg, "--run-command", "--workspace", ws, "--workspace-per-session", "--listen", "127.0.0.1:0"}
	// Without the check serve would start and run until ctx ends.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := run(ctx, append(args, "--sandbox", "required"), &strings.Builder{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "sandbox.read_only_paths: "+parent+" holds the sessions' folders") {
		t.Errorf("serve --sandbox required with %s read-only: %v; want an error naming it", parent, err)
	}
	s := startServe(t, "--no-workspace=false", "--config", cfg, "--run-command", "--workspace", ws, "--workspace-per-session", "--sandbox", "auto")
	if !strings.Contains(s.stderr.String(), "holds the sessions' folders") {
		t.Errorf("serve --sandbox auto with %s read-only logged no warning:\n%s", parent, s.stderr)
	}
}

// TestSandboxWarnsOfMissingReadOnlyPath checks that a configured read-only
// path that does not exist (a typo: the sandbox skips it) is warned about by
// name, and that the defaults' missing entries are not.
func TestSandboxWarnsOfMissingReadOnlyPath(t *testing.T) {
	t.Parallel()
	typo := filepath.Join(t.TempDir(), "usr-locl")
	cfg := writeFile(t, "toolwire.yaml", "sandbox: {read_only_paths: [/usr, "+typo+"]}\n")
	s := startServe(t, "--no-workspace=false", "--config", cfg, "--run-command", "--workspace", t.TempDir())
	if want := "sandbox.read_only_paths: " + typo + " does not exist"; !strings.Contains(s.stderr.String(), want) {
		t.Errorf("the log does not warn %q:\n%s", want, s.stderr)
	}
	d := startServe(t, "--no-workspace=false", "--run-command", "--workspace", t.TempDir())
	if strings.Contains(d.stderr.String(), "does not exist") {
		t.Errorf("the defaults' missing paths were warned about:\n%s", d.stderr)
	}
}

// TestSandboxGaugeOnTheProviderPassed checks that the toolwire.sandbox
// gauge is published on the meter provider serve passes, one series per
// restriction, and never on OpenTelemetry's global one; without a provider
// it is published nowhere. (Not parallel: it sets the global provider, and
// restores it.)
func TestSandboxGaugeOnTheProviderPassed(t *testing.T) {
	global := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(global)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	log := slog.New(slog.DiscardHandler)
	cfg := workspacetools.Config{Workspace: t.TempDir(), RunCommand: workspacetools.RunCommandConfig{Enabled: true}, Sandbox: sandbox.Config{Mode: sandbox.Off}}
	open := func(mp metric.MeterProvider) {
		ws, err := workspacetools.Open(cfg, workspacetools.Env{MeterProvider: mp, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
	}
	open(nil)
	passed := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(passed))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	open(mp)

	got := sandboxGauge(t, passed)
	want := map[string]int64{
		"files": 0, "network_tcp": 0, "network_sockets": 0, "network_allowed": 1,
		"syscalls": 0, "scoped": 0, "no_new_privs": 0, "limits": 0,
		"mediated": 0, "uid_per_session": 0, "aggregate_cgroup": 0, "aggregate_watchdog": 0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("toolwire.sandbox on the provider passed, mode off (-want +got):\n%s", diff)
	}
	if g := sandboxGauge(t, global); g != nil {
		t.Errorf("toolwire.sandbox reached the global meter provider: %v", g)
	}
}

// sandboxGauge collects r and returns the toolwire.sandbox gauge's series
// of mode off by restriction, or nil when the gauge is not there.
func sandboxGauge(t *testing.T, r sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var got map[string]int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "toolwire.sandbox" {
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				t.Fatalf("toolwire.sandbox is a %T; want an int64 gauge", m.Data)
			}
			got = map[string]int64{}
			for _, p := range g.DataPoints {
				if mode, _ := p.Attributes.Value("mode"); mode.AsString() != "off" {
					t.Errorf("series %v: want mode off", p.Attributes)
				}
				name, _ := p.Attributes.Value("restriction")
				got[name.AsString()] = p.Value
			}
		}
	}
	return got
}

// TestServeBinaryContained runs the real binary as the attack on it did
// (serve --run-command --workspace-per-session --sandbox required; as root
// with a uid per session, else with the server's uid accepted): a command
// of one session cannot lower the server's limits, read the server's
// command line beyond "toolwire serve", or reach the other session; and
// with uids apart, each session's command runs under its own.
func TestServeBinaryContained(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	sandboxCfg := "sandbox: {accept: [owner_files]}\n"
	if os.Getuid() == 0 {
		sandboxCfg = "sandbox: {uid_range: 310000-310099}\n"
	}
	cfg := writeFile(t, "toolwire.yaml", sandboxCfg)
	root := t.TempDir()
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := "--session-ttl=123h" // a flag value that must not show in /proc/PID/cmdline
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--workspace", root, "--workspace-per-session",
		"--run-command", "--run-command-shell", "--sandbox", "required", secret)
	serve := startChild(t, cmd)
	pid := strconv.Itoa(cmd.Process.Pid)
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimRight(string(cmdline), "\x00"); got != bin+"\x00serve" {
		t.Errorf("the server's command line reads %q; want only %q", got, bin+" serve")
	}
	limits, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(serve.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(session, command string) *toolwirev1.CallResult {
		t.Helper()
		b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{SessionId: session, Calls: []*toolwirev1.ToolCall{
			client.Call("c", "run_command", map[string]any{"command": command}),
		}}))
		if err != nil {
			t.Fatal(err)
		}
		return b.Results[0]
	}
	for _, command := range []string{
		"prlimit --pid " + pid + " --nofile=3:3",
		"prlimit --pid " + pid + " --cpu=1:1",
		"renice -n 19 -p " + pid,
		"cat /proc/" + pid + "/environ",
	} {
		if r := run("a", command); !r.GetIsError() || !strings.Contains(client.Text(r), "denied") && !strings.Contains(client.Text(r), "not permitted") {
			t.Errorf("%s: %s; want a denial", command, client.Text(r))
		}
	}
	if r := run("a", "tr '\\0' ' ' < /proc/"+pid+"/cmdline"); strings.Contains(client.Text(r), "123h") {
		t.Errorf("a command reads the server's flags: %s", client.Text(r))
	}
	if after, _ := os.ReadFile("/proc/" + pid + "/limits"); string(after) != string(limits) {
		t.Errorf("the server's limits changed:\n%s\nwere\n%s", after, limits)
	}
	a, b := run("a", "id -u && echo mine > f && pwd"), run("b", "id -u && pwd")
	if a.GetIsError() || b.GetIsError() {
		t.Fatalf("a: %s\nb: %s", client.Text(a), client.Text(b))
	}
	aLines, bLines := strings.Fields(client.Text(a)), strings.Fields(client.Text(b))
	if len(aLines) < 4 || len(bLines) < 4 {
		t.Fatalf("a: %q\nb: %q", aLines, bLines)
	}
	aUID, aDir := aLines[len(aLines)-2], aLines[len(aLines)-1]
	bUID := bLines[len(bLines)-2]
	if os.Getuid() == 0 && (aUID == bUID || aUID == "0") {
		t.Errorf("sessions a and b run as uids %s and %s; want each its own from sandbox.uid_range", aUID, bUID)
	}
	if r := run("b", "cat "+aDir+"/f; ls "+aDir); !r.GetIsError() || strings.Contains(client.Text(r), "mine") {
		t.Errorf("b reads a's folder: %s", client.Text(r))
	}
}

// TestServeRefusesUnwritableTemp: run_command makes each command's TMPDIR
// in the temporary folder. A server that cannot write there (a read-only
// root file system without a volume at /tmp) started saying run_command
// was served and then failed every command ("making the server's folder
// for calls' TMPDIRs: mkdir /tmp/toolwire-calls-…: read-only file
// system"); it now refuses to start, saying what to give it.
func TestServeRefusesUnwritableTemp(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	notAFolder := writeFile(t, "tmp", "a file where the temporary folder should be")
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0", "--workspace", t.TempDir(), "--run-command")
	cmd.Env = append(os.Environ(), "TMPDIR="+notAFolder)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run_command: cannot make the folder of its commands' TMPDIRs in the temporary folder "+notAFolder) ||
		strings.Contains(string(out), "toolwire listening") {
		t.Errorf("serve with TMPDIR a file: %v; want it to refuse to start, naming the temporary folder:\n%s", err, out)
	}
}
