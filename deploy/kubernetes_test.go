package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// The manifests are checked by a real kube-apiserver (with etcd) on
// loopback: server-side dry-run with strict field validation runs the
// API's own decoding, defaulting, validation and admission, which no
// schema linter matches. kubernetes/test/build-kube.sh builds the three
// programs from their Go modules and prints their folder; .ci/run exports
// it as KubeBinVar.

// KubeBinVar names the folder holding kube-apiserver, etcd and kubectl.
const KubeBinVar = "TOOLWIRE_KUBE_BIN"

// namespace is the overlays' namespace (and the base's, through the
// kubeconfig's context).
const namespace = "toolwire"

// cluster is a running etcd and kube-apiserver, and kubectl configured for
// them.
type cluster struct {
	bin        string
	dir        string
	kubeconfig string
}

func kubeBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(KubeBinVar)
	if dir == "" {
		testenv.Missing(t, KubeBinVar+" (the folder deploy/kubernetes/test/build-kube.sh prints, with kube-apiserver, etcd and kubectl)")
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
			testenv.Missing(t, fmt.Sprintf("the program %s in %s=%s", name, KubeBinVar, dir))
		}
	}
	return dir
}

func TestManifestsAgainstAPIServer(t *testing.T) {
	c := startCluster(t, kubeBin(t))

	t.Run("server version", func(t *testing.T) {
		// kubectl parses the server's version; a build without the version
		// ldflags reports v0.0.0-master, which this catches.
		out := c.kubectl(t, "version", "-o", "json")
		var v struct {
			ServerVersion struct {
				GitVersion, Major, Minor string
			}
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("kubectl version: %v\n%s", err, out)
		}
		want := pinnedKubeVersion(t)
		if got := v.ServerVersion; got.GitVersion != want || got.Major != "1" || !strings.HasPrefix(want, "v1."+got.Minor+".") {
			t.Errorf("server version = %+v, want %s", got, want)
		}
	})

	overlays, err := filepath.Glob("kubernetes/overlays/*")
	if err != nil || len(overlays) < 2 {
		t.Fatalf("overlays: %q, %v", overlays, err)
	}
	common := []string{"ConfigMap/toolwire-config", "Deployment/toolwire", "NetworkPolicy/toolwire", "Service/toolwire", "Service/toolwire-headless", "ServiceAccount/toolwire"}
	wantObjects := map[string][]string{
		"kubernetes/base":                common,
		"kubernetes/overlays/single":     append(slices.Clone(common), "PersistentVolumeClaim/toolwire-data"),
		"kubernetes/overlays/replicated": append(slices.Clone(common), "Deployment/redis", "HorizontalPodAutoscaler/toolwire", "NetworkPolicy/redis", "NetworkPolicy/toolwire-to-redis", "PodDisruptionBudget/toolwire", "Service/redis"),
	}
	for _, dir := range append([]string{"kubernetes/base"}, overlays...) {
		t.Run("accepts "+dir, func(t *testing.T) {
			want, ok := wantObjects[dir]
			if !ok {
				t.Fatalf("a new overlay %s: list the objects it makes in this test", dir)
			}
			out, warnings := c.kubectlStderr(t, "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-k", dir)
			if len(warnings) > 0 {
				// Such as "would violate PodSecurity restricted:latest".
				t.Errorf("the API server warned:\n%s", warnings)
			}
			objs := decodeList(t, out)
			var got []string
			for _, o := range objs {
				got = append(got, o.Kind+"/"+strings.TrimSuffix(hashSuffix.ReplaceAllString(o.Metadata.Name, ""), "-"))
				if o.Metadata.Namespace != "" && o.Metadata.Namespace != namespace {
					t.Errorf("%s/%s is in namespace %q, want %q", o.Kind, o.Metadata.Name, o.Metadata.Namespace, namespace)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("objects the server accepted:\n got %q\nwant %q", got, want)
			}
			checkServerDeployment(t, objs, "toolwire")
		})
	}

	t.Run("the session-uids component: baseline, not restricted", func(t *testing.T) {
		// The strongest sandbox profile runs the server as root with six
		// capabilities: the baseline Pod Security Standard admits it, the
		// restricted one does not (docs/security.md, "Profiles").
		root := t.TempDir()
		if err := os.CopyFS(root, os.DirFS("kubernetes")); err != nil {
			t.Fatal(err)
		}
		overlay := filepath.Join(root, "overlays", "uids")
		if err := os.MkdirAll(overlay, 0o755); err != nil {
			t.Fatal(err)
		}
		kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources: [../../base]\ncomponents: [../../components/session-uids]\n"
		const baseline = "toolwire-uids"
		c.kubectl(t, "create", "namespace", baseline)
		c.kubectl(t, "label", "namespace", baseline, "pod-security.kubernetes.io/enforce=baseline", "pod-security.kubernetes.io/warn=baseline")
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(kust, baseline)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, warnings := c.kubectlStderr(t, "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-k", overlay)
		if len(warnings) > 0 {
			t.Errorf("the API server warned in a baseline namespace:\n%s", warnings)
		}
		var found bool
		for _, o := range decodeList(t, out) {
			if o.Kind != "Deployment" || o.Metadata.Name != "toolwire" {
				continue
			}
			found = true
			var spec struct {
				Template struct {
					Spec struct {
						SecurityContext struct{ RunAsUser *int }
						Containers      []struct {
							Args            []string
							SecurityContext struct {
								AllowPrivilegeEscalation *bool
								Capabilities             struct{ Add, Drop []string }
							}
						}
					}
				}
			}
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			ctr := spec.Template.Spec.Containers[0]
			if u := spec.Template.Spec.SecurityContext.RunAsUser; u == nil || *u != 0 {
				t.Errorf("runAsUser %v; want 0", u)
			}
			if got, want := ctr.SecurityContext.Capabilities.Add, []string{"SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"}; !slices.Equal(got, want) || !slices.Equal(ctr.SecurityContext.Capabilities.Drop, []string{"ALL"}) {
				t.Errorf("capabilities add %q drop %q; want add %q drop ALL", got, ctr.SecurityContext.Capabilities.Drop, want)
			}
			if p := ctr.SecurityContext.AllowPrivilegeEscalation; p == nil || *p {
				t.Error("the component lets the server escalate privileges")
			}
			for _, a := range []string{"--workspace-per-session", "--sandbox-uid-range=100000-165535", "--sandbox=required"} {
				if !slices.Contains(ctr.Args, a) {
					t.Errorf("args %q lack %s", ctr.Args, a)
				}
			}
		}
		if !found {
			t.Fatal("no Deployment toolwire")
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(kust, namespace)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, warnings := c.kubectlStderr(t, "apply", "--dry-run=server", "-o", "json", "-k", overlay); !strings.Contains(string(warnings), "restricted") {
			t.Errorf("in the restricted namespace the API server did not warn:\n%s", warnings)
		}
	})

	t.Run("accepts an overlay edited as docs/deploy.md says", func(t *testing.T) {
		// The operator names the image and adds the otlp component in the
		// overlay's kustomization.yaml, by hand, with the page's blocks.
		root := t.TempDir()
		if err := os.CopyFS(root, os.DirFS("kubernetes")); err != nil {
			t.Fatal(err)
		}
		page, err := os.ReadFile("../docs/deploy.md")
		if err != nil {
			t.Fatal(err)
		}
		overlay := filepath.Join(root, "overlays", "replicated")
		k, err := os.OpenFile(filepath.Join(overlay, "kustomization.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"images:", "components:"} {
			if _, err := io.WriteString(k, "\n"+docYAML(t, string(page), key)); err != nil {
				t.Fatal(err)
			}
		}
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}

		out, warnings := c.kubectlStderr(t, "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-k", overlay)
		if len(warnings) > 0 {
			t.Errorf("the API server warned:\n%s", warnings)
		}
		objs := decodeList(t, out)
		var otlp *object
		for i, o := range objs {
			if o.Kind == "NetworkPolicy" && o.Metadata.Name == "toolwire-otlp" {
				otlp = &objs[i]
			}
		}
		if otlp == nil {
			t.Fatal("no NetworkPolicy toolwire-otlp: the otlp component was not applied")
		}
		if otlp.Metadata.Namespace != namespace {
			t.Errorf("NetworkPolicy toolwire-otlp is in namespace %q, want %q", otlp.Metadata.Namespace, namespace)
		}
		var policy struct {
			PodSelector struct{ MatchLabels map[string]string }
			Egress      []struct {
				Ports []struct {
					Port     int
					Protocol string
				}
			}
		}
		if err := json.Unmarshal(otlp.Spec, &policy); err != nil {
			t.Fatal(err)
		}
		if policy.PodSelector.MatchLabels["app.kubernetes.io/name"] != "toolwire" {
			t.Errorf("toolwire-otlp selects %v, not toolwire's pods", policy.PodSelector.MatchLabels)
		}
		var ports []string
		for _, e := range policy.Egress {
			for _, p := range e.Ports {
				ports = append(ports, fmt.Sprintf("%s/%d", p.Protocol, p.Port))
			}
		}
		if want := []string{"TCP/4317", "TCP/4318"}; !slices.Equal(ports, want) {
			t.Errorf("toolwire-otlp lets out %q, want OTLP's %q", ports, want)
		}
		if got, want := deploymentImage(t, objs), "registry.example.com/toolwire:v0.1.0"; got != want {
			t.Errorf("the Deployment runs image %q, want %q as docs/deploy.md names it", got, want)
		}
	})

	// The Helm chart's renders, on the same server (helm_test.go).
	t.Run("helm chart", func(t *testing.T) { helmAgainstAPIServer(t, c) })

	broken, err := filepath.Glob("kubernetes/test/broken/*")
	if err != nil || len(broken) == 0 {
		t.Fatalf("broken manifests: %q, %v", broken, err)
	}
	// What the server must say, so a rejection for another reason (a
	// missing namespace, a kustomize error) does not pass for the right one.
	wantError := map[string]*regexp.Regexp{
		"unknown-field": regexp.MustCompile(`unknown field "spec\.template\.spec\.containers\[0\]\.readinessProbe\.grpc\.serviceName"`),
		"wrong-type":    regexp.MustCompile(`cannot unmarshal string into Go struct field \S*terminationGracePeriodSeconds of type int64`),
	}
	for _, dir := range broken {
		name := filepath.Base(dir)
		t.Run("rejects "+name, func(t *testing.T) {
			re, ok := wantError[name]
			if !ok {
				t.Fatalf("a new broken manifest %s: say in this test what the server must answer", dir)
			}
			// It must build, so that what refuses it is the API server.
			c.kubectl(t, "kustomize", dir)
			out, err := c.run("apply", "--dry-run=server", "--validate=strict", "-k", dir)
			if err == nil {
				t.Fatalf("the API server accepted %s:\n%s", dir, out)
			}
			if !re.Match(out) {
				t.Errorf("kubectl failed, but not for the broken field (want %q):\n%s", re, out)
			}
		})
	}
}

// hashSuffix is the content hash kustomize appends to generated names.
var hashSuffix = regexp.MustCompile(`-[a-z0-9]{10}$`)

// object is the part of an API object these tests read.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

func decodeList(t *testing.T, out []byte) []object {
	t.Helper()
	var list struct {
		Kind  string   `json:"kind"`
		Items []object `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil || list.Kind != "List" {
		t.Fatalf("kubectl apply -o json: want a List (%v):\n%.2000s", err, out)
	}
	return list.Items
}

// checkServerDeployment checks that the API server kept, in the
// Deployment name, the fields that an older or differently configured
// server drops silently (a disabled feature's fields are cleared, not
// refused).
func checkServerDeployment(t *testing.T, objs []object, name string) {
	t.Helper()
	for _, o := range objs {
		if o.Kind != "Deployment" || o.Metadata.Name != name {
			continue
		}
		var spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name           string
						ReadinessProbe struct{ GRPC *struct{ Port int } }
						LivenessProbe  struct{ GRPC *struct{ Port int } }
						StartupProbe   struct{ GRPC *struct{ Port int } }
						Lifecycle      struct {
							PreStop struct{ Sleep *struct{ Seconds int } }
						}
					}
				}
			}
		}
		if err := json.Unmarshal(o.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		for _, ctr := range spec.Template.Spec.Containers {
			if ctr.Name != "toolwire" {
				continue
			}
			if s := ctr.Lifecycle.PreStop.Sleep; s == nil || s.Seconds <= 0 {
				t.Error("the server dropped the preStop sleep action")
			}
			if ctr.ReadinessProbe.GRPC == nil || ctr.LivenessProbe.GRPC == nil || ctr.StartupProbe.GRPC == nil {
				t.Error("the server dropped a gRPC probe")
			}
			return
		}
	}
	t.Errorf("no Deployment %s with a container toolwire among the accepted objects", name)
}

// docYAML returns the ```yaml block of a Markdown page that starts with key.
func docYAML(t *testing.T, page, key string) string {
	t.Helper()
	for _, part := range strings.Split(page, "```yaml\n")[1:] {
		if block, _, ok := strings.Cut(part, "```"); ok && strings.HasPrefix(block, key) {
			return block
		}
	}
	t.Fatalf("no yaml block starting with %q", key)
	return ""
}

// deploymentImage returns the image of the toolwire container of the
// Deployment toolwire among objs.
func deploymentImage(t *testing.T, objs []object) string {
	t.Helper()
	for _, o := range objs {
		if o.Kind != "Deployment" || o.Metadata.Name != "toolwire" {
			continue
		}
		var spec struct {
			Template struct {
				Spec struct {
					Containers []struct{ Name, Image string }
				}
			}
		}
		if err := json.Unmarshal(o.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		for _, ctr := range spec.Template.Spec.Containers {
			if ctr.Name == "toolwire" {
				return ctr.Image
			}
		}
	}
	t.Fatal("no Deployment toolwire with a container toolwire")
	return ""
}

// pinnedKubeVersion returns the k8s.io/kubernetes version the build module
// pins, which the version ldflags must match.
func pinnedKubeVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("kubernetes/test/kube/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v1\.\d+\.\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("kubernetes/test/kube/go.mod does not require k8s.io/kubernetes")
	}
	return string(m[1])
}

// kubectl runs kubectl against the cluster and returns its standard output;
// a failure fails the test.
func (c *cluster) kubectl(t *testing.T, args ...string) []byte {
	t.Helper()
	out, _ := c.kubectlStderr(t, args...)
	return out
}

// kubectlStderr is kubectl that returns standard error (warnings) too.
func (c *cluster) kubectlStderr(t *testing.T, args ...string) (stdout, stderr []byte) {
	t.Helper()
	cmd := c.command(args...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, errBuf.Bytes(), out)
	}
	return out, errBuf.Bytes()
}

// run runs kubectl and returns its combined output and error.
func (c *cluster) run(args ...string) ([]byte, error) {
	return c.command(args...).CombinedOutput()
}

func (c *cluster) command(args ...string) *exec.Cmd {
	args = append([]string{"--kubeconfig=" + c.kubeconfig, "--cache-dir=" + filepath.Join(c.dir, "kubectl-cache")}, args...)
	cmd := exec.Command(filepath.Join(c.bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "HOME="+c.dir, "KUBECONFIG=")
	return cmd
}

// startCluster starts etcd and kube-apiserver on loopback, waits until the
// server is ready, creates the namespace, and stops both when t ends.
func startCluster(t *testing.T, bin string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{bin: bin, dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}
	pki := writePKI(t, dir)

	etcdClient, etcdPeer := testenv.FreePort(t), testenv.FreePort(t)
	startProcess(t, dir, filepath.Join(bin, "etcd"),
		"--name=test",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://"+etcdClient,
		"--advertise-client-urls=http://"+etcdClient,
		"--listen-peer-urls=http://"+etcdPeer,
		"--initial-advertise-peer-urls=http://"+etcdPeer,
		"--initial-cluster=test=http://"+etcdPeer,
		"--unsafe-no-fsync", // a throwaway store: speed over durability
		"--log-level=warn",
	)

	apiAddr := testenv.FreePort(t)
	_, port, _ := net.SplitHostPort(apiAddr)
	apiserver := startProcess(t, dir, filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=http://"+etcdClient,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+port,
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+pki.serverCert,
		"--tls-private-key-file="+pki.serverKey,
		"--token-auth-file="+pki.tokens,
		"--authorization-mode=AlwaysAllow",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saPub,
		"--service-account-signing-key-file="+pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// Nothing here serves the kubernetes Service's endpoints, and one
		// client needs no fairness queues: both only cost CPU.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	)

	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: admin
    namespace: %s
current-context: test
`, apiAddr, pki.caCert, pki.token, namespace)
	if err := os.WriteFile(c.kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}

	waitReady(t, apiserver, "https://"+apiAddr+"/readyz", pki)
	c.kubectl(t, "create", "namespace", namespace)
	// The strictest Pod Security Standard, as docs/deploy.md advises: the
	// apiserver's PodSecurity admission then warns about any Deployment
	// whose pods it would refuse.
	c.kubectl(t, "label", "namespace", namespace,
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")
	return c
}

// process is a started program whose output goes to a log file.
type process struct {
	name string
	log  string
	done chan struct{}
	err  error
}

// startProcess starts a program, and stops it when t ends: SIGTERM, then
// SIGKILL if it has not exited within a while. Cleanups run last-in
// first-out, so the apiserver stops before etcd.
func startProcess(t *testing.T, dir, path string, args ...string) *process {
	t.Helper()
	p := &process{name: filepath.Base(path), log: filepath.Join(dir, filepath.Base(path)+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			p.tail(t)
		}
	})
	return p
}

// tail logs the last lines of the process's output.
func (p *process) tail(t *testing.T) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return
	}
	var lines []string
	for s := bufio.NewScanner(bytes.NewReader(b)); s.Scan(); {
		lines = append(lines, s.Text())
	}
	t.Logf("last lines of %s's output:\n%s", p.name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
}

// waitReady polls the apiserver's /readyz until it answers 200. The wait is
// generous: on a busy two-core machine the apiserver takes a while to
// install its APIs, and this is not a speed check.
func waitReady(t *testing.T, apiserver *process, url string, pki pki) {
	t.Helper()
	ca, err := os.ReadFile(pki.caCert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+pki.token)
		resp, err := client.Do(req)
		if err == nil {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body[:n])
		} else {
			last = err.Error()
		}
		select {
		case <-apiserver.done:
			t.Fatalf("kube-apiserver exited before it was ready: %v", apiserver.err)
		case <-ctx.Done():
			t.Fatalf("kube-apiserver not ready after 5 minutes; last answer: %s", last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// pki holds the files of the throwaway credentials: a CA and the
// apiserver's serving certificate, the service-account signing key, and a
// static admin token.
type pki struct {
	caCert, serverCert, serverKey, saKey, saPub, tokens, token string
}

func writePKI(t *testing.T, dir string) pki {
	t.Helper()
	p := pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		tokens:     filepath.Join(dir, "tokens.csv"),
		token:      rand.Text(),
	}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "toolwire-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	serverKey := newKey(t)
	serverDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}, ca, &serverKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.caCert, "CERTIFICATE", caDER)
	writePEM(t, p.serverCert, "CERTIFICATE", serverDER)
	writeKey(t, p.serverKey, serverKey)
	saKey := newKey(t)
	writeKey(t, p.saKey, saKey)
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.saPub, "PUBLIC KEY", saPub)
	// token,user,uid,"group": system:masters may do anything.
	line := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", p.token)
	if err := os.WriteFile(p.tokens, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t *testing.T, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
