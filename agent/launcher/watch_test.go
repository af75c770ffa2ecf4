package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/podmpi/podmpi/agent/kube"
	corev1 "k8s.io/api/core/v1"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/postmortem"
	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/worker/api"
)

// thisLauncher, as an event's Launcher, stands for the instance of the
// launcher under test: a fakeAgent answers the instance its job's command
// wrote to daemonOf (daemonScript) in its place, as an agent names the
// instance whose session started a rank.
const thisLauncher = "(the launcher under test)"

// fakeAgent serves /events on 127.0.0.1 with the events the test sets.
type fakeAgent struct {
	port int
	srv  *http.Server
	asks atomic.Int32

	mu      sync.Mutex
	events  []api.Event
	since   []string
	started time.Time     // when "the agent" started
	stall   time.Duration // how long the next request waits before its answer
	filter  bool          // answer only what the query asks for (api.EventsQuery.Match)
	// daemonOf is a file where the job's command (daemonScript) wrote the
	// launcher instance its environment names; while runsDaemon, the agent
	// says it runs an MPI daemon of that instance. daemonAnswers counts
	// the answers that said so.
	daemonOf      string
	runsDaemon    bool
	daemonAnswers atomic.Int32
}

// waitAsked waits until the agent has been asked at least once, or d
// passes; it reports whether it was asked.
func (a *fakeAgent) waitAsked(d time.Duration) bool {
	for deadline := time.Now().Add(d); a.asks.Load() == 0; {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func startAgent(t *testing.T) *fakeAgent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &fakeAgent{port: ln.Addr().(*net.TCPAddr).Port, started: time.Now().Add(-time.Hour)}
	a.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api.EventsPath {
			http.NotFound(w, r)
			return
		}
		a.asks.Add(1)
		a.mu.Lock()
		stall := a.stall
		a.stall = 0
		a.mu.Unlock()
		time.Sleep(stall)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.since = append(a.since, r.URL.Query().Get("since"))
		q, err := api.ParseEventsQuery(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var up float64
		if !a.started.IsZero() {
			up = time.Since(a.started).Seconds()
		}
		evs, last := []api.Event{}, uint64(0)
		for _, e := range a.events {
			last = max(last, e.Seq)
			if e.Launcher == thisLauncher && a.daemonOf != "" {
				if b, err := os.ReadFile(a.daemonOf); err == nil {
					if inst, err := launcherid.ParseValue(string(b)); err == nil {
						e.Launcher = inst.ID
					}
				}
			}
			if !a.filter || q.Match(e) {
				evs = append(evs, e)
			}
		}
		var launchers []api.LauncherSessions
		if a.runsDaemon && a.daemonOf != "" {
			if b, err := os.ReadFile(a.daemonOf); err == nil {
				if inst, err := launcherid.ParseValue(string(b)); err == nil {
					launchers = append(launchers, api.LauncherSessions{Launcher: api.LauncherOf(inst), Sessions: 1, Daemons: 1, Open: 1})
					a.daemonAnswers.Add(1)
				}
			}
		}
		_ = json.NewEncoder(w).Encode(api.Events{Hostname: "w", Started: a.started, UptimeSeconds: up, Now: time.Now(), Events: evs,
			LastSeq: last, After: q.After, Memory: api.Memory{Version: 1, LimitBytes: 200 << 20}, Launchers: launchers})
	})}
	go func() { _ = a.srv.Serve(ln) }()
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.srv.Close()
	})
	return a
}

// pause closes the agent's port (connections are refused) and returns
// what resume needs to open it again on the same port.
func (a *fakeAgent) pause(t *testing.T) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(a.port)
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// resume serves the agent again on addr (from pause), as the same agent.
func (a *fakeAgent) resume(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic(fmt.Sprintf("resume on %s: %v", addr, err))
	}
	a.mu.Lock()
	old := a.srv
	a.srv = &http.Server{ReadHeaderTimeout: old.ReadHeaderTimeout, Handler: old.Handler}
	srv := a.srv
	a.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// names is a Resolver of host names whose answers tests change: a name
// removed answers "no such host", as a deleted pod's does.
type names struct {
	mu sync.Mutex
	m  map[string]string
}

func newNames(m map[string]string) *names { return &names{m: m} }

func (n *names) remove(host string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.m, host)
}

func (n *names) LookupHost(_ context.Context, host string) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ip, ok := n.m[host]; ok {
		return []string{ip}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (n *names) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func (n *names) LookupAddr(_ context.Context, addr string) ([]string, error) {
	return nil, &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}
}

// restart makes the agent another one, started now: a pod replaced under
// the same name.
func (a *fakeAgent) restart() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started, a.events, a.runsDaemon = time.Now(), nil, false
}

// setDaemon says whether the agent runs the job's MPI daemon.
func (a *fakeAgent) setDaemon(runs bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runsDaemon = runs
}

// waitFor waits until cond holds, checking every 20 ms, or d passes; it
// reports whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// restartMidJob returns a job command (daemonScript) that runs until then
// has returned, then runs last; meanwhile the agent, once asked, restarts
// with no daemon, and then is called once the new agent has answered.
// The job's wait is bounded (a minute: the test fails then).
func (a *fakeAgent) restartMidJob(t *testing.T, last string, then func()) []string {
	t.Helper()
	dir := t.TempDir()
	a.daemonOf = filepath.Join(dir, "instance")
	done := filepath.Join(dir, "done")
	go func() {
		defer func() { _ = os.WriteFile(done, nil, 0o600) }() // the job ends either way
		if !a.waitAsked(30 * time.Second) {
			return
		}
		a.restart() // the agent that answered restarts, with no daemon yet
		asked := a.asks.Load()
		if waitFor(30*time.Second, func() bool { return a.asks.Load() > asked }) {
			then()
		}
	}()
	wait := `i=0; while [ ! -e ` + done + ` ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`
	if last != "" {
		wait += "; " + last
	}
	return daemonScript(a.daemonOf, wait)
}

// daemonScript is a job command that writes the launcher instance of its
// environment (the one the launcher gives mpirun) to file, for a
// fakeAgent's daemonOf, then runs then.
func daemonScript(file, then string) []string {
	return []string{"sh", "-c", `printf %s "$` + launcherid.EnvName + `" > ` + file + "; " + then}
}

func (a *fakeAgent) set(evs ...api.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = evs
}

