package share

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// helperEnv makes the test binary act as the full client (rsh.Main), so
// that a test can kill a real relay process.
const helperEnv = "PODMPI_SHARE_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(rsh.Main(context.Background(), os.Args[1:], nil, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// helper is the test binary started as the client, relaying to the
// launcher named in env.
func helper(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{helperEnv + "=1"}, env...)
	return cmd
}

// fixture is a job auth dir and a worker serving it on loopback.
type fixture struct {
	dir string
	srv *sshtest.Server
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	return fixtureWith(t, sshtest.Options{})
}

// fixtureWith is a fixture whose worker has opts besides the job key.
func fixtureWith(t *testing.T, opts sshtest.Options) fixture {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	opts.HostKey, opts.Authorized = k.Signer, []ssh.PublicKey{k.Public()}
	return fixture{dir: sshtest.WriteAuthDir(t, k), srv: sshtest.Start(t, opts)}
}

func (f fixture) port() string { return strconv.Itoa(f.srv.Port) }

// oneLine fails unless stderr is one line that starts with prefix.
func oneLine(t *testing.T, stderr, prefix string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.HasPrefix(stderr, prefix) {
		t.Fatalf("stderr %q, want one line starting %q", stderr, prefix)
	}
}

// share is a launcher's sharing side on a temporary socket.
type share struct {
	pool *Pool
	srv  *Server
}

func startShare(t *testing.T) share {
	t.Helper()
	return startShareWith(t, OpenTimeout, nil, os.Getuid())
}

// startShareWith is startShare with a pool whose open timeout is open, a
// server that logs to log (nil: nowhere) and answers uid only.
func startShareWith(t *testing.T, open time.Duration, log *slog.Logger, uid int) share {
	t.Helper()
	pool := NewPool(nil)
	pool.openTimeout = open
	srv, err := serve(filepath.Join(t.TempDir(), SocketName), pool, log, uid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		pool.Close()
	})
	return share{pool: pool, srv: srv}
}

// env is what the launcher puts into mpirun's environment for its relays.
func (sh share) env() []string {
	return []string{relay.EnvSocket + "=" + sh.srv.Path(), relay.EnvToken + "=" + sh.srv.Token()}
}

// relayRun is one relay's session run in-process: stdin is fed from a
// string, stdout and stderr are collected, as pipes (real descriptors,
// which the launcher takes).
type relayRun struct {
	code     int
	err      error
	stdout   string
	stderr   string
	sessions int // the pool's open sessions when Run returned
}

type relayOpts struct {
	env []string
	// stdin, when set, is copied into the relay's stdin pipe, which is
	// closed when it ends; else stdin is /dev/null.
	stdin io.Reader
	// stdinFile, when set, is the relay's stdin as it is (a socket).
	stdinFile *os.File
	signals   <-chan os.Signal
	// stdout, when set, gets the stdout pipe's read end instead of the
	// collector (the test reads it itself).
	stdout func(*os.File)
	// stderr, when set, gets what the relay's stderr receives as it comes
	// (and relayRun.stderr all of it at the end).
	stderr *sshtest.Buffer
	// started is closed once the relay's request is on its way.
	started chan struct{}
	// noToken leaves out the run's token that mpirun's environment holds
	// (share.env): env is all the relay has.
	noToken bool
}

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func runRelay(t *testing.T, sh share, o relayOpts, args ...string) relayRun {
	t.Helper()
	var stdinFD int
	switch {
	case o.stdinFile != nil:
		stdinFD = int(o.stdinFile.Fd())
	case o.stdin != nil:
		r, w := pipe(t)
		go func() {
			_, _ = io.Copy(w, o.stdin)
			w.Close()
		}()
		stdinFD = int(r.Fd())
	default:
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { null.Close() })
		stdinFD = int(null.Fd())
	}
	outR, outW := pipe(t)
	errR, errW := pipe(t)
	var wg sync.WaitGroup
	var out, errb bytes.Buffer
	if o.stdout != nil {
		o.stdout(outR)
	} else {
		wg.Go(func() { _, _ = io.Copy(&out, outR) })
	}
	var errTo io.Writer = &errb
	if o.stderr != nil {
		errTo = io.MultiWriter(&errb, o.stderr)
	}
	wg.Go(func() { _, _ = io.Copy(errTo, errR) })
	env := o.env
	if !o.noToken {
		env = append(sh.env(), env...)
	}
	c := relay.Client{Socket: sh.srv.Path(), Args: args, Env: env, Stdio: [3]int{stdinFD, int(outW.Fd()), int(errW.Fd())},
		Signals: o.signals}
	if o.started != nil {
		close(o.started)
	}
	code, err := c.Run()
	res := relayRun{code: code, err: err, sessions: sh.pool.Sessions()}
	// Our own copies of the write ends: the launcher closed its own.
	outW.Close()
	errW.Close()
	wg.Wait()
	res.stdout, res.stderr = out.String(), errb.String()
	return res
}

