package sshd

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

const statusPath = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status"

const testCA = "-----BEGIN CERTIFICATE-----\nMAo=\n-----END CERTIFICATE-----\n"

func statusRequest(dir string, port int) []byte {
	return statusfwd.Request{Version: statusfwd.Version, Port: uint32(port), Path: statusPath, Dir: dir,
		Token: strings.Repeat("ab", 32), CA: testCA}.Marshal()
}

// answerChannels answers each forwarded connection on c with one line:
// "launcher got: " and the first line the rank sent.
func answerChannels(c *ssh.Client) {
	chans := c.HandleChannelOpen(statusfwd.ChannelType)
	go func() {
		for nc := range chans {
			ch, reqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(reqs)
			go func() {
				defer ch.Close()
				line, _ := bufio.NewReader(ch).ReadString('\n')
				_, _ = io.WriteString(ch, "launcher got: "+line)
			}()
		}
	}()
}

// TestStatusForward: the job's declared launcher asks for the forward;
// the agent listens on loopback at the port asked, writes the token and CA
// where asked, gives every session the three variables, and carries a
// connection to the listener to the launcher. It all ends with the
// launcher's connection.
func TestStatusForward(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	dir := filepath.Join(t.TempDir(), "podmpi-1", "trainer-status")

	// A connection that declared no launcher is refused.
	u := ts.dial(t)
	answerChannels(u)
	if ok, _, err := u.SendRequest(statusfwd.RequestType, true, statusRequest(dir, 0)); err != nil || ok {
		t.Fatalf("an undeclared client's forward: ok %v, err %v", ok, err)
	}

	a := ts.dial(t)
	answerChannels(a)
	if !declare(t, a, launcherid.New("uid-a", "tj-launcher-0-0", time.Now())) {
		t.Fatal("declaration refused")
	}
	// The port the launcher's pod uses: here a free one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ok, payload, err := a.SendRequest(statusfwd.RequestType, true, statusRequest(dir, port))
	if err != nil || !ok {
		t.Fatalf("the launcher's forward: ok %v, err %v; log:\n%s", ok, err, ts.logs.String())
	}
	rep, err := statusfwd.ParseReply(payload)
	if err != nil || int(rep.Port) != port || rep.Dir != dir {
		t.Fatalf("reply %+v (%v), want port %d dir %s", rep, err, port, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, statusfwd.TokenFileName)); err != nil || strings.TrimSpace(string(b)) != strings.Repeat("ab", 32) {
		t.Fatalf("token file: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, statusfwd.TokenFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode: %v, %v", fi, err)
	}

	// Any session, on any connection, sees the three variables.
	r := run(t, u, "echo $"+statusfwd.EnvURL+" $"+statusfwd.EnvToken+" $"+statusfwd.EnvCACert, nil)
	want := "https://127.0.0.1:" + strconv.Itoa(port) + statusPath + " " + filepath.Join(dir, "token") + " " + filepath.Join(dir, "ca.crt")
	if strings.TrimSpace(r.stdout) != want {
		t.Fatalf("session env: %q, want %q", r.stdout, want)
	}

	// A rank's connection reaches the launcher.
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "POST "+statusPath+"\n")
	got, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if got != "launcher got: POST "+statusPath+"\n" {
		t.Fatalf("through the forward: %q", got)
	}

	// The launcher's connection closes: the listener and the files go, and
	// sessions get no variables.
	a.Close()
	waitFor(t, func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	}, "the forward's directory removed")
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the forward's listener closed")
	if r := run(t, u, "echo x$"+statusfwd.EnvURL, nil); strings.TrimSpace(r.stdout) != "x" {
		t.Fatalf("a session after the forward ended: %q", r.stdout)
	}
}

// TestStatusForwardOlderLauncherRefused: an older launcher instance that
// asks after a newer one does not take the forward from it.
func TestStatusForwardOlderLauncherRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	now := time.Now()
	oldInst := launcherid.New("uid-a", "tj-launcher-0-0", now.Add(-time.Hour))
	newInst := launcherid.New("uid-b", "tj-launcher-0-0", now)
	// The old instance is heard of first (its connection stays, idle).
	a := ts.dial(t)
	if !declare(t, a, oldInst) {
		t.Fatal("declaration refused")
	}
	b := ts.dial(t)
	answerChannels(b)
	if !declare(t, b, newInst) {
		t.Fatal("declaration refused")
	}
	dir := filepath.Join(t.TempDir(), "status")
	if ok, _, err := b.SendRequest(statusfwd.RequestType, true, statusRequest(dir, 0)); err != nil || !ok {
		t.Fatalf("the newer launcher's forward: %v %v", ok, err)
	}
	// The old instance's connections were closed by the newer one's
	// declaration; a replayed old identity on a new connection asks again.
	a2 := ts.dial(t)
	if !declare(t, a2, oldInst) {
		t.Fatal("declaration refused")
	}
	if ok, _, err := a2.SendRequest(statusfwd.RequestType, true, statusRequest(filepath.Join(t.TempDir(), "x"), 0)); err != nil || ok {
		t.Fatalf("the older launcher's forward: ok %v err %v", ok, err)
	}
	if !strings.Contains(ts.logs.String(), "a newer launcher instance") {
		t.Errorf("log:\n%s", ts.logs.String())
	}
}

