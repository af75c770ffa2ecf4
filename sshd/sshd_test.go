//go:build linux

package sshd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/podmpi/podmpi/jobkey"
)

func TestExitCodesAndStreams(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	for _, tc := range []struct {
		cmd            string
		code           int
		stdout, stderr string
	}{
		{"true", 0, "", ""},
		{"exit 7", 7, "", ""},
		{"no-such-command-podmpi", 127, "", "not found"},
		{"echo out; echo err >&2; exit 1", 1, "out\n", "err\n"},
	} {
		r := run(t, c, tc.cmd, nil)
		if r.err != nil || r.code != tc.code || r.stdout != tc.stdout || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%q: code %d stdout %q stderr %q err %v; want code %d stdout %q stderr containing %q",
				tc.cmd, r.code, r.stdout, r.stderr, r.err, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestLargeOutputIntact(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	dir := t.TempDir()
	big := make([]byte, 64<<20)
	_, _ = rand.Read(big)
	small := make([]byte, 1<<20)
	_, _ = rand.Read(small)
	must(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "small"), small, 0o644))
	sess, err := c.NewSession()
	must(t, err)
	defer sess.Close()
	hOut, hErr := sha256.New(), sha256.New()
	var nOut, nErr countWriter
	sess.Stdout = io.MultiWriter(hOut, &nOut)
	sess.Stderr = io.MultiWriter(hErr, &nErr)
	// Both streams at once, and the shell exits right after: the exit status
	// must not overtake buffered output.
	cmd := "cat " + filepath.Join(dir, "big") + " & cat " + filepath.Join(dir, "small") + " >&2; wait"
	if err := sess.Run(cmd); err != nil {
		t.Fatalf("run: %v", err)
	}
	wantOut, wantErr := sha256.Sum256(big), sha256.Sum256(small)
	if !bytes.Equal(hOut.Sum(nil), wantOut[:]) || int64(nOut) != int64(len(big)) {
		t.Errorf("stdout: %d bytes, hash mismatch=%v", nOut, !bytes.Equal(hOut.Sum(nil), wantOut[:]))
	}
	if !bytes.Equal(hErr.Sum(nil), wantErr[:]) || int64(nErr) != int64(len(small)) {
		t.Errorf("stderr: %d bytes, hash mismatch=%v", nErr, !bytes.Equal(hErr.Sum(nil), wantErr[:]))
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

func TestStdinStreamed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	// Bulk: 1 MiB through cat.
	in := make([]byte, 1<<20)
	_, _ = rand.Read(in)
	r := run(t, c, "cat", bytes.NewReader(in))
	if r.err != nil || r.code != 0 || r.stdout != string(in) {
		t.Fatalf("cat: code %d, %d bytes back, err %v", r.code, len(r.stdout), r.err)
	}
	// Interactive: each line comes back before stdin ends; EOF ends cat.
	sess, err := c.NewSession()
	must(t, err)
	defer sess.Close()
	stdin, err := sess.StdinPipe()
	must(t, err)
	stdout, err := sess.StdoutPipe()
	must(t, err)
	must(t, sess.Start("cat"))
	br := bufio.NewReader(stdout)
	for i := 0; i < 3; i++ {
		line := "line " + strconv.Itoa(i) + "\n"
		_, err := io.WriteString(stdin, line)
		must(t, err)
		got, err := readLineTimeout(br, 10*time.Second)
		if err != nil || got != line {
			t.Fatalf("echo %d: got %q, %v", i, got, err)
		}
	}
	must(t, stdin.Close())
	if err := waitSession(t, sess, 10*time.Second); err != nil {
		t.Fatalf("cat after EOF: %v", err)
	}
}

func readLineTimeout(br *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := br.ReadString('\n'); ch <- res{s, err} }()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", errors.New("timeout reading a line")
	}
}