// shareEnv is a relay's environment: the fixture's auth dir and no
// waiting (a failure is reported at once), then extra entries.
func (f fixture) shareEnv(extra ...string) []string {
	return append([]string{rsh.EnvAuthDir + "=" + f.dir, rsh.EnvWait + "=0"}, extra...)
}

// TestSharedSessionsUseOneConnection: every session to a worker, exit
// codes, both streams, stdin and the remote command byte for byte, runs on
// the one connection the launcher holds.
func TestSharedSessionsUseOneConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	env := f.shareEnv()
	r := runRelay(t, sh, relayOpts{env: env}, "-p", f.port(), "127.0.0.1", "echo out; echo err >&2; exit 3")
	if r.err != nil || r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("got %+v", r)
	}
	in := "line one\nline two\n"
	r = runRelay(t, sh, relayOpts{env: env, stdin: strings.NewReader(in)}, "-p", f.port(), "127.0.0.1", "wc", "-l")
	if r.err != nil || r.code != 0 || strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("stdin: %+v", r)
	}
	r = runRelay(t, sh, relayOpts{env: env, stdin: strings.NewReader(in)}, "-n", "-p", f.port(), "127.0.0.1", "wc", "-c")
	if r.err != nil || r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
		t.Fatalf("-n: %+v", r)
	}
	// Open MPI's argv shape: the command's words joined by single spaces,
	// its leading space and quotes kept.
	r = runRelay(t, sh, relayOpts{env: env}, "-p", f.port(), "127.0.0.1", " echo", `"a  b"`, "'c;d'")
	if r.err != nil || r.code != 0 || r.stdout != "a  b c;d\n" {
		t.Fatalf("argv: %+v", r)
	}
	if got := f.srv.Commands(); got[len(got)-1] != ` echo "a  b" 'c;d'` {
		t.Fatalf("the worker ran %q", got[len(got)-1])
	}
	if n := f.srv.Accepted(); n != 1 {
		t.Fatalf("%d connections to the worker, want 1", n)
	}
	if n := sh.pool.Sessions(); n != 0 {
		t.Fatalf("%d sessions still open", n)
	}
}

// TestSharedExitByRemoteSignal: a remote command killed by a signal exits
// 128+N with the line the client gives.
func TestSharedExitByRemoteSignal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "kill -BUS $$")
	if r.err != nil || r.code != 128+int(syscall.SIGBUS) {
		t.Fatalf("got %+v", r)
	}
	oneLine(t, r.stderr, "podmpi-rsh: 127.0.0.1:"+f.port()+": remote command killed by signal 7 (SIGBUS)")
}

