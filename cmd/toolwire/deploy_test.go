package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The Kubernetes manifests run "toolwire serve" with a config file and
// flags; these tests hold them to what this build's parser accepts, so a
// renamed flag or a config key the strict parser refuses fails here and not
// in a crash-looping pod. (deploy's tests check the same manifests against a
// real API server.)

const deployDir = "../../deploy/kubernetes"

// flagsOwnedElsewhere are serve flags the manifests use that other issues
// add (names fixed across them); until they exist in this build they are
// left out of the parse, and once they exist they are parsed like any other.
var flagsOwnedElsewhere = map[string]bool{
	"admin-listen": true, // telemetry
	"tokens-file":  true, // authentication
	"store":        true, // idempotency and session store
	"workspace":    true, // workspace tools
}

// podSpec is the part of a Deployment these tests read.
type podSpec struct {
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
	Containers                    []struct {
		Name      string   `json:"name"`
		Args      []string `json:"args"`
		Lifecycle struct {
			PreStop struct {
				Sleep *struct {
					Seconds int64 `json:"seconds"`
				} `json:"sleep"`
			} `json:"preStop"`
		} `json:"lifecycle"`
		VolumeMounts []struct {
			Name      string `json:"name"`
			MountPath string `json:"mountPath"`
			SubPath   string `json:"subPath"`
		} `json:"volumeMounts"`
	} `json:"containers"`
	Volumes []struct {
		Name      string `json:"name"`
		ConfigMap *struct {
			Name string `json:"name"`
		} `json:"configMap"`
	} `json:"volumes"`
}