// TestSessionEnvironment: the agent's PATH reaches the session, an
// Open MPI-style command string goes through the shell, and the sshd
// variables are set.
func TestSessionEnvironment(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bin, "orted"), []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n"), 0o755))
	path := bin + ":/usr/local/bin:/usr/bin:/bin"
	ts := startServer(t, func(c *Config) {
		c.Env = []string{"PATH=" + path, "LD_LIBRARY_PATH=/opt/podmpi-test/lib", "SSH_AUTH_SOCK=/should/not/leak"}
	})
	c := ts.dial(t)

	r := run(t, c, `echo "$PATH"`, nil)
	if strings.TrimSpace(r.stdout) != path {
		t.Errorf("PATH in session = %q, want %q", r.stdout, path)
	}
	r = run(t, c, ` orted -mca ess "env" -mca orte_hnp_uri "2009530368.0;tcp://10.250.0.10:53751" -mca x "a;b" --tree-spawn`, nil)
	want := "[-mca]\n[ess]\n[env]\n[-mca]\n[orte_hnp_uri]\n[2009530368.0;tcp://10.250.0.10:53751]\n[-mca]\n[x]\n[a;b]\n[--tree-spawn]\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("MPI-style command: code %d stdout %q stderr %q; want %q", r.code, r.stdout, r.stderr, want)
	}
	r = run(t, c, `echo "$LD_LIBRARY_PATH|$SHELL|${SSH_AUTH_SOCK:-unset}|$SSH_CONNECTION|$SSH_CLIENT|$HOME|$USER|$LOGNAME"; pwd`, nil)
	f := strings.Split(strings.Split(r.stdout, "\n")[0], "|")
	if len(f) != 8 {
		t.Fatalf("env line %q", r.stdout)
	}
	lp := strconv.Itoa(ts.port)
	if f[0] != "/opt/podmpi-test/lib" || f[1] != "/bin/sh" || f[2] != "unset" {
		t.Errorf("LD_LIBRARY_PATH|SHELL|SSH_AUTH_SOCK = %q", f[:3])
	}
	if cf := strings.Fields(f[3]); len(cf) != 4 || cf[0] != "127.0.0.1" || cf[2] != "127.0.0.1" || cf[3] != lp {
		t.Errorf("SSH_CONNECTION = %q", f[3])
	}
	if cf := strings.Fields(f[4]); len(cf) != 3 || cf[0] != "127.0.0.1" || cf[2] != lp {
		t.Errorf("SSH_CLIENT = %q", f[4])
	}
	if f[5] == "" || !isDir(f[5]) || f[6] == "" || f[6] != f[7] {
		t.Errorf("HOME|USER|LOGNAME = %q", f[5:])
	}
	if !strings.Contains(r.stdout, "\n"+f[5]+"\n") {
		t.Errorf("working dir is not HOME %q: %q", f[5], r.stdout)
	}
}

func TestEnvAllowListInSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	sess, err := c.NewSession()
	must(t, err)
	defer sess.Close()
	if err := sess.Setenv("OMPI_MCA_podmpi_test", "yes it is"); err != nil {
		t.Errorf("OMPI_ variable refused: %v", err)
	}
	if err := sess.Setenv("SECRET_X", "leak"); err == nil {
		t.Errorf("SECRET_X accepted")
	}
	if err := sess.Setenv("PATH", "/evil"); err == nil {
		t.Errorf("PATH accepted")
	}
	out, err := sess.Output(`echo "${OMPI_MCA_podmpi_test:-unset}|${SECRET_X:-unset}|$PATH"`)
	must(t, err)
	f := strings.Split(strings.TrimSpace(string(out)), "|")
	if f[0] != "yes it is" || f[1] != "unset" || f[2] == "/evil" {
		t.Errorf("session saw %q", f)
	}
	if strings.Contains(ts.logs.String(), "yes it is") || strings.Contains(ts.logs.String(), "leak") {
		t.Errorf("env values leaked into the log")
	}
}

func TestUnknownKeyRejectedPublicKeyOnly(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry())
	ts := startServer(t, func(c *Config) { c.Metrics = m })
	other, _ := newP521(t)
	called := ""
	cfg := clientConfig(other, ts.keys.pub)
	cfg.Auth = append(cfg.Auth,
		ssh.PasswordCallback(func() (string, error) { called += "password "; return "x", nil }),
		ssh.KeyboardInteractive(func(string, string, []string, []bool) ([]string, error) {
			called += "keyboard-interactive "
			return nil, nil
		}))
	_, err := ssh.Dial("tcp", ts.addr, cfg)
	if err == nil {
		t.Fatal("unknown key authenticated")
	}
	if called != "" {
		t.Errorf("server offered %s", called)
	}
	if !strings.Contains(err.Error(), "attempted methods [none publickey]") {
		t.Errorf("error %q: want only none and publickey attempted", err)
	}
	waitFor(t, func() bool { return metricValue(m.authFailures.WithLabelValues(authUnknownKey)) == 1 }, "auth failure counted as unknown_key")
	if got := metricValue(m.connections.WithLabelValues(connHandshakeFailed)); got != 1 {
		t.Errorf("handshake_failed = %v", got)
	}
	if ts.authOK.Load() != 0 {
		t.Errorf("server counted an authentication")
	}
	// The right key still works, and is counted.
	ts.dial(t)
	if got := metricValue(m.connections.WithLabelValues(connAuthenticated)); got != 1 {
		t.Errorf("accepted = %v", got)
	}
	logs := ts.logs.String()
	if !strings.Contains(logs, jobkey.Fingerprint(other.PublicKey())) || !strings.Contains(logs, "user=mpiuser") {
		t.Errorf("audit log lacks the rejected key's fingerprint or user:\n%s", logs)
	}
	if strings.Contains(logs, "BEGIN") || strings.Contains(logs, string(ssh.MarshalAuthorizedKey(ts.keys.pub))[20:60]) {
		t.Errorf("key material in the log")
	}
}

