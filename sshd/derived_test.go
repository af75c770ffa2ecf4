//go:build linux

package sshd

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// derivedClient is the x/crypto client configuration the launcher uses when
// both sides hold the job's id_rsa: ed25519 host key and user key derived
// from it, and nothing else.
func derivedClient(t *testing.T, derived ssh.Signer) *ssh.ClientConfig {
	t.Helper()
	want := derived.PublicKey()
	return &ssh.ClientConfig{
		User:              "mpiuser",
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(derived)},
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
		HostKeyCallback: func(_ string, _ net.Addr, got ssh.PublicKey) error {
			if string(got.Marshal()) != string(want.Marshal()) {
				t.Errorf("host key %s, want the derived %s", jobkey.Fingerprint(got), jobkey.Fingerprint(want))
				return errNotPinned
			}
			return nil
		},
	}
}

var errNotPinned = &jobkey.Error{Op: "pin", Path: "test"}

func TestDerivedKeyIsHostKeyAndClientKey(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	_, derived, err := jobkey.LoadJobKey(filepath.Join(ts.keys.dir, jobkey.PrivateKey))
	if err != nil || derived == nil {
		t.Fatalf("derived %v, %v", derived, err)
	}
	c, err := ssh.Dial("tcp", ts.addr, derivedClient(t, derived))
	if err != nil {
		t.Fatalf("dial with the derived key: %v\n%s", err, ts.logs.String())
	}
	defer c.Close()
	if r := run(t, c, "echo ok", nil); r.stdout != "ok\n" {
		t.Fatalf("session: %+v", r)
	}
	if !strings.Contains(ts.logs.String(), "key_source=\"derived from ") {
		t.Fatalf("auth log does not say the key was the derived one:\n%s", ts.logs.String())
	}
	// The job key itself still works, and stays the advertised host key.
	ts.dial(t)
	if ts.HostKeyFingerprint() != jobkey.Fingerprint(ts.keys.pub) {
		t.Fatal("the advertised host key must stay the job's id_rsa")
	}
}

// A derived key stands for the job key only where the job key itself may
// log in: with id_rsa's public key absent from authorized_keys, the derived
// key is refused too; and another job's derived key is never accepted.
func TestDerivedKeyOnlyWhereJobKeyIsAuthorized(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	other := startServer(t, nil)
	_, otherDerived, err := jobkey.LoadJobKey(filepath.Join(other.keys.dir, jobkey.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	cfg := derivedClient(t, otherDerived)
	cfg.HostKeyCallback = ssh.InsecureIgnoreHostKey()
	if c, err := ssh.Dial("tcp", ts.addr, cfg); err == nil {
		c.Close()
		t.Fatal("another job's derived key was accepted")
	}

	// authorized_keys holding some other key only.
	foreign, _ := newP521(t)
	dir := t.TempDir()
	for _, f := range []string{jobkey.PrivateKey, jobkey.PublicKey} {
		b, err := os.ReadFile(filepath.Join(ts.keys.dir, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, f), b, 0o640))
	}
	must(t, os.WriteFile(filepath.Join(dir, jobkey.AuthorizedKeys), ssh.MarshalAuthorizedKey(foreign.PublicKey()), 0o644))
	ts2 := startServer(t, func(c *Config) { c.AuthDir = dir })
	_, derived, err := jobkey.LoadJobKey(filepath.Join(dir, jobkey.PrivateKey))
	must(t, err)
	cfg = derivedClient(t, derived)
	if c, err := ssh.Dial("tcp", ts2.addr, cfg); err == nil {
		c.Close()
		t.Fatal("derived key accepted although id_rsa's key is not in authorized_keys")
	}
}

// TestRequestKeyIsTheJobKeys: the server's request key is the one every
// holder of the job's id_rsa derives (the launcher proves its HTTP
// requests with it); a server without id_rsa has none.
func TestRequestKeyIsTheJobKeys(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	_, derived, err := jobkey.LoadJobKey(filepath.Join(ts.keys.dir, jobkey.PrivateKey))
	must(t, err)
	if k := ts.RequestKey(); len(k) != jobkey.RequestKeySize || string(k) != string(jobkey.RequestKey(derived)) {
		t.Fatalf("RequestKey() = %x, want the job key's", k)
	}
	unpinned := startServer(t, func(c *Config) { must(t, os.Remove(filepath.Join(c.AuthDir, jobkey.PrivateKey))) })
	if k := unpinned.RequestKey(); k != nil {
		t.Fatalf("a server without id_rsa has request key %x", k)
	}
}
