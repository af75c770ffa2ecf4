package share

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// shortOpen is the open timeout of these tests' pools: a stall of a few
// of them is to it what a stall of 12 s is to OpenTimeout.
const shortOpen = 300 * time.Millisecond

// daemonRun is a session that runs until the test ends its stdin, as an MPI
// daemon runs for the whole job on the shared connection.
type daemonRun struct {
	out     *bufio.Reader
	release *io.PipeWriter
	res     chan relayRun
}

// holdSession starts a daemonRun on port through sh, once its command
// runs.
func holdSession(t *testing.T, sh share, env []string, port string) *daemonRun {
	t.Helper()
	out := make(chan *os.File, 1)
	hold, release := io.Pipe()
	h := &daemonRun{release: release, res: make(chan relayRun, 1)}
	go func() {
		h.res <- runRelay(t, sh, relayOpts{env: env, stdin: hold, stdout: func(r *os.File) { out <- r }},
			"-p", port, "127.0.0.1", "echo ready; cat; echo done")
	}()
	h.out = bufio.NewReader(<-out)
	if l, _ := h.out.ReadString('\n'); l != "ready\n" {
		t.Fatalf("the held session did not start: %q", l)
	}
	return h
}

// ended reports whether the held session has ended already.
func (h *daemonRun) ended() bool { return len(h.res) > 0 }

// end ends the held session's input and returns how it ended, its stdout
// after "ready".
func (h *daemonRun) end(t *testing.T) relayRun {
	t.Helper()
	h.release.Close()
	rest, _ := io.ReadAll(h.out)
	select {
	case r := <-h.res:
		r.stdout = string(rest)
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the held session did not end with its input")
		return relayRun{}
	}
}

// stall is a worker behind a proxy, a share whose pool has the short open
// timeout, and a session running on its connection through the proxy,
// whose traffic is then frozen.
type stall struct {
	f      fixture
	proxy  *sshtest.Proxy
	port   string
	sh     share
	daemon *daemonRun
}

func newStall(t *testing.T) stall {
	t.Helper()
	st := stall{f: newFixture(t)}
	st.proxy = sshtest.NewProxy(t, st.f.srv.Addr)
	st.port = strconv.Itoa(st.proxy.Port)
	st.sh = startShareWith(t, shortOpen, nil, os.Getuid())
	st.daemon = holdSession(t, st.sh, st.f.shareEnv(), st.port)
	st.proxy.Freeze()
	return st
}

// TestSlowOpenKeepsTheConnection: a session open that goes unanswered for
// several open timeouts (the path to the worker stalls) while an MPI
// daemon runs on the same connection neither closes the connection nor
// fails: the running session goes on and ends normally, the new one says
// it waits, runs once the path is back, and leaves no failure record.
// Before, the pool closed the whole connection after OpenTimeout: the
// running session exited 255.
func TestSlowOpenKeepsTheConnection(t *testing.T) {
	t.Parallel()
	st := newStall(t)
	f, proxy, port, sh, daemon := st.f, st.proxy, st.port, st.sh, st.daemon
	rec := t.TempDir()
	var stderr sshtest.Buffer
	second := make(chan relayRun, 1)
	go func() {
		second <- runRelay(t, sh, relayOpts{env: f.shareEnv(rsh.EnvFailureDir + "=" + rec), stderr: &stderr},
			"-p", port, "127.0.0.1", "echo second")
	}()
	sshtest.Eventually(t, 20*time.Second, "the new session waiting past the open timeout, or the running one ended", func() bool {
		return strings.Contains(stderr.String(), "no answer to a session request") || daemon.ended()
	})
	time.Sleep(2 * shortOpen) // the stall goes on
	proxy.Thaw()

	select {
	case r := <-second:
		if r.err != nil || r.code != 0 || r.stdout != "second\n" {
			t.Fatalf("the session opened during the stall: %+v", r)
		}
		t.Logf("the session opened during the stall: stderr %q; %d connections through the proxy", r.stderr, proxy.Accepted())
	case <-time.After(20 * time.Second):
		t.Fatal("the session opened during the stall did not run once the path was back")
	}
	if r := daemon.end(t); r.err != nil || r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("the session that ran on the connection during the stall: %+v", r)
	}
	if recs, _, err := rsh.ReadFailureRecords(rec, 10, nil); err != nil || len(recs) != 0 {
		t.Fatalf("failure records %+v, %v; want none", recs, err)
	}
}

