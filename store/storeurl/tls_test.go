package storeurl_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/follow"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/store/storeurl"
)

// tlsFiles are the PEM files of a throwaway CA, a server certificate
// for 127.0.0.1 and a client certificate, all the CA's, in dir.
type tlsFiles struct {
	dir, ca               string
	caPKI                 *testpki.CA
	serverCert, serverKey string
	clientCert, clientKey string
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	f := tlsFiles{dir: t.TempDir(), caPKI: testpki.New(t, "redis CA")}
	f.ca = filepath.Join(f.dir, "ca.crt")
	if err := os.WriteFile(f.ca, f.caPKI.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	f.serverCert, f.serverKey = testpki.WritePEM(t, f.dir, "server", f.caPKI.Issue(t, testpki.Server))
	f.clientCert, f.clientKey = testpki.WritePEM(t, f.dir, "client", f.caPKI.Issue(t, testpki.Client("toolwire")))
	return f
}

// TestRedisOverTLS: a real redis-server that takes TLS only from clients
// with a certificate its CA signed (Redis's default, tls-auth-clients
// yes), reached through the store's configuration as serve reads it: with
// the CA and a client certificate the store works; without the client
// certificate, or trusting the system's CAs instead of the server's, Open
// fails and says why.
func TestRedisOverTLS(t *testing.T) {
	f := newTLSFiles(t)
	caFile, cliCert, cliKey := f.ca, f.clientCert, f.clientKey
	_, addr := testenv.StartRedisTLS(t, f.serverCert, f.serverKey, caFile)
	url := "rediss://" + addr + "/0"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	st, err := storeurl.Config{URL: url, TLSCA: caFile, TLSCert: cliCert, TLSKey: cliKey}.Open(ctx)
	if err != nil {
		t.Fatalf("Open over TLS with the CA and a client certificate: %v", err)
	}
	defer st.Close()
	claim, err := st.Claim(ctx, "k", "fp", "owner", time.Minute, time.Minute)
	if err != nil || claim.State != store.Claimed {
		t.Fatalf("Claim over TLS: %+v, %v", claim, err)
	}
	if err := st.Complete(ctx, "k", "owner", []byte("result"), time.Minute); err != nil {
		t.Fatalf("Complete over TLS: %v", err)
	}
	if again, err := st.Claim(ctx, "k", "fp", "other", time.Minute, time.Minute); err != nil || string(again.Result) != "result" {
		t.Fatalf("the record read back over TLS: %+v, %v", again, err)
	}

	// The URL's own TLS parameters still count beside the files: go-redis's
	// skip_verify (no check of the server's certificate) with a client
	// certificate. The store warns of it; verified, it does not.
	if st, err := (storeurl.Config{URL: url + "?skip_verify=true", TLSCert: cliCert, TLSKey: cliKey}).Open(ctx); err != nil {
		t.Errorf("Open with skip_verify and a client certificate: %v", err)
	} else {
		if w := st.(*redis.Store).Warnings(); len(w) != 1 || !strings.Contains(w[0], "skip_verify") {
			t.Errorf("warnings with skip_verify: %q, want one naming it", w)
		}
		st.Close()
	}
	if w := st.(*redis.Store).Warnings(); len(w) != 0 {
		t.Errorf("warnings over verified TLS: %q, want none", w)
	}

	for _, tc := range []struct {
		name string
		cfg  storeurl.Config
		want string
	}{
		{"no client certificate", storeurl.Config{URL: url, TLSCA: caFile}, "certificate required"},
		{"the system's CAs", storeurl.Config{URL: url, TLSCert: cliCert, TLSKey: cliKey}, "unknown authority"},
	} {
		st, err := tc.cfg.Open(ctx)
		if err == nil {
			st.Close()
			t.Errorf("%s: Open succeeded; want it refused", tc.name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open: %v; want an error about %s", tc.name, err, tc.want)
		}
	}
}

// TestTLSConfigErrors: the TLS files are checked with the URL before
// anything is opened, each error naming the setting.
func TestTLSConfigErrors(t *testing.T) {
	f := newTLSFiles(t)
	dir, caFile, cert, key := f.dir, f.ca, f.clientCert, f.clientKey
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  storeurl.Config
		want string // "" when valid
	}{
		{storeurl.Config{URL: "rediss://r:6380/0", TLSCA: caFile, TLSCert: cert, TLSKey: key}, ""},
		{storeurl.Config{URL: "rediss+cluster://a:1,b:2", TLSCA: caFile}, ""},
		{storeurl.Config{URL: "redis://r:6379/0", TLSCA: caFile}, "rediss://"},
		{storeurl.Config{URL: "redis+cluster://a:1,b:2", TLSCA: caFile}, "rediss://"},
		{storeurl.Config{URL: "memory", TLSCA: caFile}, "rediss://"},
		{storeurl.Config{URL: "rediss://r:6380/0", TLSCert: cert}, "go together"},
		{storeurl.Config{URL: "rediss://r:6380/0", TLSKey: key}, "go together"},
		{storeurl.Config{URL: "rediss://r:6380/0", TLSCA: filepath.Join(dir, "missing.crt")}, "store_tls_ca"},
		{storeurl.Config{URL: "rediss://r:6380/0", TLSCA: notPEM}, "no PEM certificate"},
		{storeurl.Config{URL: "rediss://r:6380/0", TLSCert: cert, TLSKey: notPEM}, "store_tls_cert"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v; want it valid", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v; want an error about %q", tc.cfg, err, tc.want)
		}
	}
}

