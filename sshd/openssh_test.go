//go:build linux

package sshd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

const opensshPath = "/usr/bin/ssh"

// opensshClient runs the real OpenSSH client against ts, pinning the host
// key to id_rsa.pub through a known_hosts file as a launcher would.
type opensshClient struct {
	ts      *testServer
	key, kh string
}

func newOpenSSH(t *testing.T, ts *testServer) *opensshClient {
	t.Helper()
	if _, err := os.Stat(opensshPath); err != nil {
		t.Skipf("OpenSSH client %s not installed: %v", opensshPath, err)
	}
	dir := t.TempDir()
	// OpenSSH refuses a group-readable key it owns (0640 as Trainer mounts
	// it), so use a 0600 copy, as the launcher must when it runs as root.
	key := filepath.Join(dir, "id_rsa")
	must(t, os.WriteFile(key, ts.keys.keyPEM, 0o600))
	kh := filepath.Join(dir, "known_hosts")
	line := "[127.0.0.1]:" + strconv.Itoa(ts.port) + " " + string(ssh.MarshalAuthorizedKey(ts.keys.pub))
	must(t, os.WriteFile(kh, []byte(line), 0o644))
	return &opensshClient{ts: ts, key: key, kh: kh}
}

// opensshDeadline bounds one OpenSSH run: it guards against a hang, and
// is no measure of speed (a loaded machine running the race detector
// takes tens of seconds to carry the 64 MiB below).
const opensshDeadline = 3 * time.Minute

func (o *opensshClient) run(t *testing.T, extra []string, cmd string) (stdout, stderr string, code int) {
	t.Helper()
	var out strings.Builder
	stderr, code = o.runTo(t, extra, cmd, &out)
	return out.String(), stderr, code
}

// runTo is run with the command's output written to stdout as it comes.
func (o *opensshClient) runTo(t *testing.T, extra []string, cmd string, stdout io.Writer) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opensshDeadline)
	defer cancel()
	args := []string{"-F", "none", "-p", strconv.Itoa(o.ts.port), "-i", o.key,
		"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + o.kh, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-l", "mpiuser"}
	args = append(args, extra...)
	args = append(args, "127.0.0.1", cmd)
	c := exec.CommandContext(ctx, opensshPath, args...)
	var errb strings.Builder
	c.Stdout, c.Stderr = stdout, &errb
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("ssh: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("ssh %q did not end within %s", cmd, opensshDeadline)
	}
	return errb.String(), code
}

func TestOpenSSHClient(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bin, "orted"), []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n"), 0o755))
	ts := startServer(t, func(c *Config) { c.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"} })
	o := newOpenSSH(t, ts)

	minTime := time.Hour
	for _, tc := range []struct {
		cmd            string
		code           int
		stdout, stderr string
	}{
		{"true", 0, "", ""},
		{"exit 7", 7, "", ""},
		{"no-such-command-podmpi", 127, "", "not found"},
		{"echo out; echo err >&2", 0, "out\n", "err\n"},
		{` orted -mca ess "env" -mca x "a;b"`, 0, "[-mca]\n[ess]\n[env]\n[-mca]\n[x]\n[a;b]\n", ""},
	} {
		start := time.Now()
		out, errOut, code := o.run(t, nil, tc.cmd)
		d := time.Since(start)
		minTime = min(minTime, d)
		t.Logf("ssh %q: %v", tc.cmd, d.Round(time.Millisecond))
		if code != tc.code || out != tc.stdout || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("ssh %q: code %d stdout %q stderr %q; want %d %q %q", tc.cmd, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
	// Without TCP_QUICKACK during the handshake every OpenSSH connection
	// stalls >= 40 ms on a delayed ACK. That is a speed property: `make bench`
	// measures it side by side with OpenSSH (BENCHMARKS.md); tests only log it.
	t.Logf("fastest OpenSSH connection: %v", minTime.Round(time.Millisecond))
	// Exit by signal: OpenSSH exits 255 when the remote command died by a signal.
	// A signal outside RFC 4254's list ("BUS@podmpi" on the wire) is no
	// worse for it: the same 255, and nothing printed.
	for _, cmd := range []string{"kill -TERM $$", "kill -BUS $$"} {
		if _, errOut, code := o.run(t, nil, cmd); code != 255 || errOut != "" {
			t.Errorf("%s via OpenSSH: code %d stderr %q, want 255 and nothing", cmd, code, errOut)
		}
	}
	// Only publickey is offered: password and keyboard-interactive fail.
	_, errOut, code := o.run(t, []string{"-o", "PreferredAuthentications=password,keyboard-interactive"}, "true")
	if code != 255 || !strings.Contains(errOut, "Permission denied (publickey)") {
		t.Errorf("password/keyboard-interactive only: code %d stderr %q", code, errOut)
	}
	// 64 MiB of output arrives intact through OpenSSH too.
	blob := make([]byte, 64<<20)
	_, _ = rand.Read(blob)
	blobFile := filepath.Join(t.TempDir(), "blob")
	must(t, os.WriteFile(blobFile, blob, 0o644))
	h := sha256.New()
	var n countWriter
	if errOut, code := o.runTo(t, nil, "cat "+blobFile, io.MultiWriter(h, &n)); code != 0 || [32]byte(h.Sum(nil)) != sha256.Sum256(blob) {
		t.Errorf("64 MiB via OpenSSH: code %d, got %d bytes (want %d), stderr %q", code, n, len(blob), errOut)
	}
	// An unknown client key is rejected.
	_, otherPEM := newP521(t)
	unknown := filepath.Join(t.TempDir(), "unknown_key")
	must(t, os.WriteFile(unknown, otherPEM, 0o600))
	jobKey := o.key
	o.key = unknown
	if _, errOut, code := o.run(t, nil, "true"); code != 255 || !strings.Contains(errOut, "Permission denied (publickey)") {
		t.Errorf("unknown key: code %d stderr %q", code, errOut)
	}
	o.key = jobKey
	// A wrong pinned host key is refused by the client.
	other, _ := newP521(t)
	must(t, os.WriteFile(o.kh, []byte("[127.0.0.1]:"+strconv.Itoa(ts.port)+" "+string(ssh.MarshalAuthorizedKey(other.PublicKey()))), 0o644))
	if _, errOut, code := o.run(t, nil, "true"); code != 255 || !strings.Contains(errOut, "HOST IDENTIFICATION HAS CHANGED") {
		t.Errorf("wrong pin: code %d stderr %q", code, errOut)
	}
}

// OpenSSH's client (9.2 here) negotiates with the server's explicit
// algorithm lists, in FIPS mode too (TestFIPSMode re-runs this test).
func TestOpenSSHNegotiates(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	o := newOpenSSH(t, ts)
	if out, errOut, code := o.run(t, nil, "echo negotiated"); code != 0 || out != "negotiated\n" {
		t.Fatalf("ssh: code %d stdout %q stderr %q\n%s", code, out, errOut, ts.logs)
	}
}
