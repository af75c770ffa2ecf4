package launcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/hostfile"
	"github.com/podmpi/podmpi/mpi"
)

// fixture is one loopback SSH server with the job's key, and an auth dir.
type fixture struct {
	authDir string
	port    int
	webPort int // a worker-agent /info on 127.0.0.1
}

func newFixture(t *testing.T, authorized bool, path string) fixture {
	t.Helper()
	job := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, job)
	client := job.Public()
	if !authorized {
		client = sshtest.NewKey(t).Public()
	}
	srv := sshtest.Start(t, sshtest.Options{
		HostKey:    job.Signer,
		Authorized: []ssh.PublicKey{client},
		Env:        []string{"PATH=" + path},
	})
	return fixture{authDir: dir, port: srv.Port, webPort: startInfo(t, cpuOnlyInfo)}
}

// fakeDaemonDir holds executables named like the MPI daemons.
func fakeDaemonDir(t *testing.T, names ...string) string {
	t.Helper()
	d := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(d, n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func baseConfig(f fixture, workers ...string) Config {
	return Config{
		Discovery:        discovery.Spec{Workers: workers, Self: "launcher-not-listed"},
		DiscoveryTimeout: 5 * time.Second,
		DefaultSlots:     1,
		WorkerWebPort:    f.webPort, // a CPU-only agent's default: the hostfile's slots stand
		Implementation:   "mpich",
		AuthDir:          f.authDir,
		SSHPort:          f.port,
		ProbeTimeout:     5 * time.Second,
	}
}

// startInfo serves a worker-agent /info on 127.0.0.1 answering body, and
// returns its port.
func startInfo(t *testing.T, body string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

const cpuOnlyInfo = `{"hostname":"w","slots":{"n":1,"source":"default"},"gpus":{"count":0,"source":"none"}}`

func TestPrepareWritesHostfileAndProbes(t *testing.T) {
	f := newFixture(t, true, fakeDaemonDir(t, "hydra_pmi_proxy")+":/usr/bin:/bin")
	cfg := baseConfig(f, "127.0.0.1=2", "localhost=3")
	cfg.HostfilePath = filepath.Join(t.TempDir(), "out", "hostfile")
	var report bytes.Buffer
	cfg.Report = &report
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Prepare(context.Background(), true)
	if err != nil {
		t.Fatalf("prepare: %v\nreport:\n%s", err, report.String())
	}
	got, err := os.ReadFile(cfg.HostfilePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "127.0.0.1:2\nlocalhost:3\n" {
		t.Fatalf("hostfile = %q", got)
	}
	if hostfile.TotalSlots(p.Hosts) != 5 || len(p.Results) != 2 {
		t.Fatalf("prepared %+v", p)
	}
	m := l.Metrics()
	for _, ph := range []string{PhaseDiscovery, PhaseDNSWait, PhaseSlots, PhaseHostfile, PhaseProbe} {
		if v := testutil.ToFloat64(m.PhaseSuccess.WithLabelValues(ph)); v != 1 {
			t.Errorf("phase %s success = %v", ph, v)
		}
	}
	if v := testutil.ToFloat64(m.WorkersReach); v != 2 {
		t.Errorf("reachable = %v", v)
	}
	if !strings.Contains(report.String(), "== probe (2/2 workers reachable)") {
		t.Errorf("report lacks the probe table:\n%s", report.String())
	}
}

func TestPrepareProbeFailureNamesHostAndPhase(t *testing.T) {
	for name, tc := range map[string]struct {
		authorized bool
		path       string
		phase      string
	}{
		"auth":           {false, "/usr/bin:/bin", "auth"},
		"missing-daemon": {true, t.TempDir(), "remote-command"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.authorized, tc.path)
			cfg := baseConfig(f, "127.0.0.1")
			cfg.Slots = 1
			cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
			l, _ := New(cfg)
			_, err := l.Prepare(context.Background(), true)
			var fl *Failure
			if !errors.As(err, &fl) || fl.Code != exitcode.ProbeFailed || fl.Phase != PhaseProbe {
				t.Fatalf("want probe failure, got %v", err)
			}
			if !strings.Contains(err.Error(), "127.0.0.1:") || !strings.Contains(err.Error(), ": "+tc.phase+": ") {
				t.Fatalf("diagnosis does not name host and phase %q: %v", tc.phase, err)
			}
			if v := testutil.ToFloat64(l.Metrics().PhaseSuccess.WithLabelValues(PhaseProbe)); v != 0 {
				t.Fatalf("probe success metric = %v", v)
			}
		})
	}
}

func TestPrepareDiscoveryTimeout(t *testing.T) {
	cfg := Config{
		Discovery:        discovery.Spec{Workers: []string{"tj-node-0-9.podmpi-test.invalid"}},
		DiscoveryTimeout: 800 * time.Millisecond,
		Implementation:   "openmpi4",
	}
	l, _ := New(cfg)
	_, err := l.Prepare(context.Background(), true)
	var fl *Failure
	if !errors.As(err, &fl) || fl.Code != exitcode.DiscoveryTimeout {
		t.Fatalf("want discovery timeout, got %v", err)
	}
	if !strings.Contains(err.Error(), "tj-node-0-9.podmpi-test.invalid") || !strings.Contains(err.Error(), "likely causes") {
		t.Fatalf("message must name the missing host and give a hint: %v", err)
	}
}

func TestRunExitCodes(t *testing.T) {
	f := newFixture(t, true, "/usr/bin:/bin")
	for name, tc := range map[string]struct {
		cmd  []string
		want exitcode.Code
	}{
		"success":   {[]string{"sh", "-c", "exit 0"}, exitcode.OK},
		"passthru":  {[]string{"sh", "-c", "exit 3"}, 3},
		"not-found": {[]string{"/nonexistent/mpirun", "-np", "2", "x"}, exitcode.MPIRunNotFound},
		"timeout":   {[]string{"sleep", "30"}, exitcode.MPIRunTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig(f, "127.0.0.1=2")
			cfg.SkipProbe = true
			cfg.Slots = 2
			cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
			cfg.TempDir = t.TempDir()
			cfg.Executable = "/bin/true"
			cfg.MPIRunTimeout = 2 * time.Second
			cfg.KillGrace = time.Second
			cfg.Command = tc.cmd
			var out bytes.Buffer
			cfg.Stdout, cfg.Stderr = &out, &out
			l, _ := New(cfg)
			code, err := l.Run(context.Background())
			if code != tc.want {
				t.Fatalf("code %d, want %d (err %v, out %q)", code, tc.want, err, out.String())
			}
			if (err == nil) != (tc.want == exitcode.OK) {
				t.Fatalf("err = %v for code %d", err, code)
			}
			if msg := TerminationMessage(code, err); !strings.Contains(msg, "exit code") {
				t.Fatalf("termination message %q", msg)
			}
		})
	}
}

func TestMetricsPassPromtool(t *testing.T) {
	m := NewMetrics()
	for _, ph := range Phases {
		m.PhaseDuration.WithLabelValues(ph).Set(0.5)
		m.PhaseSuccess.WithLabelValues(ph).Set(1)
	}
	m.ProbeLatency.Observe(0.002)
	m.ProbeFailures.WithLabelValues("auth").Inc()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus); metric names not linted")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// pushed is one request a fake Pushgateway received.
type pushed struct {
	method, path string
	families     map[string]int // metric family -> series
}

// fakeGateway records the pushes it receives.
func fakeGateway(t *testing.T) (url string, got <-chan pushed) {
	t.Helper()
	ch := make(chan pushed, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := pushed{method: r.Method, path: r.URL.Path, families: map[string]int{}}
		dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); err != nil {
				break
			}
			p.families[mf.GetName()] = len(mf.GetMetric())
		}
		ch <- p
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusAccepted) // as the Pushgateway answers
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ch
}

