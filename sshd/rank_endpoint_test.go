package sshd

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcher/trainerstatus"
	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

const statusPath = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status"

// newRun is a run's endpoint as the launcher makes it: a CA, a
// certificate for loopback and a token.
func newRun(t *testing.T) *trainerstatus.Local {
	t.Helper()
	l, err := trainerstatus.NewLocal(filepath.Join(t.TempDir(), "launcher"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// statusRequest is the launcher's request for run's endpoint, its files
// in dir, on port (0: any).
func statusRequest(t *testing.T, run *trainerstatus.Local, dir string, port int) []byte {
	t.Helper()
	r, err := statusfwd.NewRequest(port, statusPath, dir, run.Token, run.CAPEM, run.TLSConfig().Certificates[0], trainerstatus.MaxBody)
	if err != nil {
		t.Fatal(err)
	}
	return r.Marshal()
}

// launcherSide answers each request the agent carries on c as the
// launcher's endpoint would: "launcher got: " and the body, after delay.
// It counts the requests it took and the most it held at once.
type launcherSide struct {
	delay       time.Duration
	took        atomic.Int64
	now, most   atomic.Int64
	stall       bool // take each channel and never answer
	stalledChan chan struct{}
}

func answerChannels(c *ssh.Client) *launcherSide {
	return serveLauncherSide(c, &launcherSide{})
}

func serveLauncherSide(c *ssh.Client, ls *launcherSide) *launcherSide {
	chans := c.HandleChannelOpen(statusfwd.ChannelType)
	ls.stalledChan = make(chan struct{}, 64)
	go func() {
		for nc := range chans {
			ch, reqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(reqs)
			if ls.stall {
				ls.stalledChan <- struct{}{}
				continue
			}
			go func() {
				// A request is held from its channel's opening until its
				// answer is written: the agent frees its slot only after
				// reading the answer, so "now" never counts a request the
				// agent no longer carries (counting until the goroutine
				// ends did, for the few microseconds between the answer and
				// the close, and saw 17 at once on a busy machine).
				n := ls.now.Add(1)
				for m := ls.most.Load(); n > m && !ls.most.CompareAndSwap(m, n); m = ls.most.Load() {
				}
				conn := statusfwd.ChannelConn(ch, statusfwd.Addr("launcher"), statusfwd.Addr("worker"))
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					ls.now.Add(-1)
					return
				}
				body, _ := io.ReadAll(req.Body)
				ls.took.Add(1)
				time.Sleep(ls.delay)
				ls.now.Add(-1)
				answer := "launcher got: " + req.Method + " " + req.URL.Path + " " + req.Header.Get("Authorization") + " " + string(body)
				resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, ContentLength: int64(len(answer)),
					Body: io.NopCloser(strings.NewReader(answer)), Close: true}
				_ = resp.Write(conn)
			}()
		}
	}()
	return ls
}

// rankClient is a rank's HTTPS client for run's endpoint: the CA of the
// run, a connection of its own per request.
func rankClient(run *trainerstatus.Local, timeout time.Duration) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(run.CAPEM)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
}