// TestLateOpenRunsNothing: a session whose client stops waiting (its
// PODMPI_SSH_WAIT) before the worker answers fails with a timeout, named as
// one in its line and record; the connection and the session running on it
// are kept, and the open that the worker answers later is closed unused:
// its command never runs.
func TestLateOpenRunsNothing(t *testing.T) {
	t.Parallel()
	st := newStall(t)
	f, proxy, port, sh, daemon := st.f, st.proxy, st.port, st.sh, st.daemon
	rec := t.TempDir()
	ran := filepath.Join(t.TempDir(), "ran")
	r := runRelay(t, sh, relayOpts{env: f.shareEnv(rsh.EnvFailureDir+"="+rec, rsh.EnvWait+"=1s")}, "-q", "-p", port, "127.0.0.1", "touch "+ran)
	if daemon.ended() {
		proxy.Thaw()
		t.Fatalf("the running session ended when another one timed out: %+v", daemon.end(t))
	}
	if r.err != nil || r.code != 255 {
		t.Fatalf("the session that timed out: %+v", r)
	}
	oneLine(t, r.stderr, "podmpi-rsh: 127.0.0.1:"+port+": remote-command: no answer to a session request within 1s")
	recs, _, err := rsh.ReadFailureRecords(rec, 10, nil)
	if err != nil || len(recs) != 1 || recs[0].Phase != "remote-command" || !strings.HasPrefix(recs[0].Cause, "no answer to a session request within 1s") {
		t.Fatalf("records %+v, %v; want the timeout's", recs, err)
	}

	proxy.Thaw()
	sshtest.Eventually(t, 10*time.Second, "the late session closed", func() bool { return sh.pool.Sessions() == 1 })
	if r := daemon.end(t); r.err != nil || r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("the session that ran on the connection: %+v", r)
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the command of the session that timed out ran (%v)", err)
	}
	if c := f.srv.Commands(); len(c) != 1 {
		t.Fatalf("the worker ran %q, want the held session's command only", c)
	}
}

// TestStalledConnectionStillServes: a session asked for while the only
// connection is stalled, and for which no new connection can be made,
// waits on the stalled one and runs once the worker answers there, as on
// OpenSSH's ControlMaster: the worker is slow, not gone.
func TestStalledConnectionStillServes(t *testing.T) {
	t.Parallel()
	st := newStall(t)
	var stderr sshtest.Buffer
	first := make(chan relayRun, 1)
	go func() {
		first <- runRelay(t, st.sh, relayOpts{env: st.f.shareEnv(), stderr: &stderr}, "-p", st.port, "127.0.0.1", "echo first")
	}()
	sshtest.Eventually(t, 20*time.Second, "the first session waiting past the open timeout", func() bool {
		return strings.Contains(stderr.String(), "no answer to a session request")
	})
	st.proxy.RefuseNew(true)
	second := make(chan relayRun, 1)
	go func() {
		second <- runRelay(t, st.sh, relayOpts{env: st.f.shareEnv()}, "-q", "-p", st.port, "127.0.0.1", "echo second")
	}()
	// The second's new connection is refused; it waits on the stalled one.
	sshtest.Eventually(t, 20*time.Second, "the second session's new connection refused", func() bool { return st.proxy.Refused() >= 1 })
	select {
	case r := <-second:
		t.Fatalf("the second session ended while the worker was stalled: %+v", r)
	case <-time.After(2 * shortOpen):
	}
	st.proxy.Thaw()
	for name, ch := range map[string]chan relayRun{"first": first, "second": second} {
		select {
		case r := <-ch:
			if r.err != nil || r.code != 0 || r.stdout != name+"\n" {
				t.Fatalf("the %s session: %+v", name, r)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the %s session did not run once the worker answered", name)
		}
	}
	if r := st.daemon.end(t); r.err != nil || r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("the session that ran on the connection: %+v", r)
	}
}