func TestMaxAuthTries(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	ts := startServer(t, func(c *Config) { c.Metrics = m; c.MaxAuthTries = 2 })
	var signers []ssh.Signer
	for i := 0; i < 3; i++ {
		s, _ := newP521(t)
		signers = append(signers, s)
	}
	signers = append(signers, ts.keys.signer) // the good key comes too late
	cfg := clientConfig(ts.keys.signer, ts.keys.pub)
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(signers...)}
	if _, err := ssh.Dial("tcp", ts.addr, cfg); err == nil {
		t.Fatal("authenticated after MaxAuthTries")
	}
	waitFor(t, func() bool { return metricValue(m.authFailures.WithLabelValues(authMaxTries)) == 1 }, "max_tries counted")
}

func TestExitSignal(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	r := run(t, c, "echo before; kill -TERM $$; echo after", nil)
	if r.signal != "TERM" || r.stdout != "before\n" {
		t.Errorf("signal %q stdout %q code %d err %v", r.signal, r.stdout, r.code, r.err)
	}
	// A signal RFC 4254 does not name is named all the same, so that
	// podmpi-rsh can exit 128+7 (OpenSSH's sshd says "SIG@openssh.com").
	if r := run(t, c, "kill -BUS $$", nil); r.signal != "BUS@podmpi" {
		t.Errorf("SIGBUS: signal %q code %d err %v", r.signal, r.code, r.err)
	}
}

// startPIDs runs cmd, which prints PIDs one per line and then blocks, and
// returns the session, its client and the PIDs once want lines are read.
func startPIDs(t *testing.T, c *ssh.Client, cmd string, want int) (*ssh.Session, []int) {
	t.Helper()
	sess, err := c.NewSession()
	must(t, err)
	stdout, err := sess.StdoutPipe()
	must(t, err)
	must(t, sess.Start(cmd))
	br := bufio.NewReader(stdout)
	var pids []int
	for len(pids) < want {
		line, err := readLineTimeout(br, 10*time.Second)
		if err != nil {
			t.Fatalf("reading PIDs: %v", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("not a PID: %q", line)
		}
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	go io.Copy(io.Discard, br)
	return sess, pids
}

// gone reports whether none of pids exists any more (not even as a zombie).
func waitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var alive []string
		for _, pid := range pids {
			if _, state, comm, ok := procStat(pid); ok {
				alive = append(alive, strconv.Itoa(pid)+"("+comm+","+state+")")
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still present after %v: %v", within, alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDisconnectKillsProcessGroup(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	tcp, err := net.Dial("tcp", ts.addr)
	must(t, err)
	sc, chans, reqs, err := ssh.NewClientConn(tcp, ts.addr, clientConfig(ts.keys.signer, ts.keys.pub))
	must(t, err)
	c := ssh.NewClient(sc, chans, reqs)
	defer c.Close()
	_, pids := startPIDs(t, c, "sleep 1000 & echo $!; sleep 1000 & echo $!; echo $$; wait", 3)
	// Drop the TCP connection abruptly: no channel close, no SSH disconnect.
	must(t, tcp.(*net.TCPConn).SetLinger(0))
	must(t, tcp.Close())
	waitGone(t, pids, 2*time.Second)
}

func TestSignalRequestReachesGroup(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	sess, pids := startPIDs(t, c, "sleep 1000 & echo $!; echo $$; wait", 2)
	must(t, sess.Signal(ssh.SIGUSR1))
	err := waitSession(t, sess, 5*time.Second)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.Signal() != "USR1" {
		t.Fatalf("wait: %v, want exit-signal USR1", err)
	}
	// The background sleep got the signal too: only a group signal reaches it.
	waitGone(t, pids, 2*time.Second)
}

func TestShutdownTerminatesSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *Config) { c.ShutdownGrace = 500 * time.Millisecond })
	c := ts.dial(t)
	// One session exits on SIGTERM, the other ignores it and needs SIGKILL.
	s1, p1 := startPIDs(t, c, "echo $$; exec sleep 1000", 1)
	s2, p2 := startPIDs(t, c, "trap '' TERM; sleep 1000 & echo $!; echo $$; wait", 2)
	errs := make(chan error, 2)
	go func() { errs <- s1.Wait() }()
	go func() { errs <- s2.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	select {
	case err := <-ts.serveErr:
		if err != nil {
			t.Errorf("Serve returned %v", err)
		}
		ts.serveErr <- nil // for the cleanup
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return")
	}
	if ts.Listening() {
		t.Error("Listening after Shutdown")
	}
	sigs := map[string]bool{}
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			var ee *ssh.ExitError
			if errors.As(err, &ee) {
				sigs[ee.Signal()] = true
			} else {
				t.Errorf("session ended with %v", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("session not ended by Shutdown")
		}
	}
	if !sigs["TERM"] || !sigs["KILL"] {
		t.Errorf("exit signals %v, want TERM and KILL", sigs)
	}
	waitGone(t, append(p1, p2...), 2*time.Second)
	if _, err := net.DialTimeout("tcp", ts.addr, time.Second); err == nil {
		t.Error("still accepting after Shutdown")
	}
}

func TestServeContextCancelShutsDown(t *testing.T) {
	t.Parallel()
	keys := writeTrainerLayout(t)
	s, err := New(Config{ListenAddress: "127.0.0.1:0", AuthDir: keys.dir, ShutdownGrace: 200 * time.Millisecond})
	must(t, err)
	addr, err := s.Listen()
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	c, err := ssh.Dial("tcp", addr.String(), clientConfig(keys.signer, keys.pub))
	must(t, err)
	defer c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after ctx cancel")
	}
	if s.Listening() {
		t.Error("Listening after cancel")
	}
}

