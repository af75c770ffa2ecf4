//go:build linux

package sshd

import (
	"context"
	"crypto/fips140"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

const fipsChildEnv = "PODMPI_SSHD_FIPS_CHILD"

// TestFIPSMode re-runs the key and session tests in a subprocess of this test
// binary with GODEBUG=fips140=on (Go's FIPS 140-3 mode): ECDSA P-521 job
// keys, x/crypto's default (FIPS-filtered) algorithms.
func TestFIPSMode(t *testing.T) {
	if os.Getenv(fipsChildEnv) != "" {
		t.Skip("already the FIPS subprocess")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tests := "^(TestFIPSChild|TestHostKeyIsJobKey|TestExitCodesAndStreams|TestUnknownKeyRejectedPublicKeyOnly|TestGeneratedHostKeyReused|TestOpenSSHNegotiates|TestSecretRotation)$"
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+tests, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=on", fipsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("FIPS subprocess failed: %v\n%s", err, out)
	}
	for _, name := range []string{"TestFIPSChild", "TestHostKeyIsJobKey", "TestExitCodesAndStreams", "TestUnknownKeyRejectedPublicKeyOnly", "TestGeneratedHostKeyReused", "TestOpenSSHNegotiates", "TestSecretRotation"} {
		if !strings.Contains(string(out), "--- PASS: "+name) && !strings.Contains(string(out), "--- SKIP: "+name) {
			t.Errorf("%s did not pass under fips140=on:\n%s", name, out)
		}
	}
}

func TestFIPSChild(t *testing.T) {
	if os.Getenv(fipsChildEnv) == "" {
		t.Skip("runs only in the GODEBUG=fips140=on subprocess of TestFIPSMode")
	}
	if !fips140.Enabled() {
		t.Fatal("crypto/fips140.Enabled() is false under GODEBUG=fips140=on")
	}
	ts := startServer(t, nil)
	// No derived ed25519 key in FIPS mode: the job key is the only host key.
	if fp := ts.DerivedKeyFingerprint(); fp != "" {
		t.Fatalf("derived host key %s offered under fips140=on", fp)
	}
	if ts.Server.keys.current().signer.PublicKey().Type() != ssh.KeyAlgoECDSA521 {
		t.Fatalf("host key type %s", ts.Server.keys.current().signer.PublicKey().Type())
	}
	c := ts.dial(t)
	if r := run(t, c, "echo fips", nil); r.stdout != "fips\n" || r.code != 0 {
		t.Errorf("%+v", r)
	}
	// x/crypto honours FIPS mode: a client insisting on curve25519 (not
	// approved) finds no common algorithm, so the defaults are FIPS-filtered.
	cfg := clientConfig(ts.keys.signer, ts.keys.pub)
	cfg.KeyExchanges = []string{ssh.KeyExchangeCurve25519}
	if c2, err := ssh.Dial("tcp", ts.addr, cfg); err == nil {
		c2.Close()
		t.Error("curve25519 negotiated under fips140=on: x/crypto did not apply FIPS mode")
	}
}