// runJob runs the launcher over one worker, 127.0.0.1, whose agent listens
// on webPort, with command as mpirun.
func runJob(t *testing.T, webPort int, mod func(*Config), command ...string) (exitcode.Code, string, string, *Launcher, error) {
	t.Helper()
	cfg := Config{
		Discovery:        discovery.Spec{Workers: []string{"127.0.0.1=2"}, Self: "launcher-not-listed"},
		DiscoveryTimeout: 5 * time.Second,
		Implementation:   "openmpi4",
		WorkerWebPort:    webPort,
		SkipProbe:        true,
		Slots:            2,
		HostfilePath:     filepath.Join(t.TempDir(), "hostfile"),
		TempDir:          t.TempDir(),
		Executable:       "/bin/true",
		KillGrace:        time.Second,
		DiagnosisTimeout: 3 * time.Second,
		LaunchGrace:      300 * time.Millisecond,
		Command:          command,
	}
	var out, logs, report sshtest.Buffer
	cfg.Stdout, cfg.Stderr, cfg.Report = &out, &out, &report
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	code, runErr := l.Run(ctx)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("output:\n%s\nreport:\n%s\nlog:\n%s", out.String(), report.String(), logs.String())
		}
	})
	return code, out.String(), logs.String() + report.String(), l, runErr
}

// firstLine is the termination message's first line.
func firstLine(code exitcode.Code, err error) string {
	line, _, _ := strings.Cut(TerminationMessage(code, err), "\n")
	return line
}

// recordScript writes a podmpi-rsh failure record the way the client does
// (a JSON file in $PODMPI_RSH_FAILURE_DIR), then runs then.
func recordScript(then string) []string {
	rec := `{"time":"2025-01-02T03:04:05Z","host":"127.0.0.1","port":2222,"phase":"tcp-refused",` +
		`"cause":"dial tcp 127.0.0.1:2222: connect: connection refused","hint":"nothing listens on port 2222 of 127.0.0.1","daemon":"orted","launch":true,` +
		`"line":"127.0.0.1:2222: tcp-refused: ...","pid":42}`
	return []string{"sh", "-c", `test -d "$` + "PODMPI_RSH_FAILURE_DIR" + `" || exit 99; printf '%s\n' '` + rec + `' > "$PODMPI_RSH_FAILURE_DIR/42-1.json"; ` + then}
}

func TestLaunchFailureStopsAHangingMPIRun(t *testing.T) {
	a := startAgent(t)
	start := time.Now()
	code, _, logs, _, err := runJob(t, a.port, nil, recordScript("exec sleep 60")...)
	if code != exitcode.LaunchFailed {
		t.Fatalf("exit %d (%v), want %d", code, err, exitcode.LaunchFailed)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %v", took)
	}
	first := firstLine(code, err)
	for _, want := range []string{"root cause: podmpi-rsh could not start orted on 127.0.0.1:2222: tcp-refused", "hint: nothing listens on port 2222"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line of the termination message lacks %q:\n%s", want, first)
		}
	}
	msg := TerminationMessage(code, err)
	if !strings.Contains(msg, "exit code 73") || !strings.Contains(msg, "did not exit within --diagnosis.launch-grace=300ms") {
		t.Errorf("termination message:\n%s", msg)
	}
	if !strings.Contains(logs, `level=ERROR msg="podmpi-rsh could not start an MPI daemon" host=127.0.0.1 port=2222 phase=tcp-refused`) ||
		!strings.Contains(logs, "stopping it") {
		t.Errorf("log lacks the record and the stop:\n%s", logs)
	}
}

func TestLaunchFailureMPIRunExitsOnItsOwn(t *testing.T) {
	a := startAgent(t)
	code, _, _, l, err := runJob(t, a.port, nil, recordScript("exit 1")...)
	if code != 1 {
		t.Fatalf("exit %d (%v), want mpirun's own 1", code, err)
	}
	if first := firstLine(code, err); !strings.Contains(first, "root cause: podmpi-rsh could not start orted on 127.0.0.1:2222") {
		t.Errorf("first line: %s", first)
	}
	if v := testutil.ToFloat64(l.m.RootCause.WithLabelValues(postmortem.CauseLaunch)); v != 1 {
		t.Errorf("podmpi_launcher_root_cause{cause=launch} = %v", v)
	}
}

func TestDiagnosisNamesTheOOMKill(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindOOMKill, Rank: 3, PID: 77, Comm: "train", ExitCode: -1, Signal: "SIGKILL",
		RSSBytes: 150 << 20, Memory: &api.Memory{Version: 1, LimitBytes: 200 << 20, UsageBytes: 200 << 20, PeakBytes: 200 << 20, OOMKills: 1, AtLimit: true}})
	code, _, logs, _, err := runJob(t, a.port, nil, "sh", "-c", "exit 137")
	if code != 137 {
		t.Fatalf("exit %d, want mpirun's 137 passed through", code)
	}
	first := firstLine(code, err)
	for _, want := range []string{"OOM", "rank 3 on 127.0.0.1", "memory limit of 200 MiB"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line lacks %q: %s", want, first)
		}
	}
	if !strings.Contains(TerminationMessage(code, err), "exit code 137") || !strings.Contains(logs, "level=ERROR msg=\"root cause: OOM: rank 3") {
		t.Errorf("error %v; log:\n%s", err, logs)
	}
	if !strings.Contains(logs, "== root cause: OOM") {
		t.Errorf("report lacks the root cause:\n%s", logs)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.since) == 0 || a.since[0] == "" {
		t.Fatalf("the agent was asked %v, want ?since=<the run's start>", a.since)
	}
	if since, err := time.Parse(time.RFC3339Nano, a.since[0]); err != nil || time.Since(since) > time.Minute {
		t.Errorf("since = %q (%v)", a.since[0], err)
	}
}

// TestSlowAgentIsNotGone: an agent that answers after longer than one
// request of the watch may take (its pod busy: a rank just used all its
// memory) is asked within the whole --diagnosis.timeout, and its account
// names the cause; it is not called gone.
func TestSlowAgentIsNotGone(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindOOMKill, Rank: 3, PID: 77, Comm: "train", ExitCode: -1, Signal: "SIGKILL",
		Memory: &api.Memory{Version: 1, LimitBytes: 200 << 20, UsageBytes: 200 << 20, PeakBytes: 200 << 20, OOMKills: 1, AtLimit: true}})
	a.mu.Lock()
	a.stall = askTimeout + 500*time.Millisecond
	a.mu.Unlock()
	code, _, _, _, err := runJob(t, a.port, func(c *Config) { c.DiagnosisTimeout = 2 * askTimeout }, "sh", "-c", "exit 137")
	if first := firstLine(code, err); !strings.Contains(first, "OOM: rank 3 on 127.0.0.1") {
		t.Errorf("first line: %s; want the slow agent's OOM kill", first)
	}
}

