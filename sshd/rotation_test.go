//go:build linux

package sshd

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// kubeletSecret is a Secret volume laid out as the kubelet's atomic writer
// makes it: the files are symlinks into "..data", itself a symlink to a
// timestamped directory; an update writes a new directory and renames a
// new symlink over "..data" in one step.
type kubeletSecret struct {
	t   *testing.T
	dir string
	n   int
}

func newKubeletSecret(t *testing.T, files map[string][]byte) *kubeletSecret {
	t.Helper()
	k := &kubeletSecret{t: t, dir: t.TempDir()}
	k.update(files)
	for _, name := range []string{jobkey.PrivateKey, jobkey.PublicKey, jobkey.AuthorizedKeys} {
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(k.dir, name)))
	}
	return k
}

// update writes a new version and swaps ..data to it atomically.
func (k *kubeletSecret) update(files map[string][]byte) {
	k.t.Helper()
	k.n++
	ts := fmt.Sprintf("..2026_11_01_00_00_%02d.%d", k.n, 1000+k.n)
	d := filepath.Join(k.dir, ts)
	must(k.t, os.Mkdir(d, 0o755))
	for name, data := range files {
		mode := os.FileMode(0o644)
		if name == jobkey.PrivateKey {
			mode = 0o640
		}
		must(k.t, os.WriteFile(filepath.Join(d, name), data, mode))
		must(k.t, os.Chmod(filepath.Join(d, name), mode))
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	must(k.t, os.Symlink(ts, tmp))
	must(k.t, os.Rename(tmp, filepath.Join(k.dir, "..data")))
}

// jobFiles is one job key's Secret content.
func jobFiles(t *testing.T) (map[string][]byte, ssh.Signer) {
	t.Helper()
	signer, pemBytes := newP521(t)
	line := ssh.MarshalAuthorizedKey(signer.PublicKey())
	return map[string][]byte{jobkey.PrivateKey: pemBytes, jobkey.PublicKey: line, jobkey.AuthorizedKeys: line}, signer
}

func dialWith(ts *testServer, signer ssh.Signer, hostKey ssh.PublicKey) error {
	cfg := clientConfig(signer, hostKey)
	if hostKey == nil {
		cfg.HostKeyCallback = ssh.InsecureIgnoreHostKey()
	}
	c, err := ssh.Dial("tcp", ts.addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	out, err := s.Output("echo ok")
	if err != nil || string(out) != "ok\n" {
		return fmt.Errorf("session: %q %w", out, err)
	}
	return nil
}

// After the kubelet swaps the Secret, the next connection sees the new job
// key as host key and client key, the old key is refused, and the change is
// logged with both fingerprints. A Secret that turns unusable refuses every
// login (fail closed) and says why once; a good Secret brings logins back.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	files1, key1 := jobFiles(t)
	sec := newKubeletSecret(t, files1)
	logs := &syncBuffer{}
	ts := startServerCfg(t, keyPair{dir: sec.dir, signer: key1, pub: key1.PublicKey()}, Config{
		ListenAddress: "127.0.0.1:0", AuthDir: sec.dir, StateDir: filepath.Join(t.TempDir(), "state"),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}, logs)
	must(t, dialWith(ts, key1, key1.PublicKey()))
	_, derived1, err := jobkey.LoadJobKey(filepath.Join(sec.dir, jobkey.PrivateKey))
	must(t, err)
	// (No derived key in FIPS 140 mode, where TestFIPSMode re-runs this.)
	if ts.DerivedKeyFingerprint() != derivedFP(derived1) {
		t.Fatalf("derived fingerprint %q, want %q", ts.DerivedKeyFingerprint(), derivedFP(derived1))
	}

	files2, key2 := jobFiles(t)
	sec.update(files2)
	if err := dialWith(ts, key2, key2.PublicKey()); err != nil {
		t.Fatalf("new job key after rotation: %v\n%s", err, logs)
	}
	if err := dialWith(ts, key1, nil); err == nil {
		t.Fatal("old job key still logs in after rotation")
	}
	if err := dialWith(ts, key2, key1.PublicKey()); err == nil {
		t.Fatal("old host key still served after rotation")
	}
	_, derived2, err := jobkey.LoadJobKey(filepath.Join(sec.dir, jobkey.PrivateKey))
	must(t, err)
	if derived1 != nil {
		if err := dialWith(ts, derived1, nil); err == nil {
			t.Fatal("the old job key's derived key still logs in after rotation")
		}
		if err := dialWith(ts, derived2, nil); err != nil {
			t.Fatalf("the new derived key: %v", err)
		}
	}
	if ts.HostKeyFingerprint() != jobkey.Fingerprint(key2.PublicKey()) || ts.DerivedKeyFingerprint() != derivedFP(derived2) {
		t.Fatalf("fingerprints %s %s after rotation", ts.HostKeyFingerprint(), ts.DerivedKeyFingerprint())
	}
	want := fmt.Sprintf(`msg="job key rotated" file=%s old_host_key_fp=%s new_host_key_fp=%s`,
		filepath.Join(sec.dir, jobkey.PrivateKey), jobkey.Fingerprint(key1.PublicKey()), jobkey.Fingerprint(key2.PublicKey()))
	if derived1 != nil {
		want += fmt.Sprintf(" old_derived_key_fp=%s new_derived_key_fp=%s", derivedFP(derived1), derivedFP(derived2))
	}
	if !strings.Contains(logs.String(), want) || strings.Count(logs.String(), "job key rotated") != 1 {
		t.Fatalf("want one log line %q:\n%s", want, logs)
	}
	if !strings.Contains(logs.String(), `msg="authorized_keys reloaded"`) || strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatalf("authorized_keys change not logged (or key material logged):\n%s", logs)
	}
	if ts.KeyError() != nil || ts.AuthorizedKeyCount() != 1 {
		t.Fatalf("KeyError %v count %d", ts.KeyError(), ts.AuthorizedKeyCount())
	}

	// authorized_keys without a key: every login is refused, once logged.
	files3 := map[string][]byte{
		jobkey.PrivateKey: files2[jobkey.PrivateKey], jobkey.PublicKey: files2[jobkey.PublicKey],
		jobkey.AuthorizedKeys: []byte("# emptied\n"),
	}
	sec.update(files3)
	for range 2 {
		if err := dialWith(ts, key2, key2.PublicKey()); err == nil {
			t.Fatal("login accepted with an authorized_keys that holds no key")
		}
	}
	if ts.AuthorizedKeyCount() != 0 || ts.KeyError() == nil || !strings.Contains(ts.KeyError().Error(), "refusing every login") {
		t.Fatalf("count %d KeyError %v", ts.AuthorizedKeyCount(), ts.KeyError())
	}
	if n := strings.Count(logs.String(), "authorized_keys changed and is unusable"); n != 1 {
		t.Fatalf("unusable authorized_keys logged %d times, want once:\n%s", n, logs)
	}

	// A job key that does not load keeps the previous host key, says so
	// once, and the readable authorized_keys still decides logins.
	files4, key4 := jobFiles(t)
	files4[jobkey.PrivateKey] = []byte("-----BEGIN EC PRIVATE KEY-----\ngarbage\n-----END EC PRIVATE KEY-----\n")
	sec.update(files4)
	for range 2 {
		if err := dialWith(ts, key4, key2.PublicKey()); err != nil {
			t.Fatalf("broken id_rsa: previous host key with the new authorized_keys: %v", err)
		}
	}
	if ts.KeyError() == nil || !strings.Contains(ts.KeyError().Error(), "previous host key") {
		t.Fatalf("KeyError %v", ts.KeyError())
	}
	if n := strings.Count(logs.String(), "job key changed on disk but cannot be loaded"); n != 1 {
		t.Fatalf("broken job key logged %d times, want once:\n%s", n, logs)
	}

	// A good Secret again.
	files5, key5 := jobFiles(t)
	sec.update(files5)
	if err := dialWith(ts, key5, key5.PublicKey()); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if ts.KeyError() != nil {
		t.Fatalf("KeyError after recovery: %v", ts.KeyError())
	}
}

