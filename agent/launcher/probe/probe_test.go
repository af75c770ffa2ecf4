package probe

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/mpi"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

type job struct {
	key sshtest.Key
	cfg sshclient.Config
}

// openMPIDaemons accepts either Open MPI major, as a launcher that knows
// only "openmpi" would.
var openMPIDaemons = []string{"orted", "prted"}

func newJob(t testing.TB) job {
	k := sshtest.NewKey(t)
	return job{key: k, cfg: sshclient.Config{Signer: k.Signer, HostKey: k.Public(), User: "mpiuser"}}
}

// binDir returns a directory holding executable stand-ins for the given
// MPI daemons, to put on the test server's PATH.
func binDir(t testing.TB, names ...string) string {
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func (j job) worker(t testing.TB, path string, delay time.Duration) *sshtest.Server {
	return sshtest.Start(t, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{j.key.Public()},
		Env: []string{"PATH=" + path}, ExecDelay: delay})
}

func local(port int) Target { return Target{Host: "127.0.0.1", Port: port} }

func TestRunAllOK(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	bin := binDir(t, "prted")
	srv := j.worker(t, bin, 0) // only the stand-in: this machine may have a real orted in /usr/bin
	targets := []Target{local(srv.Port), {Host: "localhost", Port: srv.Port}, local(srv.Port)}
	res := Run(context.Background(), targets, Options{Client: j.cfg, Daemons: openMPIDaemons})
	if !AllOK(res) {
		var b bytes.Buffer
		WriteReport(&b, res)
		t.Fatal(b.String())
	}
	for i, r := range res {
		if r.Target != targets[i] || r.Attempts != 1 || r.Latency <= 0 || r.DaemonPath != filepath.Join(bin, "prted") {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if got := srv.Commands(); len(got) != 3 || got[0] != `command -v 'orted' || command -v 'prted'` {
		t.Fatalf("remote commands %q", got)
	}
}

// TestRunKeepsConnections: Keep is offered every successful full probe's
// connection, which the probe then leaves open for the caller; a refused
// one, a banner check and a failed probe are closed or never offered.
func TestRunKeepsConnections(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	srv := j.worker(t, binDir(t, "prted"), 0)
	empty := j.worker(t, t.TempDir(), 0) // no daemon on PATH: the probe fails
	var mu sync.Mutex
	kept := map[Target]*ssh.Client{}
	targets := []Target{local(srv.Port), {Host: "localhost", Port: srv.Port}, local(empty.Port)}
	res := Run(context.Background(), targets, Options{Client: j.cfg, Daemons: openMPIDaemons,
		Keep: func(tg Target, c *ssh.Client) bool {
			mu.Lock()
			defer mu.Unlock()
			if tg.Host == "localhost" {
				return false // the probe closes it
			}
			kept[tg] = c
			return true
		}})
	if !res[0].OK || !res[1].OK || res[2].OK {
		t.Fatalf("results %+v", res)
	}
	if len(kept) != 1 || kept[targets[0]] == nil {
		t.Fatalf("kept %v, want the first worker's connection only", kept)
	}
	s, err := kept[targets[0]].NewSession()
	if err != nil {
		t.Fatalf("the kept connection is closed: %v", err)
	}
	if out, err := s.Output("echo kept"); err != nil || string(out) != "kept\n" {
		t.Fatalf("session on the kept connection: %q %v", out, err)
	}
	kept[targets[0]].Close()
}

// TestRunClassifiesEveryPhase provokes each failure for real on loopback.
// Only the two targets that never answer (a connect that never completes,
// a server that never speaks) are probed with short timeouts, which end
// their attempts whatever the load; every target that answers gets the
// default timeouts, so that a loaded machine still finds its answer.
func TestRunClassifiesEveryPhase(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	other := sshtest.NewKey(t)
	good := j.worker(t, binDir(t, "orted"), 0)
	noDaemon := j.worker(t, t.TempDir(), 0) // `command -v` is a shell builtin: no PATH needed
	wrongHost := sshtest.Start(t, sshtest.Options{HostKey: other.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
	wrongClient := sshtest.Start(t, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{other.Public()}})
	httpSrv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(httpSrv.Close)

	cfg := j.cfg
	cfg.Resolver = sshtest.NXDomainResolver(t)
	silent := cfg
	silent.ConnectTimeout = 400 * time.Millisecond
	silent.HandshakeTimeout = 400 * time.Millisecond

	type probed struct {
		target Target
		silent bool            // never answers: probed with short timeouts
		want   sshclient.Phase // "" for OK
	}
	cases := []probed{
		{local(good.Port), false, ""},
		{local(sshtest.FreePort(t)), false, sshclient.PhaseTCPRefused},
		{local(sshtest.FullBacklogPort(t)), true, sshclient.PhaseTCPTimeout},
		{local(sshtest.SilentListener(t)), true, sshclient.PhaseHandshake},
		{local(httpSrv.Listener.Addr().(*net.TCPAddr).Port), false, sshclient.PhaseHandshake},
		{local(wrongHost.Port), false, sshclient.PhaseHostKey},
		{local(wrongClient.Port), false, sshclient.PhaseAuth},
		{local(noDaemon.Port), false, sshclient.PhaseRemoteCommand},
		{Target{Host: "tj-node-0-9.invalid", Port: 2222}, false, sshclient.PhaseDNS},
	}
	res := make([]Result, len(cases))
	for _, quiet := range []bool{false, true} {
		c := cfg
		if quiet {
			c = silent
		}
		var targets []Target
		var at []int
		for i, p := range cases {
			if p.silent == quiet {
				targets = append(targets, p.target)
				at = append(at, i)
			}
		}
		for k, r := range Run(context.Background(), targets, Options{Client: c, Daemons: openMPIDaemons, Parallel: 4}) {
			res[at[k]] = r
		}
	}
	for i, r := range res {
		if r.Target != cases[i].target {
			t.Fatalf("result %d is for %v, want %v", i, r.Target, cases[i].target)
		}
		if cases[i].want == "" {
			if !r.OK {
				t.Errorf("%v: %v", r.Target, r.Failure)
			}
			continue
		}
		if r.OK || r.Failure.Phase != cases[i].want {
			t.Errorf("%v: got %+v, want phase %s", r.Target, r.Failure, cases[i].want)
		}
		if r.Attempts != 1 {
			t.Errorf("%v: %d attempts without a deadline", r.Target, r.Attempts)
		}
	}
	f := res[7].Failure
	wantHint := "orted/prted is not on the PATH of worker-agent on 127.0.0.1; install the MPI in the worker image or set PATH in the worker container"
	if f == nil || f.Hint != wantHint || !strings.Contains(f.Error(), "exited with status 1") {
		t.Errorf("missing daemon: %v", f)
	}
	var b bytes.Buffer
	WriteReport(&b, res)
	t.Log("\n" + b.String())
	if n := strings.Count(b.String(), "; hint: "); n != len(cases)-1 {
		t.Errorf("report has %d failure lines, want %d", n, len(cases)-1)
	}
}

// TestRunBoundedParallel: with Parallel 3, three remote checks run at
// once and never more. The server holds every command until three wait
// together, so no timing decides whether they overlap.
func TestRunBoundedParallel(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	gate := make(chan struct{})
	srv := sshtest.Start(t, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{j.key.Public()}, ExecGate: gate})
	targets := make([]Target, 10)
	for i := range targets {
		targets[i] = local(srv.Port)
	}
	var mu sync.Mutex
	attempts := 0
	done := make(chan []Result, 1)
	go func() {
		done <- Run(context.Background(), targets, Options{Client: j.cfg, Daemons: []string{"sh"}, Parallel: 3,
			CommandTimeout: time.Minute, // a hang guard: the commands wait at the gate
			OnAttempt:      func(Attempt) { mu.Lock(); attempts++; mu.Unlock() }})
	}()
	sshtest.Eventually(t, time.Minute, "three remote checks waiting at once", func() bool { return srv.Running() == 3 })
	close(gate)
	var res []Result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the probe did not end within a minute of the gate's opening")
	}
	if !AllOK(res) {
		t.Fatalf("not all OK: %+v", res)
	}
	if m := srv.MaxExecs(); m != 3 {
		t.Fatalf("max concurrent remote checks %d, want 3 (Parallel 3)", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts != len(targets) {
		t.Fatalf("OnAttempt called %d times", attempts)
	}
	if res[0].DaemonPath != "/usr/bin/sh" && res[0].DaemonPath != "/bin/sh" {
		t.Fatalf("daemon path %q", res[0].DaemonPath)
	}
}

// TestRunRetriesUntilListening: a worker whose agent starts listening
// after the probe's first attempts were refused is reported OK after
// them.
func TestRunRetriesUntilListening(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	port := sshtest.FreePort(t)
	started := make(chan struct{})
	refused := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(started)
		<-refused // the agent starts once the probe was refused
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("port %d taken meanwhile: %v", port, err)
			return
		}
		srv := sshtest.Serve(ln, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
		t.Cleanup(srv.Close)
	}()
	var mu sync.Mutex
	var phases []sshclient.Phase
	var logs bytes.Buffer
	res := Run(context.Background(), []Target{local(port)}, Options{Client: j.cfg, Deadline: time.Minute, // a hang guard
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnAttempt: func(a Attempt) {
			mu.Lock()
			defer mu.Unlock()
			if a.Failure != nil {
				phases = append(phases, a.Failure.Phase)
				if !a.Retry {
					t.Errorf("attempt %d not retried: %v", a.N, a.Failure)
				}
				once.Do(func() { close(refused) })
			}
		}})
	<-started
	r := res[0]
	if !r.OK || r.Attempts < 2 {
		t.Fatalf("result %+v", r)
	}
	for _, p := range phases {
		if p != sshclient.PhaseTCPRefused {
			t.Fatalf("unexpected phase %s", p)
		}
	}
	if len(phases) != r.Attempts-1 {
		t.Fatalf("%d failed attempts reported, %d attempts", len(phases), r.Attempts)
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Fatalf("no retry logged:\n%s", logs.String())
	}
}

// TestRunGivesUpAtDeadline: a worker refused until the deadline is given
// up on: the run ends (refused connections are retried for ever without
// it), each attempt but the last says another follows, and the last
// refusal is its failure.
func TestRunGivesUpAtDeadline(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	var mu sync.Mutex
	var got []Attempt
	done := make(chan []Result, 1)
	go func() {
		done <- Run(context.Background(), []Target{local(sshtest.FreePort(t))}, Options{Client: j.cfg, Deadline: time.Second,
			InitialBackoff: 100 * time.Millisecond,
			OnAttempt: func(a Attempt) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, a)
			}})
	}()
	var res []Result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the probe did not give up within a minute of its 1 s deadline")
	}
	mu.Lock()
	defer mu.Unlock()
	r := res[0]
	if r.OK || r.Failure.Phase != sshclient.PhaseTCPRefused || r.Attempts != len(got) {
		t.Fatalf("result %+v after %d attempts reported", r, len(got))
	}
	for i, a := range got {
		if last := i == len(got)-1; a.Retry == last || a.Failure == nil || a.Failure.Phase != sshclient.PhaseTCPRefused {
			t.Errorf("attempt %d of %d: %+v", a.N, len(got), a)
		}
	}
}

