package jobkey

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/fips140"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestLoadJobKeyDerivesStableEd25519(t *testing.T) {
	dir, pub := writeTrainerLayout(t, 0o640)
	p := filepath.Join(dir, PrivateKey)
	s1, d1, err := LoadJobKey(p)
	if err != nil {
		t.Fatal(err)
	}
	_, d2, err := LoadJobKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s1.PublicKey().Marshal(), pub.Marshal()) {
		t.Fatal("signer is not the job key")
	}
	if d1 == nil || d1.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Fatalf("derived = %v", d1)
	}
	if !bytes.Equal(d1.PublicKey().Marshal(), d2.PublicKey().Marshal()) {
		t.Fatal("derivation is not deterministic")
	}
	// Another job key derives another key.
	other, _ := writeTrainerLayout(t, 0o640)
	_, d3, err := LoadJobKey(filepath.Join(other, PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(d1.PublicKey().Marshal(), d3.PublicKey().Marshal()) {
		t.Fatal("two job keys derived the same key")
	}
}

// TestRequestKey: the request key comes with the derived key, is the same
// for every load of the same job key (fast SEC1 path and full parse alike),
// differs between job keys, and is nil without a derived key.
func TestRequestKey(t *testing.T) {
	dir, _ := writeTrainerLayout(t, 0o640)
	p := filepath.Join(dir, PrivateKey)
	_, d1, err := LoadJobKey(p)
	must(t, err)
	k1 := RequestKey(d1)
	if len(k1) != RequestKeySize {
		t.Fatalf("request key of %d bytes", len(k1))
	}
	data, err := os.ReadFile(p)
	must(t, err)
	raw, err := ssh.ParseRawPrivateKey(data)
	must(t, err)
	d2, err := DeriveSigner(raw)
	must(t, err)
	if !bytes.Equal(RequestKey(d2), k1) {
		t.Fatal("the full parse derives another request key than the fast path")
	}
	other, _ := writeTrainerLayout(t, 0o640)
	_, d3, err := LoadJobKey(filepath.Join(other, PrivateKey))
	must(t, err)
	if bytes.Equal(RequestKey(d3), k1) {
		t.Fatal("two job keys derive the same request key")
	}
	if RequestKey(nil) != nil || RequestKey(newSigner(t)) != nil {
		t.Fatal("a request key without a derived key")
	}
	// The derived key still signs with its algorithm, as before.
	sig, err := d1.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, []byte("x"), ssh.KeyAlgoED25519)
	must(t, err)
	must(t, d1.PublicKey().Verify([]byte("x"), sig))
}

func newSigner(t *testing.T) ssh.Signer {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	s, err := ssh.NewSignerFromKey(k)
	must(t, err)
	return s
}

func TestLoadJobKeyEd25519HasNoDerived(t *testing.T) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := ssh.MarshalPrivateKey(k, "")
	must(t, err)
	p := filepath.Join(t.TempDir(), "id_rsa")
	must(t, os.WriteFile(p, pem.EncodeToMemory(blk), 0o600))
	s, d, err := LoadJobKey(p)
	if err != nil || s == nil || d != nil {
		t.Fatalf("signer %v derived %v err %v", s, d, err)
	}
}

// The fast SEC1 path and the full parse derive the same key and the same
// public half, and the lazy signer signs for real.
func TestFastSEC1MatchesFullParse(t *testing.T) {
	dir, pub := writeTrainerLayout(t, 0o640)
	data, err := os.ReadFile(filepath.Join(dir, PrivateKey))
	must(t, err)
	lazy, d1, ok := fastSEC1(data)
	if !ok {
		t.Fatal("the Trainer layout's SEC1 key must take the fast path")
	}
	raw, err := ssh.ParseRawPrivateKey(data)
	must(t, err)
	d2, err := DeriveSigner(raw)
	must(t, err)
	if !bytes.Equal(d1.PublicKey().Marshal(), d2.PublicKey().Marshal()) {
		t.Fatal("fast and full derivation differ")
	}
	if !bytes.Equal(lazy.PublicKey().Marshal(), pub.Marshal()) {
		t.Fatal("lazy signer's public key is not the job key")
	}
	sig, err := lazy.Sign(rand.Reader, []byte("session"))
	must(t, err)
	must(t, pub.Verify([]byte("session"), sig))
	// PKCS#8 of the same key takes the full path and derives the same key.
	p8, err := x509.MarshalPKCS8PrivateKey(raw)
	must(t, err)
	p := filepath.Join(t.TempDir(), "id_rsa")
	must(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600))
	_, d3, err := LoadJobKey(p)
	must(t, err)
	if !bytes.Equal(d1.PublicKey().Marshal(), d3.PublicKey().Marshal()) {
		t.Fatal("PKCS#8 and SEC1 of one key derive different keys")
	}
}