// TestPushGroupsByJob: two jobs' launchers push to different groups (PUT,
// grouped by namespace, job_name and pod); no push holds the Go runtime's
// series; the push of a 1-worker and of a 2-worker job hold the same number
// of series; delete-on-success deletes a succeeded job's group.
func TestPushGroupsByJob(t *testing.T) {
	url, got := fakeGateway(t)
	f := newFixture(t, true, fakeDaemonDir(t, "hydra_pmi_proxy")+":/usr/bin:/bin")
	series := map[string]int{}
	for i, tc := range []struct {
		job     string
		workers []string
	}{{"alpha", []string{"127.0.0.1"}}, {"beta", []string{"127.0.0.1", "localhost"}}} {
		cfg := baseConfig(f, tc.workers...)
		cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
		cfg.PushURL = url
		cfg.MetricsNamespace = "ml"
		cfg.MetricsPod = tc.job + "-launcher-0-0"
		l, _ := New(cfg)
		if _, err := l.Prepare(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		if err := l.Push(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		p := <-got
		want := map[string]string{"job": PushJob, "namespace": "ml", "job_name": tc.job, "pod": tc.job + "-launcher-0-0"}
		if p.method != http.MethodPut || !reflect.DeepEqual(groupingOf(p.path), want) {
			t.Errorf("push %d: %s %s, want PUT to the group %v", i, p.method, p.path, want)
		}
		n := 0
		for name, c := range p.families {
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				t.Errorf("push %d holds the runtime's %s", i, name)
			}
			n += c
		}
		if p.families["podmpi_launcher_workers_reachable"] != 1 || p.families["podmpi_launcher_probe_latency_seconds"] != 1 {
			t.Errorf("push %d lacks the launcher's metrics: %v", i, p.families)
		}
		series[tc.job] = n
	}
	if series["alpha"] != series["beta"] {
		t.Errorf("series of a 1-worker job %d, of a 2-worker job %d: the count depends on the workers", series["alpha"], series["beta"])
	}
	// A succeeded job with delete-on-success removes its group.
	l, _ := New(Config{PushURL: url, PushDeleteOnSuccess: true, MetricsNamespace: "ml", MetricsPod: "alpha-launcher-0-0"})
	if err := l.Push(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p.method != http.MethodDelete || groupingOf(p.path)["job_name"] != "alpha" || groupingOf(p.path)["pod"] != "alpha-launcher-0-0" {
		t.Errorf("delete-on-success: %s %s", p.method, p.path)
	}
	// An unreachable gateway is an error naming the URL, bounded in time.
	l, _ = New(Config{PushURL: "http://127.0.0.1:1"})
	if err := l.Push(context.Background(), false); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("want an error naming the gateway, got %v", err)
	}
}

// groupingOf reads the label pairs of a Pushgateway path
// /metrics/job/<job>/<label>/<value>/...: the gateway keys groups by the set.
func groupingOf(path string) map[string]string {
	parts := strings.Split(strings.TrimPrefix(path, "/metrics/"), "/")
	out := map[string]string{}
	for i := 0; i+1 < len(parts); i += 2 {
		out[parts[i]] = parts[i+1]
	}
	return out
}

func TestJobOfLauncher(t *testing.T) {
	for pod, want := range map[string]string{
		"tj-launcher-0-0": "tj", "my-job-launcher-0-1": "my-job", "pi-launcher": "pi",
		"tj-node-0-0": "", "launcher": "", "x-launcher-a": "",
	} {
		if got := jobOfLauncher(pod); got != want {
			t.Errorf("jobOfLauncher(%q) = %q, want %q", pod, got, want)
		}
	}
}

func TestTerminationLogNamesRootCause(t *testing.T) {
	cfg := Config{
		Discovery:        discovery.Spec{Workers: []string{"tj-node-0-3.podmpi-test.invalid"}},
		DiscoveryTimeout: 500 * time.Millisecond,
		Implementation:   "openmpi4",
		Command:          []string{"mpirun", "true"},
	}
	l, _ := New(cfg)
	code, err := l.Run(context.Background())
	path := filepath.Join(t.TempDir(), "termination-log")
	l.WriteTerminationLog(path, TerminationMessage(code, err))
	b, rerr := os.ReadFile(path)
	if rerr != nil {
		t.Fatal(rerr)
	}
	msg := string(b)
	if code != exitcode.DiscoveryTimeout || !strings.Contains(msg, "exit code 66") || !strings.Contains(msg, "tj-node-0-3.podmpi-test.invalid") || strings.Count(msg, "likely causes") != 1 || strings.Count(msg, "gang scheduling") != 1 {
		t.Fatalf("termination message (code %d):\n%s", code, msg)
	}
	if len(msg) > 4096 {
		t.Fatalf("termination message is %d bytes; the kubelet keeps 4096", len(msg))
	}
	// An unwritable path (no /dev/termination-log outside Kubernetes) is skipped quietly.
	l.WriteTerminationLog(filepath.Join(t.TempDir(), "no", "such", "dir"), "x")
}

// --slots auto with workers whose source gives no count and whose agent
// gives none either: exit 72 naming them, not a smaller world; with
// --slots.allow-default, the default count. What answers on the agent's
// web port is no worker-agent (404 on /info), a final answer: the phase
// ends on it, not on its deadline, which is only a bound here, so that
// the probe after it has its time whatever the machine's load.
func TestPrepareSlotsUnknown(t *testing.T) {
	f := newFixture(t, true, fakeDaemonDir(t, "hydra_pmi_proxy")+":/usr/bin:/bin")
	notAgent := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notAgent.Close)
	cfg := baseConfig(f, "127.0.0.1")
	cfg.WorkerWebPort = notAgent.Listener.Addr().(*net.TCPAddr).Port
	cfg.ProbeTimeout = 5 * time.Minute
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	l, _ := New(cfg)
	_, err := l.Prepare(context.Background(), true)
	var fl *Failure
	if !errors.As(err, &fl) || fl.Code != exitcode.SlotsUnknown || fl.Phase != PhaseSlots {
		t.Fatalf("want slots-unknown failure, got %v", err)
	}
	for _, w := range []string{"slot count unknown for 1 of 1 workers", "\n127.0.0.1: GET http://127.0.0.1:", "404 Not Found", "--slots.allow-default", "--probe.timeout"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("failure lacks %q:\n%v", w, err)
		}
	}
	if _, err := os.Stat(cfg.HostfilePath); err == nil {
		t.Errorf("a hostfile was written despite unknown slots")
	}

	cfg.SlotsAllowDefault = true
	cfg.DefaultSlots = 3
	l, _ = New(cfg)
	p, err := l.Prepare(context.Background(), true)
	if err != nil {
		t.Fatalf("with --slots.allow-default: %v", err)
	}
	if hostfile.TotalSlots(p.Hosts) != 3 {
		t.Fatalf("hosts %v", p.Hosts)
	}
}