// TestSilentAgentIsAskedAgain: an agent whose first answer is lost (the
// request times out) is asked again within --diagnosis.timeout.
func TestSilentAgentIsAskedAgain(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindRankExit, Rank: 1, PID: 7, Comm: "train", ExitCode: -1, Signal: "SIGSEGV"})
	l, _ := New(Config{WorkerWebPort: a.port, ProbeParallel: 4})
	w := &watch{l: l, since: time.Now().Add(-time.Minute), client: http.DefaultClient}
	s := &workerState{host: "127.0.0.1"}
	w.workers = []*workerState{s}
	a.mu.Lock()
	a.stall = time.Second
	a.mu.Unlock()
	// A budget shorter than the stall for the first request: it fails.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	w.askAll(ctx, time.Second, time.Second, time.Time{})
	cancel()
	if s.err == nil || s.events != nil {
		t.Fatalf("first ask: err %v events %v; want a timeout", s.err, s.events)
	}
	if want := "connected to 127.0.0.1:" + strconv.Itoa(a.port) + ", request sent, no response"; !strings.Contains(s.err.Error(), want) {
		t.Errorf("first ask: %v; want how far it got: %q", s.err, want)
	}
	w.askUntilAnswered(5 * time.Second)
	if s.err != nil || s.events == nil || len(s.events.Events) != 1 || a.asks.Load() < 2 {
		t.Fatalf("after asking again: err %v events %+v asks %d", s.err, s.events, a.asks.Load())
	}
}

func TestDiagnosisGoneWorker(t *testing.T) {
	port := sshtest.FreePort(t)
	start := time.Now()
	code, _, _, _, err := runJob(t, port, func(c *Config) { c.DiagnosisTimeout = time.Minute }, "sh", "-c", "exit 1")
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	// Nothing at the address is settled at once: it is not asked again
	// until the diagnosis timeout.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the run took %s: a refused worker-agent was asked until --diagnosis.timeout", took)
	}
	// A refused connection says nothing is there now, not that the pod is
	// gone: the worker is named for what was seen.
	first := firstLine(code, err)
	for _, want := range []string{"worker 127.0.0.1 did not answer", "port " + strconv.Itoa(port), "connection refused", "kubectl describe pod"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line lacks %q: %s", want, first)
		}
	}
}

func TestDiagnosisFromMPIRunOutput(t *testing.T) {
	a := startAgent(t)
	out := "mpirun noticed that process rank 1 with PID 0 on node 127.0.0.1 exited on signal 11 (Segmentation fault).\n"
	code, got, _, _, err := runJob(t, a.port, nil, "sh", "-c", "printf '%s' '"+out+"' >&2; exit 139")
	if code != 139 {
		t.Fatalf("exit %d", code)
	}
	if got != out {
		t.Errorf("mpirun's output changed on its way: %q", got)
	}
	if first := firstLine(code, err); !strings.Contains(first, "rank 1 on 127.0.0.1 died of signal 11 (SIGSEGV") {
		t.Errorf("first line: %s", first)
	}
}

func TestWatchSeesAWorkerStopAnswering(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindRankExit, Rank: 0, PID: 9, Signal: "SIGBUS", ExitCode: -1, Message: "rank 0 died"})
	gone := filepath.Join(t.TempDir(), "agent-gone")
	go func() {
		// Once the agent has been asked, it goes away for good, and mpirun
		// is told so (the marker file).
		if !a.waitAsked(30 * time.Second) {
			return // the test fails on its own: nothing asked the agent
		}
		a.srv.Close()
		_ = os.WriteFile(gone, nil, 0o644)
	}()
	// mpirun fails a second after the agent went away: the watch (every
	// 200ms) has seen it fail to answer twice by then. Within the grace,
	// mpirun's own exit stands.
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) {
		c.DiagnosisWatch, c.LaunchGrace = 200*time.Millisecond, 20*time.Second
	}, "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; sleep 1; exit 7`, gone)
	if code != 7 {
		t.Fatalf("exit %d (%v), want 7", code, err)
	}
	if !strings.Contains(logs, "level=WARN msg=\"a worker-agent stopped answering while mpirun runs") {
		t.Errorf("log lacks the worker's silence at WARN:\n%s", logs)
	}
	if strings.Contains(logs, "a worker's pod is gone while mpirun runs") {
		t.Errorf("a closed port was taken for a gone pod:\n%s", logs)
	}
	first := firstLine(code, err)
	if !strings.Contains(first, "rank 0 on 127.0.0.1 died of signal 7 (SIGBUS") {
		t.Errorf("what the agent said before it went quiet is not the root cause: %s", first)
	}
	if msg := TerminationMessage(code, err); !strings.Contains(msg, "also: worker 127.0.0.1 did not answer") || !strings.Contains(msg, " UTC") {
		t.Errorf("termination message:\n%s", msg)
	}
}

// TestUnreachableWorkerIsNotStopped: a worker-agent that stops answering
// (refused, as a restarting pod or a partition's lost neighbour entry
// gives) for many rounds of the watch, then answers again, is a warning:
// mpirun runs on to its own end, and nothing is logged at ERROR (what the
// shipped alerts page on).
func TestUnreachableWorkerIsNotStopped(t *testing.T) {
	a := startAgent(t)
	ln := a.pause(t)
	back := filepath.Join(t.TempDir(), "back")
	go func() {
		time.Sleep(time.Second) // 10 rounds of the watch without an answer
		a.resume(ln)
		_ = os.WriteFile(back, nil, 0o644)
	}()
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) {
		c.DiagnosisWatch, c.LaunchGrace = 100*time.Millisecond, 100*time.Millisecond
	}, "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; sleep 0.5`, back)
	if code != 0 {
		t.Fatalf("exit %d (%v), want mpirun's own 0: a worker that did not answer for a while stopped the job", code, err)
	}
	for _, want := range []string{"level=WARN msg=\"a worker-agent stopped answering", "a worker-agent answers again"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("an ERROR record for a worker that was only unreachable:\n%s", logs)
	}
}

