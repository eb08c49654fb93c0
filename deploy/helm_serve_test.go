package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sigs.k8s.io/yaml"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// The chart's config file is held to the server's own parser the only way
// package deploy can reach it (serve's config type lives in package main):
// the real toolwire binary boots from the rendered config, the rendered
// Deployment's arguments and the rendered tokens, and its health service
// answers SERVING for toolwire.v1.ToolService, as kubelet's readiness probe
// asks. (cmd/toolwire's TestDeployConfigParses does the same for the
// kustomize base's config.yaml, in-process.)

// keysOwnedElsewhere are config keys the chart renders that other parts of
// issue 21 add to the server (their names are fixed there). While this
// build refuses one as unknown, the boot leaves it out and says so; once
// the server knows it, it is parsed, and boots, like any other key.
var keysOwnedElsewhere = []string{"auth.oidc", "policies", "audit_log", "rate_per_caller", "rate_burst"}

var unknownKey = regexp.MustCompile(`unknown key "([^"]+)"`)

func TestHelmConfigBootsServer(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	server := imageBinary(t) // the pod's binary
	issuer := startTestIssuer(t)

	for _, tc := range []struct {
		name, fullname string
		args           []string
	}{
		{"defaults", "toolwire", nil},
		{"every value", "tw", []string{"-f", allValues}},
		{"the service-account identity example", "toolwire", []string{"-f", exampleValues}},
		// The grace period the chart computes for a longer drain.
		{"a long drain", "toolwire", []string{"--set", "config.drain_timeout=2m", "--set", "extraArgs={--abandon-grace=1500ms}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := helmTemplate(t, bin, release, tc.args...)
			cfg := m.config(t, tc.fullname)
			spec, ctr := m.podSpec(t, tc.fullname)
			enc, _ := get(m.obj(t, "Secret/"+tc.fullname+"-tokens"), "data", "tokens").(string)
			tokens, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				t.Fatal(err)
			}

			dir := t.TempDir()
			files := map[string]string{ // the pod's paths, here
				"/etc/toolwire/config.yaml":    filepath.Join(dir, "config.yaml"),
				"/etc/toolwire/tokens/tokens":  filepath.Join(dir, "tokens"),
				"/workspace":                   filepath.Join(dir, "workspace"),
				"/etc/toolwire/kube-ca/ca.crt": issuer.caFile,
			}
			if err := os.WriteFile(files["/etc/toolwire/tokens/tokens"], tokens, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(files["/workspace"], 0o755); err != nil {
				t.Fatal(err)
			}
			args, env := serveArgs(t, ctr, files)
			// What the pod reaches over the network, on loopback: the
			// issuer, and the audit log's volume.
			if oidc, ok := get(cfg, "auth", "oidc").(map[string]any); ok {
				oidc["issuer"] = issuer.url
				if _, ok := oidc["jwks_url"]; ok {
					oidc["jwks_url"] = issuer.url + "/jwks"
				}
			}
			if log, _ := cfg["audit_log"].(string); log != "" && log != "-" {
				if err := os.Mkdir(filepath.Join(dir, "audit"), 0o755); err != nil {
					t.Fatal(err)
				}
				cfg["audit_log"] = filepath.Join(dir, "audit", filepath.Base(log))
			}

			for attempt := 0; ; attempt++ {
				b, err := yaml.Marshal(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(files["/etc/toolwire/config.yaml"], b, 0o644); err != nil {
					t.Fatal(err)
				}
				output, ok := bootServer(t, server, dir, args, env)
				if ok {
					checkGrace(t, spec, ctr, output)
					return
				}
				refused := output
				k := unknownKey.FindStringSubmatch(refused)
				if k == nil || !slices.Contains(keysOwnedElsewhere, k[1]) || attempt > len(keysOwnedElsewhere) {
					t.Fatalf("toolwire serve refused the chart's config or arguments:\n%s\nconfig.yaml:\n%s", refused, b)
				}
				t.Logf("this build does not know the config key %s yet (issue 21 adds it): left out of the boot", k[1])
				deleteKey(cfg, strings.Split(k[1], "."))
			}
		})
	}
}

// checkGrace checks that the pod's terminationGracePeriodSeconds is longer
// than its preStop delay and the longest shutdown the server, booted from
// the chart's render, says it makes (shutdown_bound_seconds, logged at
// start): the kubelet's SIGKILL must not cut a drain or the audit trail's
// flush short.
func checkGrace(t *testing.T, spec, ctr map[string]any, output string) {
	t.Helper()
	bound := -1.0
	for s := bufio.NewScanner(strings.NewReader(output)); s.Scan(); {
		var line struct {
			Bound *float64 `json:"shutdown_bound_seconds"`
		}
		if json.Unmarshal(s.Bytes(), &line) == nil && line.Bound != nil {
			bound = *line.Bound
		}
	}
	if bound < 0 {
		t.Fatalf("the server logged no shutdown_bound_seconds:\n%s", output)
	}
	grace, _ := spec["terminationGracePeriodSeconds"].(float64)
	sleep, _ := get(ctr, "lifecycle", "preStop", "sleep", "seconds").(float64)
	if sleep <= 0 {
		t.Fatal("the toolwire container has no preStop sleep")
	}
	if grace <= sleep+bound {
		t.Errorf("terminationGracePeriodSeconds %v, want more than the preStop delay %vs and the longest shutdown %vs the server logged", grace, sleep, bound)
	}
}

// serveArgs rewrites the toolwire container's arguments for a server on
// loopback: addresses on free ports of 127.0.0.1, the pod's files at
// files, and the store in memory unless a real Redis is at hand. It also
// returns the container's environment, its paths rewritten the same way.
func serveArgs(t *testing.T, ctr map[string]any, files map[string]string) (args, env []string) {
	t.Helper()
	all := strs(ctr["args"])
	if len(all) == 0 || all[0] != "serve" {
		t.Fatalf("args %q: want serve first", all)
	}
	args = []string{"serve"}
	for _, a := range all[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case !ok:
			args = append(args, a) // a switch such as --workspace-per-session
		case strings.HasSuffix(name, "listen"):
			args = append(args, "--"+name+"=127.0.0.1:0")
		case name == "store" && strings.HasPrefix(value, "redis://"):
			if addr := os.Getenv(testenv.RedisAddrVar); addr != "" {
				args = append(args, "--store=redis://"+addr+"/15")
			} else {
				t.Logf("--store=%s: the memory store instead (no %s)", value, testenv.RedisAddrVar)
			}
		case files[value] != "":
			args = append(args, "--"+name+"="+files[value])
		default:
			args = append(args, a)
		}
	}
	l, _ := ctr["env"].([]any)
	for _, e := range l {
		name, value := fmt.Sprint(get(e, "name")), get(e, "value")
		if value == nil {
			continue // valueFrom: the downward API
		}
		v := fmt.Sprint(value)
		if files[v] != "" {
			v = files[v]
		}
		if strings.HasPrefix(name, "OTEL_EXPORTER_OTLP_") {
			continue // no collector here
		}
		env = append(env, name+"="+v)
	}
	return args, env
}