// TestSignalForwarded: a signal the relay receives reaches the remote
// command, whose status comes back.
func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	sigs := make(chan os.Signal, 1)
	first := make(chan string, 1)
	rest := make(chan string, 1)
	done := make(chan relayRun, 1)
	go func() {
		done <- runRelay(t, sh, relayOpts{env: f.shareEnv(), signals: sigs, stdout: func(r *os.File) {
			go func() {
				rd := bufio.NewReader(r)
				l, _ := rd.ReadString('\n')
				first <- l
				b, _ := io.ReadAll(rd)
				rest <- string(b)
			}()
		}}, "-p", f.port(), "127.0.0.1", `trap 'echo got-term; exit 7' TERM; echo ready; sleep 30 & wait`)
	}()
	select {
	case l := <-first:
		if l != "ready\n" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("remote command never started")
	}
	sigs <- syscall.SIGTERM
	select {
	case r := <-done:
		if out := <-rest; r.err != nil || r.code != 7 || out != "got-term\n" {
			t.Fatalf("exit %d (%v), rest of stdout %q, stderr %q", r.code, r.err, out, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end after the signal")
	}
	if got := f.srv.Signals(); len(got) != 1 || got[0] != "TERM" {
		t.Fatalf("server saw signals %q", got)
	}
}

// TestSlowReaderDoesNotStallOthers: a session whose output nobody reads
// fills its own window only; another session on the same connection moves
// its 16 MiB meanwhile, and the stalled one completes once read.
func TestSlowReaderDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	env := f.shareEnv()
	const size = 16 << 20
	cmd := "head -c " + strconv.Itoa(size) + " /dev/zero"
	slowOut := make(chan *os.File, 1)
	slow := make(chan relayRun, 1)
	go func() {
		slow <- runRelay(t, sh, relayOpts{env: env, stdout: func(r *os.File) { slowOut <- r }}, "-p", f.port(), "127.0.0.1", cmd)
	}()
	stalled := <-slowOut
	// The slow session has started and stopped: its command is running
	// and the pipe is full.
	sshtest.Eventually(t, 10*time.Second, "the slow session's command running", func() bool { return f.srv.Running() == 1 })
	fast := make(chan relayRun, 1)
	moved := make(chan int64, 1)
	go func() {
		fast <- runRelay(t, sh, relayOpts{env: env, stdout: func(r *os.File) {
			go func() {
				n, _ := io.Copy(io.Discard, r)
				moved <- n
			}()
		}}, "-p", f.port(), "127.0.0.1", cmd)
	}()
	select {
	case r := <-fast:
		if n := <-moved; r.err != nil || r.code != 0 || n != size {
			t.Fatalf("fast session: %+v, %d bytes", r, n)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the fast session did not finish while the other was stalled")
	}
	select {
	case r := <-slow:
		t.Fatalf("the stalled session ended before its output was read: %+v", r)
	default:
	}
	n, _ := io.Copy(io.Discard, stalled)
	r := <-slow
	if r.err != nil || r.code != 0 || n != size {
		t.Fatalf("slow session: %+v, %d bytes", r, n)
	}
	if c := f.srv.Accepted(); c != 1 {
		t.Fatalf("%d connections, want both sessions on one", c)
	}
}

// TestKilledRelayFreesItsChannel: a relay process killed mid-session (as
// mpirun's SIGKILL does) closes the launcher's side of the session: the
// channel closes, the worker ends the command, the pool's session count
// drops, and the connection still serves others.
func TestKilledRelayFreesItsChannel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	cmd := helper(append(sh.env(), rsh.EnvAuthDir+"="+f.dir), "-p", f.port(), "127.0.0.1", "echo ready; sleep 60")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "ready\n" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("remote command never started")
	}
	if n := sh.pool.Sessions(); n != 1 {
		t.Fatalf("%d shared sessions, want the relay's", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	sshtest.Eventually(t, 10*time.Second, "the session freed", func() bool { return sh.pool.Sessions() == 0 })
	sshtest.Eventually(t, 10*time.Second, "the remote command ended", func() bool { return f.srv.Running() == 0 })
	r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "echo still")
	if r.err != nil || r.code != 0 || r.stdout != "still\n" || f.srv.Accepted() != 1 {
		t.Fatalf("after the kill: %+v, %d connections", r, f.srv.Accepted())
	}
}

// TestSharedWaitsForLateWorker: a worker that listens only after the first
// attempt failed is waited for (PODMPI_SSH_WAIT's default), with the
// client's retry lines on the relay's stderr, and then kept for the next
// session.
func TestSharedWaitsForLateWorker(t *testing.T) {
	t.Parallel()
	k := sshtest.NewKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	port := sshtest.FreePort(t)
	sh := startShare(t)
	errR, errW := pipe(t)
	outR, outW := pipe(t)
	retrying := "podmpi-rsh: attempt 1: 127.0.0.1:" + strconv.Itoa(port) + ": tcp-refused: "
	seen := make(chan struct{})
	var errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(errR)
		once := sync.Once{}
		for sc.Scan() {
			errb.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), retrying) {
				once.Do(func() { close(seen) })
			}
		}
	})
	var out bytes.Buffer
	wg.Go(func() { _, _ = io.Copy(&out, outR) })
	sshtest.ServeLater(t, k, port, seen)
	c := relay.Client{Socket: sh.srv.Path(), Args: []string{"-v", "-p", strconv.Itoa(port), "127.0.0.1", "echo up"},
		Env: append(sh.env(), rsh.EnvAuthDir+"="+dir), Stdio: [3]int{-1, int(outW.Fd()), int(errW.Fd())}}
	code, err := c.Run()
	outW.Close()
	errW.Close()
	wg.Wait()
	if err != nil || code != 0 || out.String() != "up\n" {
		t.Fatalf("exit %d, %v, stdout %q, stderr %q", code, err, out.String(), errb.String())
	}
	if sh.pool.Len() != 1 {
		t.Fatalf("the pool holds %d connections after the late worker came, want 1", sh.pool.Len())
	}
}