// mpirun gets a private HOME when the launcher has none (Open MPI 4 exits
// 139 without one under a UID with no passwd entry) or one it cannot write
// (HOME=/ under a read-only root: horovodrun fails creating ~/.horovod),
// and one INFO line names the old and the new.
func TestRunGivesMPIRunAHome(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, home := range map[string]string{"unset": "", "not-a-folder": notDir} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, true, "/usr/bin:/bin")
			t.Setenv("HOME", home)
			if home == "" {
				os.Unsetenv("HOME")
			}
			cfg := baseConfig(f, "127.0.0.1=1")
			cfg.SkipProbe = true
			cfg.Slots = 1
			cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
			cfg.TempDir = t.TempDir()
			cfg.Executable = "/bin/true"
			cfg.Command = []string{"sh", "-c", `echo "HOME=[$HOME]"; test -d "$HOME" && test -w "$HOME" && echo usable`}
			var out, logs bytes.Buffer
			cfg.Stdout, cfg.Stderr = &out, &out
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l, _ := New(cfg)
			code, err := l.Run(context.Background())
			if code != exitcode.OK || err != nil {
				t.Fatalf("code %d, %v\n%s", code, err, out.String())
			}
			want := "HOME=[" + cfg.TempDir + "/podmpi-"
			if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "/home]\nusable\n") {
				t.Fatalf("mpirun saw %q, want %s.../home] and a usable dir", out.String(), want)
			}
			line := "level=INFO msg=\"HOME is unset or not writable"
			old := "old=" + home // slog quotes an empty value only
			if home == "" {
				old = `old=""`
			}
			if !strings.Contains(logs.String(), line) || !strings.Contains(logs.String(), old) || !strings.Contains(logs.String(), "HOME="+cfg.TempDir+"/podmpi-") {
				t.Errorf("no INFO line about HOME naming old %q and the new:\n%s", home, logs.String())
			}
		})
	}
}

