package statusfwd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCert is a CA (PEM) and a certificate it signed for 127.0.0.1, valid
// from notBefore for a day.
func testCert(t testing.TB, notBefore time.Time) (caPEM []byte, cert tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: notBefore,
		NotAfter: notBefore.Add(24 * time.Hour), KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"}, NotBefore: notBefore,
		NotAfter: notBefore.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

const testPath = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status"

func good(t testing.TB) Request {
	t.Helper()
	caPEM, cert := testCert(t, time.Now().Add(-time.Hour))
	r, err := NewRequest(40123, testPath, "/tmp/podmpi-1/trainer-status", strings.Repeat("ab", 32), caPEM, cert, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	g := good(t)
	if r, err := ParseRequest(g.Marshal()); err != nil || r != g {
		t.Fatalf("round trip: %+v, %v", r, err)
	}
	other := good(t)
	expiredCA, expired := testCert(t, time.Now().Add(-48*time.Hour))
	expiredReq, _ := NewRequest(0, testPath, "/tmp/x", strings.Repeat("ab", 32), expiredCA, expired, 1)
	for _, tc := range []struct {
		name    string
		edit    func(*Request)
		wantErr string
	}{
		{"version 1", func(r *Request) { r.Version = 1 }, "request version 1, this worker-agent speaks 2"},
		{"port", func(r *Request) { r.Port = 70000 }, "port 70000"},
		{"relative path", func(r *Request) { r.Path = "apis/x" }, "not a URL path"},
		{"path with a newline", func(r *Request) { r.Path = "/a\r\nHost: evil" }, "not a URL path"},
		{"relative dir", func(r *Request) { r.Dir = "tmp/x" }, "not a clean absolute path"},
		{"unclean dir", func(r *Request) { r.Dir = "/tmp/../etc" }, "not a clean absolute path"},
		{"short token", func(r *Request) { r.Token = "abcd" }, "hex digits"},
		{"token not hex", func(r *Request) { r.Token = strings.Repeat("zz", 16) }, "hex digits"},
		{"no body", func(r *Request) { r.MaxBody = 0 }, "body limit of 0"},
		{"huge body", func(r *Request) { r.MaxBody = 1 << 30 }, "body limit of"},
		{"no CA", func(r *Request) { r.CA = "" }, "not a PEM certificate"},
		{"key as CA", func(r *Request) { r.CA = r.Key }, "not a PEM certificate"},
		{"huge CA", func(r *Request) { r.CA = strings.Repeat("x", maxPEM+1) }, "over"},
		{"another's key", func(r *Request) { r.Key = other.Key }, "certificate and key"},
		{"another CA", func(r *Request) { r.CA = other.CA }, "not the CA's for 127.0.0.1"},
		{"the CA as the certificate", func(r *Request) { r.Cert = r.CA }, "certificate and key"},
		{"expired", func(r *Request) { *r = expiredReq }, "not the CA's for 127.0.0.1 now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := g
			tc.edit(&r)
			if _, err := ParseRequest(r.Marshal()); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	for _, b := range [][]byte{{0, 0, 0}, {0, 0, 0, 2, 1}} {
		if _, err := ParseRequest(b); err == nil || !strings.Contains(err.Error(), "not a "+RequestType) {
			t.Fatalf("garbage %v: %v", b, err)
		}
	}
}

func TestReply(t *testing.T) {
	t.Parallel()
	r := Reply{Port: 40123, Dir: "/tmp/x"}
	if got, err := ParseReply(r.Marshal()); err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if _, err := ParseReply(Reply{Port: 0, Dir: "/tmp"}.Marshal()); err == nil {
		t.Fatal("a reply without a port was taken")
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	got := strings.Join(Env(40123, "/apis/x/status", "/tmp/d"), " ")
	want := EnvURL + "=https://127.0.0.1:40123/apis/x/status " + EnvToken + "=/tmp/d/token " + EnvCACert + "=/tmp/d/ca.crt"
	if got != want {
		t.Fatalf("Env = %s\nwant  %s", got, want)
	}
}

func TestBearer(t *testing.T) {
	t.Parallel()
	tok := strings.Repeat("ab", 32)
	for h, want := range map[string]bool{"Bearer " + tok: true, "bearer " + tok: true, "Bearer  " + tok + " ": true,
		"Bearer " + tok + "x": false, "Basic " + tok: false, tok: false, "": false, "Bearer " + tok + " more": false} {
		if got := Bearer(h, tok); got != want {
			t.Errorf("Bearer(%q) = %v, want %v", h, got, want)
		}
	}
	if Bearer("Bearer ", "") {
		t.Error("an empty token was taken")
	}
}

// FuzzParseRequest: whatever a client sends, the agent gets a checked
// request or an error, never a panic.
func FuzzParseRequest(f *testing.F) {
	f.Add(good(f).Marshal())
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if r.Version != Version || r.Path[0] != '/' || len(r.Token) < minToken || r.Port > 65535 || r.MaxBody == 0 || r.MaxBody > maxMaxBody {
			t.Fatalf("accepted %+v", r)
		}
		if _, err := r.KeyPair(); err != nil {
			t.Fatalf("accepted a request whose key pair fails: %v", err)
		}
	})
}

// TestWriteFilesConcurrently: writers that share the directory (the
// launcher and worker-agents on one file system) never fail each other.
func TestWriteFilesConcurrently(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caPEM, _ := testCert(t, time.Now())
	errs := make(chan error, 16)
	for range 16 {
		go func() { errs <- WriteFiles(dir, strings.Repeat("ab", 16), caPEM) }()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, TokenFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("%d files left in the directory, want the token and the CA", len(ents))
	}
}
