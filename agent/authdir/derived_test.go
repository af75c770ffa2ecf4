package authdir

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

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