// TestStatusForwardOnTwoConnections: the launcher holds two connections to
// this agent (a second one dialed while the first was busy) and asks on
// both for the same endpoint: one forward stands, on the launcher's port,
// and it ends only with the last of them.
func TestStatusForwardOnTwoConnections(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	dir := filepath.Join(t.TempDir(), "status")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var conns []*ssh.Client
	for range 2 {
		c := ts.dial(t)
		answerChannels(c)
		if !declare(t, c, inst) {
			t.Fatal("declaration refused")
		}
		ok, payload, err := c.SendRequest(statusfwd.RequestType, true, statusRequest(dir, port))
		rep, perr := statusfwd.ParseReply(payload)
		if err != nil || !ok || perr != nil || int(rep.Port) != port {
			t.Fatalf("forward on connection %d: ok %v, err %v, reply %+v %v", len(conns)+1, ok, err, rep, perr)
		}
		conns = append(conns, c)
	}
	ask := func() string {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 2*time.Second)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, "hello\n")
		got, _ := bufio.NewReader(c).ReadString('\n')
		return got
	}
	conns[1].Close()
	if got := ask(); got != "launcher got: hello\n" {
		t.Fatalf("with the first connection left: %q", got)
	}
	conns[0].Close()
	waitFor(t, func() bool { return !strings.HasPrefix(ask(), "launcher got") }, "the forward ended with the last connection")
}

// TestStatusForwardStaysWithTheNewerInstance: the newer launcher instance
// asks first; an older one (provably started before it) that this agent
// hears of later, on a connection of its own that the newer one's
// declaration could not close, asks too and is refused: the newer one's
// forward, its files and the sessions' variables stay as they were.
// Before, the older one took the forward, being heard of later.
func TestStatusForwardStaysWithTheNewerInstance(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	now := time.Now()
	newInst := launcherid.New("uid-b", "tj-launcher-0-0", now)
	oldInst := launcherid.New("uid-a", "tj-launcher-0-0", now.Add(-time.Hour))
	b := ts.dial(t)
	answerChannels(b)
	if !declare(t, b, newInst) {
		t.Fatal("declaration refused")
	}
	dir := filepath.Join(t.TempDir(), "status")
	ok, payload, err := b.SendRequest(statusfwd.RequestType, true, statusRequest(dir, 0))
	rep, perr := statusfwd.ParseReply(payload)
	if err != nil || !ok || perr != nil {
		t.Fatalf("the newer launcher's forward: ok %v, err %v, reply %v", ok, err, perr)
	}
	a := ts.dial(t)
	answerChannels(a)
	if !declare(t, a, oldInst) {
		t.Fatal("declaration refused")
	}
	otherDir := filepath.Join(t.TempDir(), "old")
	req := statusfwd.Request{Version: statusfwd.Version, Path: statusPath, Dir: otherDir, Token: strings.Repeat("cd", 32), CA: testCA}
	if ok, _, err := a.SendRequest(statusfwd.RequestType, true, req.Marshal()); err != nil || ok {
		t.Fatalf("the older launcher, heard of later, took the forward: ok %v, err %v; log:\n%s", ok, err, ts.logs.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, statusfwd.TokenFileName)); err != nil || strings.TrimSpace(string(b)) != strings.Repeat("ab", 32) {
		t.Fatalf("the newer launcher's token file: %q, %v", b, err)
	}
	r := run(t, a, "echo $"+statusfwd.EnvURL+" $"+statusfwd.EnvToken, nil)
	want := "https://127.0.0.1:" + strconv.Itoa(int(rep.Port)) + statusPath + " " + filepath.Join(dir, "token")
	if strings.TrimSpace(r.stdout) != want {
		t.Fatalf("session env: %q, want the newer launcher's %q", r.stdout, want)
	}
	if !strings.Contains(ts.logs.String(), "newer launcher instance") {
		t.Errorf("the refusal is not logged:\n%s", ts.logs.String())
	}
}

// TestStatusForwardNotHeldUpByAStalledConnection: the forward carries a
// rank's connection that the launcher took but never answers (its end
// stalled); the same launcher instance asks for a new endpoint (its next
// run) and gets it at once: the old forward's carried connections are cut,
// not waited for. Before, the request waited for them (up to 2 minutes).
func TestStatusForwardNotHeldUpByAStalledConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	a := ts.dial(t)
	// The launcher takes every carried connection and never answers.
	chans := a.HandleChannelOpen(statusfwd.ChannelType)
	taken := make(chan ssh.Channel, 4)
	go func() {
		for nc := range chans {
			ch, reqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(reqs)
			taken <- ch
		}
	}()
	if !declare(t, a, inst) {
		t.Fatal("declaration refused")
	}
	ok, payload, err := a.SendRequest(statusfwd.RequestType, true, statusRequest(filepath.Join(t.TempDir(), "one"), 0))
	rep, perr := statusfwd.ParseReply(payload)
	if err != nil || !ok || perr != nil {
		t.Fatalf("first forward: ok %v, err %v, reply %v", ok, err, perr)
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(rep.Port))), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST "+statusPath+"\n")
	select {
	case <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the rank's connection did not reach the launcher")
	}
	// The next run's endpoint: another token.
	req := statusfwd.Request{Version: statusfwd.Version, Path: statusPath, Dir: filepath.Join(t.TempDir(), "two"),
		Token: strings.Repeat("cd", 32), CA: testCA}
	type answer struct {
		ok  bool
		err error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		ok, _, err := a.SendRequest(statusfwd.RequestType, true, req.Marshal())
		done <- answer{ok, err}
	}()
	select {
	case ans := <-done:
		if ans.err != nil || !ans.ok {
			t.Fatalf("second forward: ok %v, err %v; log:\n%s", ans.ok, ans.err, ts.logs.String())
		}
		t.Logf("the second forward stood after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the second forward waited over 5 s for the old forward's stalled connection")
	}
	// The old forward's rank connection was cut.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the old forward's rank connection: %v, want it closed", err)
	}
}