// TestRedisClusterOverTLS: a real Redis Cluster (3 masters, 3 replicas)
// whose nodes take TLS from clients with a certificate, and speak TLS
// among themselves, reached as rediss+cluster:// with the CA and a client
// certificate: records on every master are written and read back.
func TestRedisClusterOverTLS(t *testing.T) {
	f := newTLSFiles(t)
	caFile, cliCert, cliKey := f.ca, f.clientCert, f.clientKey
	cl := testenv.StartRedisClusterTLS(t, f.serverCert, f.serverKey, caFile, cliCert, cliKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := storeurl.Config{URL: cl.URL(), TLSCA: caFile, TLSCert: cliCert, TLSKey: cliKey}.Open(ctx)
	if err != nil {
		t.Fatalf("Open %s: %v", cl.URL(), err)
	}
	defer st.Close()
	masters := map[*testenv.RedisNode]bool{}
	for i := 0; len(masters) < 3; i++ {
		key := fmt.Sprint("k", i)
		masters[cl.MasterOf(t, "toolwire:idem:{"+key+"}")] = true
		if _, err := st.Claim(ctx, key, "fp", "owner", time.Minute, time.Minute); err != nil {
			t.Fatalf("Claim %s: %v", key, err)
		}
		if err := st.Complete(ctx, key, "owner", []byte(key), time.Minute); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
		if again, err := st.Claim(ctx, key, "fp", "other", time.Minute, time.Minute); err != nil || string(again.Result) != key {
			t.Fatalf("record %s read back: %+v, %v", key, again, err)
		}
	}
}

// TestClientCertificateFollowsItsFiles: the client certificate is read
// through tlsfiles (which reads a rotated pair again: its own test), not
// once into the settings, so a rotated certificate reaches the next
// connection to Redis without a restart.
func TestClientCertificateFollowsItsFiles(t *testing.T) {
	f := newTLSFiles(t)
	cert, key := testpki.WritePEM(t, f.dir, "first", f.caPKI.Issue(t, testpki.Client("first")))
	settings, err := storeurl.TLSSettings(storeurl.Config{URL: "rediss://r:6380/0", TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(settings.Certificates) != 0 || settings.GetClientCertificate == nil {
		t.Fatalf("the client certificate is fixed in the settings (%d certificates, GetClientCertificate %v); want it read from its files", len(settings.Certificates), settings.GetClientCertificate != nil)
	}
	got, err := settings.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(got.Certificate[0])
	if err != nil || leaf.Subject.CommonName != "first" {
		t.Fatalf("client certificate %v (%v); want the file's, first", leaf.Subject, err)
	}
}

// TestCARotation: the CA file is read again when it changes, so a store
// that is running trusts a server whose certificate a new CA signed once
// the file holds it, without a restart. A real redis-server over TLS
// changes its certificate (CONFIG SET, as an operator's rotation does)
// and drops its clients: until the file changes the store refuses the new
// certificate; after, it reconnects and works.
func TestCARotation(t *testing.T) {
	t.Cleanup(follow.SetRecheck(0)) // every connection looks at the file
	f := newTLSFiles(t)
	srv, addr := testenv.StartRedisTLS(t, f.serverCert, f.serverKey, f.ca)
	trust := filepath.Join(f.dir, "trust.crt")
	if err := os.WriteFile(trust, f.caPKI.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := storeurl.Config{URL: "rediss://" + addr + "/0?max_retries=0", TLSCA: trust, TLSCert: f.clientCert, TLSKey: f.clientKey}.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	claim := func(key string) error {
		_, err := st.Claim(ctx, key, "fp", "owner", time.Minute, time.Minute)
		return err
	}
	if err := claim("before"); err != nil {
		t.Fatalf("Claim before the rotation: %v", err)
	}

	// The server rotates to a certificate of a new CA and drops its
	// clients, so the store's next command connects anew.
	ca2 := testpki.New(t, "redis CA 2")
	cert2, key2 := testpki.WritePEM(t, t.TempDir(), "server2", ca2.Issue(t, testpki.Server))
	srv.Do("CONFIG", "SET", "tls-cert-file", cert2, "tls-key-file", key2)
	srv.Do("CLIENT", "KILL", "TYPE", "normal")
	// Redis closes the killed connections at its next turn: wait until
	// the one asking is the only client left.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(strings.TrimSpace(srv.Do("CLIENT", "LIST", "TYPE", "normal")), "\n") > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the store's connections still open after CLIENT KILL:\n%s", srv.Do("CLIENT", "LIST", "TYPE", "normal"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := claim("unknown CA"); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("Claim with the new CA not yet trusted: %v; want the certificate refused (unknown authority)", err)
	}

	// The trust bundle gets the new CA beside the old, as a rotation
	// hands it out.
	if err := os.WriteFile(trust, append(append([]byte(nil), f.caPKI.PEM...), ca2.PEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(trust, later, later); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 50 { // the breaker may hold a few attempts back
		if last = claim("after"); last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Claim once the CA file trusts the new CA: %v", last)
}