// TestPoolKeysOnIdentity: a session asking for another login name does not
// run on a connection made for another; the same name reuses it.
func TestPoolKeysOnIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	env := f.shareEnv()
	for _, user := range []string{"alice", "bob", "alice"} {
		if r := runRelay(t, sh, relayOpts{env: env}, "-l", user, "-p", f.port(), "127.0.0.1", "true"); r.err != nil || r.code != 0 {
			t.Fatalf("%s: %+v", user, r)
		}
	}
	if n := f.srv.Accepted(); n != 2 {
		t.Fatalf("%d connections for two login names, want 2", n)
	}
}

// TestPoolOpensAnotherConnectionWhenFull: a worker that refuses another
// session on a connection (its MaxSessions) gets a second connection.
func TestPoolOpensAnotherConnectionWhenFull(t *testing.T) {
	t.Parallel()
	f := fixtureWith(t, sshtest.Options{MaxSessions: 1})
	srv := f.srv
	sh := startShare(t)
	first := make(chan relayRun, 1)
	out := make(chan *os.File, 1)
	hold, release := io.Pipe()
	go func() {
		first <- runRelay(t, sh, relayOpts{env: f.shareEnv(), stdin: hold, stdout: func(r *os.File) { out <- r }}, "-p", f.port(), "127.0.0.1", "echo ready; cat")
	}()
	rd := bufio.NewReader(<-out)
	if l, _ := rd.ReadString('\n'); l != "ready\n" {
		t.Fatalf("first session: %q", l)
	}
	r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "echo second")
	if r.err != nil || r.code != 0 || r.stdout != "second\n" {
		t.Fatalf("second session: %+v", r)
	}
	if n := srv.Accepted(); n != 2 {
		t.Fatalf("%d connections, want a second one for the second session", n)
	}
	// The first session's cat reaches the end of its stdin.
	release.Close()
	if r := <-first; r.err != nil || r.code != 0 {
		t.Fatalf("first session: %+v", r)
	}
}

// TestRefusesAnotherUser: the socket serves only the launcher's own UID; a
// refused relay has run nothing and falls back.
func TestRefusesAnotherUser(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShareWith(t, OpenTimeout, nil, os.Getuid()+1) // as if the relay ran under another UID
	r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "true")
	var u *relay.Unserved
	if !errors.As(r.err, &u) || !strings.Contains(u.Reason, "not the launcher's user") {
		t.Fatalf("got %+v, want a refusal", r)
	}
	if n := f.srv.Accepted(); n != 0 {
		t.Fatalf("a refused relay made %d connections", n)
	}
}

// TestRefusesWithoutTheRunsToken: a process of the launcher's own UID that
// reaches the socket (a sidecar of the same pod sharing TMPDIR: on
// OpenShift every container runs as the pod's UID) but was not started by
// the run's mpirun, so that it lacks the run's token, is refused with a
// line that says so; it has run nothing, made no connection, and falls
// back to its own (which needs the job key it was never given). The same
// request with the token is served. Neither token is logged.
func TestRefusesWithoutTheRunsToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var log sshtest.Buffer
	sh := startShareWith(t, OpenTimeout, slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})), os.Getuid())
	srv := sh.srv
	const forged = "AAAAAAAAAAAAAAAAAAAAAAAAAA"
	for name, env := range map[string][]string{
		"no token":    {relay.EnvSocket + "=" + srv.Path()},
		"wrong token": {relay.EnvSocket + "=" + srv.Path(), relay.EnvToken + "=" + forged},
	} {
		r := runRelay(t, sh, relayOpts{env: append(env, f.shareEnv()...), noToken: true}, "-p", f.port(), "127.0.0.1", "true")
		var u *relay.Unserved
		if !errors.As(r.err, &u) || !strings.Contains(u.Reason, "the launcher refused: the request does not carry this run's PODMPI_RSH_TOKEN") {
			t.Fatalf("%s: got %+v, want a refusal naming the token", name, r)
		}
	}
	if n := f.srv.Accepted(); n != 0 {
		t.Fatalf("refused relays made %d connections", n)
	}
	if r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "echo served"); r.err != nil || r.code != 0 || r.stdout != "served\n" {
		t.Fatalf("with the run's token: %+v", r)
	}
	if l := log.String(); strings.Count(l, "refused a podmpi-rsh request without this run's token") != 2 ||
		strings.Contains(l, srv.Token()) || strings.Contains(l, forged) {
		t.Fatalf("the launcher's log should name both refusals and neither token:\n%s", l)
	}
}