// TestNameGoneIsNotProof: a worker's name leaves DNS while mpirun runs,
// as a pod that is only not Ready leaves a headless Service without
// publishNotReadyAddresses (mpi-operator's default; a CPU-starved agent
// fails the shipped readiness probe within seconds). The watch asks the
// address the name had: the same agent answering there is alive, and the
// job runs to its end. With nothing there either it is still no proof
// (a NotReady pod cut off looks the same): the job is left to mpirun,
// and the diagnosis names what was seen. Both used to stop mpirun (exit
// 74) after two rounds.
func TestNameGoneIsNotProof(t *testing.T) {
	t.Run("agent-answers", func(t *testing.T) {
		a := startAgent(t)
		dns := newNames(map[string]string{"w-1.job": "127.0.0.1"})
		go func() {
			if !a.waitAsked(30 * time.Second) {
				return // the test fails on its own: nothing asked the agent
			}
			dns.remove("w-1.job")
		}()
		code, _, logs, _, err := runJob(t, a.port, func(c *Config) {
			c.DiagnosisWatch = 200 * time.Millisecond
			c.Discovery.Workers = []string{"w-1.job=2"}
			c.Resolver = dns
		}, "sleep", "3")
		if code != exitcode.OK {
			t.Fatalf("exit %d (%v), want 0: a name gone from DNS stopped the job while its agent answered", code, err)
		}
		if !strings.Contains(logs, "level=WARN msg=\"a worker's name is missing from DNS, but its worker-agent, the same one, answers") {
			t.Errorf("log lacks the missing name at WARN:\n%s", logs)
		}
		if strings.Contains(logs, "level=ERROR") {
			t.Errorf("an ERROR record for a worker whose agent answers:\n%s", logs)
		}
	})
	t.Run("nothing-there", func(t *testing.T) {
		a := startAgent(t)
		dns := newNames(map[string]string{"w-1.job": "127.0.0.1"})
		away := filepath.Join(t.TempDir(), "away")
		go func() {
			if !a.waitAsked(30 * time.Second) {
				return // the test fails on its own: nothing asked the agent
			}
			a.mu.Lock()
			a.srv.Close()
			a.mu.Unlock()
			dns.remove("w-1.job")
			_ = os.WriteFile(away, nil, 0o644)
		}()
		// mpirun fails on its own 2 s (10 rounds of the watch, and more
		// than the grace) after the name and the agent went away.
		code, _, logs, _, err := runJob(t, a.port, func(c *Config) {
			c.DiagnosisWatch = 200 * time.Millisecond
			c.Discovery.Workers = []string{"w-1.job=2"}
			c.Resolver = dns
		}, "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; sleep 2; exit 5`, away)
		if code != 5 {
			t.Fatalf("exit %d (%v), want mpirun's own 5: the launcher stopped it on a guess", code, err)
		}
		if strings.Contains(logs, "a worker's pod is gone while mpirun runs") {
			t.Errorf("a name gone and a closed port were taken for proof:\n%s", logs)
		}
		first := firstLine(code, err)
		for _, want := range []string{"worker w-1.job did not answer and its name is missing from DNS", "nothing answers at the address it had (127.0.0.1) either", "connection refused", "deleted, or is not Ready and cut off"} {
			if !strings.Contains(first, want) {
				t.Errorf("first line lacks %q: %s", want, first)
			}
		}
	})
}

// TestReplacedWorkerIsGone: another agent, younger than the run, answers
// under the worker's name (the pod was deleted and recreated with the same
// hostname, as both operators do), and runs no MPI daemon of the launcher,
// which the agent before it did: the worker that ran the daemon is gone.
func TestReplacedWorkerIsGone(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindSessionExit, ExitCode: 0, Rank: -1, Message: "first agent's"})
	a.daemonOf, a.runsDaemon = filepath.Join(t.TempDir(), "instance"), true
	go func() {
		if !waitFor(30*time.Second, func() bool { return a.daemonAnswers.Load() > 0 }) {
			return // the test fails on its own: the agent never said it ran the daemon
		}
		a.restart()
	}()
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) { c.DiagnosisWatch = 200 * time.Millisecond }, daemonScript(a.daemonOf, "sleep 30")...)
	if code != exitcode.WorkerGone {
		t.Fatalf("exit %d (%v), want %d", code, err, exitcode.WorkerGone)
	}
	if first := firstLine(code, err); !strings.HasPrefix(first, "root cause: worker 127.0.0.1 is gone: its pod was replaced while the job ran") {
		t.Errorf("first line: %s", first)
	}
	if !strings.Contains(logs, "another worker-agent answers under a worker's name") || !strings.Contains(logs, "the agent before it ran this launcher's MPI daemon") {
		t.Errorf("log lacks the replacement and why:\n%s", logs)
	}
}

// TestAgentRestartedBeforeTheDaemonIsNotReplaced: the worker-agent
// restarts after mpirun started but before the job's daemon reached it;
// the new agent, younger than the run, answers first without the daemon,
// then runs it. Nothing was replaced: the job goes on and ends as mpirun
// does (it was stopped as gone, exit 74).
func TestAgentRestartedBeforeTheDaemonIsNotReplaced(t *testing.T) {
	a := startAgent(t)
	// The job ends when the new agent has said it runs the daemon.
	command := a.restartMidJob(t, "", func() {
		a.setDaemon(true) // the daemon reaches the new agent
		waitFor(30*time.Second, func() bool { return a.daemonAnswers.Load() > 0 })
	})
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) { c.DiagnosisWatch = 200 * time.Millisecond }, command...)
	if code != 0 || err != nil {
		t.Fatalf("exit %d (%v), want 0: the agent that runs the daemon was taken for a replacement", code, err)
	}
	if strings.Contains(logs, "another worker-agent answers under a worker's name") {
		t.Errorf("a replacement was logged:\n%s", logs)
	}
	for _, want := range []string{"runs no MPI daemon of this launcher yet", "runs this launcher's MPI daemon: it restarted before the daemon reached it"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

// TestUnsureAgentIsReplacedWhenMPIRunEnds: an agent younger than the run
// that never runs the launcher's daemon, while nothing says the one before
// it did, does not stop mpirun; when mpirun fails, it is a replacement.
func TestUnsureAgentIsReplacedWhenMPIRunEnds(t *testing.T) {
	a := startAgent(t)
	// The job fails after two more rounds of questions (it is not stopped).
	command := a.restartMidJob(t, "exit 3", func() {
		n := a.asks.Load()
		waitFor(30*time.Second, func() bool { return a.asks.Load() > n+1 })
	})
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) { c.DiagnosisWatch = 200 * time.Millisecond }, command...)
	if code != 3 {
		t.Fatalf("exit %d (%v), want mpirun's 3: an unsure agent stopped it", code, err)
	}
	if first := firstLine(code, err); !strings.HasPrefix(first, "root cause: worker 127.0.0.1 is gone: its pod was replaced while the job ran") {
		t.Errorf("first line: %s", first)
	}
	if !strings.Contains(logs, "mpirun has ended and this agent never ran its MPI daemon") {
		t.Errorf("log lacks why:\n%s", logs)
	}
}

