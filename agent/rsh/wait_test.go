package rsh

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// waitRunner is a client with fast backoff whose progress lines come after
// every retry; stderr tells the test when the worker may start.
func waitRunner(env func(string) (string, bool), stderr *lineWaiter) (*runner, *bytes.Buffer) {
	var out bytes.Buffer
	return &runner{env: env, stdout: &out, stderr: stderr, grace: time.Second, retryDelay: 10 * time.Millisecond,
		backoff: 10 * time.Millisecond, maxBackoff: 20 * time.Millisecond, progressEvery: time.Nanosecond}, &out
}

// TestWaitsForLateWorker: with no option at all (horovodrun's task line,
// plain mpirun), a worker that listens only after the client started is
// waited for, with progress lines, and the command runs.
func TestWaitsForLateWorker(t *testing.T) {
	t.Parallel()
	k := sshtest.NewKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	port := sshtest.FreePort(t)
	env := func(n string) (string, bool) {
		if n == EnvAuthDir {
			return dir, true
		}
		return "", false // PODMPI_SSH_WAIT unset: the default wait
	}
	progress := "podmpi-rsh: waiting for 127.0.0.1:" + strconv.Itoa(port) + ": tcp-refused: "
	errw := newLineWaiter(progress)
	r, out := waitRunner(env, errw)
	sshtest.ServeLater(t, k, port, errw.seen)
	code := r.run(context.Background(), []string{"-o", "StrictHostKeyChecking=no", "127.0.0.1", "-p", strconv.Itoa(port), "echo up"})
	if code != 0 || out.String() != "up\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errw.String())
	}
	if !strings.Contains(errw.String(), "of 2m0s)") {
		t.Fatalf("progress lines do not name the 2m default wait: %q", errw.String())
	}
}

// TestQuietWaitsSilently: -q waits without progress lines. The worker's
// port first closes the connection before saying anything (what a sidecar
// whose upstream is not up yet does: transient), then serves SSH.
func TestQuietWaitsSilently(t *testing.T) {
	t.Parallel()
	k := sshtest.NewKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		c.Close()
		close(first)
		srv := sshtest.Serve(ln, sshtest.Options{HostKey: k.Signer, Authorized: []ssh.PublicKey{k.Public()}})
		t.Cleanup(srv.Close)
	}()
	env := func(n string) (string, bool) {
		if n == EnvAuthDir {
			return dir, true
		}
		return "", false
	}
	errw := newLineWaiter("never printed")
	r, out := waitRunner(env, errw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	code := r.run(ctx, []string{"-q", "-p", port, "127.0.0.1", "echo up"})
	select {
	case <-first:
	default:
		t.Fatal("the client never met the closing port")
	}
	if code != 0 || out.String() != "up\n" || errw.String() != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errw.String())
	}
}

// TestWaitBoundedByCommandLine: -o ConnectionAttempts=N allows N attempts,
// and PODMPI_SSH_WAIT=0 gives up at once; both end in the probe's one-line
// diagnosis.
func TestWaitBoundedByCommandLine(t *testing.T) {
	t.Parallel()
	k := sshtest.NewKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	port := strconv.Itoa(sshtest.FreePort(t))
	for _, tc := range []struct {
		name, wait string
		args       []string
		wantCause  string
	}{
		{"ConnectionAttempts", "", []string{"-o", "ConnectionAttempts=3", "-p", port, "127.0.0.1", "true"}, "(gave up after 3 attempts in "},
		{"ConnectTimeout", "", []string{"-o", "ConnectTimeout=1", "-p", port, "127.0.0.1", "true"}, "(gave up after "},
		{"no waiting", "0", []string{"-p", port, "127.0.0.1", "true"}, "connection refused; hint:"},
		{"short wait", "1", []string{"-p", port, "127.0.0.1", "true"}, "(gave up after "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := func(n string) (string, bool) {
				switch n {
				case EnvAuthDir:
					return dir, true
				case EnvWait:
					return tc.wait, tc.wait != ""
				}
				return "", false
			}
			var errb bytes.Buffer
			r := &runner{env: env, stdout: &bytes.Buffer{}, stderr: &errb, grace: time.Second, retryDelay: 10 * time.Millisecond,
				backoff: 10 * time.Millisecond, maxBackoff: 50 * time.Millisecond, progressEvery: time.Hour}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if code := r.run(ctx, tc.args); code != 255 {
				t.Fatalf("exit %d, want 255; stderr %q", code, errb.String())
			}
			oneLine(t, errb.String(), "podmpi-rsh: 127.0.0.1:"+port+": tcp-refused: ", tc.wantCause, "hint: nothing listens on port "+port)
		})
	}
}

