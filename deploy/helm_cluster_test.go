package deploy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// helmAgainstAPIServer runs the chart's renders through the real
// kube-apiserver of TestManifestsAgainstAPIServer, as that test runs the
// overlays: server-side dry-run with strict field validation, in a
// namespace that enforces (and warns about) the restricted Pod Security
// Standard. Then it follows the service-account identity example through
// the same server: the agent pod is created, a token for it is minted for
// the audience "toolwire", and its signature and claims are checked
// against what the example configures toolwire with.
func helmAgainstAPIServer(t *testing.T, c *cluster) {
	bin := helmBin(t)

	for _, tc := range []struct {
		name, deployment string
		args             []string
	}{
		{"defaults", "toolwire", nil},
		{"every value", "tw", []string{"-f", allValues}},
		{"the service-account identity example", "toolwire", []string{"-f", exampleValues}},
		{"a bolt store (Recreate)", "toolwire", []string{"--set", "store=bolt:///data/toolwire.db"}},
		{"a store URL from a Secret, three replicas", "toolwire", []string{"--set", "storeSecret.name=redis-url", "--set", "replicas=3"}},
		{"a LoadBalancer Service", "toolwire", []string{"--set", "service.type=LoadBalancer"}},
	} {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			m := helmTemplate(t, bin, release, tc.args...)
			objs := c.dryRunHelm(t, m, namespace)
			var got []string
			for _, o := range objs {
				got = append(got, o.Kind+"/"+o.Metadata.Name)
				if o.Kind != "ClusterRoleBinding" && o.Metadata.Namespace != namespace {
					t.Errorf("%s/%s is in namespace %q, want %q", o.Kind, o.Metadata.Name, o.Metadata.Namespace, namespace)
				}
			}
			slices.Sort(got)
			if want := m.kinds(); !slices.Equal(got, want) {
				t.Errorf("objects the server accepted:\n got %q\nwant %q (what helm rendered)", got, want)
			}
			checkServerDeployment(t, objs, tc.deployment)
		})
	}

	t.Run("sandbox.sessionUIDs: baseline, not restricted", func(t *testing.T) {
		const baseline = "toolwire-helm-uids"
		c.kubectl(t, "create", "namespace", baseline)
		c.kubectl(t, "label", "namespace", baseline, "pod-security.kubernetes.io/enforce=baseline", "pod-security.kubernetes.io/warn=baseline")
		out, err := runHelm(t, bin, "template", release, chartDir, "--namespace", baseline, "--set", "sandbox.sessionUIDs.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		m := parseManifest(t, out)
		objs := c.dryRunHelm(t, m, baseline)
		checkServerDeployment(t, objs, "toolwire")

		file := filepath.Join(t.TempDir(), "chart.yaml")
		if err := os.WriteFile(file, m.yaml, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, warnings := c.kubectlStderr(t, "apply", "--dry-run=server", "-o", "json", "-n", namespace, "-f", file); !strings.Contains(string(warnings), "restricted") {
			t.Errorf("in the restricted namespace the API server did not warn:\n%s", warnings)
		}
	})

	t.Run("the service-account identity example, end to end on the server", func(t *testing.T) {
		var values struct {
			Auth struct {
				OIDC struct {
					Issuer      string `json:"issuer"`
					Audience    string `json:"audience"`
					JWKSURL     string `json:"jwks_url"`
					CallerClaim string `json:"caller_claim"`
					GroupsClaim string `json:"groups_claim"`
				} `json:"oidc"`
			} `json:"auth"`
			Policies []struct {
				Name, When, Effect, Message string
			} `json:"policies"`
		}
		b, err := os.ReadFile(exampleValues)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &values); err != nil {
			t.Fatal(err)
		}
		oidc := values.Auth.OIDC

		// The issuer: the API server's discovery document names it and the
		// JWKS path the example fetches.
		var discovery struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal(c.kubectl(t, "get", "--raw", "/.well-known/openid-configuration"), &discovery); err != nil {
			t.Fatal(err)
		}
		if discovery.Issuer != oidc.Issuer {
			t.Errorf("the cluster's issuer is %q; the example configures %q", discovery.Issuer, oidc.Issuer)
		}
		jwksPath := func(s string) string {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			return u.Path
		}
		if got, want := jwksPath(oidc.JWKSURL), jwksPath(discovery.JWKSURI); got != want {
			t.Errorf("the example fetches the keys at %s; the cluster serves them at %s", got, want)
		}

		// The agent: its namespace, service account and pod, for real (the
		// Pod's namespace must exist, so no dry-run here).
		if _, warnings := c.kubectlStderr(t, "apply", "-f", "helm/examples/agent-pod.yaml"); len(warnings) > 0 {
			t.Errorf("the API server warned about the agent pod:\n%s", warnings)
		}
		var pod struct {
			Spec struct {
				Volumes []struct {
					Name      string
					Projected *struct {
						Sources []struct {
							ServiceAccountToken *struct {
								Audience          string
								ExpirationSeconds int
								Path              string
							}
						}
					}
				}
			}
		}
		if err := json.Unmarshal(c.kubectl(t, "get", "pod", "builder", "-n", "agents", "-o", "json"), &pod); err != nil {
			t.Fatal(err)
		}
		var projected bool
		for _, v := range pod.Spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == oidc.Audience {
					projected = true
				}
			}
		}
		if !projected {
			t.Errorf("the agent pod has no projected service-account token for the audience %q: %+v", oidc.Audience, pod.Spec.Volumes)
		}

		// What kubelet would mount: a token bound to the pod, for the
		// example's audience (the TokenRequest API kubelet uses).
		token := strings.TrimSpace(string(c.kubectl(t, "create", "token", "builder", "-n", "agents",
			"--audience", oidc.Audience, "--bound-object-kind", "Pod", "--bound-object-name", "builder", "--duration", "10m")))
		jwks := c.kubectl(t, "get", "--raw", jwksPath(discovery.JWKSURI))
		claims := verifyJWT(t, token, jwks)

		if claims["iss"] != oidc.Issuer {
			t.Errorf("iss = %v, want the example's issuer %q", claims["iss"], oidc.Issuer)
		}
		if aud, _ := claims["aud"].([]any); !slices.Contains(aud, any(oidc.Audience)) {
			t.Errorf("aud = %v, want it to hold %q", claims["aud"], oidc.Audience)
		}
		if exp, _ := claims["exp"].(float64); time.Unix(int64(exp), 0).Before(time.Now()) {
			t.Errorf("exp = %v: expired", claims["exp"])
		}
		const caller = "system:serviceaccount:agents:builder"
		if got := claim(claims, oidc.CallerClaim); got != caller {
			t.Errorf("caller_claim %q = %v, want %q", oidc.CallerClaim, got, caller)
		}
		if got := claim(claims, oidc.GroupsClaim); got != "agents" {
			t.Errorf("groups_claim %q = %v, want the namespace agents", oidc.GroupsClaim, got)
		}
		if got := claim(claims, "kubernetes.io.serviceaccount.name"); got != "builder" {
			t.Errorf("kubernetes.io.serviceaccount.name = %v, want builder", got)
		}
		if got := claim(claims, "kubernetes.io.pod.name"); got != "builder" {
			t.Errorf("the token is not bound to the pod: kubernetes.io.pod.name = %v", got)
		}
		// The policies name this caller and group as the token carries them.
		var named, grouped bool
		for _, p := range values.Policies {
			named = named || strings.Contains(p.When, fmt.Sprintf("caller.id == %q", caller))
			grouped = grouped || strings.Contains(p.When, `"agents" in caller.groups`)
		}
		if !named || !grouped {
			t.Errorf("the example's policies do not name the caller %q and the group agents as the token carries them: %+v", caller, values.Policies)
		}
		t.Logf("claims of the agent's token: %v", claims)
	})
}