// TestOlderAgentIsNotReplaced: an agent that says nothing of its start
// (older than the field) is never taken for a replacement.
func TestOlderAgentIsNotReplaced(t *testing.T) {
	a := startAgent(t)
	a.mu.Lock()
	a.started = time.Time{}
	a.mu.Unlock()
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) { c.DiagnosisWatch = 100 * time.Millisecond }, "sh", "-c", "sleep 0.6; exit 3")
	if code != 3 {
		t.Fatalf("exit %d (%v), want 3", code, err)
	}
	if strings.Contains(logs, "another worker-agent") || strings.Contains(firstLine(code, err), "gone") {
		t.Errorf("an agent without a start time was taken for a replacement:\n%s", logs)
	}
}

func TestNothingThere(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.DNSError{Err: "no such host", Name: "w-1.job", IsNotFound: true}, true},
		{&net.DNSError{Err: "server misbehaving", Name: "w-1.job", IsTemporary: true}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}, false},
		{errors.New("no answer within 2s"), false},
		{nil, false},
	} {
		if got := nothingThere(tc.err); got != tc.want {
			t.Errorf("nothingThere(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestSuccessAsksNobody(t *testing.T) {
	a := startAgent(t)
	code, _, _, l, err := runJob(t, a.port, nil, "sh", "-c", "exit 0")
	if code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if n := a.asks.Load(); n != 0 {
		t.Errorf("the agent was asked %d times after a successful run", n)
	}
	if strings.Contains(TerminationMessage(code, err), "root cause") {
		t.Errorf("a successful run has a root cause")
	}
	if n := testutil.CollectAndCount(l.m.RootCause); n != 0 {
		t.Errorf("root cause metric has %d series after a success", n)
	}
}

// TestStoppedIsNamed: the launcher's context ends (SIGTERM) while mpirun
// runs and nothing failed before: the stop is the root cause.
func TestStoppedIsNamed(t *testing.T) {
	a := startAgent(t)
	started := filepath.Join(t.TempDir(), "started")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		for {
			if _, err := os.Stat(started); err == nil || ctx.Err() != nil {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var out bytes.Buffer
	l, _ := New(Config{
		Discovery: discovery.Spec{Workers: []string{"127.0.0.1=1"}, Self: "x"}, DiscoveryTimeout: 5 * time.Second,
		Implementation: "openmpi4", WorkerWebPort: a.port, SkipProbe: true, Slots: 1,
		HostfilePath: filepath.Join(t.TempDir(), "hostfile"), TempDir: t.TempDir(), Executable: "/bin/true",
		KillGrace: 500 * time.Millisecond, Command: []string{"sh", "-c", `: > "$0"; exec sleep 30`, started}, Stdout: &out, Stderr: &out,
	})
	code, err := l.Run(ctx)
	if code == 0 {
		t.Fatalf("exit 0 after the stop")
	}
	if first := firstLine(code, err); !strings.Contains(first, "the launcher received SIGTERM or SIGINT and stopped sh") {
		t.Errorf("first line: %s", first)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
}

// TestRunJobNamesTheRootCause: the job's one-line error and the
// termination log file both start with the root cause.
func TestRunJobNamesTheRootCause(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindOOMKill, Rank: 1, PID: 7, ExitCode: -1,
		Memory: &api.Memory{Version: 2, LimitBytes: 1 << 30, PeakBytes: 1 << 30, AtLimit: true}})
	termLog := filepath.Join(t.TempDir(), "termination-log")
	var out bytes.Buffer
	code, err := RunJob(t.Context(), Config{
		Discovery: discovery.Spec{Workers: []string{"127.0.0.1=1"}, Self: "x"}, DiscoveryTimeout: 5 * time.Second,
		Implementation: "openmpi4", WorkerWebPort: a.port, SkipProbe: true, Slots: 1,
		HostfilePath: filepath.Join(t.TempDir(), "hostfile"), TempDir: t.TempDir(), Executable: "/bin/true",
		TerminationLog: termLog, Command: []string{"sh", "-c", "exit 137"}, Stdout: &out, Stderr: &out,
	})
	if code != 137 || err == nil || !strings.HasPrefix(err.Error(), "sh exited with 137; root cause: OOM: rank 1 on 127.0.0.1") {
		t.Fatalf("RunJob = %d, %v", code, err)
	}
	b, rerr := os.ReadFile(termLog)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !strings.HasPrefix(string(b), "root cause: OOM: rank 1 on 127.0.0.1 was killed by the kernel's OOM killer at its container's memory limit of 1 GiB") {
		t.Errorf("termination log:\n%s", b)
	}
}

// TestProvisionalEventsAreReplaced: what an agent had not recorded yet is
// replaced by its next answer, not counted twice.
func TestProvisionalEventsAreReplaced(t *testing.T) {
	a := startAgent(t)
	l, _ := New(Config{WorkerWebPort: a.port, ProbeParallel: 4})
	w := &watch{l: l, since: time.Now().Add(-time.Minute), client: http.DefaultClient}
	s := &workerState{host: "127.0.0.1"}
	w.workers = []*workerState{s}
	mem := &api.Memory{LimitBytes: 1 << 20, AtLimit: true}
	a.set(api.Event{Time: time.Now(), Kind: api.KindOOMKill, Rank: -1, ExitCode: -1, Memory: mem, Provisional: true})
	w.askAll(t.Context(), 5*time.Second, askTimeout, time.Time{})
	a.set(api.Event{Seq: 4, Time: time.Now(), Kind: api.KindOOMKill, Rank: 2, PID: 8, ExitCode: -1, Memory: mem})
	w.askAll(t.Context(), 5*time.Second, askTimeout, time.Time{})
	w.askAll(t.Context(), 5*time.Second, askTimeout, time.Time{})
	if len(s.events.Events) != 1 || s.events.Events[0].Rank != 2 || s.events.Events[0].Provisional {
		t.Fatalf("events = %+v; want the recorded OOM kill once", s.events.Events)
	}
}

// TestOOMRecordedAfterAnAnswerIsKept: an agent records an OOM kill once it
// has named the victim, up to a few seconds after the counter rose, with
// the time the counter rose. Asked in between, it answered with the kill
// provisional; its next answer has the recorded kill, whose time is before
// the first answer, and the merge keeps it (paging by time lost it, and the
// diagnosis read a SIGKILL of unknown origin).
func TestOOMRecordedAfterAnAnswerIsKept(t *testing.T) {
	a := startAgent(t)
	a.filter = true
	l, _ := New(Config{WorkerWebPort: a.port, ProbeParallel: 4})
	w := &watch{l: l, since: time.Now().Add(-time.Minute), client: http.DefaultClient}
	s := &workerState{host: "127.0.0.1"}
	w.workers = []*workerState{s}
	rose := time.Now().Add(-1500 * time.Millisecond) // the OOM counter rose
	mem := &api.Memory{Version: 2, LimitBytes: 1 << 30, AtLimit: true, OOMKills: 1}
	session := api.Event{Seq: 1, Time: rose.Add(-time.Second), Kind: api.KindSessionExit, Rank: -1, ExitCode: 1, Session: "c1/s1"}
	a.set(session, api.Event{Time: rose, Kind: api.KindOOMKill, Rank: -1, ExitCode: -1, Signal: "SIGKILL", Memory: mem, Provisional: true})
	w.askAll(t.Context(), 5*time.Second, askTimeout, time.Time{})
	if s.events == nil || len(s.events.Events) != 2 {
		t.Fatalf("first answer merged as %+v; want the session exit and the provisional OOM kill", s.events)
	}
	a.set(session, api.Event{Seq: 2, Time: rose, Kind: api.KindOOMKill, Rank: 2, PID: 8, ExitCode: -1, Signal: "SIGKILL", Memory: mem})
	w.askAll(t.Context(), 5*time.Second, askTimeout, time.Time{})
	var ooms []api.Event
	for _, e := range s.events.Events {
		if e.Kind == api.KindOOMKill {
			ooms = append(ooms, e)
		}
	}
	if len(ooms) != 1 || ooms[0].Provisional || ooms[0].Rank != 2 {
		t.Fatalf("OOM kills merged: %+v; want rank 2's, recorded, once", ooms)
	}
	d := postmortem.Decide(postmortem.Input{Outcome: postmortem.Outcome{Program: "mpirun", ExitCode: 137},
		Workers: []postmortem.Worker{{Host: s.host, Events: s.events}}})
	if d.Cause() != postmortem.CauseOOM {
		t.Errorf("diagnosis %q, want the OOM kill", d.Summary())
	}
}

// TestTimeoutWithoutFinding: a hang leaves nothing in the accounts; the
// timeout is the message, without a "root cause unknown" line before it.
func TestTimeoutWithoutFinding(t *testing.T) {
	a := startAgent(t)
	code, _, _, _, err := runJob(t, a.port, func(c *Config) { c.MPIRunTimeout = 500 * time.Millisecond }, "sleep", "30")
	if code != exitcode.MPIRunTimeout {
		t.Fatalf("exit %d (%v)", code, err)
	}
	if msg := TerminationMessage(code, err); strings.Contains(msg, "root cause") || !strings.HasPrefix(msg, "podmpi launcher failed (exit code 69)") {
		t.Errorf("termination message:\n%s", msg)
	}
	if a.asks.Load() == 0 {
		t.Errorf("the workers were not asked after the timeout")
	}
}

// TestOtherCommandFailureDoesNotStop: a record about something that is not
// an MPI daemon is logged and named, but mpirun is left to report it.
func TestOtherCommandFailureDoesNotStop(t *testing.T) {
	a := startAgent(t)
	script := recordScript("sleep 1; exit 4")
	script[2] = strings.Replace(script[2], `"daemon":"orted","launch":true`, `"daemon":"hostname"`, 1)
	code, _, logs, _, err := runJob(t, a.port, nil, script...)
	if code != 4 {
		t.Fatalf("exit %d (%v), want the command's own 4: it was stopped", code, err)
	}
	if !strings.Contains(logs, "podmpi-rsh could not run a remote command") || strings.Contains(logs, "stopping it") {
		t.Errorf("log:\n%s", logs)
	}
}

// TestReplacedAtFirstAnswer: an agent first asked after mpirun started,
// younger than the time since the probe reached every agent, is followed
// when it runs this launcher's MPI daemon (it restarted before the daemon
// reached it); without it, it waits (unsure), and is a replacement once
// mpirun has ended, or at once when the agent before it ran the daemon.
// Without a probe nothing says how old it must be.
func TestReplacedAtFirstAnswer(t *testing.T) {
	now := time.Now()
	l := &Launcher{log: slog.New(slog.DiscardHandler), instance: launcherid.New("", "tj-launcher-0-0", now.Add(-time.Minute))}
	young := api.Events{Started: now.Add(-time.Second), UptimeSeconds: 1}
	old := api.Events{Started: now.Add(-3 * time.Second), UptimeSeconds: 3}
	withDaemon := func(ev api.Events, id string) api.Events {
		ev.Launchers = []api.LauncherSessions{{Launcher: api.Launcher{Instance: id}, Sessions: 2, Daemons: 1}}
		return ev
	}
	probed := func() *watch { return &watch{l: l, upBefore: now.Add(-3 * time.Second)} }

	w, s := probed(), &workerState{}
	if w.counts(s, young, now, 10*time.Millisecond) || !s.replacedAt.IsZero() || !s.unsure.Equal(young.Started) {
		t.Errorf("an agent up 1s, 3s after the probe, without the daemon: replacedAt %v unsure %v, want unsure", s.replacedAt, s.unsure)
	}
	if w.counts(s, withDaemon(young, "another-launcher"), now, 10*time.Millisecond) || !s.replacedAt.IsZero() {
		t.Errorf("another launcher's daemon is taken for this one's")
	}
	if !w.counts(s, withDaemon(young, l.instance.ID), now, 10*time.Millisecond) || !s.replacedAt.IsZero() || !s.started.Equal(young.Started) || !s.unsure.IsZero() {
		t.Errorf("an agent younger than the run that runs the daemon is not followed: %+v", s)
	}
	if !w.counts(s, young, now, 10*time.Millisecond) {
		t.Errorf("the agent followed, asked again, does not count")
	}

	w, s = probed(), &workerState{}
	w.counts(s, young, now, 10*time.Millisecond)
	w.ended = true
	if w.counts(s, young, now, 10*time.Millisecond) || s.replacedAt.IsZero() {
		t.Errorf("an agent that never ran the daemon is not a replacement once mpirun has ended")
	}

	w, s = probed(), &workerState{}
	if !w.counts(s, withDaemon(old, l.instance.ID), now, 10*time.Millisecond) || !s.daemonSeen {
		t.Errorf("an agent up since the probe, with the daemon, is not followed")
	}
	if w.counts(s, young, now, 10*time.Millisecond) || s.replacedAt.IsZero() {
		t.Errorf("another agent without the daemon that the one before ran is not a replacement")
	}

	if w, s := probed(), (&workerState{}); !w.counts(s, old, now, 10*time.Millisecond) || !s.started.Equal(old.Started) {
		t.Errorf("an agent up since the probe is not followed")
	}
	if w, s := (&watch{l: l}), (&workerState{}); !w.counts(s, young, now, 10*time.Millisecond) || !s.unsure.IsZero() {
		t.Errorf("without a probe, a young agent is not followed")
	}
}

// TestAgentFollowedAnewIsAskedFromItsFirstEvent: the agent followed after
// another answered before it numbers its events from 1: its first answer,
// paged by the other's numbers, is asked again from its first event.
func TestAgentFollowedAnewIsAskedFromItsFirstEvent(t *testing.T) {
	a := startAgent(t)
	a.filter = true
	a.set(api.Event{Seq: 7, Time: time.Now(), Kind: api.KindSessionExit, Rank: -1, ExitCode: 0, Message: "the first agent's"})
	w, s := dialWatch(t, a, "127.0.0.1", nil, func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil })
	w.l.instance = launcherid.New("", "tj-launcher-0-0", time.Now().Add(-time.Minute))
	w.upBefore = time.Now().Add(-time.Second)
	a.daemonOf = filepath.Join(t.TempDir(), "instance")
	if err := os.WriteFile(a.daemonOf, []byte(w.l.instance.Value()), 0o600); err != nil {
		t.Fatal(err)
	}
	w.askAll(t.Context(), 5*time.Second, 5*time.Second, time.Time{})
	if s.lastSeq != 7 || s.events == nil || len(s.events.Events) != 1 {
		t.Fatalf("first agent: lastSeq %d events %+v", s.lastSeq, s.events)
	}
	// It restarts; the new agent runs the daemon and has recorded one
	// rank's end, its event 1.
	a.restart()
	a.setDaemon(true)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindRankExit, Rank: 1, PID: 9, Comm: "train", ExitCode: -1, Signal: "SIGSEGV"})
	w.askAll(t.Context(), 5*time.Second, 5*time.Second, time.Time{})
	if !s.replacedAt.IsZero() || s.lastSeq != 1 || len(s.events.Events) != 2 || s.events.Events[1].Kind != api.KindRankExit {
		t.Fatalf("after the agent followed anew: replacedAt %v lastSeq %d events %+v", s.replacedAt, s.lastSeq, s.events.Events)
	}
}