// TestDetectionNeverRunsTheUsersProgram: with --mpi.implementation openmpi
// and a command that is not an MPI launcher, the launcher asks only mpirun
// from PATH for its version (here there is none, so Open MPI 4 stands) and
// never runs the user's program with --version; with auto the same.
func TestDetectionNeverRunsTheUsersProgram(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	train := filepath.Join(dir, "train.sh")
	if err := os.WriteFile(train, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\necho 'mpirun (Open MPI) 5.0.7'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir()) // no mpirun anywhere
	for _, spec := range []string{"openmpi", "auto"} {
		l, err := New(Config{Implementation: spec, Command: []string{train, "--epochs", "3"}})
		if err != nil {
			t.Fatal(err)
		}
		impl, _, err := l.implementation(context.Background())
		switch spec {
		case "openmpi":
			if err != nil || impl != mpi.OpenMPI4 {
				t.Errorf("openmpi: got %q, %v; want %q (Open MPI 4 stands when detection fails)", impl, err, mpi.OpenMPI4)
			}
		case "auto":
			var f *Failure
			if !errors.As(err, &f) || f.Phase != PhaseMPI || f.Code != exitcode.MPIRunNotFound {
				t.Errorf("auto without mpirun: got %q, %v; want a %s failure with exit %d", impl, err, PhaseMPI, exitcode.MPIRunNotFound)
			}
		}
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the user's program was run: %q", b)
	}
}