func TestRunDoesNotRetryPermanentFailures(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	other := sshtest.NewKey(t)
	srv := sshtest.Start(t, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{other.Public()}})
	res := Run(context.Background(), []Target{local(srv.Port)}, Options{Client: j.cfg, Deadline: 10 * time.Second})
	if r := res[0]; r.OK || r.Failure.Phase != sshclient.PhaseAuth || r.Attempts != 1 {
		t.Fatalf("result %+v: a permanent failure was retried", r)
	}
	if n := srv.Accepted(); n != 1 {
		t.Fatalf("%d connections: a permanent failure was retried", n)
	}
}

// TestRunCancelled: Run ends with its context, whatever its deadline and
// timeouts (here far longer than the test's patience).
func TestRunCancelled(t *testing.T) {
	t.Parallel()
	cfg := newJob(t).cfg
	cfg.HandshakeTimeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan []Result, 1)
	var attempts sync.WaitGroup
	attempts.Add(1)
	var once sync.Once
	go func() {
		done <- Run(ctx, []Target{local(sshtest.FreePort(t)), local(sshtest.SilentListener(t))}, Options{Client: cfg, Deadline: time.Hour,
			Parallel: 2, OnAttempt: func(Attempt) { once.Do(attempts.Done) }})
	}()
	attempts.Wait() // the refused worker was tried once: the run is under way
	cancel()
	select {
	case res := <-done:
		for _, r := range res {
			if r.OK || r.Failure == nil {
				t.Fatalf("result %+v", r)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("Run ignored its context's end for a minute")
	}
}

func TestInsecureWarns(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	other := sshtest.NewKey(t)
	srv := sshtest.Start(t, sshtest.Options{HostKey: other.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
	cfg := j.cfg
	cfg.InsecureIgnoreHostKey = true
	var logs bytes.Buffer
	res := Run(context.Background(), []Target{local(srv.Port)}, Options{Client: cfg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !res[0].OK {
		t.Fatal(res[0].Failure)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "insecure-ignore-host-key") {
		t.Fatalf("no warning: %q", logs.String())
	}
}

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{openMPIDaemons, `command -v 'orted' || command -v 'prted'`},
		{mpi.MPICH.Daemons(), `command -v 'hydra_pmi_proxy'`},
		{[]string{"/opt/x y/it's"}, `command -v '/opt/x y/it'\''s'`},
	} {
		if got := CheckCommand(tc.in); got != tc.want {
			t.Errorf("CheckCommand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func fixedKey(seed byte) ssh.PublicKey {
	pub, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)).Public())
	if err != nil {
		panic(err)
	}
	return pub
}

func reportFixture() []Result {
	hk := &sshclient.HostKeyError{Expected: fixedKey(1), Presented: fixedKey(2), Source: "/home/mpiuser/.ssh/id_rsa.pub"}
	return []Result{
		{Target: Target{"tj-node-0-0.tj", 2222}, OK: true, Latency: 1234 * time.Microsecond, Attempts: 1, DaemonPath: "/usr/bin/orted"},
		{Target: Target{"tj-node-0-1.tj", 2222}, OK: true, Latency: 870 * time.Microsecond, Attempts: 3, DaemonPath: "/usr/bin/orted"},
		{Target: Target{"tj-node-0-2.tj", 2222}, Attempts: 1, Failure: sshclient.Classify("tj-node-0-2.tj", 2222, sshclient.PhaseHandshake,
			&sshclient.AuthError{User: "mpiuser", KeyFingerprint: "SHA256:AAAA", Err: errString("ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain")})},
		{Target: Target{"tj-node-0-3.tj", 2222}, Attempts: 12, Failure: sshclient.Classify("tj-node-0-3.tj", 2222, sshclient.PhaseTCP,
			&net.OpError{Op: "dial", Net: "tcp", Err: errString("i/o timeout"), Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 3), Port: 2222}})},
		{Target: Target{"tj-node-0-4.tj", 2222}, Attempts: 1, Failure: sshclient.Classify("tj-node-0-4.tj", 2222, sshclient.PhaseHandshake, hk)},
		{Target: Target{"tj-node-0-5.tj", 2222}, Attempts: 1, Failure: &sshclient.Failure{Host: "tj-node-0-5.tj", Port: 2222,
			Phase: sshclient.PhaseRemoteCommand, Cause: errString("orted/prted not found: `command -v 'orted' || command -v 'prted'` exited with status 1"),
			Hint: "orted/prted is not on the PATH of worker-agent on tj-node-0-5.tj; install the MPI in the worker image or set PATH in the worker container"}},
		{Target: Target{"tj-node-0-6.tj", 2222}, OK: true, Latency: 2*time.Second + 345*time.Millisecond, Attempts: 2, DaemonPath: "/usr/bin/prted"},
	}
}

// errString is an error whose text is fixed and which reports a timeout when
// it says so (as net errors do), for deterministic report fixtures.
type errString string

func (e errString) Error() string   { return string(e) }
func (e errString) Timeout() bool   { return strings.Contains(string(e), "timeout") }
func (e errString) Temporary() bool { return false }

func TestWriteReportGolden(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	WriteReport(&b, reportFixture())
	golden := filepath.Join("testdata", "report.golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if b.String() != string(want) {
		t.Fatalf("report differs from %s (run with -update after checking):\n--- got\n%s--- want\n%s", golden, b.String(), want)
	}
}

func ExampleWriteReport() {
	WriteReport(os.Stdout, []Result{
		{Target: Target{"tj-node-0-0.tj", 2222}, OK: true, Latency: 1200 * time.Microsecond, Attempts: 1, DaemonPath: "/usr/bin/orted"},
		{Target: Target{"tj-node-0-1.tj", 2222}, Attempts: 1, Failure: &sshclient.Failure{Host: "tj-node-0-1.tj", Port: 2222,
			Phase: sshclient.PhaseAuth, Cause: errString("public key SHA256:AAAA refused for user \"mpiuser\""),
			Hint: "the worker's authorized_keys does not hold this job's key (fingerprint SHA256:AAAA)"}},
	})
	// Output:
	// tj-node-0-1.tj:2222: auth: public key SHA256:AAAA refused for user "mpiuser"; hint: the worker's authorized_keys does not hold this job's key (fingerprint SHA256:AAAA)
	// WORKER               RESULT  LATENCY  ATTEMPTS  DAEMON
	// tj-node-0-0.tj:2222  ok      1.2ms    1         /usr/bin/orted
	// tj-node-0-1.tj:2222  auth    -        1         -
	// 2 workers: 1 ok, 1 failed (auth 1)
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func TestRunNoTargets(t *testing.T) {
	t.Parallel()
	if res := Run(context.Background(), nil, Options{}); len(res) != 0 {
		t.Fatalf("results %v", res)
	}
	var b bytes.Buffer
	WriteReport(&b, nil)
	if !strings.HasSuffix(b.String(), "0 workers: 0 ok, 0 failed\n") {
		t.Fatalf("report %q", b.String())
	}
}

// A connect that never completes (a NetworkPolicy drop) must not outlive
// the probe deadline, even with a long per-attempt connect timeout.
func TestRunDeadlineCutsHangingConnect(t *testing.T) {
	cfg := newJob(t).cfg
	cfg.ConnectTimeout = time.Hour
	done := make(chan []Result, 1)
	go func() {
		done <- Run(context.Background(), []Target{local(sshtest.FullBacklogPort(t))}, Options{Client: cfg, Deadline: 1500 * time.Millisecond})
	}()
	select {
	case res := <-done:
		if res[0].OK || res[0].Failure.Phase != sshclient.PhaseTCPTimeout {
			t.Fatalf("want tcp-timeout, got %+v", res[0])
		}
	case <-time.After(time.Minute):
		t.Fatal("a connect that never completes outlived the probe's 1.5 s deadline by a minute (its connect timeout is an hour)")
	}
}

func TestFullSample(t *testing.T) {
	if SpreadSample(10, 0) != nil || SpreadSample(10, 10) != nil || SpreadSample(3, 5) != nil {
		t.Fatal("no sampling expected")
	}
	for _, tc := range []struct{ n, sample int }{{10, 1}, {10, 2}, {10, 3}, {1024, 128}, {129, 128}} {
		full := SpreadSample(tc.n, tc.sample)
		count := 0
		for _, f := range full {
			if f {
				count++
			}
		}
		if count != tc.sample || !full[0] || (tc.sample > 1 && !full[tc.n-1]) {
			t.Errorf("SpreadSample(%d, %d): %d marked, first %v last %v", tc.n, tc.sample, count, full[0], full[tc.n-1])
		}
	}
}

// With SSHSample, the sampled workers get the full probe (a missing daemon
// is found there) and the others the banner check, which still finds a
// dead port on any worker.
func TestRunSSHSample(t *testing.T) {
	j := newJob(t)
	ok := j.worker(t, binDir(t, "orted"), 0)
	targets := []Target{local(ok.Port), local(ok.Port), local(sshtest.FreePort(t)), local(ok.Port)}
	res := Run(context.Background(), targets, Options{Client: j.cfg, Daemons: openMPIDaemons, SSHSample: 2})
	want := []string{CheckSSH, CheckBanner, CheckBanner, CheckSSH}
	for i, r := range res {
		if r.Check != want[i] {
			t.Errorf("target %d: check %q, want %q", i, r.Check, want[i])
		}
	}
	if !res[0].OK || res[0].DaemonPath == "" || !res[1].OK || res[1].DaemonPath != "" || !res[3].OK {
		t.Fatalf("results %+v", res)
	}
	if res[2].OK || res[2].Failure.Phase != sshclient.PhaseTCPRefused {
		t.Fatalf("banner check must still classify a dead port: %+v", res[2])
	}
	var b strings.Builder
	WriteReport(&b, res)
	if !strings.Contains(b.String(), "(banner check)") || !strings.Contains(b.String(), "2 fully probed over SSH, 2 by banner check") {
		t.Fatalf("report:\n%s", b.String())
	}
	if got := ok.Commands(); len(got) != 2 {
		t.Fatalf("remote checks ran %d times, want 2 (sampled workers only): %q", len(got), got)
	}
}

// A panic in a probing goroutine reaches Run's caller (where the launcher
// turns it into exit 71), after every other target was still probed.
func TestRunPanicReachesCaller(t *testing.T) {
	targets := []Target{{"127.0.0.1", 1}, {"127.0.0.1", 1}, {"127.0.0.1", 1}}
	var calls atomic.Int32
	var got any
	func() {
		defer func() { got = recover() }()
		Run(context.Background(), targets, Options{Parallel: 2, OnAttempt: func(Attempt) {
			if calls.Add(1) == 1 {
				panic("boom in OnAttempt")
			}
		}})
	}()
	s, _ := got.(string)
	if !strings.Contains(s, "boom in OnAttempt") || !strings.Contains(s, "probe goroutine") {
		t.Fatalf("recovered %v", got)
	}
	if calls.Load() != 3 {
		t.Errorf("%d attempts, want every target tried", calls.Load())
	}
}

// The probe's wait says what it sees from its first line: a worker whose
// SSH port refuses every connection is named with the refusal (the probe
// used to log nothing above debug level until its deadline), and what
// Kubernetes says of it.
func TestRunProgressNamesTheAnswer(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	port := sshtest.FreePort(t)
	var logs bytes.Buffer
	logw := &syncWriter{w: &logs}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan []Result, 1)
	go func() {
		done <- Run(ctx, []Target{local(port)}, Options{Client: j.cfg, Deadline: time.Hour,
			InitialBackoff: 50 * time.Millisecond, ProgressEvery: time.Hour,
			Note:   func(h string) string { return "pod w-0-x is Running, not Ready" },
			Logger: slog.New(slog.NewTextHandler(logw, nil))})
	}()
	// The wait's first line, then the end of the run (its context).
	sshtest.Eventually(t, time.Minute, "the probe's first progress line", func() bool { return strings.Contains(logw.String(), `msg="probe: `) })
	cancel()
	var res []Result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the probe did not end with its context")
	}
	if r := res[0]; r.OK || r.Failure == nil { // refused, or cut by the cancel
		t.Fatalf("result %+v", r)
	}
	var lines []string
	for _, l := range strings.Split(logw.String(), "\n") {
		if strings.Contains(l, `msg="probe: `) {
			lines = append(lines, l)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	want := `msg="probe: 0/1 workers checked; waiting for 127.0.0.1 (pod w-0-x is Running, not Ready; tcp-refused: connection refused on ` + addr + `)"`
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("progress lines %q, want one with\n%s", lines, want)
	}
}
