package share

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/jobkey"
)

// TestConfigsFollowTheSecret: the launcher reads a job's keys once for all
// the sessions it serves, and again once the Secret's files change (the
// kubelet swaps them on an update).
func TestConfigsFollowTheSecret(t *testing.T) {
	k1 := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, k1)
	var c configs
	fp := func() string {
		t.Helper()
		cfg, err := c.load(dir, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return ssh.FingerprintSHA256(cfg.Signer.PublicKey())
	}
	first := fp()
	if first != ssh.FingerprintSHA256(k1.Public()) || fp() != first {
		t.Fatalf("fingerprints %s, %s; want the job key's", first, fp())
	}
	// The Secret changes: a new key, written as the kubelet does (new
	// files, renamed into place).
	k2 := sshtest.NewTrainerKey(t)
	other := sshtest.WriteAuthDir(t, k2)
	for _, n := range []string{jobkey.PrivateKey, jobkey.PublicKey} {
		b, err := os.ReadFile(filepath.Join(other, n))
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "."+n+".new")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fp(); got != ssh.FingerprintSHA256(k2.Public()) {
		t.Fatalf("after the Secret changed: %s, want the new key %s", got, ssh.FingerprintSHA256(k2.Public()))
	}
}
