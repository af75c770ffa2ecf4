package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/worker"
	"github.com/podmpi/podmpi/sshd"
)

// kubeletMount lays dir out as the kubelet mounts a Secret volume: files
// that are symlinks into "..data", a symlink to a timestamped directory.
// swap writes a new version and renames a fresh link over "..data", the
// atomic update the kubelet makes when the Secret changes.
type kubeletMount struct {
	dir string
	n   int
}

func (m *kubeletMount) swap(t *testing.T, from string) {
	t.Helper()
	m.n++
	ts := fmt.Sprintf("..2026_11_01_12_00_%02d.%d", m.n, 4000+m.n)
	if err := os.Rename(from, filepath.Join(m.dir, ts)); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func newKubeletMount(t *testing.T) (*kubeletMount, keys) {
	t.Helper()
	m := &kubeletMount{dir: t.TempDir()}
	k := writeKeys(t, t.TempDir())
	m.swap(t, k.dir)
	for _, name := range []string{"id_rsa", "id_rsa.pub", "authorized_keys"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(m.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return m, k
}

type hostKeyInfo struct {
	Fingerprint        string `json:"fingerprint"`
	DerivedFingerprint string `json:"derivedFingerprint"`
	Pinned             bool   `json:"pinned"`
}

func hostKeyOf(t *testing.T, a *agent) hostKeyInfo {
	t.Helper()
	code, body := a.Get("/info")
	var info struct {
		HostKey hostKeyInfo `json:"hostKey"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &info) != nil {
		t.Fatalf("/info = %d %s", code, body)
	}
	return info.HostKey
}

// The real binary follows a rotated Secret: after the kubelet's ..data
// swap the new key logs in and is the host key, the old one is refused,
// /info shows the new fingerprints, /readyz stays 200 (the keys are in
// step), and the log says "job key rotated" with both fingerprints.
func TestSecretRotationRealAgent(t *testing.T) {
	t.Parallel()
	mount, k1 := newKubeletMount(t)
	a := startAgent(t, loopbackArgs(mount.dir), baseEnv(), t.TempDir())
	a.WaitReady(t, 20*time.Second)
	dial(t, a.SSHAddr, k1.signer, k1.signer.PublicKey())
	hk1 := hostKeyOf(t, a)
	if hk1.Fingerprint != ssh.FingerprintSHA256(k1.signer.PublicKey()) || hk1.DerivedFingerprint == "" || !hk1.Pinned {
		t.Fatalf("/info hostKey %+v before rotation", hk1)
	}
	if !strings.Contains(a.Log(), hk1.DerivedFingerprint) {
		t.Errorf("the derived host key's fingerprint is not in the startup log:\n%s", a.Log())
	}

	k2 := writeKeys(t, t.TempDir())
	mount.swap(t, k2.dir)
	dial(t, a.SSHAddr, k2.signer, k2.signer.PublicKey())
	if c, err := dialErr(a.SSHAddr, k1.signer, k2.signer.PublicKey()); err == nil {
		c.Close()
		t.Fatal("the rotated-out key still logs in")
	}
	if c, err := dialErr(a.SSHAddr, k2.signer, k1.signer.PublicKey()); err == nil {
		c.Close()
		t.Fatal("the rotated-out host key is still served")
	}
	hk2 := hostKeyOf(t, a)
	if hk2.Fingerprint != ssh.FingerprintSHA256(k2.signer.PublicKey()) || hk2.DerivedFingerprint == "" || hk2.DerivedFingerprint == hk1.DerivedFingerprint {
		t.Fatalf("/info hostKey %+v after rotation (before %+v)", hk2, hk1)
	}
	if code, body := a.Get("/readyz"); code != 200 {
		t.Fatalf("/readyz after a good rotation = %d %q", code, body)
	}
	var rotated bool
	for _, line := range strings.Split(a.Log(), "\n") {
		if strings.Contains(line, `"msg":"job key rotated"`) &&
			strings.Contains(line, `"old_host_key_fp":"`+hk1.Fingerprint+`"`) && strings.Contains(line, `"new_host_key_fp":"`+hk2.Fingerprint+`"`) &&
			strings.Contains(line, `"old_derived_key_fp":"`+hk1.DerivedFingerprint+`"`) && strings.Contains(line, `"new_derived_key_fp":"`+hk2.DerivedFingerprint+`"`) {
			rotated = true
		}
	}
	if !rotated {
		t.Errorf("no \"job key rotated\" line with both fingerprints:\n%s", a.Log())
	}

	// A Secret whose authorized_keys lost its key: logins refused, /readyz
	// says why.
	k3 := writeKeys(t, t.TempDir())
	mustWrite(t, filepath.Join(k3.dir, "authorized_keys"), "# no keys\n", 0o644)
	mount.swap(t, k3.dir)
	if c, err := dialErr(a.SSHAddr, k3.signer, k3.signer.PublicKey()); err == nil {
		c.Close()
		t.Fatal("login accepted with an empty authorized_keys")
	}
	if code, body := a.Get("/readyz"); code != 503 || !strings.Contains(body, "refusing every login") {
		t.Fatalf("/readyz with an empty authorized_keys = %d %q", code, body)
	}
}

// An over-limit connection gets one line naming the limit and its flag.
func TestRefusalLineRealAgent(t *testing.T) {
	t.Parallel()
	k := writeKeys(t, t.TempDir())
	a := startAgent(t, loopbackArgs(k.dir, "--ssh.per-source-max-startups=1"), baseEnv(), t.TempDir())
	a.WaitReady(t, 20*time.Second)
	hold, err := net.Dial("tcp", a.SSHAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	_ = hold.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := bufio.NewReader(hold).ReadString('\n'); err != nil || !strings.HasPrefix(l, "SSH-2.0-") {
		t.Fatalf("first connection: %q %v", l, err)
	}
	c, err := net.Dial("tcp", a.SSHAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(l, "too many unauthenticated connections") || !strings.Contains(l, "--ssh.per-source-max-startups") {
		t.Fatalf("second connection from the same address got %q", l)
	}
}

var _ worker.KeyState = (*sshd.Server)(nil) // /info and /readyz see the key state