func TestLoginGraceTimeSlowloris(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	// The grace must exceed a P-521 handshake on 2 busy cores under -race
	// (~0.4 s seen in CI), or the authenticated half below is cut too.
	const grace = 1500 * time.Millisecond
	ts := startServer(t, func(c *Config) { c.LoginGraceTime = grace; c.Metrics = m })
	conn, err := net.Dial("tcp", ts.addr)
	must(t, err)
	defer conn.Close()
	start := time.Now()
	must(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	// Send nothing; read the banner and whatever follows until the server hangs up.
	n, err := io.Copy(io.Discard, conn)
	d := time.Since(start)
	if err != nil {
		t.Fatalf("connection not closed by the server: %v after %v", err, d)
	}
	if n == 0 || d < grace-100*time.Millisecond || d > grace+2*time.Second {
		t.Errorf("closed after %v with %d bytes; want ~%v after the banner", d, n, grace)
	}
	waitFor(t, func() bool { return metricValue(m.connections.WithLabelValues(connHandshakeFailed)) == 1 }, "handshake_failed counted")

	// A slow client that authenticated is not subject to the grace time.
	c := ts.dial(t)
	time.Sleep(grace + 300*time.Millisecond)
	if r := run(t, c, "echo alive", nil); r.stdout != "alive\n" {
		t.Errorf("authenticated connection cut by LoginGraceTime: %+v", r)
	}
}

func TestMaxStartups(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	ts := startServer(t, func(c *Config) { c.MaxStartups = 2; c.Metrics = m })
	banner := func(c net.Conn) (string, error) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		return line, err
	}
	var pre []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", ts.addr)
		must(t, err)
		defer c.Close()
		if l, err := banner(c); err != nil || !strings.HasPrefix(l, "SSH-2.0-") {
			t.Fatalf("pre-auth conn %d: %q %v", i, l, err)
		}
		pre = append(pre, c)
	}
	// The third is refused at once with a line that says why, not in
	// silence.
	third, err := net.Dial("tcp", ts.addr)
	must(t, err)
	defer third.Close()
	if l, _ := banner(third); !strings.Contains(l, RefusalMarker) || !strings.Contains(l, "--ssh.max-startups 2") || strings.HasPrefix(l, "SSH-") {
		t.Errorf("third pre-auth connection got %q; want the refusal line naming --ssh.max-startups 2", l)
	}
	if got := metricValue(m.connections.WithLabelValues(connRejectedMaxStartups)); got != 1 {
		t.Errorf("rejected_maxstartups = %v", got)
	}
	// A slot frees when a pre-auth connection goes away.
	pre[0].Close()
	waitFor(t, func() bool { n, _ := ts.limits.held(); return n < 2 }, "startup slot released")
	c := ts.dial(t)
	if r := run(t, c, "echo ok", nil); r.stdout != "ok\n" {
		t.Errorf("after slot release: %+v", r)
	}
	// Authenticated connections do not hold a slot.
	if n, _ := ts.limits.held(); n != 1 {
		t.Errorf("%d startup slots held, want 1 (the remaining pre-auth conn)", n)
	}
}

func TestMaxSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *Config) { c.MaxSessions = 2 })
	c := ts.dial(t)
	s1, err := c.NewSession()
	must(t, err)
	s2, err := c.NewSession()
	must(t, err)
	if _, err := c.NewSession(); err == nil || !strings.Contains(err.Error(), "MaxSessions") {
		t.Errorf("third session: %v", err)
	}
	s1.Close()
	// Closing one frees its slot (once the server saw the close).
	waitFor(t, func() bool {
		s, err := c.NewSession()
		if err != nil {
			return false
		}
		s.Close()
		return true
	}, "session slot freed")
	s2.Close()
}

