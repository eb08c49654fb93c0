package deploy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// The Helm chart (helm/toolwire) is held to what the kustomize base does:
// these tests run the real helm program, built from its Go module by
// helm/build-helm.sh (.ci/run exports its path as HelmBinVar), for "helm
// lint" and "helm template", and read what it renders. The real
// kube-apiserver of kubernetes_test.go then accepts the rendered objects
// (helmAgainstAPIServer), and the real server boots from the rendered
// config and arguments (helm_serve_test.go).

// HelmBinVar names the helm program.
const HelmBinVar = "TOOLWIRE_HELM_BIN"

const (
	chartDir      = "helm/toolwire"
	allValues     = "helm/test/all-values.yaml"
	exampleValues = "helm/examples/service-account-identity.yaml"
	// release is the release name of the renders compared with the
	// kustomize base: the chart then names its objects as the base does.
	release = "toolwire"
)

func helmBin(t *testing.T) string {
	t.Helper()
	path := os.Getenv(HelmBinVar)
	if path == "" {
		testenv.Missing(t, HelmBinVar+" (the program deploy/helm/build-helm.sh prints)")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		testenv.Missing(t, fmt.Sprintf("the program helm at %s=%s", HelmBinVar, path))
	}
	return path
}

// runHelm runs helm with folders of its own and no cluster, and returns
// its standard output, or an error that holds its standard error.
func runHelm(t *testing.T, bin string, args ...string) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"),
		"KUBECONFIG="+filepath.Join(dir, "no-kubeconfig"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.Bytes(), out)
	}
	return out, nil
}

// manifest is what "helm template" rendered.
type manifest struct {
	yaml []byte                    // the stream, as helm printed it
	objs map[string]map[string]any // "Kind/name" → the object
}

// helmTemplate renders the chart as release rel in the namespace
// namespace, with args (-f FILE, --set K=V) added.
func helmTemplate(t *testing.T, bin, rel string, args ...string) manifest {
	t.Helper()
	out, err := runHelm(t, bin, append([]string{"template", rel, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return parseManifest(t, out)
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

func parseManifest(t *testing.T, out []byte) manifest {
	t.Helper()
	m := manifest{yaml: out, objs: map[string]map[string]any{}}
	for _, doc := range docSeparator.Split(string(out), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("helm template printed YAML that does not parse: %v\n%s", err, doc)
		}
		if obj == nil {
			continue // only comments
		}
		key := fmt.Sprintf("%v/%v", obj["kind"], get(obj, "metadata", "name"))
		if _, dup := m.objs[key]; dup {
			t.Errorf("helm template rendered %s twice", key)
		}
		m.objs[key] = obj
	}
	return m
}

// kinds returns the rendered objects' "Kind/name", sorted.
func (m manifest) kinds() []string {
	var ks []string
	for k := range m.objs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (m manifest) obj(t *testing.T, key string) map[string]any {
	t.Helper()
	o, ok := m.objs[key]
	if !ok {
		t.Fatalf("helm template rendered no %s; it rendered %q", key, m.kinds())
	}
	return o
}

// podSpec returns the Deployment's pod spec and its toolwire container.
func (m manifest) podSpec(t *testing.T, name string) (spec, ctr map[string]any) {
	t.Helper()
	spec, _ = get(m.obj(t, "Deployment/"+name), "spec", "template", "spec").(map[string]any)
	ctrs, _ := spec["containers"].([]any)
	for _, c := range ctrs {
		if c, _ := c.(map[string]any); c["name"] == "toolwire" {
			return spec, c
		}
	}
	t.Fatalf("Deployment/%s has no container toolwire", name)
	return nil, nil
}

// config returns the server's config file the ConfigMap holds, parsed.
func (m manifest) config(t *testing.T, name string) map[string]any {
	t.Helper()
	text, ok := get(m.obj(t, "ConfigMap/"+name+"-config"), "data", "config.yaml").(string)
	if !ok {
		t.Fatalf("ConfigMap/%s-config has no config.yaml", name)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, text)
	}
	return cfg
}

// tokens returns the tokens file the Secret holds.
func (m manifest) tokens(t *testing.T, secret string) map[string]string {
	t.Helper()
	enc, ok := get(m.obj(t, "Secret/"+secret), "data", "tokens").(string)
	if !ok {
		t.Fatalf("Secret/%s has no data.tokens", secret)
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		t.Fatalf("Secret/%s data.tokens: %v", secret, err)
	}
	var tokens map[string]string
	if err := yaml.UnmarshalStrict(b, &tokens); err != nil {
		t.Fatalf("Secret/%s: the tokens file is not \"name: token\" lines: %v", secret, err)
	}
	return tokens
}

// get walks v by map keys (string) and list indices (int); nil when
// something on the way is missing.
func get(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				return nil
			}
			v = l[p]
		}
	}
	return v
}