// TestGoneAtFirstList: the launcher can start mpirun before its first list
// of the job's pods. A first list, made after the probe found every agent
// up, that shows a worker's pod Pending (a new pod under its name) or
// being deleted is proof that the daemon's pod is gone; a list made before
// the probe (a late worker not started yet) and a running pod are not.
func TestGoneAtFirstList(t *testing.T) {
	now := time.Now()
	pending := kube.PodState{Name: "tj-node-0-1-new", Hostname: "tj-node-0-1", UID: "new", Phase: corev1.PodPending, Why: "is Pending"}
	running := kube.PodState{Name: "tj-node-0-1-old", Hostname: "tj-node-0-1", UID: "old", Phase: corev1.PodRunning, Ready: true}
	deleting := running
	deleting.Deleting, deleting.Why = true, "is being deleted"
	// A sidecar worker-agent answers while a later init container keeps
	// the pod Pending: the same pod, not a new one.
	sidecar := pending
	sidecar.Started = true
	for _, c := range []struct {
		name     string
		probed   bool
		listedAt time.Time
		pod      kube.PodState
		gone     string
	}{
		{"pending-after-probe", true, now, pending, "the pod under its name, tj-node-0-1-new, is Pending"},
		{"pending-before-probe", true, now.Add(-5 * time.Second), pending, ""},
		{"pending-without-probe", false, now, pending, ""},
		{"running", true, now, running, ""},
		{"pending-with-a-container-running", true, now, sidecar, ""},
		{"deleting", false, now, deleting, "its pod tj-node-0-1-old is being deleted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, _ := New(Config{})
			l.kv.pods, l.kv.listed = kube.Pods{At: c.listedAt, ByHost: map[string]kube.PodState{"tj-node-0-1": c.pod}}, true
			s := &workerState{host: "tj-node-0-1.tj"}
			w := &watch{l: l, workers: []*workerState{s}}
			if c.probed {
				w.upBefore = now.Add(-time.Second)
			}
			w.checkPods(context.Background())
			if c.gone == "" && s.podEnded != "" || !strings.HasPrefix(s.podEnded, c.gone) {
				t.Errorf("podEnded = %q, want %q", s.podEnded, c.gone)
			}
			if s.pod == nil || s.pod.UID != c.pod.UID {
				t.Errorf("the pod first seen is %+v, want %s", s.pod, c.pod.Name)
			}
		})
	}
}