// post sends a rank's request to the endpoint on port: its code and body.
func post(hc *http.Client, method string, port int, path, token, body string) (int, string, error) {
	req, err := http.NewRequest(method, "https://127.0.0.1:"+strconv.Itoa(port)+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// askEndpoint sends the launcher's request on c and returns the reply.
func askEndpoint(t *testing.T, c *ssh.Client, payload []byte) (statusfwd.Reply, bool) {
	t.Helper()
	ok, b, err := c.SendRequest(statusfwd.RequestType, true, payload)
	if err != nil {
		t.Fatalf("asking for the ranks' endpoint: %v", err)
	}
	if !ok {
		return statusfwd.Reply{}, false
	}
	rep, err := statusfwd.ParseReply(b)
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	return rep, true
}

// TestRanksEndpoint: the job's declared launcher asks for the ranks'
// endpoint; the agent listens on loopback at the port asked, writes the
// token and CA where asked, gives every session the three variables,
// answers what is not a rank's request itself, and carries a rank's
// request to the launcher. It all ends with the launcher's connection.
func TestRanksEndpoint(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	run := newRun(t)
	// The launcher's private directory, which this pod does not have.
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "podmpi-1", "trainer-status")

	// A connection that declared no launcher is refused.
	u := ts.dial(t)
	answerChannels(u)
	if _, ok := askEndpoint(t, u, statusRequest(t, run, dir, 0)); ok {
		t.Fatal("an undeclared client's endpoint was taken")
	}

	a := ts.dial(t)
	ls := answerChannels(a)
	if !declare(t, a, launcherid.New("uid-a", "tj-launcher-0-0", time.Now())) {
		t.Fatal("declaration refused")
	}
	port := sshtest.FreePort(t) // the port the launcher's pod uses
	rep, ok := askEndpoint(t, a, statusRequest(t, run, dir, port))
	if !ok || int(rep.Port) != port || rep.Dir != dir {
		t.Fatalf("reply %+v (%v), want port %d dir %s; log:\n%s", rep, ok, port, dir, ts.logs.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, statusfwd.TokenFileName)); err != nil || strings.TrimSpace(string(b)) != run.Token {
		t.Fatalf("token file: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, statusfwd.TokenFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode: %v, %v", fi, err)
	}

	// Any session, on any connection, sees the three variables.
	r := run2(t, u, "echo $"+statusfwd.EnvURL+" $"+statusfwd.EnvToken+" $"+statusfwd.EnvCACert)
	want := "https://127.0.0.1:" + strconv.Itoa(port) + statusPath + " " + filepath.Join(dir, "token") + " " + filepath.Join(dir, "ca.crt")
	if strings.TrimSpace(r) != want {
		t.Fatalf("session env: %q, want %q", r, want)
	}

	// What is not a rank's request is answered by the agent.
	hc := rankClient(run, 10*time.Second)
	for _, tc := range []struct {
		name, method, path, token, body string
		code                            int
		says                            string
	}{
		{"another token", "POST", statusPath, strings.Repeat("cd", 32), "{}", 403, "send the token in the file " + statusfwd.EnvToken},
		{"another path", "POST", "/x", run.Token, "{}", 404, "takes the job's status at " + statusPath},
		{"GET", "GET", statusPath, run.Token, "", 405, "only POST"},
		{"too big", "POST", statusPath, run.Token, strings.Repeat("a", trainerstatus.MaxBody+1), 413, "over the 65536 bytes"},
	} {
		code, body, err := post(hc, tc.method, port, tc.path, tc.token, tc.body)
		if err != nil || code != tc.code || !strings.Contains(body, tc.says) || !strings.Contains(body, `"kind":"Status"`) {
			t.Errorf("%s: %d %s %v, want %d with %q", tc.name, code, body, err, tc.code, tc.says)
		}
	}
	if n := ls.took.Load(); n != 0 {
		t.Fatalf("%d refused requests reached the launcher", n)
	}

	// A rank's request reaches the launcher, with its token.
	code, body, err := post(hc, "POST", port, statusPath, run.Token, `{"trainerStatus":{}}`)
	if err != nil || code != 200 || body != "launcher got: POST "+statusPath+" Bearer "+run.Token+` {"trainerStatus":{}}` {
		t.Fatalf("a rank's request: %d %q %v", code, body, err)
	}

	// The launcher's connection closes: the listener and the files go, and
	// sessions get no variables.
	a.Close()
	waitFor(t, func() bool {
		_, err := os.Stat(filepath.Dir(dir))
		return os.IsNotExist(err)
	}, "the endpoint's directory removed with "+filepath.Dir(dir)+", which the agent made for it")
	if _, err := os.Stat(tmp); err != nil {
		t.Errorf("the temporary directory itself: %v", err)
	}
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the endpoint's listener closed")
	if r := run2(t, u, "echo x$"+statusfwd.EnvURL); strings.TrimSpace(r) != "x" {
		t.Fatalf("a session after the endpoint ended: %q", r)
	}
}

// run2 runs cmd on c and returns its stdout.
func run2(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	return run(t, c, cmd, nil).stdout
}

// TestRanksEndpointVersion1Refused: a launcher of the release before
// (version 1 of the request, which carried the ranks' TLS to the launcher
// unchecked) is refused, and the agent says why.
func TestRanksEndpointVersion1Refused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	a := ts.dial(t)
	if !declare(t, a, launcherid.New("uid-a", "tj-launcher-0-0", time.Now())) {
		t.Fatal("declaration refused")
	}
	run := newRun(t)
	req := statusfwd.Request{Version: 1, Path: statusPath, Dir: t.TempDir(), Token: run.Token, CA: string(run.CAPEM)}
	if _, ok := askEndpoint(t, a, req.Marshal()); ok {
		t.Fatal("a version 1 request was taken")
	}
	if !strings.Contains(ts.logs.String(), "request version 1, this worker-agent speaks 2") {
		t.Errorf("log:\n%s", ts.logs.String())
	}
}