// dryRunHelm sends a render to the API server (server-side dry-run, strict
// field validation) in namespace ns and returns the objects it answered
// with; a warning fails the test.
func (c *cluster) dryRunHelm(t *testing.T, m manifest, ns string) []object {
	t.Helper()
	file := filepath.Join(t.TempDir(), "chart.yaml")
	if err := os.WriteFile(file, m.yaml, 0o644); err != nil {
		t.Fatal(err)
	}
	out, warnings := c.kubectlStderr(t, "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-n", ns, "-f", file)
	if len(warnings) > 0 {
		t.Errorf("the API server warned:\n%s", warnings)
	}
	return decodeList(t, out)
}

// claim returns the claim at a dotted path, whose keys may hold dots
// themselves ("kubernetes.io.namespace" is the key "kubernetes.io", then
// "namespace").
func claim(claims map[string]any, path string) any {
	if v, ok := claims[path]; ok {
		return v
	}
	for i := range len(path) {
		if path[i] != '.' {
			continue
		}
		if sub, ok := claims[path[:i]].(map[string]any); ok {
			if v := claim(sub, path[i+1:]); v != nil {
				return v
			}
		}
	}
	return nil
}

// verifyJWT checks a compact JWS's signature (ES256 or RS256) against the
// key of the JWKS with its kid, and returns its claims.
func verifyJWT(t *testing.T, token string, jwks []byte) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the token is not a compact JWS (%d parts)", len(parts))
	}
	dec := func(s string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("token: %v", err)
		}
		return b
	}
	var header struct{ Alg, Kid string }
	if err := json.Unmarshal(dec(parts[0]), &header); err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct{ Kty, Kid, Crv, X, Y, N, E string }
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatalf("JWKS: %v\n%s", err, jwks)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	sig := dec(parts[2])
	var verified bool
	for _, k := range set.Keys {
		if k.Kid != header.Kid {
			continue
		}
		switch {
		case header.Alg == "ES256" && k.Kty == "EC" && k.Crv == "P-256" && len(sig) == 64:
			point := append([]byte{4}, append(dec(k.X), dec(k.Y)...)...)
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
			if err != nil {
				t.Fatalf("JWKS key %s: %v", k.Kid, err)
			}
			verified = ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
		case header.Alg == "RS256" && k.Kty == "RSA":
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(dec(k.N)), E: int(new(big.Int).SetBytes(dec(k.E)).Int64())}
			verified = rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) == nil
		}
	}
	if !verified {
		t.Fatalf("the token's signature (alg %s, kid %s) does not verify against the cluster's JWKS:\n%s", header.Alg, header.Kid, jwks)
	}
	var claims map[string]any
	if err := json.Unmarshal(dec(parts[1]), &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}