// A hostfile that lists other pods of the launcher's own replicated job (a
// runtime that starts several launcher pods) fails at once, naming them.
// TestPrepareSiblingNamesAreAHint: hostfile names like other pods of the
// launcher's own replicated job decide nothing before the probe; workers
// that never become reachable under such names get the launcher-count hint
// with the probe's failure.
func TestPrepareSiblingNamesAreAHint(t *testing.T) {
	closed := func() int { // a port nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	f := newFixture(t, true, "/usr/bin:/bin")
	cfg := baseConfig(f, "tj-launcher-0-0.tj=2", "tj-launcher-0-1.tj=2")
	cfg.Discovery.Self = "tj-launcher-0-0"
	cfg.Resolver = newNames(map[string]string{"tj-launcher-0-0.tj": "127.0.0.2", "tj-launcher-0-1.tj": "127.0.0.1"})
	cfg.SSHPort, cfg.WorkerWebPort, cfg.Slots = closed(), closed(), 2
	cfg.ProbeTimeout = time.Second
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	l, _ := New(cfg)
	_, err := l.Prepare(context.Background(), true)
	var fl *Failure
	if !errors.As(err, &fl) || fl.Phase != PhaseProbe || fl.Code != exitcode.ProbeFailed {
		t.Fatalf("want a probe failure (the names alone decide nothing), got %v", err)
	}
	for _, want := range []string{"tj-launcher-0-1.tj", "1 worker is named like other pods of this launcher's own replicated job", "mlPolicy.numNodes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("failure lacks %q: %v", want, err)
		}
	}
}

// A worker whose SSH port refuses while its HTTP port answers is not a
// late worker: the probe says what answers there, at once, instead of
// waiting for the whole deadline.
func TestPrepareRefusedPeerIsExplained(t *testing.T) {
	closed := func(t *testing.T) int { // a port nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		return port
	}
	for name, tc := range map[string]struct {
		info string
		want []string
	}{
		"another launcher": {`{"role":"launcher","hostname":"tj-launcher-0-1"}`, []string{"not-worker-agent", "another launcher pod", "mlPolicy.numNodes"}},
		"no info":          {"", []string{"not-worker-agent", "not with a worker-agent /info", "worker-agent"}},
		"ssh port differs": {`{"role":"worker-agent","hostname":"w","slots":{"n":1,"source":"default"},"sshAddress":":2022"}`, []string{"not-worker-agent", `":2022"`, "--ssh.port"}},
	} {
		t.Run(name, func(t *testing.T) {
			web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.info == "" {
					http.NotFound(w, r)
					return
				}
				_, _ = io.WriteString(w, tc.info)
			}))
			t.Cleanup(web.Close)
			f := newFixture(t, true, "/usr/bin:/bin")
			cfg := baseConfig(f, "127.0.0.1=1")
			cfg.SSHPort = closed(t)
			cfg.WorkerWebPort = web.Listener.Addr().(*net.TCPAddr).Port
			cfg.ProbeTimeout = time.Minute
			cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
			l, _ := New(cfg)
			start := time.Now()
			_, err := l.Prepare(context.Background(), true)
			var fl *Failure
			if !errors.As(err, &fl) || fl.Code != exitcode.ProbeFailed {
				t.Fatalf("want a probe failure, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("diagnosis lacks %q: %v", w, err)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s of the 1m deadline: the refused peer was waited for", d)
			}
		})
	}
}