// bootServer runs toolwire serve until its health service reports the
// ToolService SERVING, then stops it with SIGTERM, which must end it
// cleanly. When the server exits first, it returns its output and false.
func bootServer(t *testing.T, bin, dir string, args, env []string) (output string, ok bool) {
	t.Helper()
	logPath := filepath.Join(dir, "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "TMPDIR="+dir, "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none"), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			return errors.New("still running 30s after SIGTERM")
		}
	}
	logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	deadline := time.After(2 * time.Minute)
	var health, listening string
	for health == "" || listening == "" {
		select {
		case err := <-done:
			return fmt.Sprintf("exit: %v\n%s", err, logs()), false
		case <-deadline:
			_ = stop()
			t.Fatalf("toolwire serve did not start listening within 2 minutes:\n%s", logs())
		case <-time.After(50 * time.Millisecond):
		}
		for s := bufio.NewScanner(strings.NewReader(logs())); s.Scan(); {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(s.Bytes(), &line) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(line.Msg, "health listening on "):
				health = strings.TrimPrefix(line.Msg, "health listening on ")
			case strings.HasPrefix(line.Msg, "toolwire listening on "):
				listening = line.Addr
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(health, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "toolwire.v1.ToolService"})
	conn.Close()
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		_ = stop()
		t.Fatalf("health of toolwire.v1.ToolService on %s: %v, %v; want SERVING\n%s", health, resp.GetStatus(), err, logs())
	}
	if err := stop(); err != nil {
		t.Errorf("toolwire serve did not end cleanly on SIGTERM: %v\n%s", err, logs())
	}
	t.Logf("toolwire serve %q booted from the chart's render (gRPC on %s) and drained", args[1:], listening)
	return logs(), true
}

// deleteKey removes the key at path from a config.
func deleteKey(cfg map[string]any, path []string) {
	for _, k := range path[:len(path)-1] {
		sub, ok := cfg[k].(map[string]any)
		if !ok {
			return
		}
		cfg = sub
	}
	delete(cfg, path[len(path)-1])
}

// testIssuer is an OIDC issuer on loopback (HTTPS, discovery and a JWKS),
// standing in for the cluster's API server; caFile holds its certificate,
// which the chart's SSL_CERT_FILE points at, as at kube-root-ca.crt.
type testIssuer struct {
	url, caFile string
}

func startTestIssuer(t *testing.T) testIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	point, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []any{map[string]string{
		"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": "test",
		"x": b64(point[1:33]), "y": b64(point[33:]),
	}}})
	var url string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": url, "jwks_uri": url + "/jwks",
				"id_token_signing_alg_values_supported": []string{"ES256"}, "response_types_supported": []string{"id_token"},
				"subject_types_supported": []string{"public"}})
		case "/jwks":
			_, _ = w.Write(jwks)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	url = srv.URL
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	var pemBuf bytes.Buffer
	_ = pem.Encode(&pemBuf, &pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBuf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return testIssuer{url: url, caFile: caFile}
}