// TestSharedFailureRecord: a command the launcher cannot run for a relay
// leaves the relay's record (its PID) and line, exit 255.
func TestSharedFailureRecord(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	rec := t.TempDir()
	port := strconv.Itoa(sshtest.FreePort(t))
	r := runRelay(t, sh, relayOpts{env: f.shareEnv(rsh.EnvFailureDir + "=" + rec)}, "-p", port, "127.0.0.1", "orted -mca x")
	if r.err != nil || r.code != 255 {
		t.Fatalf("got %+v", r)
	}
	oneLine(t, r.stderr, "podmpi-rsh: 127.0.0.1:"+port+": tcp-refused: ")
	recs, _, err := rsh.ReadFailureRecords(rec, 10, nil)
	if err != nil || len(recs) != 1 || recs[0].PID != os.Getpid() || recs[0].Daemon != "orted" || !recs[0].Launch {
		t.Fatalf("records %+v, %v", recs, err)
	}
}

// TestServerCloseEndsSessions: a launcher that ends tells each running
// session (a line, 255) and waits for it.
func TestServerCloseEndsSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	out := make(chan *os.File, 1)
	done := make(chan relayRun, 1)
	go func() {
		done <- runRelay(t, sh, relayOpts{env: f.shareEnv(), stdout: func(r *os.File) { out <- r }}, "-p", f.port(), "127.0.0.1", "echo ready; sleep 60")
	}()
	rd := bufio.NewReader(<-out)
	if l, _ := rd.ReadString('\n'); l != "ready\n" {
		t.Fatalf("first line %q", l)
	}
	sh.srv.Close()
	r := <-done
	if r.err != nil || r.code != 255 || !strings.Contains(r.stderr, "interrupted: the launcher is ending") {
		t.Fatalf("got %+v", r)
	}
	sshtest.Eventually(t, 10*time.Second, "the remote command ended", func() bool { return f.srv.Running() == 0 })
}

// TestPoolSessionContext: a session asked for by a client that went away
// before the connection came is not opened.
func TestPoolSessionContext(t *testing.T) {
	t.Parallel()
	p := NewPool(nil)
	defer p.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errRelayGone)
	_, _, f := p.Session(ctx, rsh.SessionRequest{Host: "127.0.0.1", Port: 1, Dial: func(ctx context.Context) (*ssh.Client, *sshclient.Failure) {
		return nil, sshclient.Classify("127.0.0.1", 1, sshclient.PhaseTCP, context.Cause(ctx))
	}})
	if f == nil || !errors.Is(f.Cause, errRelayGone) {
		t.Fatalf("got %v", f)
	}
}

// pipeFDs counts this process's descriptors on the pipe of f.
func pipeFDs(t *testing.T, f *os.File) int {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &want); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Stat("/proc/self/fd/"+e.Name(), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			n++
		}
	}
	return n
}

// TestSessionsShareAnOutputPipe: sessions whose relays write to the same
// pipe (Open MPI's daemons all inherit mpirun's stdout) share one
// descriptor of the launcher's on it, closed with the last of them; both
// outputs arrive.
func TestSessionsShareAnOutputPipe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	outR, outW := pipe(t)
	errR, errW := pipe(t)
	lines := make(chan string, 4)
	go func() {
		rd := bufio.NewReader(outR)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	go func() { _, _ = io.Copy(io.Discard, errR) }()
	before := pipeFDs(t, outW)
	releases := make([]*io.PipeWriter, 2)
	done := make(chan error, 2)
	for i := range 2 {
		hold, release := io.Pipe()
		releases[i] = release
		inR, inW := pipe(t)
		go func() { _, _ = io.Copy(inW, hold); inW.Close() }()
		c := relay.Client{Socket: sh.srv.Path(), Args: []string{"-p", f.port(), "127.0.0.1", "echo session-" + strconv.Itoa(i) + "; cat"},
			Env: append(sh.env(), f.shareEnv()...), Stdio: [3]int{int(inR.Fd()), int(outW.Fd()), int(errW.Fd())}}
		go func() {
			code, err := c.Run()
			if err == nil && code != 0 {
				err = errors.New("exit " + strconv.Itoa(code))
			}
			done <- err
		}()
	}
	got := map[string]bool{}
	for range 2 {
		select {
		case l := <-lines:
			got[l] = true
		case <-time.After(10 * time.Second):
			t.Fatal("the sessions did not start")
		}
	}
	if !got["session-0\n"] || !got["session-1\n"] {
		t.Fatalf("outputs %v", got)
	}
	if n := pipeFDs(t, outW); n != before+1 {
		t.Fatalf("the launcher holds %d descriptors on the pipe both sessions write to, want 1", n-before)
	}
	for _, r := range releases {
		r.Close()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	sshtest.Eventually(t, 5*time.Second, "the shared descriptor closed", func() bool { return pipeFDs(t, outW) == before })
}