// TestRanksEndpointOlderLauncherRefused: an older launcher instance that
// asks after a newer one does not take the endpoint from it.
func TestRanksEndpointOlderLauncherRefused(t *testing.T) {
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
	if _, ok := askEndpoint(t, b, statusRequest(t, newRun(t), filepath.Join(t.TempDir(), "status"), 0)); !ok {
		t.Fatal("the newer launcher's endpoint refused")
	}
	// The old instance's connections were closed by the newer one's
	// declaration; a replayed old identity on a new connection asks again.
	a2 := ts.dial(t)
	if !declare(t, a2, oldInst) {
		t.Fatal("declaration refused")
	}
	if _, ok := askEndpoint(t, a2, statusRequest(t, newRun(t), filepath.Join(t.TempDir(), "x"), 0)); ok {
		t.Fatal("the older launcher took the endpoint")
	}
	if !strings.Contains(ts.logs.String(), "a newer launcher instance") {
		t.Errorf("log:\n%s", ts.logs.String())
	}
}

// TestRanksEndpointOnTwoConnections: the launcher holds two connections to
// this agent (a second one dialed while the first was busy) and asks on
// both for the same endpoint: one endpoint stands, on the launcher's port,
// and it ends only with the last of them.
func TestRanksEndpointOnTwoConnections(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	run := newRun(t)
	dir := filepath.Join(t.TempDir(), "status")
	port := sshtest.FreePort(t)
	var conns []*ssh.Client
	for range 2 {
		c := ts.dial(t)
		answerChannels(c)
		if !declare(t, c, inst) {
			t.Fatal("declaration refused")
		}
		if rep, ok := askEndpoint(t, c, statusRequest(t, run, dir, port)); !ok || int(rep.Port) != port {
			t.Fatalf("endpoint on connection %d: %v %+v", len(conns)+1, ok, rep)
		}
		conns = append(conns, c)
	}
	hc := rankClient(run, 10*time.Second)
	ask := func() string {
		_, body, err := post(hc, "POST", port, statusPath, run.Token, "hello")
		if err != nil {
			return err.Error()
		}
		return body
	}
	conns[1].Close()
	if got := ask(); !strings.HasPrefix(got, "launcher got: ") {
		t.Fatalf("with the first connection left: %q", got)
	}
	conns[0].Close()
	waitFor(t, func() bool { return !strings.HasPrefix(ask(), "launcher got") }, "the endpoint ended with the last connection")
}

// TestRanksEndpointStaysWithTheNewerInstance: the newer launcher instance
// asks first; an older one (provably started before it) that this agent
// hears of later, on a connection of its own that the newer one's
// declaration could not close, asks too and is refused: the newer one's
// endpoint, its files and the sessions' variables stay as they were.
// Before, the older one took it, being heard of later.
func TestRanksEndpointStaysWithTheNewerInstance(t *testing.T) {
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
	run := newRun(t)
	dir := filepath.Join(t.TempDir(), "status")
	rep, ok := askEndpoint(t, b, statusRequest(t, run, dir, 0))
	if !ok {
		t.Fatal("the newer launcher's endpoint refused")
	}
	a := ts.dial(t)
	answerChannels(a)
	if !declare(t, a, oldInst) {
		t.Fatal("declaration refused")
	}
	if _, ok := askEndpoint(t, a, statusRequest(t, newRun(t), filepath.Join(t.TempDir(), "old"), 0)); ok {
		t.Fatalf("the older launcher, heard of later, took the endpoint; log:\n%s", ts.logs.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, statusfwd.TokenFileName)); err != nil || strings.TrimSpace(string(b)) != run.Token {
		t.Fatalf("the newer launcher's token file: %q, %v", b, err)
	}
	want := "https://127.0.0.1:" + strconv.Itoa(int(rep.Port)) + statusPath + " " + filepath.Join(dir, "token")
	if r := run2(t, a, "echo $"+statusfwd.EnvURL+" $"+statusfwd.EnvToken); strings.TrimSpace(r) != want {
		t.Fatalf("session env: %q, want the newer launcher's %q", r, want)
	}
	if !strings.Contains(ts.logs.String(), "newer launcher instance") {
		t.Errorf("the refusal is not logged:\n%s", ts.logs.String())
	}
}