// TestStallCountsRunningSessions: a session request waits on a stalled
// connection where one session runs and another request waits already;
// its lines say 1 other session runs there: a request still unanswered is
// not a session. Before, they said 2.
func TestStallCountsRunningSessions(t *testing.T) {
	t.Parallel()
	st := newStall(t)
	var firstErr sshtest.Buffer
	first := make(chan relayRun, 1)
	go func() {
		first <- runRelay(t, st.sh, relayOpts{env: st.f.shareEnv(), stderr: &firstErr}, "-p", st.port, "127.0.0.1", "echo first")
	}()
	sshtest.Eventually(t, 20*time.Second, "the first request waiting past the open timeout", func() bool {
		return strings.Contains(firstErr.String(), "no answer to a session request")
	})
	st.proxy.RefuseNew(true)
	r := runRelay(t, st.sh, relayOpts{env: st.f.shareEnv(rsh.EnvWait + "=1s")}, "-p", st.port, "127.0.0.1", "echo second")
	if r.code != 255 {
		t.Fatalf("the second request, on the stalled connection: %+v", r)
	}
	for _, want := range []string{"(1 other session runs on it)", "no answer to a session request within 1s (the launcher keeps its connection: 1 other session runs on it)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the second request's lines lack %q:\n%s", want, r.stderr)
		}
	}
	st.proxy.Thaw()
	select {
	case r := <-first:
		if r.code != 0 || r.stdout != "first\n" {
			t.Fatalf("the first session: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first session did not run once the worker answered")
	}
	if r := st.daemon.end(t); r.code != 0 {
		t.Fatalf("the session that ran on the connection: %+v", r)
	}
}

// TestDeadConnectionIsReplaced: a connection whose transport failed (the
// worker restarted, the connection was reset) is dropped at the next
// session, which runs on a new one.
func TestDeadConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	proxy := sshtest.NewProxy(t, f.srv.Addr)
	port := strconv.Itoa(proxy.Port)
	sh := startShare(t)
	for i := range 2 {
		if r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", port, "127.0.0.1", "echo up"); r.err != nil || r.code != 0 || r.stdout != "up\n" {
			t.Fatalf("session %d: %+v", i, r)
		}
		if i == 0 {
			proxy.Cut()
		}
	}
	if n := proxy.Accepted(); n != 2 || sh.pool.Len() != 1 {
		t.Fatalf("%d connections, %d held; want 2 (a new one after the cut) and the new one held", n, sh.pool.Len())
	}
}

// TestConnSetupRunsOnceBeforeTheFirstSession: the pool's connection setup
// runs on a connection it makes before the first session opens there, and
// on no connection twice; Warm runs it ahead on the connections held.
func TestConnSetupRunsOnceBeforeTheFirstSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sh := startShare(t)
	// A first session makes and holds a connection, before any setup.
	if r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "echo up"); r.err != nil || r.code != 0 {
		t.Fatalf("first session: %+v", r)
	}
	var mu sync.Mutex
	var setUp []string
	sessionsAtSetup := -1
	sh.pool.SetConnSetup(func(host string, c *ssh.Client) {
		mu.Lock()
		defer mu.Unlock()
		setUp = append(setUp, host)
		sessionsAtSetup = sh.pool.Sessions()
	})
	// The held connection: set up before the next session on it.
	if r := runRelay(t, sh, relayOpts{env: f.shareEnv()}, "-p", f.port(), "127.0.0.1", "echo up"); r.err != nil || r.code != 0 {
		t.Fatalf("second session: %+v", r)
	}
	sh.pool.Warm(4)() // already set up: nothing more
	mu.Lock()
	got, at := append([]string(nil), setUp...), sessionsAtSetup
	mu.Unlock()
	if len(got) != 1 || got[0] != "127.0.0.1" || at != 1 {
		t.Fatalf("set up %v (with %d sessions counted then), want once for 127.0.0.1 before its session opened (1 being opened)", got, at)
	}
	if n := sh.pool.Len(); n != 1 {
		t.Fatalf("%d connections held, want the one", n)
	}
}