// strs returns v's strings, for lists such as args.
func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// keys returns a map's keys, sorted.
func keys(v any) []string {
	m, _ := v.(map[string]any)
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// readYAMLFile parses a YAML file of the repository.
func readYAMLFile(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// portsByName returns a container's or a Service's ports as name → port.
func portsByName(v any, field string) map[string]any {
	out := map[string]any{}
	l, _ := v.([]any)
	for _, p := range l {
		out[fmt.Sprint(get(p, "name"))] = get(p, field)
	}
	return out
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for name, args := range map[string][]string{
		"defaults":     nil,
		"every value":  {"-f", allValues},
		"example":      {"-f", exampleValues},
		"session uids": {"--set", "sandbox.sessionUIDs.enabled=true"},
		"no http port": {"--set", "http.enabled=false"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := runHelm(t, bin, append([]string{"lint", "--strict", chartDir}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(out, []byte("1 chart(s) linted, 0 chart(s) failed")) {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// TestHelmDefaults holds the default render to the kustomize base: the
// same objects (and a tokens Secret and a PodDisruptionBudget), the same
// pod spec, ports, NetworkPolicy rules and config file.
func TestHelmDefaults(t *testing.T) {
	t.Parallel()
	m := helmTemplate(t, helmBin(t), release)

	want := []string{"ConfigMap/toolwire-config", "Deployment/toolwire", "NetworkPolicy/toolwire", "PodDisruptionBudget/toolwire", "Secret/toolwire-tokens", "Service/toolwire", "Service/toolwire-headless", "ServiceAccount/toolwire"}
	if diff := cmp.Diff(want, m.kinds()); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}

	t.Run("pod spec as the base's", func(t *testing.T) {
		base := readYAMLFile(t, "kubernetes/base/deployment.yaml")
		wantSpec, _ := get(base, "spec", "template", "spec").(map[string]any)
		// kustomize's images: transformer (base/kustomization.yaml) tags it.
		get(wantSpec, "containers", 0).(map[string]any)["image"] = "toolwire:dev"
		gotSpec, _ := m.podSpec(t, release)
		if diff := cmp.Diff(wantSpec, gotSpec); diff != "" {
			t.Errorf("the chart's pod spec differs from base/deployment.yaml's (-base +chart):\n%s", diff)
		}
		for _, field := range []string{"strategy", "revisionHistoryLimit"} {
			if diff := cmp.Diff(get(base, "spec", field), get(m.obj(t, "Deployment/toolwire"), "spec", field)); diff != "" {
				t.Errorf("spec.%s (-base +chart):\n%s", field, diff)
			}
		}
		if got := get(m.obj(t, "Deployment/toolwire"), "spec", "replicas"); got != 1.0 {
			t.Errorf("replicas = %v, want 1", got)
		}
		if got := get(m.obj(t, "ServiceAccount/toolwire"), "automountServiceAccountToken"); got != false {
			t.Errorf("the ServiceAccount's automountServiceAccountToken = %v, want false", got)
		}
	})

	t.Run("selectors", func(t *testing.T) {
		sel := get(m.obj(t, "Deployment/toolwire"), "spec", "selector", "matchLabels")
		labels := get(m.obj(t, "Deployment/toolwire"), "spec", "template", "metadata", "labels").(map[string]any)
		for k, v := range sel.(map[string]any) {
			if labels[k] != v {
				t.Errorf("the pods' labels %v lack the selector's %s=%v", labels, k, v)
			}
		}
		if get(sel, "app.kubernetes.io/name") != "toolwire" {
			t.Errorf("selector %v lacks app.kubernetes.io/name=toolwire", sel)
		}
		for key, path := range map[string][]any{
			"Service/toolwire":             {"spec", "selector"},
			"Service/toolwire-headless":    {"spec", "selector"},
			"PodDisruptionBudget/toolwire": {"spec", "selector", "matchLabels"},
			"NetworkPolicy/toolwire":       {"spec", "podSelector", "matchLabels"},
		} {
			if diff := cmp.Diff(sel, get(m.obj(t, key), path...)); diff != "" {
				t.Errorf("%s selects other pods than the Deployment (-deployment +%s):\n%s", key, key, diff)
			}
		}
	})

	t.Run("services as the base's", func(t *testing.T) {
		for file, key := range map[string]string{"service.yaml": "Service/toolwire", "service-headless.yaml": "Service/toolwire-headless"} {
			base := readYAMLFile(t, "kubernetes/base/"+file)
			got := m.obj(t, key)
			if diff := cmp.Diff(get(base, "spec", "ports"), get(got, "spec", "ports")); diff != "" {
				t.Errorf("%s ports (-base +chart):\n%s", key, diff)
			}
			for _, f := range []string{"type", "clusterIP", "publishNotReadyAddresses"} {
				if get(base, "spec", f) != get(got, "spec", f) {
					t.Errorf("%s spec.%s = %v, base %v", key, f, get(got, "spec", f), get(base, "spec", f))
				}
			}
			if diff := cmp.Diff(get(base, "metadata", "annotations"), get(got, "metadata", "annotations")); diff != "" {
				t.Errorf("%s annotations (-base +chart):\n%s", key, diff)
			}
		}
		if got, want := portsByName(get(m.obj(t, "Service/toolwire"), "spec", "ports"), "port"), map[string]any{"grpc": 50051.0, "http": 8080.0, "metrics": 9090.0}; !cmp.Equal(got, want) {
			t.Errorf("Service ports %v, want %v", got, want)
		}
	})

	t.Run("network policy as the base's", func(t *testing.T) {
		base := readYAMLFile(t, "kubernetes/base/networkpolicy.yaml")
		got := m.obj(t, "NetworkPolicy/toolwire")
		for _, f := range []string{"policyTypes", "ingress", "egress"} {
			if diff := cmp.Diff(get(base, "spec", f), get(got, "spec", f)); diff != "" {
				t.Errorf("spec.%s (-base +chart):\n%s", f, diff)
			}
		}
	})

	t.Run("config as the base's", func(t *testing.T) {
		base := readYAMLFile(t, "kubernetes/base/config.yaml")
		got := m.config(t, release)
		if diff := cmp.Diff(base, got); diff != "" {
			t.Errorf("config.yaml (-base +chart):\n%s", diff)
		}
		for _, k := range []string{"auth", "policies", "audit_log", "rate_per_caller", "rate_burst", "store"} {
			if _, ok := got[k]; ok {
				t.Errorf("config.yaml has %s, which no default value sets", k)
			}
		}
	})

	t.Run("tokens Secret", func(t *testing.T) {
		// No tokens and no OIDC: one generated caller, never an open server.
		tokens := m.tokens(t, "toolwire-tokens")
		if len(tokens) != 1 || len(tokens["default"]) < 32 {
			t.Errorf("tokens of %q; want one caller \"default\" with a long random token", slices.Sorted(maps.Keys(tokens)))
		}
		if get(m.obj(t, "Secret/toolwire-tokens"), "type") != "Opaque" {
			t.Error("the tokens Secret is not Opaque")
		}
		_, ctr := m.podSpec(t, release)
		if !slices.Contains(strs(ctr["args"]), "--tokens-file=/etc/toolwire/tokens/tokens") {
			t.Errorf("args %q lack --tokens-file", strs(ctr["args"]))
		}
	})

	t.Run("pod disruption budget", func(t *testing.T) {
		// The replicated overlay's.
		base := readYAMLFile(t, "kubernetes/overlays/replicated/pdb.yaml")
		if got, want := get(m.obj(t, "PodDisruptionBudget/toolwire"), "spec", "maxUnavailable"), get(base, "spec", "maxUnavailable"); got != want {
			t.Errorf("maxUnavailable = %v, want the replicated overlay's %v", got, want)
		}
	})
}

// TestHelmEveryValue renders helm/test/all-values.yaml, which sets every
// value, and checks that each lands where it must.
func TestHelmEveryValue(t *testing.T) {
	t.Parallel()
	m := helmTemplate(t, helmBin(t), release, "-f", allValues)
	const name = "tw" // fullnameOverride

	want := []string{"ClusterRoleBinding/tw-toolwire-issuer-discovery", "ConfigMap/tw-config", "Deployment/tw", "HorizontalPodAutoscaler/tw", "NetworkPolicy/tw", "PodDisruptionBudget/tw", "Secret/tw-tokens", "Service/tw", "Service/tw-headless", "ServiceAccount/toolwire-server"}
	if diff := cmp.Diff(want, m.kinds()); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}

	t.Run("config", func(t *testing.T) {
		got := m.config(t, name)
		want := map[string]any{
			"audit_log": "/var/log/toolwire/audit.log",
			"auth": map[string]any{
				"oidc": map[string]any{
					"issuer":        "https://kubernetes.default.svc.cluster.local",
					"audience":      "toolwire",
					"jwks_url":      "https://kubernetes.default.svc/openid/v1/jwks",
					"caller_claim":  "sub",
					"caller_prefix": "oidc:",
					"groups_claim":  "kubernetes.io.namespace",
					"groups_prefix": "k8s:",
				},
				"groups":      map[string]any{"ci": []any{"builders"}},
				"permissions": map[string]any{"*": map[string]any{"allow": []any{"read_file", "list_files"}}, "ci": map[string]any{"deny": []any{"run_command"}}},
			},
			"policies": []any{
				map[string]any{"name": "builder-commands", "effect": "deny", "message": "only go, git and ls may run",
					"when": `caller.id == "oidc:system:serviceaccount:agents:builder" && tool.name == "run_command" && !(args.argv[0] in ["go", "git", "ls"])`},
				map[string]any{"name": "docs-only", "effect": "deny", "message": "write only under docs/",
					"when": `tool.name == "write_file" && !args.path.startsWith("docs/")`},
			},
			"http_allowed_hosts": []any{"tw", "tw.toolwire", "tw.toolwire.svc", "tw.toolwire.svc.cluster.local",
				"tw-headless", "tw-headless.toolwire", "tw-headless.toolwire.svc", "tw-headless.toolwire.svc.cluster.local",
				"toolwire.example.com", "*.agents.example.com"},
			"rate_per_caller":  20.0,
			"rate_burst":       40.0,
			"log_level":        "debug",
			"log_format":       "json",
			"drain_timeout":    "60s",
			"max_parallel":     8.0,
			"call_timeout":     "30s",
			"max_call_timeout": "5m",
			"sandbox":          map[string]any{"mode": "auto", "network": "deny", "max_workspace_bytes": float64(805306368), "read_only_paths": []any{"/usr", "/bin", "/lib", "/etc/ssl"}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("config.yaml (-want +got):\n%s", diff)
		}
	})

	spec, ctr := m.podSpec(t, name)
	t.Run("deployment", func(t *testing.T) {
		d := m.obj(t, "Deployment/tw")
		if r := get(d, "spec", "replicas"); r != nil {
			t.Errorf("replicas = %v with autoscaling on; want none (the autoscaler owns the count)", r)
		}
		if got, want := ctr["image"], "registry.example.com/toolwire:v0.1.0"; got != want {
			t.Errorf("image %v, want %v", got, want)
		}
		wantArgs := []string{"serve", "--config=/etc/toolwire/config.yaml", "--listen=:50052", "--http-listen=:8443",
			"--health-listen=:8082", "--admin-listen=:9091", "--tokens-file=/etc/toolwire/tokens/tokens",
			"--workspace=/workspace", "--store=redis://redis.toolwire-store:6380/1", "--max-connection-age=10m"}
		if diff := cmp.Diff(wantArgs, strs(ctr["args"])); diff != "" {
			t.Errorf("args (-want +got):\n%s", diff)
		}
		if got, want := portsByName(ctr["ports"], "containerPort"), map[string]any{"grpc": 50052.0, "http": 8443.0, "health": 8082.0, "metrics": 9091.0}; !cmp.Equal(got, want) {
			t.Errorf("container ports %v, want %v", got, want)
		}
		for _, probe := range []string{"readinessProbe", "livenessProbe"} {
			if p := get(ctr, probe, "grpc", "port"); p != 8082.0 {
				t.Errorf("%s on port %v, want the health port 8082", probe, p)
			}
		}
		if s := get(ctr, "readinessProbe", "grpc", "service"); s != "toolwire.v1.ToolService" {
			t.Errorf("readiness asks for %v, want toolwire.v1.ToolService", s)
		}
		env := map[string]any{}
		for _, e := range ctr["env"].([]any) {
			env[fmt.Sprint(get(e, "name"))] = get(e, "value")
		}
		for k, v := range map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"SSL_CERT_FILE":               "/etc/toolwire/kube-ca/ca.crt",
			"GOMAXPROCS":                  "4",
		} {
			if env[k] != v {
				t.Errorf("env %s = %v, want %q", k, env[k], v)
			}
		}
		mounts := portsByName(ctr["volumeMounts"], "mountPath")
		for k, v := range map[string]string{"audit": "/var/log/toolwire", "kube-ca": "/etc/toolwire/kube-ca", "tool-data": "/data", "workspace": "/workspace"} {
			if mounts[k] != v {
				t.Errorf("volume %s mounted at %v, want %s (mounts %v)", k, mounts[k], v, mounts)
			}
		}
		volumes := map[string]any{}
		for _, v := range spec["volumes"].([]any) {
			volumes[fmt.Sprint(get(v, "name"))] = v
		}
		if got := get(volumes["kube-ca"], "configMap", "name"); got != "kube-root-ca.crt" {
			t.Errorf("volume kube-ca from %v, want the ConfigMap kube-root-ca.crt", got)
		}
		if get(volumes["audit"], "emptyDir") == nil {
			t.Errorf("volume audit %v, want an emptyDir", volumes["audit"])
		}
		if got := get(volumes["tokens"], "secret", "secretName"); got != "tw-tokens" {
			t.Errorf("tokens from Secret %v, want tw-tokens", got)
		}
		if got := get(volumes["workspace"], "emptyDir", "sizeLimit"); got != "2Gi" {
			t.Errorf("workspace sizeLimit %v, want 2Gi", got)
		}
		for field, want := range map[string]any{
			"terminationGracePeriodSeconds": 120.0,
			"serviceAccountName":            "toolwire-server",
		} {
			if spec[field] != want {
				t.Errorf("%s = %v, want %v", field, spec[field], want)
			}
		}
		for _, field := range []string{"nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "imagePullSecrets"} {
			if spec[field] == nil {
				t.Errorf("the pod spec lacks %s", field)
			}
		}
		if s, _ := get(d, "spec", "template", "metadata", "annotations", "checksum/config").(string); len(s) != 64 {
			t.Errorf("pod annotation checksum/config = %q, want a SHA-256 that rolls the pods when it changes", s)
		}
		if get(d, "spec", "template", "metadata", "labels", "toolwire.dev/tier") != "tools" || get(d, "spec", "template", "metadata", "annotations", "example.com/scrape") != "yes" {
			t.Error("podLabels or podAnnotations missing")
		}
		if get(ctr, "securityContext", "capabilities", "add") != nil || get(spec, "securityContext", "runAsNonRoot") != true {
			t.Error("the pod is not restricted with sessionUIDs off")
		}
	})

	t.Run("services", func(t *testing.T) {
		if got, want := portsByName(get(m.obj(t, "Service/tw"), "spec", "ports"), "port"), map[string]any{"grpc": 50052.0, "http": 8443.0, "metrics": 9091.0}; !cmp.Equal(got, want) {
			t.Errorf("Service ports %v, want %v", got, want)
		}
		ann := get(m.obj(t, "Service/tw"), "metadata", "annotations")
		if get(ann, "prometheus.io/port") != "9091" || get(ann, "example.com/team") != "agents" {
			t.Errorf("Service annotations %v: want prometheus.io/port 9091 and example.com/team", ann)
		}
		if got, want := portsByName(get(m.obj(t, "Service/tw-headless"), "spec", "ports"), "port"), map[string]any{"grpc": 50052.0}; !cmp.Equal(got, want) {
			t.Errorf("headless Service ports %v, want %v", got, want)
		}
	})

	t.Run("network policy", func(t *testing.T) {
		np := m.obj(t, "NetworkPolicy/tw")
		var egress []string
		for _, rule := range get(np, "spec", "egress").([]any) {
			to, _ := json.Marshal(get(rule, "to"))
			for _, p := range get(rule, "ports").([]any) {
				egress = append(egress, fmt.Sprintf("%v/%v to %s", get(p, "protocol"), get(p, "port"), to))
			}
		}
		want := []string{
			"UDP/53 to null", "TCP/53 to null", // DNS
			"TCP/6380 to null", "TCP/6390 to null", // the Redis store: its URL's port and storeEgressPorts
			"TCP/4317 to [{\"namespaceSelector\":{}}]", "TCP/4318 to [{\"namespaceSelector\":{}}]", // OTLP
			"TCP/443 to null", "TCP/6443 to null", // the API server as issuer
			"TCP/443 to [{\"ipBlock\":{\"cidr\":\"203.0.113.0/24\"}}]", // extraEgress
		}
		if diff := cmp.Diff(want, egress); diff != "" {
			t.Errorf("egress (-want +got):\n%s", diff)
		}
		metrics := get(np, "spec", "ingress", 1, "from", 0, "namespaceSelector", "matchExpressions", 0, "values")
		if diff := cmp.Diff([]any{"monitoring", "observability"}, metrics); diff != "" {
			t.Errorf("metrics namespaces (-want +got):\n%s", diff)
		}
	})

	t.Run("tokens, PDB, autoscaler, issuer discovery", func(t *testing.T) {
		if diff := cmp.Diff(map[string]string{"ci": "0123456789abcdef0123456789abcdef", "ops": "fedcba9876543210fedcba9876543210"}, m.tokens(t, "tw-tokens")); diff != "" {
			t.Errorf("tokens (-want +got):\n%s", diff)
		}
		if got := get(m.obj(t, "PodDisruptionBudget/tw"), "spec", "maxUnavailable"); got != 2.0 {
			t.Errorf("PDB maxUnavailable %v, want 2", got)
		}
		hpa := m.obj(t, "HorizontalPodAutoscaler/tw")
		if get(hpa, "spec", "minReplicas") != 4.0 || get(hpa, "spec", "maxReplicas") != 10.0 || get(hpa, "spec", "scaleTargetRef", "name") != "tw" ||
			get(hpa, "spec", "metrics", 0, "resource", "target", "averageUtilization") != 60.0 {
			t.Errorf("autoscaler spec %v", get(hpa, "spec"))
		}
		crb := m.obj(t, "ClusterRoleBinding/tw-toolwire-issuer-discovery")
		if get(crb, "roleRef", "name") != "system:service-account-issuer-discovery" || get(crb, "subjects", 0, "name") != "system:unauthenticated" {
			t.Errorf("issuer discovery binding %v", crb)
		}
		if get(m.obj(t, "ServiceAccount/toolwire-server"), "metadata", "annotations", "example.com/owner") != "platform" {
			t.Error("serviceAccount.annotations missing")
		}
	})
}

// TestHelmOnlyWhenSet checks that the server's settings reach its config
// file only when set, each alone.
func TestHelmOnlyWhenSet(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	base := readYAMLFile(t, "kubernetes/base/config.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want map[string]any // what the config has beyond the base's
	}{
		{"oidc issuer and audience", []string{"--set", "auth.oidc.issuer=https://issuer.example.com", "--set", "auth.oidc.audience=toolwire"},
			map[string]any{"auth": map[string]any{"oidc": map[string]any{"issuer": "https://issuer.example.com", "audience": "toolwire"}}}},
		{"oidc claims", []string{"--set", "auth.oidc.caller_claim=email", "--set", "auth.oidc.groups_claim=groups", "--set", "auth.oidc.jwks_url=https://issuer.example.com/keys"},
			map[string]any{"auth": map[string]any{"oidc": map[string]any{"caller_claim": "email", "groups_claim": "groups", "jwks_url": "https://issuer.example.com/keys"}}}},
		{"empty policies", []string{"--set-json", "policies=[]"}, nil},
		{"a policy", []string{"--set-json", `policies=[{"name":"no-curl","when":"tool.name == \"run_command\" && args.argv[0] == \"curl\"","effect":"deny","message":"no curl"}]`},
			map[string]any{"policies": []any{map[string]any{"name": "no-curl", "when": `tool.name == "run_command" && args.argv[0] == "curl"`, "effect": "deny", "message": "no curl"}}}},
		{"audit log to stdout", []string{"--set", "audit_log=-"}, map[string]any{"audit_log": "-"}},
		{"rate per caller", []string{"--set", "rate_per_caller=0.5"}, map[string]any{"rate_per_caller": 0.5}},
		{"rate burst", []string{"--set", "rate_burst=10"}, map[string]any{"rate_burst": 10.0}},
		{"zero rate", []string{"--set", "rate_per_caller=0", "--set", "rate_burst=0"}, map[string]any{"rate_per_caller": 0.0, "rate_burst": 0.0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := helmTemplate(t, bin, release, tc.args...)
			want := map[string]any{}
			for k, v := range base {
				want[k] = v
			}
			for k, v := range tc.want {
				want[k] = v
			}
			if diff := cmp.Diff(want, m.config(t, release)); diff != "" {
				t.Errorf("config.yaml (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("no http port", func(t *testing.T) {
		t.Parallel()
		m := helmTemplate(t, bin, release, "--set", "http.enabled=false")
		_, ctr := m.podSpec(t, release)
		if slices.ContainsFunc(strs(ctr["args"]), func(a string) bool { return strings.HasPrefix(a, "--http-listen") }) {
			t.Errorf("args %q serve the HTTP port", strs(ctr["args"]))
		}
		for what, ports := range map[string]map[string]any{
			"container": portsByName(ctr["ports"], "containerPort"),
			"Service":   portsByName(get(m.obj(t, "Service/toolwire"), "spec", "ports"), "port"),
		} {
			if _, ok := ports["http"]; ok {
				t.Errorf("the %s still has the port http", what)
			}
		}
		if bytes.Contains(m.yaml, []byte("port: http\n")) {
			t.Error("the NetworkPolicy still names the port http")
		}
		if hosts, ok := m.config(t, release)["http_allowed_hosts"]; ok {
			t.Errorf("config.yaml lists the HTTP port's host names, %v, with no HTTP port", hosts)
		}
	})

	t.Run("existing tokens Secret", func(t *testing.T) {
		t.Parallel()
		m := helmTemplate(t, bin, release, "--set", "tokens.existingSecret=toolwire-tokens-by-hand")
		if _, ok := m.objs["Secret/toolwire-tokens"]; ok {
			t.Error("the chart rendered a Secret although tokens.existingSecret names one")
		}
		spec, _ := m.podSpec(t, release)
		if !bytes.Contains(m.yaml, []byte("secretName: toolwire-tokens-by-hand")) {
			t.Errorf("the pods do not mount the existing Secret: volumes %v", spec["volumes"])
		}
	})

	t.Run("oidc alone: no generated token", func(t *testing.T) {
		t.Parallel()
		m := helmTemplate(t, bin, release, "-f", exampleValues)
		if tokens := m.tokens(t, "toolwire-tokens"); len(tokens) != 0 {
			t.Errorf("with auth.oidc and no tokens.callers the tokens file has %d callers, want none", len(tokens))
		}
	})
}

// TestHelmSessionUIDs checks that sandbox.sessionUIDs makes of the pod
// what components/session-uids makes of the base's: each of the
// component's JSON patch operations holds in the chart's Deployment.
func TestHelmSessionUIDs(t *testing.T) {
	t.Parallel()
	m := helmTemplate(t, helmBin(t), release, "--set", "sandbox.sessionUIDs.enabled=true")
	d := m.obj(t, "Deployment/toolwire")

	var k struct {
		Patches []struct{ Patch string }
	}
	b, err := os.ReadFile("kubernetes/components/session-uids/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil || len(k.Patches) != 1 {
		t.Fatalf("components/session-uids: want one patch (%v)", err)
	}
	var ops []struct {
		Op, Path string
		Value    any
	}
	if err := yaml.Unmarshal([]byte(k.Patches[0].Patch), &ops); err != nil || len(ops) == 0 {
		t.Fatalf("components/session-uids: patch: %v", err)
	}
	for _, op := range ops {
		var path []any
		for _, p := range strings.Split(strings.TrimPrefix(op.Path, "/"), "/") {
			var i int
			if _, err := fmt.Sscanf(p, "%d", &i); err == nil && fmt.Sprint(i) == p {
				path = append(path, i)
			} else {
				path = append(path, p)
			}
		}
		switch {
		case op.Op == "replace":
			if diff := cmp.Diff(op.Value, get(d, path...)); diff != "" {
				t.Errorf("%s (-component +chart):\n%s", op.Path, diff)
			}
		case op.Op == "add" && path[len(path)-1] == "-":
			if list := strs(get(d, path[:len(path)-1]...)); !slices.Contains(list, fmt.Sprint(op.Value)) {
				t.Errorf("%s: %q lacks %v", op.Path, list, op.Value)
			}
		default:
			t.Errorf("the component has an operation this test cannot check: %s %s", op.Op, op.Path)
		}
	}
	_, ctr := m.podSpec(t, release)
	for f, want := range map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "privileged": false} {
		if got := get(ctr, "securityContext", f); got != want {
			t.Errorf("securityContext.%s = %v, want %v as the component keeps it", f, got, want)
		}
	}
	if got := get(d, "spec", "template", "spec", "securityContext", "seccompProfile", "type"); got != "RuntimeDefault" {
		t.Errorf("seccompProfile %v, want RuntimeDefault", got)
	}
}

// TestHelmRefuses checks the values the chart refuses, with a reason.
func TestHelmRefuses(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"short token":                       {[]string{"--set", "tokens.callers.ci=short"}, "tokens.callers.ci: a token needs at least 16 characters"},
		"relative audit log":                {[]string{"--set", "audit_log=audit.log"}, "audit_log: want an absolute path"},
		"audit log in workspace":            {[]string{"--set", "audit_log=/workspace/audit.log"}, "not under /workspace"},
		"audit log in /tmp":                 {[]string{"--set", "audit_log=/tmp/audit/audit.log"}, "not under /tmp"},
		"audit log at the root":             {[]string{"--set", "audit_log=/audit.log"}, "not at the root"},
		"store port out of range":           {[]string{"--set", "store=redis://r:65536/0"}, `"65536" is not a TCP port`},
		"store port not a number":           {[]string{"--set", "store=redis://r:6379", "--set", "storeEgressPorts={redis}"}, `'redis' does not match pattern '^[0-9]+$'`},
		"grace below the shutdown":          {[]string{"--set", "terminationGracePeriodSeconds=67"}, "terminationGracePeriodSeconds 67: the pod needs more than its preStop delay (5s) and the longest shutdown of its config"},
		"replicas with the memory store":    {[]string{"--set", "replicas=3"}, `replicas 3: the memory store (store "") is each pod's own`},
		"replicas with a memory URL":        {[]string{"--set", "replicas=2", "--set", "config.store=memory://?max_bytes=1000"}, `replicas 2: the memory store`},
		"replicas with a bolt file":         {[]string{"--set", "replicas=2", "--set", "store=bolt:///data/toolwire.db"}, `replicas 2: the bolt store (store "bolt:///data/toolwire.db") is each pod's own`},
		"autoscaling with the memory store": {[]string{"--set", "autoscaling.enabled=true"}, "autoscaling.enabled: the memory store"},
		"autoscaling without a CPU request": {[]string{"--set", "autoscaling.enabled=true", "--set", "store=redis://r:6379/0", "--set", "resources=null"}, "autoscaling.enabled: the autoscaler scales on CPU use as a share of the pods' CPU request"},
		"extraArgs moving the health port":  {[]string{"--set", "extraArgs={--health-listen=:9999}"}, "extraArgs --health-listen: the chart sets --health-listen itself, from ports.health"},
		"extraArgs moving the gRPC port":    {[]string{"--set", "extraArgs={-listen,:6000}"}, "extraArgs -listen: the chart sets --listen itself, from ports.grpc"},
		"extraArgs giving the store":        {[]string{"--set", "extraArgs={--store=memory}", "--set", "store=redis://r:6379/0", "--set", "replicas=3"}, "extraArgs --store: the chart sets --store itself, from store or storeSecret"},
		"extraArgs giving the tokens file":  {[]string{"--set", "extraArgs={--tokens-file=/tmp/t}"}, "extraArgs --tokens-file: the chart sets --tokens-file itself"},
		"callers beside an existing Secret": {[]string{"--set", "tokens.existingSecret=mine", "--set", "tokens.callers.ci=0123456789abcdef0123"}, "tokens.callers and tokens.existingSecret: the pods mount the Secret"},
		"callers beside OIDC, no prefix":    {[]string{"--set", "auth.oidc.issuer=https://issuer.example.com", "--set", "tokens.callers.ci=0123456789abcdef0123"}, "tokens.callers beside auth.oidc: set auth.oidc.caller_prefix"},
		"autoscaling with a bolt file":      {[]string{"--set", "autoscaling.enabled=true", "--set", "config.store=bolt:///data/toolwire.db"}, "autoscaling.enabled: the bolt store"},
		"grace below a longer drain":        {[]string{"--set", "terminationGracePeriodSeconds=97", "--set", "config.drain_timeout=1m"}, "longest shutdown of its config (drain_timeout, abandon_grace, http_drain_timeout, then the stops and the flushes; docs/deploy.md): 97s"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := runHelm(t, bin, append([]string{"template", release, chartDir}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %q: %v; want an error saying %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestHelmSecretsStayInSecrets: what is secret (the callers' tokens, the
// one the chart generates, a store URL with its password) reaches the
// Secrets alone. Every other object (the Deployment, its pod template,
// the ConfigMap) renders the same whatever the secrets are, so nothing in
// them is a secret or derived from one (a SHA-256 of the tokens in a pod
// annotation was: anyone who may get a Deployment, ReplicaSet or Pod read
// it); and a URL with a password in a value that lands outside a Secret
// fails the render without echoing the password.
func TestHelmSecretsStayInSecrets(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, values := range [][]string{
		nil, // a generated token
		{"-f", allValues, "--set", "tokens.callers.ci=%s"},
		{"--set", "tokens.callers.ci=%s", "--set", "storeSecret.name=redis-url", "--set", "replicas=3"},
	} {
		var renders []manifest
		for _, token := range []string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"} {
			args := slices.Clone(values)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "%s", token)
			}
			renders = append(renders, helmTemplate(t, bin, release, args...))
		}
		for key, obj := range renders[0].objs {
			if obj["kind"] == "Secret" {
				continue
			}
			if diff := cmp.Diff(obj, renders[1].objs[key]); diff != "" {
				t.Errorf("helm template %q: %s changes with the tokens (-one +other):\n%s", values, key, diff)
			}
		}
		if len(renders[0].objs) != len(renders[1].objs) {
			t.Errorf("helm template %q: %d objects, then %d", values, len(renders[0].objs), len(renders[1].objs))
		}
	}

	for _, tc := range []struct{ name, args, want string }{
		{"store", "store=redis://:s3cret-pw@redis:6379/0", "store holds a URL with a password (redis://:xxxxx@)"},
		{"config.store", "config.store=rediss://toolwire:s3cret-pw@redis:6380/0", "config holds a URL with a password (rediss://toolwire:xxxxx@)"},
		{"extraArgs", "extraArgs={--store=redis+cluster://u:s3cret-pw@a:7000}", "extraArgs holds a URL with a password"},
		{"extraEnv", "extraEnv[0].name=REDIS,extraEnv[0].value=redis://:s3cret-pw@r", "extraEnv holds a URL with a password"},
		{"otlp.endpoint", "otlp.endpoint=https://user:s3cret-pw@otel.example.com:4318", "otlp.endpoint holds a URL with a password"},
		{"store and storeSecret", "store=redis://r:6379,storeSecret.name=redis-url", "storeSecret.name and store (or config.store): give the store's URL in one place"},
	} {
		t.Run("refuses a password in "+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := runHelm(t, bin, "template", release, chartDir, "--set", tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %s: %v; want an error saying %q", tc.args, err, tc.want)
			}
			// What helm printed, after runHelm's line naming the arguments.
			if _, printed, _ := strings.Cut(fmt.Sprint(err), "\n"); strings.Contains(printed, "s3cret-pw") {
				t.Errorf("the error prints the password: %s", printed)
			}
		})
	}
}

// TestHelmStoreSecret: with storeSecret the store's URL reaches the server
// from the Secret through the container's environment, as the kubelet
// expands $(TOOLWIRE_STORE) in the arguments, and the NetworkPolicy opens
// the ports it cannot read from the URL: storeEgressPorts, or 6379.
func TestHelmStoreSecret(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, tc := range []struct {
		args  []string
		ports []float64
	}{
		{[]string{"--set", "storeSecret.name=redis-url", "--set", "replicas=3"}, []float64{6379}},
		{[]string{"--set", "storeSecret.name=redis-url", "--set", "storeSecret.key=store", "--set", "storeEgressPorts={7000,7001}", "--set", "autoscaling.enabled=true"}, []float64{7000, 7001}},
	} {
		m := helmTemplate(t, bin, release, tc.args...)
		spec, ctr := m.podSpec(t, release)
		if got := strs(ctr["args"]); !slices.Contains(got, "--store=$(TOOLWIRE_STORE)") {
			t.Errorf("helm template %q: args %q, want --store=$(TOOLWIRE_STORE)", tc.args, got)
		}
		key := "url"
		if slices.Contains(tc.args, "storeSecret.key=store") {
			key = "store"
		}
		var ref any
		for _, e := range ctr["env"].([]any) {
			if get(e, "name") == "TOOLWIRE_STORE" {
				ref = get(e, "valueFrom", "secretKeyRef")
			}
		}
		if diff := cmp.Diff(map[string]any{"name": "redis-url", "key": key}, ref); diff != "" {
			t.Errorf("helm template %q: TOOLWIRE_STORE (-want +got):\n%s", tc.args, diff)
		}
		if get(spec, "strategy") != nil {
			t.Fatal("strategy is the Deployment's, not the pod's")
		}
		if got := get(m.obj(t, "Deployment/toolwire"), "spec", "strategy", "type"); got != "RollingUpdate" {
			t.Errorf("helm template %q: strategy %v, want RollingUpdate", tc.args, got)
		}
		var got []float64
		for _, rule := range get(m.obj(t, "NetworkPolicy/toolwire"), "spec", "egress").([]any) {
			for _, p := range get(rule, "ports").([]any) {
				if port := get(p, "port").(float64); port != 53 {
					got = append(got, port)
				}
			}
		}
		if !slices.Equal(got, tc.ports) {
			t.Errorf("helm template %q: egress to ports %v, want %v", tc.args, got, tc.ports)
		}
		checkVarRefs(t, ctr)
	}
}

// checkVarRefs: each $(NAME) in the container's arguments and variables
// names one of its variables (defined before it, for a variable's value),
// as the kubelet expands them; it leaves an unknown one as it is, and the
// server would be handed "$(NAME)".
func checkVarRefs(t *testing.T, ctr map[string]any) {
	t.Helper()
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	defined := map[string]bool{}
	for _, e := range ctr["env"].([]any) {
		if v, ok := get(e, "value").(string); ok {
			for _, m := range ref.FindAllStringSubmatch(v, -1) {
				if !defined[m[1]] {
					t.Errorf("variable %v refers to $(%s), not defined before it", get(e, "name"), m[1])
				}
			}
		}
		defined[fmt.Sprint(get(e, "name"))] = true
	}
	for _, a := range strs(ctr["args"]) {
		for _, m := range ref.FindAllStringSubmatch(a, -1) {
			if !defined[m[1]] {
				t.Errorf("argument %q refers to $(%s), which the container does not define", a, m[1])
			}
		}
	}
}

// TestHelmSchema: values.schema.json refuses the values an operator gets
// wrong, which the chart rendered without a word before (a misspelt key
// was ignored, "false" as a string turned a switch on, a
// PodDisruptionBudget of 0 blocked every node drain, an unknown sandbox
// mode stopped the pods at start), and it names every value of
// values.yaml and no other, so a value added to one is added to the other.
func TestHelmSchema(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, tc := range []struct{ name, want string }{
		{"replica=3", "additional properties 'replica' not allowed"},
		{"tokens.caller.ci=0123456789abcdef0123", "at '/tokens': additional properties 'caller' not allowed"},
		{"podDisruptionBudget.maxUnavailable=0", "at '/podDisruptionBudget/maxUnavailable': minimum: got 0, want 1"},
		{"podDisruptionBudget.maxUnavailable=0%", "at '/podDisruptionBudget/maxUnavailable'"},
		{"sandbox.mode=strict", "at '/sandbox/mode': value must be one of 'auto', 'required', 'off'"},
		{"replicas=-1", "at '/replicas': minimum: got -1, want 0"},
		{"ports.grpc=70000", "at '/ports/grpc': maximum: got 70,000, want 65,535"},
		{"image.pullPolicy=Sometimes", "at '/image/pullPolicy'"},
		{"autoscaling.targetCPUUtilizationPercentage=170", "at '/autoscaling/targetCPUUtilizationPercentage'"},
		{"workspace.sizeLimit=lots", "at '/workspace/sizeLimit'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := runHelm(t, bin, "template", release, chartDir, "--set", tc.name)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %s: %v; want an error saying %q", tc.name, err, tc.want)
			}
		})
	}
	for _, set := range []string{"http.enabled=false", "headlessService.enabled=false"} {
		if _, err := runHelm(t, bin, "template", release, chartDir, "--set-string", set); err == nil || !strings.Contains(err.Error(), "got string, want boolean") {
			t.Errorf("helm template --set-string %s: %v; want the schema's refusal of a string", set, err)
		}
	}

	// Every key of values.yaml has its entry in the schema, down to the
	// objects the schema leaves open (config, resources, …); and the
	// schema names no top-level value that values.yaml does not.
	var schema map[string]any
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	values := readYAMLFile(t, filepath.Join(chartDir, "values.yaml"))
	var walk func(path string, v, node map[string]any)
	walk = func(path string, v, node map[string]any) {
		props, ok := node["properties"].(map[string]any)
		if !ok {
			return // an object the schema leaves open
		}
		for k, vv := range v {
			sub, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.yaml's %s%s is not in values.schema.json", path, k)
				continue
			}
			if m, ok := vv.(map[string]any); ok {
				walk(path+k+".", m, sub)
			}
		}
	}
	walk("", values, schema)
	for k := range schema["properties"].(map[string]any) {
		if _, ok := values[k]; !ok && k != "global" && k != "storeEgressPort" {
			t.Errorf("values.schema.json names %s, which values.yaml does not", k)
		}
	}
}

// TestHelmSpread: with more than one replica, or autoscaling, and no
// topologySpreadConstraints of the operator's, the pods spread as the
// replicated overlay's do (maxSkew 1 over nodes and over zones), selected
// by the chart's own labels; one replica gets none, as the base; the
// operator's replace them.
func TestHelmSpread(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	overlay := readYAMLFile(t, "kubernetes/overlays/replicated/deployment.yaml")
	want, _ := get(overlay, "spec", "template", "spec", "topologySpreadConstraints").([]any)
	for _, c := range want { // the chart selects its release's pods
		get(c, "labelSelector", "matchLabels").(map[string]any)["app.kubernetes.io/instance"] = release
	}
	for _, tc := range []struct {
		args []string
		want any
	}{
		{nil, nil},
		{[]string{"--set", "store=redis://r:6379/0", "--set", "replicas=3"}, want},
		{[]string{"--set", "store=redis://r:6379/0", "--set", "autoscaling.enabled=true"}, want},
		{[]string{"--set", "store=redis://r:6379/0", "--set", "replicas=3", "--set-json", `topologySpreadConstraints=[{"maxSkew":2,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule"}]`},
			[]any{map[string]any{"maxSkew": 2.0, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}}},
	} {
		spec, _ := helmTemplate(t, bin, release, tc.args...).podSpec(t, release)
		if diff := cmp.Diff(tc.want, spec["topologySpreadConstraints"]); diff != "" {
			t.Errorf("helm template %q: topologySpreadConstraints (-want +got):\n%s", tc.args, diff)
		}
	}
}

// TestHelmAdminPortStaysInside: the admin port (/metrics, and
// /debug/pprof/'s profiles and traces, which answer anyone who reaches
// them) is on no Service reachable from outside the cluster. With
// service.type LoadBalancer the chart put port 9090 on the load balancer
// beside gRPC and HTTP, kept from the internet only by the NetworkPolicy,
// where the cluster enforces one. A NodePort or LoadBalancer Service now
// leaves it out, and the headless Service carries it (and the
// prometheus.io annotations) for scrapes.
func TestHelmAdminPortStaysInside(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, typ := range []string{"ClusterIP", "NodePort", "LoadBalancer"} {
		m := helmTemplate(t, bin, release, "--set", "service.type="+typ)
		scraped := 0
		for _, key := range []string{"Service/toolwire", "Service/toolwire-headless"} {
			svc := m.obj(t, key)
			ports := portsByName(get(svc, "spec", "ports"), "port")
			_, metrics := ports["metrics"]
			inside := get(svc, "spec", "type") == nil || get(svc, "spec", "type") == "ClusterIP"
			if metrics && !inside {
				t.Errorf("service.type %s: %s, of type %v, carries the metrics port", typ, key, get(svc, "spec", "type"))
			}
			annotated := get(svc, "metadata", "annotations", "prometheus.io/port") != nil
			if annotated != metrics {
				t.Errorf("service.type %s: %s has the metrics port %v but prometheus.io annotations %v", typ, key, metrics, annotated)
			}
			if metrics {
				scraped++
			}
		}
		if scraped != 1 {
			t.Errorf("service.type %s: %d Services carry the metrics port, want 1", typ, scraped)
		}
	}
}

// TestHelmRollout: a store in a pod (bolt) rolls by Recreate, since a
// second pod finds the file locked and exits (with RollingUpdate and
// maxUnavailable 0 the rollout never ends); the other stores roll a new
// pod in before an old one goes; a shared store takes replicas.
func TestHelmRollout(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, tc := range []struct {
		args     []string
		strategy string
	}{
		{nil, "RollingUpdate"},
		{[]string{"--set", "store=memory"}, "RollingUpdate"},
		{[]string{"--set", "store=bolt:///data/toolwire.db"}, "Recreate"},
		{[]string{"--set", "config.store=bolt:///data/toolwire.db"}, "Recreate"},
		{[]string{"--set", "store=redis://redis:6379/0", "--set", "replicas=3"}, "RollingUpdate"},
		{[]string{"--set", "store=redis+cluster://a:7000", "--set", "autoscaling.enabled=true"}, "RollingUpdate"},
	} {
		d := helmTemplate(t, bin, release, tc.args...).obj(t, "Deployment/toolwire")
		if got := get(d, "spec", "strategy", "type"); got != tc.strategy {
			t.Errorf("helm template %q: strategy %v, want %s", tc.args, got, tc.strategy)
		}
		if tc.strategy == "Recreate" && get(d, "spec", "strategy", "rollingUpdate") != nil {
			t.Errorf("helm template %q: Recreate with rollingUpdate %v, which the API server refuses", tc.args, get(d, "spec", "strategy", "rollingUpdate"))
		}
	}
}

// TestHelmGracePeriod: left unset, the pod's grace period is computed from
// the config and extraArgs, as the server computes its longest shutdown
// (TestHelmConfigBootsServer holds the two together): the preStop delay
// (5s), max(drain_timeout + abandon_grace + 10s, http_drain_timeout),
// 20s of stops and flushes, and 8s more; a value set is kept.
func TestHelmGracePeriod(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, tc := range []struct {
		args []string
		want float64
	}{
		{nil, 5 + 42 + 20 + 8},
		{[]string{"--set", "config.drain_timeout=2m"}, 5 + 132 + 20 + 8},
		{[]string{"--set", "config.drain_timeout=1m30s", "--set", "extraArgs={--abandon-grace=1500ms}"}, 5 + 102 + 20 + 8},
		{[]string{"--set", "extraArgs={--drain-timeout=45s}"}, 5 + 57 + 20 + 8},
		{[]string{"--set", "extraArgs={--drain-timeout,45s,-abandon-grace,3s}"}, 5 + 58 + 20 + 8},
		{[]string{"--set", "config.http_drain_timeout=90s"}, 5 + 90 + 20 + 8},
		{[]string{"--set", "config.drain_timeout=500ms"}, 5 + 30 + 20 + 8},
		{[]string{"--set", "terminationGracePeriodSeconds=200"}, 200},
	} {
		spec, _ := helmTemplate(t, bin, release, tc.args...).podSpec(t, "toolwire")
		if got := spec["terminationGracePeriodSeconds"]; got != tc.want {
			t.Errorf("helm template %q: terminationGracePeriodSeconds %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestHelmStorePorts: the NetworkPolicy lets the pods reach every port the
// store URL names, each node of a cluster's, 6379 for a host that names
// none, and storeEgressPorts (and the single storeEgressPort of older
// values files), once each, in order; and no store port when the store is
// not Redis.
func TestHelmStorePorts(t *testing.T) {
	t.Parallel()
	bin := helmBin(t)
	for _, tc := range []struct {
		store string
		more  string // values YAML added
		want  []float64
	}{
		{"redis://redis.store:6380/1", "", []float64{6380}},
		{"redis://redis.store", "", []float64{6379}},
		{"rediss://user@[fd00::1]:6390/0?dial_timeout=2s", "", []float64{6390}},
		{"redis+cluster://a:7000,b:7001,c:7002", "", []float64{7000, 7001, 7002}},
		{"rediss+cluster://u@a:7002,b,[fd00::2]:7000/0?max_redirects=3", "storeEgressPorts: [7005, \"7003\", 7000]", []float64{6379, 7000, 7002, 7003, 7005}},
		{"redis://r:6380/0", "storeEgressPort: 6381", []float64{6380, 6381}},
		{"bolt:///data/toolwire.db", "storeEgressPorts: [7000]", nil},
		{"memory", "", nil},
		{"", "config: {store: \"redis+cluster://a:7000,b:7001\"}", []float64{7000, 7001}}, // the URL in the config file instead
	} {
		// helm -f splits its argument at commas: the subtest's name, in
		// its temporary folder's, has none.
		t.Run(strings.ReplaceAll(tc.store, ",", " "), func(t *testing.T) {
			t.Parallel()
			values := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(values, fmt.Appendf(nil, "store: %q\n%s\n", tc.store, tc.more), 0o600); err != nil {
				t.Fatal(err)
			}
			m := helmTemplate(t, bin, release, "-f", values)
			var got []float64
			for _, rule := range get(m.obj(t, "NetworkPolicy/toolwire"), "spec", "egress").([]any) {
				for _, p := range get(rule, "ports").([]any) {
					if port := get(p, "port").(float64); port != 53 {
						got = append(got, port)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("store %q, %s: egress to ports %v, want %v", tc.store, tc.more, got, tc.want)
			}
		})
	}
}

// TestHelmExampleAsDocumented holds docs/deploy.md's blocks of the worked
// example to the example's files: each key of the page's values block is
// the example values file's, and the page's volume is the agent pod's.
func TestHelmExampleAsDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	var doc, example map[string]any
	if err := yaml.Unmarshal([]byte(docYAML(t, string(page), "auth:\n  oidc:")), &doc); err != nil {
		t.Fatal(err)
	}
	example = readYAMLFile(t, exampleValues)
	for k, v := range doc {
		if k == "kubernetesIssuer" || k == "auth" {
			// The page shows a part of these: compare what it shows.
			for kk, vv := range v.(map[string]any) {
				if diff := cmp.Diff(vv, get(example, k, kk)); diff != "" {
					t.Errorf("%s.%s: docs/deploy.md differs from %s (-page +file):\n%s", k, kk, exampleValues, diff)
				}
			}
			continue
		}
		if diff := cmp.Diff(v, example[k]); diff != "" {
			t.Errorf("%s: docs/deploy.md differs from %s (-page +file):\n%s", k, exampleValues, diff)
		}
	}

	var docVolumes struct{ Volumes []any }
	if err := yaml.Unmarshal([]byte(docYAML(t, string(page), "volumes:\n  - name: toolwire-token")), &docVolumes); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("helm/examples/agent-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var podVolumes any
	for _, d := range docSeparator.Split(string(b), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatal(err)
		}
		if obj["kind"] == "Pod" {
			podVolumes = get(obj, "spec", "volumes")
		}
	}
	if diff := cmp.Diff(any(docVolumes.Volumes), podVolumes); diff != "" {
		t.Errorf("the token volume of docs/deploy.md differs from agent-pod.yaml's (-page +file):\n%s", diff)
	}
}

// TestWorkspaceBoundBelowVolumes: the base's and the chart's
// sandbox.max_workspace_bytes, which holds write_file, edit_file and
// commands (the workspace and a call's TMPDIR together), is below the
// sizeLimit of the /workspace and /tmp emptyDirs, past which the kubelet
// evicts the pod: the server cannot see that limit (statfs shows the
// node's disk), so this bound is what keeps a model's writes from
// evicting every caller's calls.
func TestWorkspaceBoundBelowVolumes(t *testing.T) {
	t.Parallel()
	check := func(name string, spec, cfg map[string]any) {
		bound, ok := get(cfg, "sandbox", "max_workspace_bytes").(float64)
		if !ok {
			t.Errorf("%s: no sandbox.max_workspace_bytes; its default (8 GiB) passes the volumes' sizeLimit", name)
			return
		}
		volumes, _ := get(spec, "volumes").([]any)
		seen := 0
		for _, v := range volumes {
			vol, _ := v.(map[string]any)
			if vol["name"] != "workspace" && vol["name"] != "tmp" {
				continue
			}
			seen++
			limit := quantityBytes(t, fmt.Sprint(get(vol, "emptyDir", "sizeLimit")))
			if int64(bound) >= limit {
				t.Errorf("%s: sandbox.max_workspace_bytes %d is not below the %s volume's sizeLimit (%d bytes)", name, int64(bound), vol["name"], limit)
			}
		}
		if seen != 2 {
			t.Errorf("%s: %d of the workspace and tmp volumes found", name, seen)
		}
	}
	base := readYAMLFile(t, "kubernetes/base/deployment.yaml")
	spec, _ := get(base, "spec", "template", "spec").(map[string]any)
	check("base", spec, readYAMLFile(t, "kubernetes/base/config.yaml"))
	bin := helmBin(t)
	m := helmTemplate(t, bin, release)
	spec, _ = m.podSpec(t, release)
	check("chart", spec, m.config(t, release))

	// The chart holds the values an operator sets to the same rule: a
	// smaller volume, or the bound left to the server's 8 GiB, rendered a
	// pod that a model's writes evict.
	for _, tc := range []struct{ args, want string }{
		{"workspace.sizeLimit=512Mi", "sandbox.max_workspace_bytes 805306368 (8 GiB when unset) is not below workspace.sizeLimit 512Mi (536870912 bytes)"},
		{"workspace.sizeLimit=805306368", "is not below workspace.sizeLimit 805306368 (805306368 bytes)"},
		{"sandbox.max_workspace_bytes=null", "sandbox.max_workspace_bytes 8589934592 (8 GiB when unset) is not below workspace.sizeLimit 1Gi"},
	} {
		_, err := runHelm(t, bin, "template", release, chartDir, "--set", tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template --set %s: %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--set", "workspace.sizeLimit=10Gi", "--set", "sandbox.max_workspace_bytes=null"},
		{"--set", "workspace.sizeLimit=1536Mi", "--set", "sandbox.max_workspace_bytes=1073741824"},
	} {
		m := helmTemplate(t, bin, release, args...)
		spec, _ := m.podSpec(t, release)
		cfg := m.config(t, release)
		if _, ok := get(cfg, "sandbox", "max_workspace_bytes").(float64); !ok {
			get(cfg, "sandbox").(map[string]any)["max_workspace_bytes"] = float64(8 << 30) // the server's default
		}
		check(fmt.Sprintf("chart %q", args), spec, cfg)
	}
}

// TestGoMemLimit: the pods' GOMEMLIMIT is nine tenths of their memory
// limit, in the base and as the chart computes it from
// resources.limits.memory in any unit; none without a limit, and the
// operator's own through extraEnv. Without it the heap grows to twice
// what is live, past the limit (the server reported a memory limit of
// math.MaxInt64, go_gc_gomemlimit_bytes 9.22e18, under the 512Mi one).
// TestHelmConfigBootsServer starts the server with the variable, which Go
// refuses to start with if it does not parse.
func TestGoMemLimit(t *testing.T) {
	t.Parallel()
	env := func(ctr map[string]any, name string) []string {
		var vals []string
		for _, e := range ctr["env"].([]any) {
			if get(e, "name") == name {
				vals = append(vals, fmt.Sprint(get(e, "value")))
			}
		}
		return vals
	}
	base := readYAMLFile(t, "kubernetes/base/deployment.yaml")
	ctr, _ := get(base, "spec", "template", "spec", "containers", 0).(map[string]any)
	limit := quantityBytes(t, fmt.Sprint(get(ctr, "resources", "limits", "memory")))
	if got, want := env(ctr, "GOMEMLIMIT"), []string{fmt.Sprintf("%dMiB", limit*9/10>>20)}; !slices.Equal(got, want) {
		t.Errorf("base: GOMEMLIMIT %q, want %q (nine tenths of limits.memory, %d bytes)", got, want, limit)
	}

	bin := helmBin(t)
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"", []string{"460MiB"}},
		{"resources: {limits: {memory: 1Gi}}", []string{"921MiB"}},
		{"resources: {limits: {memory: 1.5Gi}}", []string{"1382MiB"}},
		{"resources: {limits: {memory: 2G}}", []string{"1716MiB"}},
		{"resources: {limits: {memory: 536870912}}", []string{"460MiB"}},
		{"resources: {limits: {memory: null}}", nil},
		{"resources: null", nil},
		{"extraEnv: [{name: GOMEMLIMIT, value: 300MiB}]", []string{"300MiB"}},
	} {
		values := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(values, []byte(tc.values), 0o600); err != nil {
			t.Fatal(err)
		}
		_, ctr := helmTemplate(t, bin, release, "-f", values).podSpec(t, release)
		if got := env(ctr, "GOMEMLIMIT"); !slices.Equal(got, tc.want) {
			t.Errorf("values %q: GOMEMLIMIT %q, want %q", tc.values, got, tc.want)
		}
	}
	if _, err := runHelm(t, bin, "template", release, chartDir, "--set", "resources.limits.memory=lots"); err == nil || !strings.Contains(err.Error(), `resources.limits.memory "lots": want a number of bytes`) {
		t.Errorf("a memory limit that is not a quantity: %v", err)
	}
}

// TestStartupProbe: liveness does not restart a pod that is still
// starting. The health port listens once serve has opened its store and
// loaded its sources, each fetched at start for up to 30 s, one after
// another (two OpenAPI documents served 20 s late: health listening 40 s
// in), while the liveness probe's third failure comes 25 s in. A startup
// probe on the health port holds liveness and readiness back for 300 s,
// in the base and in the chart (whose pod spec TestHelmDefaults holds to
// the base's; here, its ports follow ports.health).
func TestStartupProbe(t *testing.T) {
	t.Parallel()
	check := func(name string, ctr map[string]any, port float64) {
		num := func(probe, field string, def float64) float64 {
			if v, ok := get(ctr, probe, field).(float64); ok {
				return v
			}
			return def // the API server's default
		}
		if got := get(ctr, "startupProbe", "grpc", "port"); got != port {
			t.Errorf("%s: startupProbe on the gRPC health port %v, want %v", name, got, port)
			return
		}
		liveness := num("livenessProbe", "initialDelaySeconds", 0) + num("livenessProbe", "periodSeconds", 10)*num("livenessProbe", "failureThreshold", 3)
		startup := num("startupProbe", "periodSeconds", 10) * num("startupProbe", "failureThreshold", 3)
		if startup < 300 || startup <= liveness {
			t.Errorf("%s: the startup probe waits %vs (liveness alone %vs); want 300s at least", name, startup, liveness)
		}
	}
	base := readYAMLFile(t, "kubernetes/base/deployment.yaml")
	ctr, _ := get(base, "spec", "template", "spec", "containers", 0).(map[string]any)
	check("base", ctr, 8081)
	_, ctr = helmTemplate(t, helmBin(t), release, "--set", "ports.health=8091").podSpec(t, release)
	check("chart", ctr, 8091)
}

// quantityBytes reads a Kubernetes quantity with a binary suffix ("1Gi").
func quantityBytes(t *testing.T, q string) int64 {
	t.Helper()
	for i, suffix := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("sizeLimit %q: %v", q, err)
			}
			return v << (10 * (i + 1))
		}
	}
	t.Fatalf("sizeLimit %q: want a number with Ki, Mi, Gi or Ti", q)
	return 0
}