// dialWatch is a watch over one worker, host, whose agent is a, with the
// launcher's own dialer and lookup as given.
func dialWatch(t *testing.T, a *fakeAgent, host string, known []string, lookup func(context.Context, string) ([]string, error)) (*watch, *workerState) {
	t.Helper()
	l, _ := New(Config{WorkerWebPort: a.port, ProbeParallel: 4})
	w := &watch{l: l, since: time.Now().Add(-time.Minute), lookupHost: lookup, known: map[string][]string{}}
	if known != nil {
		w.known[host] = known
	}
	tr := &http.Transport{DialContext: w.dial, DisableKeepAlives: true}
	w.client = &http.Client{Transport: tr}
	s := &workerState{host: host}
	w.workers = []*workerState{s}
	return w, s
}

// TestStalledLookupUsesTheKnownAddress: a worker's name that does not
// resolve in time (a lost DNS packet costs the resolver 5 s) is asked at
// the address it resolved to before, the pod that ran the job.
func TestStalledLookupUsesTheKnownAddress(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindRankExit, Rank: 1, PID: 7, Comm: "train", ExitCode: -1, Signal: "SIGSEGV"})
	stalled := func(ctx context.Context, _ string) ([]string, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	w, s := dialWatch(t, a, "w-0.example", []string{"127.0.0.1"}, stalled)
	start := time.Now()
	w.askAll(t.Context(), 10*time.Second, 10*time.Second, time.Time{})
	if s.err != nil || s.events == nil || len(s.events.Events) != 1 {
		t.Fatalf("err %v events %+v; want the account from the known address", s.err, s.events)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s: the stalled lookup was waited for", took)
	}

	// Without a known address the lookup is all there is: it times out.
	w, s = dialWatch(t, a, "w-1.example", nil, stalled)
	w.askAll(t.Context(), 2*time.Second, 2*time.Second, time.Time{})
	if s.err == nil || !strings.Contains(s.err.Error(), "looking up w-1.example") {
		t.Errorf("err %v; want a timeout while looking up the name", s.err)
	}
}