// An authorized_keys edited in place (not through ..data) is picked up
// too, and a removed file refuses logins instead of keeping the old keys.
func TestAuthorizedKeysEditedInPlace(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	ak := filepath.Join(ts.keys.dir, jobkey.AuthorizedKeys)
	other, _ := newP521(t)
	// A comment makes the size differ: an in-place rewrite of equal size
	// within one clock tick of the previous one keeps every stamp field.
	must(t, os.WriteFile(ak, append(ssh.MarshalAuthorizedKey(other.PublicKey()), "# edited by hand\n"...), 0o644))
	if err := dialWith(ts, ts.keys.signer, ts.keys.pub); err == nil {
		t.Fatal("key removed from authorized_keys still logs in")
	}
	if err := dialWith(ts, other, ts.keys.pub); err != nil {
		t.Fatalf("key added to authorized_keys: %v", err)
	}
	must(t, os.Remove(ak))
	if err := dialWith(ts, other, ts.keys.pub); err == nil {
		t.Fatal("login accepted after authorized_keys was removed")
	}
	if ts.KeyError() == nil {
		t.Fatal("no KeyError with authorized_keys gone")
	}
}

// Re-checking the keys costs a stat per file when nothing changed: the
// store does not re-read or rebuild anything.
func TestKeyStoreUnchangedIsCached(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	k1 := ts.Server.keys.current()
	deadline := time.Now().Add(time.Second)
	for i := 0; i < 100 && time.Now().Before(deadline); i++ {
		if ts.Server.keys.current() != k1 {
			t.Fatal("snapshot rebuilt although no file changed")
		}
	}
	if ts.Server.keys.reloadCount != 0 {
		t.Fatalf("%d host key reloads without a change", ts.Server.keys.reloadCount)
	}
}

// BenchmarkKeyStoreCurrent is the per-authentication cost of following the
// Secret when nothing changed: three stats.
func BenchmarkKeyStoreCurrent(b *testing.B) {
	keys := writeTrainerLayout(b)
	ks, err := newKeyStore(keys.dir, "", slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_ = ks.current()
	}
}