func TestPTY(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	sess, err := c.NewSession()
	must(t, err)
	if err := sess.RequestPty("xterm", 40, 100, nil); err == nil {
		t.Error("PTY granted without AllowPTY")
	}
	out, err := sess.Output("test -t 0 && echo tty || echo notty")
	if err != nil || string(out) != "notty\n" {
		t.Errorf("after refused pty: %q %v", out, err)
	}

	ts2 := startServer(t, func(c *Config) { c.AllowPTY = true })
	c2 := ts2.dial(t)
	sess2, err := c2.NewSession()
	must(t, err)
	if err := sess2.RequestPty("xterm", 40, 100, nil); err != nil {
		t.Fatalf("PTY refused with AllowPTY: %v", err)
	}
	out, err = sess2.Output("test -t 0 && echo tty; stty size; echo $TERM")
	if err != nil || string(out) != "tty\r\n40 100\r\nxterm\r\n" {
		t.Errorf("pty session: %q %v", out, err)
	}
}

func TestForwardingAndSubsystemsRefused(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	ts := startServer(t, func(c *Config) { c.Metrics = m })
	c := ts.dial(t)
	target, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer target.Close()
	if conn, err := c.Dial("tcp", target.Addr().String()); err == nil {
		conn.Close()
		t.Error("local port forwarding (direct-tcpip) allowed")
	}
	if l, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
		t.Error("remote port forwarding (tcpip-forward) allowed")
	}
	sess, err := c.NewSession()
	must(t, err)
	defer sess.Close()
	if err := agent.RequestAgentForwarding(sess); err == nil {
		t.Error("agent forwarding allowed")
	}
	x11 := ssh.Marshal(struct {
		Single bool
		Proto  string
		Cookie string
		Screen uint32
	}{false, "MIT-MAGIC-COOKIE-1", "00", 0})
	if ok, err := sess.SendRequest("x11-req", true, x11); ok || err != nil {
		t.Errorf("x11-req: ok=%v err=%v", ok, err)
	}
	if err := sess.RequestSubsystem("sftp"); err == nil {
		t.Error("sftp subsystem allowed")
	}
	for _, kind := range []string{"port_forward", "agent", "x11", "subsystem"} {
		if metricValue(m.refused.WithLabelValues(kind)) == 0 {
			t.Errorf("refusal of %s not counted", kind)
		}
	}
	// The connection is still usable.
	if r := run(t, c, "echo ok", nil); r.stdout != "ok\n" {
		t.Errorf("after refusals: %+v", r)
	}
}

func TestHostKeyIsJobKey(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	if !ts.HostKeyPinned() {
		t.Error("HostKeyPinned false with id_rsa present")
	}
	if ts.HostKeyFingerprint() != ssh.FingerprintSHA256(ts.keys.pub) || !strings.HasPrefix(ts.HostKeyFingerprint(), "SHA256:") {
		t.Errorf("fingerprint %s, want %s", ts.HostKeyFingerprint(), ssh.FingerprintSHA256(ts.keys.pub))
	}
	if ts.AuthorizedKeyCount() != 1 {
		t.Errorf("AuthorizedKeyCount %d", ts.AuthorizedKeyCount())
	}
	// A client pinning another key refuses the server.
	other, _ := newP521(t)
	if _, err := ssh.Dial("tcp", ts.addr, clientConfig(ts.keys.signer, other.PublicKey())); err == nil {
		t.Error("client accepted a host key other than its pin")
	}
	c := ts.dial(t) // pins id_rsa.pub
	if r := run(t, c, "true", nil); r.code != 0 || r.err != nil {
		t.Errorf("%+v", r)
	}
}