// TestPermanentFailureIsNotWaitedFor: a worker that refuses the job's key
// is reported at once, however long the wait.
func TestPermanentFailureIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := sshtest.NewTrainerKey(t)
	wrongClient := sshtest.Start(t, sshtest.Options{HostKey: f.key.Signer, Authorized: []ssh.PublicKey{other.Public()}})
	r := runMain(t, f.env(EnvWait, "10m"), nil, "-v", "-p", strconv.Itoa(wrongClient.Port), "127.0.0.1", "true")
	if r.code != 255 {
		t.Fatalf("exit %d, want 255", r.code)
	}
	oneLine(t, r.stderr, "podmpi-rsh: 127.0.0.1:"+strconv.Itoa(wrongClient.Port)+": auth: ", "hint: the worker's authorized_keys")
}

// TestCommandNotFoundNamed: exit 127 passes through after a diagnosis line
// naming the program and the fix.
func TestCommandNotFoundNamed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := runMain(t, f.env(), nil, "-p", f.port(), "127.0.0.1", " PATH=/x:$PATH ; export PATH ; podmpi-no-such-orted -mca ess env")
	if r.code != 127 {
		t.Fatalf("exit %d, want 127: %+v", r.code, r)
	}
	line := ""
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "podmpi-rsh: ") {
			line = l
		}
	}
	for _, want := range []string{"127.0.0.1:" + f.port() + ": remote-command: ", "not found", "; hint: ", "worker-agent on 127.0.0.1"} {
		if !strings.Contains(line, want) {
			t.Fatalf("diagnosis %q lacks %q; stderr %q", line, want, r.stderr)
		}
	}
	if got := commandName(" PATH=/usr/bin:$PATH ; export PATH ; orted -mca ess env"); got != "orted" {
		t.Errorf("commandName(orted line) = %q", got)
	}
	if got := commandName(`HOROVOD_RANK=0 "python3" train.py`); got != "python3" {
		t.Errorf("commandName(horovod line) = %q", got)
	}
}

// TestVersionWarningsAndDebug: -V prints the version and exits 0;
// forwarding requests are warned about unless -q; ignored options are
// listed under -v.
func TestVersionWarningsAndDebug(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := runMain(t, f.env(), nil, "-V")
	if r.code != 0 || !strings.Contains(r.stderr, "podmpi") || r.stdout != "" {
		t.Fatalf("-V: %+v", r)
	}
	r = runMain(t, f.env(), nil, "-A", "-p", f.port(), "127.0.0.1", "echo ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("-A: %+v", r)
	}
	oneLine(t, r.stderr, "podmpi-rsh: warning: -A: agent forwarding is not supported")
	r = runMain(t, f.env(), nil, "-q", "-A", "-p", f.port(), "127.0.0.1", "true")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("-q -A: %+v", r)
	}
	r = runMain(t, f.env(), nil, "-v", "-o", "Foo=bar", "-p", f.port(), "127.0.0.1", "true")
	if r.code != 0 {
		t.Fatalf("-v -o Foo=bar: %+v", r)
	}
	oneLine(t, r.stderr, "podmpi-rsh: debug: ignoring -o Foo=bar (unknown to podmpi's ssh client)")
	r = runMain(t, f.env(), nil, "-o", "Foo=bar", "-p", f.port(), "127.0.0.1", "true")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("-o Foo=bar without -v: %+v", r)
	}
}