func TestLazySignerRejectsMismatchedPublicKey(t *testing.T) {
	dir, _ := writeTrainerLayout(t, 0o640)
	data, err := os.ReadFile(filepath.Join(dir, PrivateKey))
	must(t, err)
	other, _ := writeTrainerLayout(t, 0o640)
	otherPub, err := LoadPublicKey(filepath.Join(other, PublicKey))
	must(t, err)
	l := &lazySigner{pub: otherPub, data: data}
	if _, err := l.Sign(rand.Reader, []byte("x")); err == nil {
		t.Fatal("a signer whose private key does not match its public key must refuse to sign")
	}
}

func FuzzFastSEC1(f *testing.F) {
	f.Add([]byte("-----BEGIN EC PRIVATE KEY-----\nMAA=\n-----END EC PRIVATE KEY-----\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, d, ok := fastSEC1(data)
		if ok && (s == nil || d == nil) {
			t.Fatal("ok without keys")
		}
	})
}

// An RSA job key derives the same ed25519 key whatever file holds it:
// PKCS#1, PKCS#8, OpenSSH format, p and q swapped, or another valid private
// exponent (d + λ(N)). Deriving from an encoding gave different keys.
func TestRSADerivedKeyIsCanonical(t *testing.T) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, data, 0o600))
		return p
	}
	p8, err := x509.MarshalPKCS8PrivateKey(k)
	must(t, err)
	osh, err := ssh.MarshalPrivateKey(k, "")
	must(t, err)

	// The same key with p and q swapped and d replaced by d + λ(N): what
	// another tool may write for the very same key pair.
	one := big.NewInt(1)
	pm1 := new(big.Int).Sub(k.Primes[0], one)
	qm1 := new(big.Int).Sub(k.Primes[1], one)
	lambda := new(big.Int).Div(new(big.Int).Mul(pm1, qm1), new(big.Int).GCD(nil, nil, pm1, qm1))
	alt := &rsa.PrivateKey{
		PublicKey: k.PublicKey,
		D:         new(big.Int).Add(k.D, lambda),
		Primes:    []*big.Int{k.Primes[1], k.Primes[0]},
	}
	alt.Precompute()
	altDER := x509.MarshalPKCS1PrivateKey(alt)

	paths := map[string]string{
		"pkcs1":   write("pkcs1", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})),
		"pkcs8":   write("pkcs8", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})),
		"openssh": write("openssh", pem.EncodeToMemory(osh)),
		"swapped": write("swapped", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: altDER})),
	}
	var want []byte
	for name, p := range paths {
		s, d, err := LoadJobKey(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(s.PublicKey().Marshal(), mustSSHPub(t, &k.PublicKey).Marshal()) {
			t.Fatalf("%s: signer is not the key", name)
		}
		if d == nil {
			t.Fatalf("%s: no derived key", name)
		}
		if want == nil {
			want = d.PublicKey().Marshal()
		} else if !bytes.Equal(want, d.PublicKey().Marshal()) {
			t.Fatalf("%s derives %s, another encoding of the same key %s", name,
				ssh.FingerprintSHA256(d.PublicKey()), fpOf(t, want))
		}
	}
}

func mustSSHPub(t *testing.T, k any) ssh.PublicKey {
	t.Helper()
	p, err := ssh.NewPublicKey(k)
	must(t, err)
	return p
}

func fpOf(t *testing.T, wire []byte) string {
	t.Helper()
	p, err := ssh.ParsePublicKey(wire)
	must(t, err)
	return ssh.FingerprintSHA256(p)
}

const fipsChildEnv = "PODMPI_AUTHDIR_FIPS_CHILD"

// In FIPS 140 mode no key is derived (a key made from another key's secret
// is not an approved key generation): LoadJobKey returns the job key alone.
func TestNoDerivedKeyInFIPSMode(t *testing.T) {
	if os.Getenv(fipsChildEnv) != "" {
		if !fips140.Enabled() {
			t.Fatal("crypto/fips140.Enabled() is false under GODEBUG=fips140=on")
		}
		dir, pub := writeTrainerLayout(t, 0o640)
		s, d, err := LoadJobKey(filepath.Join(dir, PrivateKey))
		must(t, err)
		if !bytes.Equal(s.PublicKey().Marshal(), pub.Marshal()) {
			t.Fatal("signer is not the job key")
		}
		if d != nil {
			t.Fatalf("derived key %s in FIPS mode", ssh.FingerprintSHA256(d.PublicKey()))
		}
		rk, err := rsa.GenerateKey(rand.Reader, 2048)
		must(t, err)
		if d, err := DeriveSigner(rk); err != nil || d != nil {
			t.Fatalf("DeriveSigner(RSA) in FIPS mode = %v, %v", d, err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoDerivedKeyInFIPSMode$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=on", fipsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNoDerivedKeyInFIPSMode") {
		t.Fatalf("FIPS subprocess: %v\n%s", err, out)
	}
	// Outside FIPS mode the same key does derive one.
	dir, _ := writeTrainerLayout(t, 0o640)
	if _, d, err := LoadJobKey(filepath.Join(dir, PrivateKey)); err != nil || d == nil {
		t.Fatalf("no derived key outside FIPS mode: %v", err)
	}
}