func TestGeneratedHostKeyReused(t *testing.T) {
	t.Parallel()
	keys := writeTrainerLayout(t)
	must(t, os.Remove(filepath.Join(keys.dir, jobkey.PrivateKey)))
	stateDir := filepath.Join(t.TempDir(), "state", "sshd")
	logs := &syncBuffer{}
	cfg := Config{ListenAddress: "127.0.0.1:0", AuthDir: keys.dir, StateDir: stateDir,
		Logger: slogText(logs)}
	s1, err := New(cfg)
	must(t, err)
	if s1.HostKeyPinned() {
		t.Error("generated key reported as pinned")
	}
	if !strings.Contains(logs.String(), "cannot pin") {
		t.Errorf("no warning about pinning:\n%s", logs)
	}
	st, err := os.Stat(stateDir)
	must(t, err)
	if st.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %04o", st.Mode().Perm())
	}
	kst, err := os.Stat(filepath.Join(stateDir, GeneratedHostKeyFile))
	must(t, err)
	if kst.Mode().Perm() != 0o600 {
		t.Errorf("host key mode %04o", kst.Mode().Perm())
	}
	s2, err := New(cfg)
	must(t, err)
	if s1.HostKeyFingerprint() != s2.HostKeyFingerprint() {
		t.Errorf("host key regenerated: %s then %s", s1.HostKeyFingerprint(), s2.HostKeyFingerprint())
	}
	ents, _ := os.ReadDir(stateDir)
	if len(ents) != 1 {
		t.Errorf("state dir holds %d entries, want only the key", len(ents))
	}
	// Clients connect pinning the generated key.
	ts := startServerCfg(t, keys, cfg, logs)
	hostPub := ts.Server.keys.current().signer.PublicKey()
	c, err := ssh.Dial("tcp", ts.addr, clientConfig(keys.signer, hostPub))
	must(t, err)
	defer c.Close()
	if r := run(t, c, "echo ok", nil); r.stdout != "ok\n" {
		t.Errorf("%+v", r)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	keys := writeTrainerLayout(t)
	must(t, os.Remove(filepath.Join(keys.dir, jobkey.AuthorizedKeys)))
	_, err := New(Config{AuthDir: keys.dir})
	var ae *jobkey.Error
	if !errors.As(err, &ae) || !strings.Contains(ae.Path, jobkey.AuthorizedKeys) {
		t.Errorf("missing authorized_keys: %v", err)
	}
	keys = writeTrainerLayout(t)
	must(t, os.WriteFile(filepath.Join(keys.dir, jobkey.PrivateKey), []byte("garbage"), 0o640))
	_, err = New(Config{AuthDir: keys.dir})
	if !errors.As(err, &ae) || !strings.Contains(ae.Path, jobkey.PrivateKey) {
		t.Errorf("bad id_rsa: %v", err)
	}
	// id_rsa.pub not matching id_rsa is named up front.
	keys = writeTrainerLayout(t)
	other, _ := newP521(t)
	must(t, os.WriteFile(filepath.Join(keys.dir, jobkey.PublicKey), ssh.MarshalAuthorizedKey(other.PublicKey()), 0o644))
	_, err = New(Config{AuthDir: keys.dir})
	if !errors.As(err, &ae) {
		t.Errorf("mismatched pair: %v", err)
	}
	// Skipped authorized_keys lines are logged, good ones used.
	keys = writeTrainerLayout(t)
	ak := filepath.Join(keys.dir, jobkey.AuthorizedKeys)
	good, _ := os.ReadFile(ak)
	must(t, os.WriteFile(ak, append([]byte("not a key\ncommand=\"x\" "+string(good)), good...), 0o644))
	logs := &syncBuffer{}
	s, err := New(Config{AuthDir: keys.dir, Logger: slogText(logs)})
	must(t, err)
	// The malformed line is a warning; the key refused for its command=
	// option is an error naming the file, the line and the option.
	if s.AuthorizedKeyCount() != 1 || strings.Count(logs.String(), "skipped authorized_keys line") != 1 ||
		!strings.Contains(logs.String(), `level=ERROR msg="authorized_keys key refused`) ||
		!strings.Contains(logs.String(), "line=2 options=[command]") || !strings.Contains(logs.String(), ak) {
		t.Errorf("count %d, log:\n%s", s.AuthorizedKeyCount(), logs)
	}
}

func TestListenBusyPort(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	keys := writeTrainerLayout(t)
	s, err := New(Config{ListenAddress: ts.addr, AuthDir: keys.dir})
	must(t, err)
	_, err = s.Listen()
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), ts.addr) {
		t.Errorf("busy port: %v", err)
	}
	if s.Listening() {
		t.Error("Listening after a failed Listen")
	}
	if err := s.Serve(context.Background()); err == nil {
		t.Error("Serve without a listener succeeded")
	}
	must(t, s.Shutdown(context.Background()))
}

func TestKeepAliveDropsDeadClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *Config) {
		c.KeepAliveInterval = 100 * time.Millisecond
		c.KeepAliveCountMax = 3
	})
	// A proxy that can freeze: the client stops answering without closing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	frozen := make(chan struct{})
	serverGone := make(chan struct{})
	go func() {
		cc, err := ln.Accept()
		if err != nil {
			return
		}
		defer cc.Close()
		sc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			return
		}
		defer sc.Close()
		go func() { copyUntil(cc, sc, frozen); close(serverGone) }() // server -> client
		copyUntil(sc, cc, frozen)                                    // client -> server
		<-serverGone
	}()
	c, err := ssh.Dial("tcp", ln.Addr().String(), clientConfig(ts.keys.signer, ts.keys.pub))
	must(t, err)
	defer c.Close()
	if r := run(t, c, "echo ok", nil); r.stdout != "ok\n" {
		t.Fatalf("%+v", r)
	}
	// Answering keepalives keeps the connection up past 3 intervals.
	time.Sleep(500 * time.Millisecond)
	if r := run(t, c, "echo still", nil); r.stdout != "still\n" {
		t.Fatalf("connection dropped while the client answered keepalives: %+v", r)
	}
	close(frozen)
	select {
	case <-serverGone:
	case <-time.After(3 * time.Second):
		t.Fatal("server kept a connection whose client stopped answering")
	}
	if !strings.Contains(ts.logs.String(), "not answering keepalives") {
		t.Errorf("drop not logged")
	}
}