// Hydra, and PRRTE under keep_fqdn_hostnames=true, start ranks on the
// launcher's own host without ssh only for an entry equal to its host
// name: the launcher writes its own entry so.
func TestSelfEntryIsHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	hosts := []hostfile.Host{{Name: "tj-node-0-0.tj", Slots: 2}, {Name: "tj-launcher-0-0.tj", Slots: 2}}
	l, _ := New(Config{})
	for impl, want := range map[mpi.Implementation]string{mpi.MPICH: host, mpi.IntelMPI: host, mpi.OpenMPI4: "tj-launcher-0-0.tj", mpi.OpenMPI5: host} {
		got := l.hostsToWrite(impl, hosts, 1)
		if got[1].Name != want || got[0].Name != "tj-node-0-0.tj" || got[1].Slots != 2 {
			t.Errorf("%s: %v, want the self entry %q", impl, got, want)
		}
	}
	if hosts[1].Name != "tj-launcher-0-0.tj" {
		t.Error("hostsToWrite changed its input")
	}
	if got := l.hostsToWrite(mpi.MPICH, hosts, -1); got[1].Name != "tj-launcher-0-0.tj" {
		t.Errorf("no self: %v", got)
	}
}

// TestSiblingHint: workers that never became reachable under names like
// other pods of the launcher's own replicated job get the launcher-count
// hint; other names get none, and the hint never decides anything.
func TestSiblingHint(t *testing.T) {
	late := []hostfile.Host{{Name: "tj-launcher-0-1.tj"}, {Name: "tj-launcher-0-2.tj"}}
	h := siblingHint("tj-launcher-0-0", late)
	for _, want := range []string{"2 workers are named like other pods of this launcher's own replicated job", "mlPolicy.numNodes", "if they are launcher pods"} {
		if !strings.Contains(h, want) {
			t.Errorf("hint lacks %q: %s", want, h)
		}
	}
	if h := siblingHint("tj-launcher-0-0", []hostfile.Host{{Name: "tj-node-0-1.tj"}}); h != "" {
		t.Errorf("a worker of another replicated job got the hint: %s", h)
	}
	if h := siblingHint("pi-launcher", late); h != "" {
		t.Errorf("mpi-operator's launcher name got the hint: %s", h)
	}
}

// TestProbeReasonIsTheCommonPhase: one worker rejects the job's key and
// three refuse the connection (nothing listens there yet). The failure
// Event's reason is the phase most workers failed in, ProbeFailedUnreachable,
// and the one-line summary (the Event's message) names one of those first,
// with the count of each phase. It used to be ProbeFailedAuth, read from
// the text by a fixed order of phases.
func TestProbeReasonIsTheCommonPhase(t *testing.T) {
	f := newFixture(t, false, "/usr/bin:/bin") // 127.0.0.1 rejects the key
	cfg := baseConfig(f, "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	cfg.Slots = 1
	cfg.ProbeTimeout = 2 * time.Second
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	l, _ := New(cfg)
	_, err := l.Prepare(context.Background(), true)
	var fl *Failure
	if !errors.As(err, &fl) || fl.Code != exitcode.ProbeFailed {
		t.Fatalf("want a probe failure, got %v", err)
	}
	if got := EventReason(fl.Code, err); got != "ProbeFailedUnreachable" {
		t.Errorf("EventReason = %s, want ProbeFailedUnreachable (3 of 4 refused)", got)
	}
	first, _, _ := strings.Cut(TerminationMessage(fl.Code, err), "\n")
	for _, want := range []string{"4 of 4 workers failed the SSH probe (3 tcp-refused, 1 auth): 127.0.0.2:", ": tcp-refused: ", "(and 3 more)"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line lacks %q: %s", want, first)
		}
	}
}