// TestRanksEndpointNotHeldUpByAStalledConnection: the endpoint carries a
// rank's request that the launcher took but never answers (its end
// stalled); the same launcher instance asks for a new endpoint (its next
// run) and gets it at once: the old endpoint's requests are cut, not
// waited for. Before, the request waited for them (up to 2 minutes).
func TestRanksEndpointNotHeldUpByAStalledConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	a := ts.dial(t)
	ls := serveLauncherSide(a, &launcherSide{stall: true})
	if !declare(t, a, inst) {
		t.Fatal("declaration refused")
	}
	run := newRun(t)
	rep, ok := askEndpoint(t, a, statusRequest(t, run, filepath.Join(t.TempDir(), "one"), 0))
	if !ok {
		t.Fatal("first endpoint refused")
	}
	ranked := make(chan error, 1)
	go func() {
		_, _, err := post(rankClient(run, 30*time.Second), "POST", int(rep.Port), statusPath, run.Token, "{}")
		ranked <- err
	}()
	select {
	case <-ls.stalledChan:
	case <-time.After(10 * time.Second):
		t.Fatal("the rank's request did not reach the launcher")
	}
	// The next run's endpoint.
	done := make(chan bool, 1)
	start := time.Now()
	go func() {
		_, ok := askEndpoint(t, a, statusRequest(t, newRun(t), filepath.Join(t.TempDir(), "two"), 0))
		done <- ok
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Fatalf("second endpoint refused; log:\n%s", ts.logs.String())
		}
		t.Logf("the second endpoint stood after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the second endpoint waited over 5 s for the old one's stalled request")
	}
	// The old endpoint's rank got its end at once.
	select {
	case <-ranked:
	case <-time.After(5 * time.Second):
		t.Fatal("the old endpoint's rank still waits")
	}
}