// TestNameGoneAsksTheLastAddress: a worker's name that no longer exists
// is asked at the address it resolved to before: the agent there answers
// (a pod that is not Ready leaves a headless Service), and a closed port
// there is nothing there, saying both. Without a known address the
// name's absence is all there is. A name that resolves is asked at its
// new address, which is remembered.
func TestNameGoneAsksTheLastAddress(t *testing.T) {
	a := startAgent(t)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindRankExit, Rank: 1, PID: 7, Comm: "train", ExitCode: -1, Signal: "SIGSEGV"})
	gone := func(context.Context, string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: "w-0.example", IsNotFound: true}
	}
	w, s := dialWatch(t, a, "w-0.example", []string{"127.0.0.1"}, gone)
	w.askAll(t.Context(), 5*time.Second, 5*time.Second, time.Time{})
	if s.err != nil || s.events == nil || len(s.events.Events) != 1 || s.nameGone != 1 {
		t.Fatalf("err %v events %v nameGone %d; want the account from the address the name had", s.err, s.events, s.nameGone)
	}

	closed := &fakeAgent{port: sshtest.FreePort(t)} // nothing listens there
	w, s = dialWatch(t, closed, "w-0.example", []string{"127.0.0.1"}, gone)
	w.askAll(t.Context(), 5*time.Second, 5*time.Second, time.Time{})
	if s.events != nil || !nameNotFound(s.err) || !errors.Is(s.err, syscall.ECONNREFUSED) || !nothingThere(s.err) {
		t.Fatalf("err %v events %v; want no such host and connection refused", s.err, s.events)
	}
	if want := "no such host; nothing answers at the address it had (127.0.0.1) either: "; !strings.Contains(s.err.Error(), want) {
		t.Errorf("err %q lacks %q", s.err, want)
	}

	w, s = dialWatch(t, a, "w-0.example", nil, gone)
	w.askAll(t.Context(), 5*time.Second, 5*time.Second, time.Time{})
	if s.events != nil || !nameNotFound(s.err) || strings.Contains(s.err.Error(), "address it had") {
		t.Fatalf("err %v events %v; want no such host alone", s.err, s.events)
	}

	found := func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	w, s = dialWatch(t, a, "w-0.example", []string{"192.0.2.1"}, found)
	w.askAll(t.Context(), 5*time.Second, 5*time.Second, time.Time{})
	if s.err != nil || s.events == nil {
		t.Fatalf("err %v; want the answer from the new address", s.err)
	}
	if got := w.known["w-0.example"]; len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("known = %v, want the new address", got)
	}
}

// TestBadRecordIsReadOnce: a record that cannot be parsed is warned about
// once and then skipped, not every poll for the rest of the run; the good
// records beside it are read in the order they were written.
func TestBadRecordIsReadOnce(t *testing.T) {
	var logs sshtest.Buffer
	l, err := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := &watch{l: l, failDir: t.TempDir(), read: map[string]bool{}}
	if err := os.WriteFile(filepath.Join(w.failDir, "00000000000000000001-7.json"), []byte(`{"time":`), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, host := range []string{"w-0", "w-1"} {
		if err := rsh.WriteFailureRecord(w.failDir, rsh.FailureRecord{Time: time.Unix(100+int64(i), 0), Host: host, Port: 2222,
			Phase: "tcp-refused", Daemon: "orted", Launch: true, PID: 9 - i}); err != nil {
			t.Fatal(err)
		}
	}
	daemons := 0
	for range 5 {
		daemons += w.readRecords()
	}
	if n := strings.Count(logs.String(), "reading podmpi-rsh failure records"); n != 1 {
		t.Errorf("%d warnings about the bad record, want 1:\n%s", n, logs.String())
	}
	if daemons != 2 || len(w.records) != 2 || w.records[0].Host != "w-0" {
		t.Errorf("daemons %d, records %+v; want w-0 then w-1", daemons, w.records)
	}
}

// TestRankOnTheLaunchersOwnPod: with the launcher's own entry in the
// hostfile (runLauncherAsNode) a rank runs beside it; when it exits
// non-zero, Open MPI names it without a host, and the launcher's account
// of its own pod, which saw that rank end, places it there. It used to be
// "rank 1 on an unknown worker".
func TestRankOnTheLaunchersOwnPod(t *testing.T) {
	a := startAgent(t)
	mpirun := `OMPI_COMM_WORLD_RANK=1 sh -c 'sleep 2; exit 3'; ` +
		`printf '%s\n' 'mpirun detected that one or more processes exited with non-zero status, thus causing' ` +
		`'the job to be terminated. The first process to do so was:' '' '  Process name: [[4242,1],1]' '  Exit code:    3' >&2; exit 3`
	code, _, logs, _, err := runJob(t, a.port, func(c *Config) {
		c.Discovery = discovery.Spec{Workers: []string{"127.0.0.1=2", "localhost=2"}, Self: "localhost"}
	}, "sh", "-c", mpirun)
	if code != 3 {
		t.Fatalf("exit %d (%v), want mpirun's 3", code, err)
	}
	if first := firstLine(code, err); !strings.Contains(first, "root cause: rank 1 on localhost (the launcher's own pod) (sh) exited with status 3") {
		t.Errorf("first line: %s", first)
	}
	if !strings.Contains(logs, "account of the pod started") {
		t.Errorf("the launcher kept no account of its own pod:\n%s", logs)
	}
}

// TestDiagnosisLeavesOutAnotherLaunchersEvents: the agent's account holds
// a rank of another launcher instance killed moments before this run
// started (its daemons ended as this launcher connected), and this run's
// rank 0 that exited 1: the root cause is this run's rank, and what was
// left out is logged at DEBUG with its host.
func TestDiagnosisLeavesOutAnotherLaunchersEvents(t *testing.T) {
	a := startAgent(t)
	a.daemonOf = filepath.Join(t.TempDir(), "instance")
	now := time.Now()
	a.set(
		api.Event{Seq: 1, Time: now.Add(-time.Second), Kind: api.KindRankExit, Rank: 1, PID: 7, Comm: "train", ExitCode: -1, Signal: "SIGKILL",
			Launcher: strings.Repeat("0a", 16)},
		api.Event{Seq: 2, Time: now, Kind: api.KindRankExit, Rank: 0, PID: 8, Comm: "train", ExitCode: 1, Launcher: thisLauncher},
	)
	var debug sshtest.Buffer
	code, _, _, _, err := runJob(t, a.port, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}, daemonScript(a.daemonOf, "exit 1")...)
	if code != 1 {
		t.Fatalf("exit %d (%v), want mpirun's 1", code, err)
	}
	if first := firstLine(code, err); !strings.Contains(first, "root cause: rank 0 on 127.0.0.1 (train) exited with status 1") ||
		strings.Contains(first, "SIGKILL") {
		t.Errorf("first line: %s; want this run's rank 0, not the other instance's rank 1", first)
	}
	if log := debug.String(); !strings.Contains(log, "level=DEBUG msg=\"the diagnosis left out a worker-agent's events of another launcher instance") ||
		!strings.Contains(log, "host=127.0.0.1 events=1") {
		t.Errorf("no DEBUG line naming the host and the count:\n%s", log)
	}
}
