package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/test/harness"
)

// Shared by every test; set up once in TestMain.
var (
	bin  Binaries
	work string // 0755 scratch dir every pod's uid can read

	jobKey, otherKey sshtest.Key
	authDir          string // the job's Secret: id_rsa = job key, authorized_keys = job key
	wrongAuthDir     string // job host key, but authorized_keys holds another job's key
	wrongHostDir     string // another job's host key, authorized_keys holds the job key
	noMPIPath        string // a PATH with sh and coreutils but no MPI daemon

	allreduceOMPI, allreduceMPICH, allreducePy string
	mpi4pyMissing                              string // why the mpi4py test skips, "" when it runs
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped: -short (the end-to-end tests need root, network namespaces and real MPI)")
		os.Exit(0)
	}
	if miss := Missing(); miss != "" {
		fmt.Println("e2e: skipped: " + miss)
		os.Exit(0)
	}
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: setup:", err)
		if work != "" {
			_ = os.RemoveAll(work)
		}
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(work)
	os.Exit(code)
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if work, err = os.MkdirTemp("", "podmpi-e2e-"); err != nil {
		return err
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if bin, err = Build(ctx, root, filepath.Join(work, "bin"), false); err != nil {
		return err
	}
	for _, d := range []string{"bin", "libexec"} {
		if err := os.Chmod(filepath.Join(work, d), 0o755); err != nil {
			return err
		}
	}
	// bin/ as make build lays it out: ssh, podmpi-rsh, mpirun, mpiexec and
	// mpiexec.hydra linked to the launcher (the adoption tests put it first
	// on PATH; the others run the binaries by path).
	if err := LinkNames(ctx, filepath.Join(work, "bin")); err != nil {
		return err
	}
	if jobKey, err = sshtest.GenerateJobKey(); err != nil {
		return err
	}
	if otherKey, err = sshtest.GenerateJobKey(); err != nil {
		return err
	}
	authDir = filepath.Join(work, "auth")
	wrongAuthDir = filepath.Join(work, "auth-wrong-authorized")
	wrongHostDir = filepath.Join(work, "auth-wrong-hostkey")
	if err := sshtest.WriteSecret(authDir, jobKey, jobKey.Public()); err != nil {
		return err
	}
	if err := sshtest.WriteSecret(wrongAuthDir, jobKey, otherKey.Public()); err != nil {
		return err
	}
	if err := sshtest.WriteSecret(wrongHostDir, otherKey, jobKey.Public()); err != nil {
		return err
	}
	// A PATH without /usr/bin: on merged-usr Debian /bin IS /usr/bin, so
	// the dir holds symlinks to just the tools a shell session needs.
	noMPIPath = filepath.Join(work, "no-mpi-bin")
	if err := os.Mkdir(noMPIPath, 0o755); err != nil {
		return err
	}
	for _, tool := range []string{"sh", "env", "cat", "sleep", "hostname", "id", "true", "false"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			return err
		}
		if err := os.Symlink(p, filepath.Join(noMPIPath, tool)); err != nil {
			return err
		}
	}

	progs := filepath.Join(work, "progs")
	if err := os.Mkdir(progs, 0o755); err != nil {
		return err
	}
	src, err := filepath.Abs("testdata/allreduce.c")
	if err != nil {
		return err
	}
	allreduceOMPI = filepath.Join(progs, "allreduce-ompi")
	allreduceMPICH = filepath.Join(progs, "allreduce-mpich")
	for _, c := range []struct{ cc, out string }{{"mpicc.openmpi", allreduceOMPI}, {"mpicc.mpich", allreduceMPICH}} {
		cmd := exec.CommandContext(ctx, c.cc, "-O2", "-o", c.out, src)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", c.cc, src, err, out)
		}
	}
	py, err := os.ReadFile("testdata/allreduce.py")
	if err != nil {
		return err
	}
	allreducePy = filepath.Join(progs, "allreduce.py")
	if err := os.WriteFile(allreducePy, py, 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import mpi4py").CombinedOutput(); err != nil {
		mpi4pyMissing = fmt.Sprintf("/usr/bin/python3 cannot import mpi4py (apt-get install -y python3-mpi4py): %v %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// testCtx is t's deadline for one test.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// fixture is one cluster: pod 0 the launcher "<job>-launcher-0-0", pods 1..n
// the workers "<job>-node-0-<i>" (Trainer v2 names) with the mpi-operator
// aliases "<job>-worker-<i>", all with a docker0-like second interface.
type fixture struct {
	c      *harness.Cluster
	job    string
	agents map[int]*harness.Proc
	seq    int
}

// newFixture starts a cluster with workers worker pods; unpublished lists
// the pod indexes (1-based, like the pods) that start without DNS records.
func newFixture(t *testing.T, job string, workers int, unpublished ...int) *fixture {
	t.Helper()
	pods := []harness.PodSpec{{Hostname: job + "-launcher-0-0", Role: harness.RoleLauncher, Publish: true}}
	for i := range workers {
		pub := true
		for _, u := range unpublished {
			if u == i+1 {
				pub = false
			}
		}
		pods = append(pods, harness.PodSpec{
			Hostname: fmt.Sprintf("%s-node-0-%d", job, i),
			Aliases:  []string{fmt.Sprintf("%s-worker-%d", job, i)},
			Role:     harness.RoleWorker,
			Publish:  pub,
		})
	}
	return newFixturePods(t, job, pods)
}

// newFixturePods starts a cluster of the given pods (pod 0 runs the
// launcher).
func newFixturePods(t *testing.T, job string, pods []harness.PodSpec) *fixture {
	t.Helper()
	c := harness.StartT(t, harness.Config{Job: job, ExtraIface: true, Pods: pods})
	f := &fixture{c: c, job: job, agents: map[int]*harness.Proc{}}
	t.Cleanup(func() {
		for pod, p := range f.agents {
			if t.Failed() {
				b, _ := os.ReadFile(p.Log)
				t.Logf("worker-agent log of pod %d (%s):\n%s", pod, c.Pod(pod).Hostname, tailBytes(b, 4000))
			}
			_ = p.Stop()
		}
	})
	return f
}

// workerName is the Trainer v2 hostfile name of worker i (0-based).
func (f *fixture) workerName(i int) string { return fmt.Sprintf("%s-node-0-%d.%s", f.job, i, f.job) }

// workersFlag is --workers with every worker's Trainer v2 name.
func (f *fixture) workersFlag(n int) []string {
	var names []string
	for i := range n {
		names = append(names, f.workerName(i))
	}
	return []string{"--workers", strings.Join(names, ",")}
}

// startAgent (re)starts the worker-agent of pod and waits until it is ready.
func (f *fixture) startAgent(t *testing.T, ctx context.Context, pod int, o AgentOptions) {
	t.Helper()
	if old := f.agents[pod]; old != nil {
		if err := old.Stop(); err != nil {
			t.Fatal(err)
		}
		delete(f.agents, pod)
	}
	if o.AuthDir == "" {
		o.AuthDir = authDir
	}
	if o.Home == "" {
		o.Home = filepath.Join(work, "home-"+f.c.Pod(pod).Hostname)
		if err := MakeDir(o.Home); err != nil {
			t.Fatal(err)
		}
	}
	// A background context: the agent lives as long as the fixture, not
	// the subtest; Stop and Close end it by PID.
	p, err := StartAgent(context.Background(), f.c, pod, bin, o)
	if err != nil {
		t.Fatal(err)
	}
	f.agents[pod] = p
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := WaitReady(rctx, f.c, map[int]*harness.Proc{pod: p}); err != nil {
		t.Fatal(err)
	}
}

// stopAgent stops pod's worker-agent.
func (f *fixture) stopAgent(t *testing.T, pod int) {
	t.Helper()
	if p := f.agents[pod]; p != nil {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		delete(f.agents, pod)
	}
}

// startAgents starts the normal worker-agent on every worker pod.
func (f *fixture) startAgents(t *testing.T, ctx context.Context, pods ...int) {
	t.Helper()
	for _, pod := range pods {
		f.startAgent(t, ctx, pod, AgentOptions{})
	}
}

func (f *fixture) agentPIDs() map[int][]int {
	keep := map[int][]int{}
	for pod, p := range f.agents {
		keep[pod] = []int{p.PID()}
	}
	return keep
}

// launch starts the launcher in pod 0.
func (f *fixture) launch(t *testing.T, ctx context.Context, flags []string, command ...string) *harness.Proc {
	t.Helper()
	return f.start(t, ctx, 0, nil, flags, command...)
}

// launchIn starts the launcher in pod.
func (f *fixture) launchIn(t *testing.T, ctx context.Context, pod int, flags []string, command ...string) *harness.Proc {
	t.Helper()
	return f.start(t, ctx, pod, nil, flags, command...)
}

// launchEnv starts the launcher in pod 0 with the extra environment env.
func (f *fixture) launchEnv(t *testing.T, ctx context.Context, env, flags []string, command ...string) *harness.Proc {
	t.Helper()
	return f.start(t, ctx, 0, env, flags, command...)
}

// start starts the launcher in pod with the extra environment env and a
// run directory of its own.
func (f *fixture) start(t *testing.T, ctx context.Context, pod int, env, flags []string, command ...string) *harness.Proc {
	t.Helper()
	f.seq++
	run := filepath.Join(work, fmt.Sprintf("run-%s-%d", f.job, f.seq))
	p, err := StartLauncher(ctx, f.c, pod, bin, LauncherOptions{
		AuthDir: authDir, RunDir: run, Flags: flags, Command: command, Env: env,
		Log: filepath.Join(f.c.LogDir(), fmt.Sprintf("launcher-%d.log", f.seq)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// result is a finished launcher run.
type result struct {
	code int
	out  string // stdout and stderr, interleaved
	took time.Duration
}

// wait waits up to d for the launcher to exit; a launcher still running is
// a test failure (and is stopped).
func wait(t *testing.T, p *harness.Proc, start time.Time, d time.Duration) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	err := p.WaitContext(ctx)
	took := time.Since(start)
	if ctx.Err() != nil {
		_ = p.Stop()
		b, _ := os.ReadFile(p.Log)
		t.Fatalf("launcher still running after %v (%v); output:\n%s", d, err, b)
	}
	b, _ := os.ReadFile(p.Log)
	code := p.ExitCode()
	if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if os.Getenv("PODMPI_E2E_VERBOSE") != "" {
		t.Logf("launcher exit %d after %v; output:\n%s", code, took.Round(time.Millisecond), b)
	}
	return result{code: code, out: string(b), took: took}
}

// run launches and waits up to d.
func (f *fixture) run(t *testing.T, ctx context.Context, d time.Duration, flags []string, command ...string) result {
	t.Helper()
	start := time.Now()
	p := f.launch(t, ctx, flags, command...)
	return wait(t, p, start, d)
}

// mustSucceed fails t with the launcher's output unless it exited 0.
func mustSucceed(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("launcher exit %d after %v, want 0; output:\n%s", r.code, r.took.Round(time.Millisecond), r.out)
	}
	t.Logf("launcher ok in %v", r.took.Round(time.Millisecond))
}

var rankLine = regexp.MustCompile(`(?m)^rank (\d+)/(\d+) on (\S+): allreduce=(\d+) \(expect (\d+)\)`)

// checkAllreduce checks that np ranks each printed a correct sum, and that
// the ranks per host are want (hostname -> count).
func checkAllreduce(t *testing.T, r result, np int, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	seen := map[int]bool{}
	for _, m := range rankLine.FindAllStringSubmatch(r.out, -1) {
		rank, _ := strconv.Atoi(m[1])
		size, _ := strconv.Atoi(m[2])
		if size != np || m[4] != m[5] || m[4] != strconv.Itoa(np*(np-1)/2) {
			t.Errorf("bad rank line %q (np %d)", m[0], np)
		}
		seen[rank] = true
		got[m[3]]++
	}
	if len(seen) != np {
		t.Errorf("%d distinct ranks reported, want %d; output:\n%s", len(seen), np, r.out)
	}
	for h, n := range want {
		if got[h] != n {
			t.Errorf("ranks per host = %v, want %v", got, want)
			break
		}
	}
}

// countHosts counts output lines that are exactly a hostname in want.
func countHosts(out string, want map[string]int) map[string]int {
	got := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if _, ok := want[l]; ok {
			got[l]++
		}
	}
	return got
}

// diagLine returns the first output line that is the probe diagnosis of
// host in phase: "host:2222: phase: cause; hint: ...".
func diagLine(out, host, phase string) string {
	prefix := host + ":" + strconv.Itoa(SSHPort) + ": " + phase + ": "
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, prefix); i >= 0 {
			return l[i:]
		}
	}
	return ""
}

// agentConnections counts the SSH connections each worker-agent has logged
// so far, by pod.
func (f *fixture) agentConnections(t *testing.T) map[int]int {
	t.Helper()
	out := map[int]int{}
	for pod, p := range f.agents {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		out[pod] = strings.Count(string(b), `"msg":"ssh connection"`)
	}
	return out
}

// noLeftovers fails t when a process other than the worker-agents is still
// in any pod d after the job ended.
func (f *fixture) noLeftovers(t *testing.T, d time.Duration) {
	t.Helper()
	var pods []int
	for i := range f.c.NumPods() {
		pods = append(pods, i)
	}
	if left := WaitNoProcs(f.c, pods, f.agentPIDs(), d); len(left) > 0 {
		for pod, ps := range left {
			t.Errorf("pod %d (%s) still runs %d job process(es) %v after the job: %v", pod, f.c.Pod(pod).Hostname, len(ps), d, ps)
		}
	}
}