// TestRanksEndpointBounds: the agent reads at most rankReadingMax
// connections at once and ends one that sends nothing at
// rankHeaderTimeout; a connection past the bound waits, unread, and is
// served once room is made (not closed). Requests that passed the checks
// wait for one of rankCarriedMax slots: 3 x rankCarriedMax ranks within
// half a second, each answered slowly by the launcher, all get 200, and
// the launcher never holds more than rankCarriedMax at once.
func TestRanksEndpointBounds(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	a := ts.dial(t)
	ls := serveLauncherSide(a, &launcherSide{delay: 300 * time.Millisecond})
	if !declare(t, a, launcherid.New("uid-a", "tj-launcher-0-0", time.Now())) {
		t.Fatal("declaration refused")
	}
	run := newRun(t)
	rep, ok := askEndpoint(t, a, statusRequest(t, run, filepath.Join(t.TempDir(), "st"), 0))
	if !ok {
		t.Fatal("endpoint refused")
	}
	port := int(rep.Port)

	// Idle connections fill the bound.
	idle := make([]net.Conn, 0, rankReadingMax)
	for range rankReadingMax {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		t.Cleanup(func() { c.Close() })
	}
	start := time.Now()
	code, body, err := post(rankClient(run, 20*time.Second), "POST", port, statusPath, run.Token, "{}")
	waited := time.Since(start)
	if err != nil || code != 200 {
		t.Fatalf("the rank past %d idle connections: %d %q %v", rankReadingMax, code, body, err)
	}
	if waited < rankHeaderTimeout/2 {
		t.Fatalf("the rank was served after %v, with %d idle connections being read: the bound did not hold", waited, rankReadingMax)
	}
	t.Logf("the rank past %d idle connections was served after %v", rankReadingMax, waited.Round(time.Millisecond))
	for i, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || os.IsTimeout(err) {
			t.Fatalf("idle connection %d after the header timeout: %d %v, want it closed", i, n, err)
		}
	}

	// Three ranks per slot, within half a second (each held 300 ms by the
	// launcher: the slots run out; the start is spread over a few ms so
	// that the test's TLS handshakes, slow under -race on a busy machine,
	// stay within the agent's header timeout).
	before := ls.took.Load()
	const ranks = 3 * rankCarriedMax
	var wg sync.WaitGroup
	errs := make(chan string, ranks)
	for i := range ranks {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 10 * time.Millisecond)
			b := fmt.Sprintf("rank %d", i)
			code, body, err := post(rankClient(run, 20*time.Second), "POST", port, statusPath, run.Token, b)
			if err != nil || code != 200 || !strings.HasSuffix(body, " "+b) {
				errs <- fmt.Sprintf("rank %d: %d %q %v", i, code, body, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := ls.took.Load() - before; n != ranks {
		t.Errorf("the launcher took %d requests, want %d", n, ranks)
	}
	if m := ls.most.Load(); m > rankCarriedMax {
		t.Errorf("the launcher held %d requests at once, over %d", m, rankCarriedMax)
	}
}

// TestRanksEndpointPassesOverAStalledConnection: of the launcher's two
// connections, the one that asked last never answers a channel open (its
// end stalled); a rank's request goes back on the other one after
// rankOpenTimeout, and gets its answer.
func TestRanksEndpointPassesOverAStalledConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	inst := launcherid.New("uid-a", "tj-launcher-0-0", time.Now())
	run := newRun(t)
	dir := filepath.Join(t.TempDir(), "status")
	first := ts.dial(t)
	ls := answerChannels(first)
	stalled := ts.dial(t)
	_ = stalled.HandleChannelOpen(statusfwd.ChannelType) // opens are never answered
	var rep statusfwd.Reply
	for _, c := range []*ssh.Client{first, stalled} {
		if !declare(t, c, inst) {
			t.Fatal("declaration refused")
		}
		var ok bool
		if rep, ok = askEndpoint(t, c, statusRequest(t, run, dir, 0)); !ok {
			t.Fatal("endpoint refused")
		}
	}
	start := time.Now()
	code, body, err := post(rankClient(run, 30*time.Second), "POST", int(rep.Port), statusPath, run.Token, "{}")
	if err != nil || code != 200 || !strings.HasPrefix(body, "launcher got: ") || ls.took.Load() != 1 {
		t.Fatalf("the rank's request: %d %q %v", code, body, err)
	}
	if waited := time.Since(start); waited < rankOpenTimeout {
		t.Fatalf("answered after %v, before the stalled connection's %v were up: it was not tried first", waited, rankOpenTimeout)
	}
}

// TestRankDirRemovesOnlyWhatItMade: the parents the agent made for the
// endpoint's directory go with it when empty; one that holds someone
// else's file stays, and so does what existed before.
func TestRankDirRemovesOnlyWhatItMade(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	want := filepath.Join(tmp, "a", "b", "trainer-status")
	dir, made, err := rankDir(want)
	if err != nil || dir != want {
		t.Fatalf("rankDir: %q %v", dir, err)
	}
	if wantMade := []string{want, filepath.Join(tmp, "a", "b"), filepath.Join(tmp, "a")}; strings.Join(made, " ") != strings.Join(wantMade, " ") {
		t.Fatalf("made %q, want %q", made, wantMade)
	}
	// Someone else writes in a parent the agent made.
	theirs := filepath.Join(tmp, "a", "theirs")
	if err := os.WriteFile(theirs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e := &rankEndpoint{dir: dir, made: made}
	e.removeDir()
	for _, gone := range []string{want, filepath.Join(tmp, "a", "b")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s stays (%v)", gone, err)
		}
	}
	for _, stays := range []string{theirs, tmp} {
		if _, err := os.Stat(stays); err != nil {
			t.Errorf("%s removed: %v", stays, err)
		}
	}

	// A directory that exists already is the launcher's own (a pod that
	// shares its file system): nothing is made, nothing removed.
	own := filepath.Join(tmp, "own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if dir, made, err := rankDir(own); err != nil || dir != own || made != nil {
		t.Fatalf("rankDir(own): %q %q %v", dir, made, err)
	}
}