type deployment struct {
	Kind string `json:"kind"`
	Spec struct {
		Template struct {
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// kustomization is the part of a kustomization.yaml these tests read.
type kustomization struct {
	Patches []struct {
		Patch  string `json:"patch"`
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
	} `json:"patches"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// baseServer returns the base Deployment's pod spec and its toolwire
// container's index.
func baseServer(t *testing.T) (podSpec, int) {
	t.Helper()
	var d deployment
	readYAML(t, filepath.Join(deployDir, "base", "deployment.yaml"), &d)
	spec := d.Spec.Template.Spec
	for i, c := range spec.Containers {
		if c.Name == "toolwire" {
			return spec, i
		}
	}
	t.Fatal("base/deployment.yaml: no container named toolwire")
	return spec, 0
}

// overlayArgs returns the args an overlay appends to the toolwire
// container with JSON patches.
func overlayArgs(t *testing.T, dir string) []string {
	t.Helper()
	var k kustomization
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	var args []string
	for _, p := range k.Patches {
		if p.Patch == "" || p.Target.Kind != "Deployment" || p.Target.Name != "toolwire" {
			continue
		}
		var ops []struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &ops); err != nil {
			t.Fatalf("%s: patch: %v", dir, err)
		}
		for _, op := range ops {
			if op.Op == "add" && op.Path == "/spec/template/spec/containers/0/args/-" {
				args = append(args, fmt.Sprint(op.Value))
			}
		}
	}
	return args
}

func TestDeployConfigParses(t *testing.T) {
	t.Parallel()
	cfg := defaultServeConfig()
	if err := readConfigFile(filepath.Join(deployDir, "base", "config.yaml"), &cfg); err != nil {
		t.Fatalf("the ConfigMap's config.yaml is refused by serve's strict parser: %v", err)
	}
	if err := cfg.LoggingConfig.Validate(); err != nil {
		t.Error(err)
	}
}

// TestDeployArgsParse: the base's and each overlay's arguments parse, with
// the config file, and the pod's grace period covers the longest shutdown
// they make (checkGrace).
func TestDeployArgsParse(t *testing.T) {
	t.Parallel()
	spec, i := baseServer(t)
	base := spec.Containers[i].Args
	if len(base) == 0 || base[0] != "serve" {
		t.Fatalf("base args = %q, want serve first", base)
	}
	overlays, err := filepath.Glob(filepath.Join(deployDir, "overlays", "*"))
	if err != nil || len(overlays) == 0 {
		t.Fatalf("no overlays under %s (%v)", deployDir, err)
	}
	for _, dir := range append([]string{filepath.Join(deployDir, "base")}, overlays...) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			args := append(append([]string(nil), base[1:]...), overlayArgs(t, dir)...)
			var kept []string
			var configPath string
			for _, a := range args {
				name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") || !ok {
					t.Errorf("arg %q: write flags as --name=value, as overlays append them", a)
					continue
				}
				if name == "config" {
					configPath = a[len("--config="):]
				}
				var cfg serveConfig
				var ignored string
				if serveFlags(&cfg, &ignored).Lookup(name) == nil && flagsOwnedElsewhere[name] {
					t.Logf("--%s is not a flag of this build yet; left out", name)
					continue
				}
				kept = append(kept, a)
			}
			// --config is replaced by the real file, which the mount puts at
			// that path.
			if configPath != "/etc/toolwire/config.yaml" {
				t.Errorf("--config=%q, want the ConfigMap's mount /etc/toolwire/config.yaml", configPath)
			}
			for j, a := range kept {
				if strings.HasPrefix(a, "--config=") {
					kept[j] = "--config=" + filepath.Join(deployDir, "base", "config.yaml")
				}
			}
			cfg, help, err := parseServeArgs(kept, io.Discard)
			if err != nil || help {
				t.Fatalf("parseServeArgs(%q) = help %v, error %v", kept, help, err)
			}
			if cfg.ServiceConfig.Listen != ":50051" {
				t.Errorf("listen = %q, want :50051 (the probes' and Services' port)", cfg.ServiceConfig.Listen)
			}
			// Every port on all addresses of both families: an IPv6-only
			// cluster's probes and Services reach the pod on IPv6.
			for name, addr := range map[string]string{"listen": cfg.ServiceConfig.Listen, "http_listen": cfg.HTTPConfig.Listen,
				"health_listen": cfg.Health, "admin_listen": cfg.AdminListen} {
				if host, _, err := net.SplitHostPort(addr); err != nil || host != "" {
					t.Errorf("%s = %q; want \":PORT\" (IPv4 and IPv6; 0.0.0.0 is IPv4 only)", name, addr)
				}
			}
			checkGrace(t, spec, i, cfg)
		})
	}
}

// checkGrace checks that Kubernetes waits for the preStop delay and the
// longest shutdown serve can make with cfg (shutdownBound: the drain, the
// stops, the closers' flushes) before it kills the container.
func checkGrace(t *testing.T, spec podSpec, i int, cfg serveConfig) {
	t.Helper()
	sleep := spec.Containers[i].Lifecycle.PreStop.Sleep
	if sleep == nil || sleep.Seconds <= 0 {
		t.Fatal("the toolwire container has no preStop sleep")
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds (the default 30s is not above the drain)")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if need := shutdownBound(cfg) + time.Duration(sleep.Seconds)*time.Second; grace <= need {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than preStop %ds + the longest shutdown %v = %v", grace, sleep.Seconds, shutdownBound(cfg), need)
	}
}

// TestServeListensOnBothFamilies: the manifests' ":PORT" addresses take
// connections over IPv4 and IPv6 alike, on every port, as kubelet's probes
// and the Services of an IPv6-only or dual-stack cluster make them.
func TestServeListensOnBothFamilies(t *testing.T) {
	t.Parallel()
	if lis, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		lis.Close()
	}
	s := startServe(t, "--diag", "--listen", ":0", "--allow-unauthenticated", "--http-listen", ":0", "--http-allow-unauthenticated",
		"--health-listen", ":0", "--admin-listen", ":0")
	addrs := map[string]string{"listen": s.addr}
	waitFor(t, "the other ports' listening lines", func() bool {
		log := s.stderr.String()
		addrs["http_listen"], _ = httpAddr(log)
		addrs["admin_listen"], _ = adminAddr(log)
		addrs["health_listen"] = ""
		for line := range strings.Lines(log) {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "health listening on ") {
				addrs["health_listen"] = rec.Addr
			}
		}
		return addrs["http_listen"] != "" && addrs["admin_listen"] != "" && addrs["health_listen"] != ""
	})
	for name, addr := range addrs {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, addr, err)
		}
		for _, to := range []string{"127.0.0.1", "::1"} {
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(to, port), 5*time.Second)
			if err != nil {
				t.Errorf("%s at %s: %v; want it to take connections on both families", name, net.JoinHostPort(to, port), err)
				continue
			}
			conn.Close()
		}
	}
}
