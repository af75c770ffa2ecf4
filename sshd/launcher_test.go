//go:build linux

package sshd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/sshclient"
)

// declare sends inst's declaration on c as the launcher does, at now.
func declare(t *testing.T, c *ssh.Client, inst launcherid.Instance) bool {
	t.Helper()
	ok, _, err := c.SendRequest(launcherid.RequestType, true, inst.Declaration(time.Now()))
	if err != nil {
		t.Fatalf("declaring %s: %v", inst, err)
	}
	return ok
}

// startDaemon runs daemonCmd on c and returns its three pids. The rank
// that left the process group is not the server's to reap when it ends
// otherwise: the test kills and reaps it (it is re-parented to the test
// binary, a subreaper).
func startDaemon(t *testing.T, c *ssh.Client) []int {
	t.Helper()
	_, pids := startPIDs(t, c, daemonCmd, 3)
	rank := pids[2]
	t.Cleanup(func() {
		_ = syscall.Kill(rank, syscall.SIGKILL)
		for range 500 { // until its parent, or this process, reaped it
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(rank, &ws, syscall.WNOHANG, nil)
			if _, _, _, ok := procStat(rank); !ok {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return pids
}

// alive reports which of pids still exist.
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if _, state, _, ok := procStat(pid); ok && state != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// daemonCmd stands for orted: a shell with a child in its process group,
// and a rank in a session and process group of its own, as orted puts
// each rank; it prints the three pids.
const daemonCmd = "echo $$; sleep 1000 & echo $!; setsid sleep 1000 & echo $!; wait"

// TestNewerLauncherEndsOlderInstance: launcher A runs a daemon and its rank;
// a client that declares nothing (a person's ssh, Hydra's tree spawn from a
// worker) and a second connection of A itself end nothing. When launcher B
// of the job connects, A's daemon and rank are ended within seconds and A's
// connections closed, logged at WARN with both instances and reported to
// OnLauncherReplaced; the undeclared client's session runs on. A's identity
// declared again afterwards, and an instance first heard of after B but
// started before it, end nothing of B's.
func TestNewerLauncherEndsOlderInstance(t *testing.T) {
	t.Parallel()
	replacedCh := make(chan LauncherReplaced, 4)
	exits := make(chan SessionExit, 16)
	ts := startServer(t, func(c *Config) {
		c.OnLauncherReplaced = func(r LauncherReplaced) { replacedCh <- r }
		c.OnSessionExit = func(e SessionExit) { exits <- e }
	})
	now := time.Now()
	instA := launcherid.New("uid-a", "tj-launcher-0-0", now.Add(-time.Hour))
	instB := launcherid.New("uid-b", "tj-launcher-0-0", now)

	a := ts.dial(t)
	if !declare(t, a, instA) {
		t.Fatal("the server refused A's declaration")
	}
	pidsA := startDaemon(t, a)
	u := ts.dial(t)
	pidsU := startDaemon(t, u)
	a2 := ts.dial(t)
	if !declare(t, a2, instA) {
		t.Fatal("the server refused A's declaration on a second connection")
	}
	if !declare(t, a2, instA) || declare(t, a2, instB) {
		t.Fatal("a connection may repeat its declaration, never declare another instance")
	}
	time.Sleep(300 * time.Millisecond)
	if got := alive(pidsA); len(got) != 3 {
		t.Fatalf("A's daemon and ranks ended before any newer launcher connected: alive %v of %v", got, pidsA)
	}

	b := ts.dial(t)
	if !declare(t, b, instB) {
		t.Fatal("the server refused B's declaration")
	}
	waitGone(t, pidsA, 5*time.Second)
	select {
	case r := <-replacedCh:
		if r.Old.ID != instA.ID || r.New.ID != instB.ID || len(r.Commands) != 1 || r.Commands[0] != daemonCmd || r.Connections != 2 {
			t.Errorf("OnLauncherReplaced got %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLauncherReplaced not called")
	}
	waitFor(t, func() bool {
		_, _, err := a.SendRequest("keepalive@openssh.com", true, nil)
		_, _, err2 := a2.SendRequest("keepalive@openssh.com", true, nil)
		return err != nil && err2 != nil
	}, "A's connections closed")
	for e := range drain(exits) {
		if e.Command == daemonCmd && (!e.Aborted || !e.Replaced || e.Signal != syscall.SIGTERM) {
			t.Errorf("A's session reported as %+v", e)
		}
	}
	if got := alive(pidsU); len(got) != 3 {
		t.Errorf("the undeclared client's session was ended: alive %v of %v", got, pidsU)
	}
	logs := ts.logs.String()
	var warn string
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "a newer launcher of the job connected") {
			warn = l
		}
	}
	if !strings.Contains(warn, instA.Short()) || !strings.Contains(warn, instB.Short()) || !strings.Contains(warn, "uid-a") {
		t.Errorf("no WARN naming both instances; log:\n%s", logs)
	}

	// B runs; A's identity comes back, and an instance B has never seen
	// but that started before B (an hour ago) connects after it.
	pidsB := startDaemon(t, b)
	a3 := ts.dial(t)
	declare(t, a3, instA)
	c := ts.dial(t)
	declare(t, c, launcherid.New("uid-c", "tj-launcher-0-0", now.Add(-time.Hour)))
	time.Sleep(300 * time.Millisecond)
	if got := alive(pidsB); len(got) != 3 {
		t.Fatalf("an older identity ended the newer launcher's sessions: alive %v of %v", got, pidsB)
	}
	if n := strings.Count(ts.logs.String(), "an older launcher instance of the job connected after a newer one"); n != 2 {
		t.Errorf("the older instances that connected after B are logged %d times, want 2 (A again, then C)", n)
	}
	select {
	case r := <-replacedCh:
		t.Errorf("OnLauncherReplaced called again: %+v", r)
	default:
	}
}

// TestLauncherDeclarationRefusals: a payload the server does not take is
// refused (and ends nothing); the connection carries on.
func TestLauncherDeclarationRefusals(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	for _, p := range [][]byte{nil, []byte("garbage"), ssh.Marshal(struct{ V uint32 }{2})} {
		ok, _, err := c.SendRequest(launcherid.RequestType, true, p)
		if err != nil || ok {
			t.Errorf("payload %q: ok %v err %v, want a refusal", p, ok, err)
		}
	}
	if r := run(t, c, "echo ok", nil); r.stdout != "ok\n" {
		t.Errorf("the connection does not carry on: %+v", r)
	}
}

// TestLauncherOrderIgnoresDeclaredClocks: what orders two instances is
// their ages placed on the agent's clock, never the wall clocks they
// declare: a replacement pod whose node's clock is an hour behind still
// replaces, and an old instance whose clock is an hour ahead does not.
func TestLauncherOrderIgnoresDeclaredClocks(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	now := time.Now()
	type wire struct {
		Version          uint32
		ID, PodUID, Host string
		Start, Age       uint64
	}
	decl := func(c *ssh.Client, id string, wall time.Time, age time.Duration) {
		t.Helper()
		p := ssh.Marshal(wire{Version: 1, ID: id, PodUID: "uid-" + id[:4], Host: "tj-launcher-0-0",
			Start: uint64(wall.UnixNano()), Age: uint64(age)})
		if ok, _, err := c.SendRequest(launcherid.RequestType, true, p); err != nil || !ok {
			t.Fatalf("declaration refused: %v", err)
		}
	}
	old := strings.Repeat("a1", 16)
	a := ts.dial(t)
	decl(a, old, now.Add(time.Hour), 10*time.Minute) // clock an hour ahead, started 10 minutes ago
	pidsA := startDaemon(t, a)
	// A newer instance that claims, by its wall clock, to have started
	// before A, and one that is not newer than A by age: neither counts.
	skewed := ts.dial(t)
	decl(skewed, strings.Repeat("b2", 16), now.Add(-time.Hour), 12*time.Minute)
	time.Sleep(300 * time.Millisecond)
	if got := alive(pidsA); len(got) != 3 {
		t.Fatalf("an instance older by age ended A: alive %v", got)
	}
	b := ts.dial(t)
	decl(b, strings.Repeat("c3", 16), now.Add(-time.Hour), time.Second) // clock an hour behind, started a second ago
	waitGone(t, pidsA, 5*time.Second)
}

// TestStartBounds: the interval of an instance's start on the agent's
// clock, and the order it gives.
func TestStartBounds(t *testing.T) {
	base := time.Now()
	accepted, arrived := base, base.Add(20*time.Millisecond)
	e, l := startBounds(accepted, arrived, time.Hour)
	slack := declarationSlack + time.Hour/1000
	if !e.Equal(base.Add(-time.Hour-slack)) || !l.Equal(arrived.Add(-time.Hour+slack)) {
		t.Fatalf("bounds %v..%v", e.Sub(base), l.Sub(base))
	}
	mk := func(seq uint64, accepted time.Time, age time.Duration) *launcherRecord {
		e, l := startBounds(accepted, accepted.Add(10*time.Millisecond), age)
		return &launcherRecord{seq: seq, earliest: e, latest: l}
	}
	for _, c := range []struct {
		name  string
		r, o  *launcherRecord
		newer bool
	}{
		{"restarted a minute later", mk(2, base.Add(time.Minute), time.Second), mk(1, base, time.Minute), true},
		{"heard of first", mk(1, base.Add(time.Minute), time.Second), mk(2, base, time.Minute), false},
		{"starts within the slack", mk(2, base.Add(time.Second), 0), mk(1, base, 0), false},
		{"older by age", mk(2, base.Add(time.Minute), 2*time.Hour), mk(1, base, time.Hour), false},
	} {
		if got := c.r.newerThan(c.o); got != c.newer {
			t.Errorf("%s: newerThan = %v, want %v", c.name, got, c.newer)
		}
	}
}

// TestForgetLauncherKeepsHeldRecords: past maxLaunchers the oldest record
// no open connection declared goes first.
func TestForgetLauncherKeepsHeldRecords(t *testing.T) {
	s := &Server{launchers: map[string]*launcherRecord{}, conns: map[*connState]struct{}{}}
	var first *launcherRecord
	for i := range maxLaunchers {
		r := s.recordLauncher(launcherid.Instance{ID: strconv.Itoa(i)}, time.Now(), time.Now())
		if i == 0 {
			first = r
		}
	}
	s.conns[&connState{launcher: first}] = struct{}{}
	s.recordLauncher(launcherid.Instance{ID: "new"}, time.Now(), time.Now())
	if len(s.launchers) != maxLaunchers || s.launchers["0"] == nil || s.launchers["1"] != nil {
		t.Fatalf("kept %d records; first held %v, second %v", len(s.launchers), s.launchers["0"] != nil, s.launchers["1"] != nil)
	}
}

// drain yields what ch holds now.
func drain[T any](ch chan T) func(func(T) bool) {
	return func(yield func(T) bool) {
		for {
			select {
			case v := <-ch:
				if !yield(v) {
					return
				}
			case <-time.After(time.Second):
				return
			}
		}
	}
}

// TestSSHClientLauncherReplaces: the launcher's own client (package
// sshclient, as the probe and podmpi-rsh dial) declares its instance before
// the first session, so a restarted launcher's first connection ends what
// the lost one left running.
func TestSSHClientLauncherReplaces(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	cfg := sshclient.Config{Signer: ts.keys.signer, HostKey: ts.keys.pub}
	dial := func(inst launcherid.Instance) *ssh.Client {
		t.Helper()
		c := cfg
		c.Launcher = inst
		client, f := sshclient.Dial(context.Background(), "127.0.0.1", ts.port, c)
		if f != nil {
			t.Fatal(f)
		}
		t.Cleanup(func() { client.Close() })
		return client
	}
	pids := startDaemon(t, dial(launcherid.New("", "tj-launcher-0-0", time.Now().Add(-time.Minute))))
	dial(launcherid.New("", "tj-launcher-0-0", time.Now()))
	waitGone(t, pids, 5*time.Second)
}

// TestLauncherSessionsCounted: what each declared launcher instance
// started here is told (the agent's /events): its sessions, those that run
// an MPI daemon and those running now. A connection that declared nothing
// counts for no instance.
func TestLauncherSessionsCounted(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bin, "orted"), []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755))
	ts := startServer(t, func(c *Config) { c.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"} })
	if got := ts.LauncherSessions(); len(got) != 0 {
		t.Fatalf("before any session: %+v", got)
	}
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	a := ts.dial(t)
	if !declare(t, a, inst) {
		t.Fatal("declaration refused")
	}
	if r := run(t, a, "command -v orted", nil); r.code != 0 {
		t.Fatalf("command -v orted: %+v", r)
	}
	// The daemon as Open MPI starts it, running.
	sess, err := a.NewSession()
	must(t, err)
	defer sess.Close()
	must(t, sess.Start(`PATH=`+bin+`:$PATH ; export PATH ; "`+filepath.Join(bin, "orted")+`" -mca ess "env"`))
	u := ts.dial(t) // declares nothing
	if r := run(t, u, "true", nil); r.code != 0 {
		t.Fatalf("true: %+v", r)
	}
	want := LauncherSessions{Instance: inst, Sessions: 2, Daemons: 1, Open: 1}
	waitFor(t, func() bool {
		got := ts.LauncherSessions()
		return len(got) == 1 && got[0].Instance.ID == want.Instance.ID && got[0].Sessions == want.Sessions &&
			got[0].Daemons == want.Daemons && got[0].Open == want.Open
	}, fmt.Sprintf("the instance's two sessions, one daemon running (%+v)", ts.LauncherSessions()))
	must(t, sess.Signal(ssh.SIGKILL))
	_ = sess.Wait()
	waitFor(t, func() bool {
		got := ts.LauncherSessions()
		return len(got) == 1 && got[0].Sessions == 2 && got[0].Daemons == 1 && got[0].Open == 0
	}, "the daemon counted after it ended, none open")
}

// TestSessionsNameTheirLauncher: a session on a connection that declared
// a launcher instance reaches OnSessionStart, with its command's pid, and
// OnSessionExit naming that instance; one on a connection that declared
// nothing names none.
func TestSessionsNameTheirLauncher(t *testing.T) {
	t.Parallel()
	starts := make(chan SessionStart, 4)
	exits := make(chan SessionExit, 4)
	ts := startServer(t, func(c *Config) {
		c.OnSessionStart = func(s SessionStart) { starts <- s }
		c.OnSessionExit = func(e SessionExit) { exits <- e }
	})
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	a := ts.dial(t)
	if !declare(t, a, inst) {
		t.Fatal("declaration refused")
	}
	u := ts.dial(t)
	for _, tc := range []struct {
		c        *ssh.Client
		launcher string
	}{{a, inst.ID}, {u, ""}} {
		r := run(t, tc.c, "echo $$; exit 3", nil)
		if r.code != 3 {
			t.Fatalf("exit 3: %+v", r)
		}
		var s SessionStart
		var e SessionExit
		select {
		case s = <-starts:
		case <-time.After(10 * time.Second):
			t.Fatal("OnSessionStart not called")
		}
		select {
		case e = <-exits:
		case <-time.After(10 * time.Second):
			t.Fatal("OnSessionExit not called")
		}
		if s.Launcher != tc.launcher || strconv.Itoa(s.PID) != strings.TrimSpace(r.stdout) || s.PID != e.PID || s.Session != e.Session {
			t.Errorf("start = %+v (exit %+v); want launcher %q and the command's pid", s, e, tc.launcher)
		}
		if e.Launcher != tc.launcher || e.ExitCode != 3 {
			t.Errorf("exit = %+v; want launcher %q, status 3", e, tc.launcher)
		}
	}
}