// copyUntil copies src to dst until src fails; once frozen is closed it
// reads and drops everything (a peer that vanished without a FIN).
func copyUntil(dst io.Writer, src io.Reader, frozen <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-frozen:
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func TestMetricsSessions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ts := startServer(t, func(c *Config) { c.Metrics = m })
	c := ts.dial(t)
	for _, cmd := range []string{"true", "exit 1", "exit 42", "nope-podmpi-cmd", "kill -KILL $$"} {
		run(t, c, cmd, nil)
	}
	waitFor(t, func() bool { return metricValue(m.sessionsActive) == 0 }, "sessions_active back to 0")
	for code, want := range map[string]float64{"0": 1, "1": 1, "other": 1, "127": 1, "signal": 1} {
		if got := metricValue(m.sessionExits.WithLabelValues(code)); got != want {
			t.Errorf("exits{code=%s} = %v, want %v", code, got, want)
		}
	}
	mfs, err := reg.Gather()
	must(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"podmpi_worker_ssh_connections_total", "podmpi_worker_ssh_auth_failures_total", "podmpi_worker_ssh_sessions_active",
		"podmpi_worker_ssh_session_duration_seconds", "podmpi_worker_ssh_session_exits_total"} {
		if !names[n] {
			t.Errorf("%s not registered", n)
		}
	}
	if !strings.Contains(ts.logs.String(), "exit_code=42") || !strings.Contains(ts.logs.String(), "signal=SIGKILL") {
		t.Errorf("audit log lacks exit code or signal:\n%s", ts.logs)
	}
}

func TestEnvAllowed(t *testing.T) {
	for name, want := range envCases {
		if got := EnvAllowed(name); got != want {
			t.Errorf("EnvAllowed(%q) = %v, want %v", name, got, want)
		}
	}
}

var envCases = map[string]bool{
	"OMPI_MCA_plm_rsh_agent": true, "PRTE_MCA_x": true, "PMIX_RANK": true, "I_MPI_DEBUG": true,
	"HYDRA_IFACE": true, "UCX_NET_DEVICES": true, "NCCL_DEBUG": true, "LANG": true, "LC_ALL": true,
	"OMPI_": false, "LC_": false, "LANGUAGE": false, "PATH": false, "LD_PRELOAD": false,
	"LD_LIBRARY_PATH": false, "HOME": false, "BASH_ENV": false, "SECRET_X": false, "": false,
	"ompi_x": false, "OMPI_X=1": false, "OMPI_X\x00": false, "1OMPI": false, "OMPI X": false,
	"OMPI_é": false, strings.Repeat("OMPI_", 60): false,
}

func TestTruncate(t *testing.T) {
	if got := truncate("héllo", 2); got != "h...(6 bytes)" {
		t.Errorf("%q", got)
	}
	if got := truncate("abc", 3); got != "abc" {
		t.Errorf("%q", got)
	}
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	sshtest.Eventually(t, 5*time.Second, what, cond)
}

// metricValue reads a counter or gauge.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// waitSession is sess.Wait bounded by d.
func waitSession(t testing.TB, sess *ssh.Session, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		sess.Close()
		t.Fatalf("session did not end within %v", d)
		return nil
	}
}

func TestShellSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	sess, err := c.NewSession()
	must(t, err)
	defer sess.Close()
	var out bytes.Buffer
	sess.Stdout = &out
	sess.Stdin = strings.NewReader("echo from-shell\nexit 3\n")
	must(t, sess.Shell())
	err = waitSession(t, sess, 10*time.Second)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 3 || out.String() != "from-shell\n" {
		t.Errorf("shell session: %v, stdout %q", err, out.String())
	}
}

func TestSessionEnvWithoutPasswdEntry(t *testing.T) {
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
	local := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 2222}
	base := []string{"PATH=/opt/mpi/bin:/usr/bin", "HOME=/nonexistent", "SSH_TTY=/dev/pts/9", "OMPI_X=base"}
	env := sessionEnv(base, identity{home: "/tmp"}, "/bin/sh", "1000680000", remote, local, nil, []string{"OMPI_X=client"})
	want := map[string]string{
		"PATH": "/opt/mpi/bin:/usr/bin", "HOME": "/tmp", "USER": "1000680000", "LOGNAME": "1000680000",
		"SHELL": "/bin/sh", "SSH_CONNECTION": "10.0.0.1 40000 10.0.0.2 2222", "SSH_CLIENT": "10.0.0.1 40000 2222",
		"OMPI_X": "client",
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s twice", k)
		}
		got[k] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["SSH_TTY"]; ok {
		t.Error("agent's SSH_TTY leaked into the session")
	}
	// HOME falls back to the agent's $HOME when it is a directory, else /tmp.
	dir := t.TempDir()
	if id := lookupIdentity([]string{"HOME=" + dir}); id.passwdName == "" && id.home != dir {
		t.Errorf("home %q, want %q", id.home, dir)
	}
	// A passwd home the agent cannot write (a read-only root) gives way to
	// the agent's $HOME; a writable one is kept.
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for passwdHome, want := range map[string]string{notDir: dir, "/no/such/home": dir, t.TempDir(): ""} {
		id := lookupIdentityWith([]string{"HOME=" + dir}, func(string) (*user.User, error) {
			return &user.User{Username: "mpiuser", HomeDir: passwdHome}, nil
		})
		if want == "" {
			want = passwdHome
		}
		if id.home != want || id.passwdName != "mpiuser" {
			t.Errorf("passwd home %s: home %q (user %q), want %q", passwdHome, id.home, id.passwdName, want)
		}
	}
}

// TestOnSessionExit: every session's end reaches Config.OnSessionExit with
// its status or signal, after the status was sent; a session the server
// ends because its client went away is marked Aborted; a command that
// cannot start is reported with its 127.
func TestOnSessionExit(t *testing.T) {
	t.Parallel()
	exits := make(chan SessionExit, 8)
	ts := startServer(t, func(c *Config) { c.OnSessionExit = func(e SessionExit) { exits <- e } })
	c := ts.dial(t)
	next := func() SessionExit {
		t.Helper()
		select {
		case e := <-exits:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no session exit reported")
		}
		return SessionExit{}
	}
	if r := run(t, c, "exit 3", nil); r.code != 3 {
		t.Fatalf("exit 3: %+v", r)
	}
	if e := next(); e.ExitCode != 3 || e.Signal != 0 || e.Command != "exit 3" || e.PID <= 0 || e.Aborted || e.Session == "" {
		t.Errorf("exit 3 reported as %+v", e)
	}
	if r := run(t, c, "kill -SEGV $$", nil); r.signal != "SEGV" {
		t.Fatalf("kill -SEGV: %+v", r)
	}
	if e := next(); e.ExitCode != -1 || e.Signal != syscall.SIGSEGV {
		t.Errorf("SIGSEGV reported as %+v", e)
	}

	// The client goes away: the server terminates the group.
	tcp, err := net.Dial("tcp", ts.addr)
	must(t, err)
	sc, chans, reqs, err := ssh.NewClientConn(tcp, ts.addr, clientConfig(ts.keys.signer, ts.keys.pub))
	must(t, err)
	c2 := ssh.NewClient(sc, chans, reqs)
	defer c2.Close()
	startPIDs(t, c2, "echo $$; exec sleep 1000", 1)
	must(t, tcp.(*net.TCPConn).SetLinger(0))
	must(t, tcp.Close())
	if e := next(); !e.Aborted || e.Signal != syscall.SIGTERM {
		t.Errorf("aborted session reported as %+v", e)
	}
}

func TestOnSessionExitStartFailure(t *testing.T) {
	t.Parallel()
	exits := make(chan SessionExit, 1)
	ts := startServer(t, func(c *Config) {
		c.Shell = "/nonexistent/sh"
		c.OnSessionExit = func(e SessionExit) { exits <- e }
	})
	if r := run(t, ts.dial(t), "true", nil); r.code != 127 {
		t.Fatalf("run with a missing shell: %+v", r)
	}
	select {
	case e := <-exits:
		if e.ExitCode != 127 || e.PID != 0 || e.Command != "true" {
			t.Errorf("start failure reported as %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no session exit reported")
	}
}

// TestSessionPreferredOOMVictim: a session's command, and what it starts,
// run with an oom_score_adj above worker-agent's own, so that an OOM in the
// container they share takes the job's processes before the agent.
func TestSessionPreferredOOMVictim(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("oom_score_adj is Linux's")
	}
	// The agent's own score is raised while any session starts (the
	// tests beside this one start theirs): read it between starts.
	ownNow := func() (int, error) {
		startMu.Lock()
		defer startMu.Unlock()
		return readOOMScoreAdj(selfOOMScoreAdj)
	}
	own, err := ownNow()
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, nil)
	c := ts.dial(t)
	// The shell's child starts after the shell's own score was raised.
	r := run(t, c, "sleep 0.3; cat /proc/self/oom_score_adj", nil)
	got, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if r.code != 0 || err != nil {
		t.Fatalf("code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if want := min(own+sessionOOMBoost, 1000); got != want {
		t.Errorf("a session's child has oom_score_adj %d, want %d (the agent's %d + %d)", got, want, own, sessionOOMBoost)
	}
	if after, _ := ownNow(); after != own {
		t.Errorf("the agent's own oom_score_adj changed from %d to %d", own, after)
	}
}
