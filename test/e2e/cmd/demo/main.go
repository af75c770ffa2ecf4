// Command demo is `make demo`: on one machine, as root, it builds a
// Kubernetes-shaped cluster of network-namespace pods (test/harness), starts
// a launcher and, a few seconds later, 3 worker pods running worker-agent,
// runs a real Open MPI allreduce through them with the user's unchanged
// `mpirun`, prints the launcher's report, its metrics and the job's output,
// and tears everything down.
//
// Usage (from the module root; scripts/demo.sh builds the binaries first):
//
//	go run ./test/e2e/cmd/demo --bin bin
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/test/e2e"
	"github.com/podmpi/podmpi/test/harness"
)

func main() {
	binDir := flag.String("bin", "bin", "directory holding the launcher and worker-agent binaries")
	workers := flag.Int("workers", 3, "number of worker pods")
	slots := flag.Int("slots", 2, "slots per worker (worker-agent --slots)")
	late := flag.Duration("late", 3*time.Second, "start the worker pods this long after the launcher")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Println("demo: needs root (network namespaces, bind mounts and a DNS server); run: sudo make demo")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	code, err := run(ctx, *binDir, *workers, *slots, *late)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// out prints a line of the demo's own narration.
func out(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func run(ctx context.Context, binDir string, nWorkers, slots int, late time.Duration) (int, error) {
	if nWorkers < 1 || nWorkers > 16 || slots < 1 || slots > 16 {
		return 2, errors.New("--workers and --slots must be between 1 and 16")
	}
	if err := harness.Preflight(); err != nil {
		return 1, err
	}
	for _, p := range []string{"mpirun", "mpicc"} {
		if _, err := exec.LookPath(p); err != nil {
			return 1, fmt.Errorf("%s not found (apt-get install -y openmpi-bin libopenmpi-dev)", p)
		}
	}
	absBin, err := filepath.Abs(binDir)
	if err != nil {
		return 1, err
	}
	bin := e2e.Binaries{Launcher: filepath.Join(absBin, "launcher"), WorkerAgent: filepath.Join(absBin, "worker-agent")}
	for _, b := range []string{bin.Launcher, bin.WorkerAgent} {
		if _, err := os.Stat(b); err != nil {
			return 1, fmt.Errorf("binary %s missing (run make build): %w", b, err)
		}
	}

	// Scratch: keys in the Trainer v2 layout, the MPI program, HOMEs.
	work, err := os.MkdirTemp("", "podmpi-demo-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return 1, err
	}
	key, err := sshtest.GenerateJobKey()
	if err != nil {
		return 1, err
	}
	auth := filepath.Join(work, "ssh")
	if err := sshtest.WriteSecret(auth, key, key.Public()); err != nil {
		return 1, err
	}
	prog := filepath.Join(work, "allreduce")
	root, err := e2e.ModuleRoot()
	if err != nil {
		return 1, err
	}
	if b, err := exec.CommandContext(ctx, "mpicc", "-O2", "-o", prog, filepath.Join(root, "test/e2e/testdata/allreduce.c")).CombinedOutput(); err != nil {
		return 1, fmt.Errorf("mpicc: %w\n%s", err, b)
	}

	// The cluster: a launcher pod and worker pods that are not scheduled yet.
	const job = "demo"
	pods := []harness.PodSpec{{Hostname: job + "-launcher-0-0", Role: harness.RoleLauncher, Publish: true}}
	for i := range nWorkers {
		pods = append(pods, harness.PodSpec{Hostname: fmt.Sprintf("%s-node-0-%d", job, i), Role: harness.RoleWorker})
	}
	c, err := harness.Start(ctx, harness.Config{Job: job, ExtraIface: true, Pods: pods, LogDir: filepath.Join(work, "log")})
	if err != nil {
		return 1, err
	}
	var pids []int
	defer func() { teardown(c, pids) }()
	out("== cluster %s: 1 launcher pod + %d worker pods (network namespaces, each with eth0 and a docker0-like net1),", c.ID(), nWorkers)
	out("   cluster DNS at %s for %s; everything runs as uid %d gid %d (no passwd entry)", c.HubIP(), c.ServiceFQDN(), e2e.AnyUID, e2e.AnyGID)

	runDir := filepath.Join(work, "launcher")
	command := []string{"mpirun", prog, "2"}
	flags := []string{"--discovery.template", job + "-node-0-{i}." + job, "--workers-expected", strconv.Itoa(nWorkers),
		"--discovery.timeout", "2m", "--mpirun.timeout", "2m"}
	out("== %s$ launcher %s -- %s", pods[0].Hostname, strings.Join(flags, " "), strings.Join(command, " "))
	// JSON logs at debug level: the demo shows the launcher's records (the
	// hostfile, each worker's probe result) as a person would read them.
	lp, err := e2e.StartLauncher(ctx, c, 0, bin, e2e.LauncherOptions{
		AuthDir: auth, RunDir: runDir, Flags: append(flags, "--log.level=debug"), Command: command, LogFormat: "json",
		Log: filepath.Join(work, "launcher.log"),
	})
	if err != nil {
		return 1, err
	}
	pids = append(pids, lp.PID())
	follow := startFollow(lp)

	// The workers get scheduled late.
	select {
	case <-time.After(late):
	case <-lp.Done():
	case <-ctx.Done():
		return 1, ctx.Err()
	}
	agents := map[int]*harness.Proc{}
	for i := 1; i <= nWorkers; i++ {
		if err := c.Publish(ctx, i); err != nil {
			return 1, err
		}
		home := filepath.Join(work, "home-"+pods[i].Hostname)
		if err := e2e.MakeDir(home); err != nil {
			return 1, err
		}
		p, err := e2e.StartAgent(ctx, c, i, bin, e2e.AgentOptions{AuthDir: auth, Slots: slots, Home: home,
			Log: filepath.Join(work, "agent-"+pods[i].Hostname+".log")})
		if err != nil {
			return 1, err
		}
		agents[i] = p
		pids = append(pids, p.PID())
	}
	follow.note(fmt.Sprintf("== %d worker pods scheduled: worker-agent --slots %d started in each", nWorkers, slots))

	// While the ranks sleep, read the launcher's /metrics from inside its pod.
	metrics := make(chan string, 1)
	go func() {
		for range 200 {
			if strings.Count(readFile(lp.Log), "sleeping") >= nWorkers*slots {
				addr := net.JoinHostPort(c.Pod(0).IP.String(), "9022")
				code, body, err := e2e.HTTPGetInPod(ctx, c, 0, addr, "/metrics")
				if err != nil || code != 200 {
					metrics <- fmt.Sprintf("   (launcher /metrics unavailable: %d %v)", code, err)
				} else {
					metrics <- formatMetrics(body)
				}
				return
			}
			select {
			case <-lp.Done():
				metrics <- ""
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		metrics <- ""
	}()

	if err := lp.WaitContext(ctx); err != nil && ctx.Err() != nil {
		return 1, err
	}
	follow.stop()
	code := lp.ExitCode()
	if m := <-metrics; m != "" {
		out("== launcher /metrics (scraped from %s:9022 while the job ran)", pods[0].Hostname)
		fmt.Print(m)
	}
	if code != 0 {
		out("== launcher exited %d; the last lines of each worker-agent log:", code)
		for i, p := range agents {
			out("-- %s", pods[i].Hostname)
			fmt.Print(lastLines(readFile(p.Log), 15))
		}
		return code, nil
	}
	out("== job done: launcher exit 0")
	return 0, nil
}

// teardown closes the cluster and checks that nothing is left.
func teardown(c *harness.Cluster, pids []int) {
	id, state := c.ID(), c.StateDir()
	if err := c.Close(); err != nil {
		out("== teardown: %v", err)
		return
	}
	var left []string
	if ents, _ := os.ReadDir("/run/netns"); len(ents) > 0 {
		for _, e := range ents {
			if strings.Contains(e.Name(), id) {
				left = append(left, "netns "+e.Name())
			}
		}
	}
	if ms, err := harness.Mounts(); err == nil {
		for _, m := range ms {
			if strings.HasPrefix(m, state) {
				left = append(left, "mount "+m)
			}
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			left = append(left, "pid "+strconv.Itoa(pid))
		}
	}
	if len(left) > 0 {
		out("== teardown: LEFT BEHIND: %s (make clean-stale removes them)", strings.Join(left, ", "))
		return
	}
	out("== teardown: cluster %s removed; no namespace, mount or process left", id)
}

// follower prints the launcher's output as it comes: JSON log records as
// short "launcher:" lines (progress, phases, warnings), everything else (the
// human report and the job's output) unchanged.
type follower struct {
	notes chan string
	done  chan struct{}
	quit  chan struct{}
}

func startFollow(p *harness.Proc) *follower {
	f := &follower{notes: make(chan string, 4), done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(f.done)
		var off int64
		var partial, last string
		flush := func(final bool) {
			fh, err := os.Open(p.Log)
			if err != nil {
				return
			}
			defer fh.Close()
			if _, err := fh.Seek(off, io.SeekStart); err != nil {
				return
			}
			b, _ := io.ReadAll(io.LimitReader(fh, 1<<20))
			off += int64(len(b))
			text := partial + string(b)
			lines := strings.Split(text, "\n")
			partial = lines[len(lines)-1]
			lines = lines[:len(lines)-1]
			if final && partial != "" {
				lines, partial = append(lines, partial), ""
			}
			for _, l := range lines {
				if s, ok := render(l); ok && s != last {
					fmt.Println(s)
					last = s
				}
			}
		}
		for {
			select {
			case n := <-f.notes:
				flush(false)
				fmt.Println(n)
			case <-f.quit:
				flush(true)
				return
			case <-time.After(100 * time.Millisecond):
				flush(false)
			}
		}
	}()
	return f
}

func (f *follower) note(s string) { f.notes <- s }
func (f *follower) stop()         { close(f.quit); <-f.done }

var sleepLine = regexp.MustCompile(`^rank \d+ sleeping \d+ s$`)

// probeRows collects the workers' probe results until the probe is done.
var probeRows []string

// render turns one output line into what the demo shows; ok=false hides it.
func render(line string) (string, bool) {
	if sleepLine.MatchString(line) {
		return "", false // the demo's own pause, so /metrics can be read
	}
	if strings.Contains(line, "Warning: setpgid(") {
		return "", false // Open MPI's harmless notice when mpirun is not a group leader
	}
	if !strings.HasPrefix(line, "{") {
		return line, true
	}
	var rec map[string]any
	if json.Unmarshal([]byte(line), &rec) != nil {
		return line, true
	}
	msg, _ := rec["msg"].(string)
	level, _ := rec["level"].(string)
	switch {
	case level == "WARN" || level == "ERROR":
		return fmt.Sprintf("   launcher %s: %s%s", strings.ToLower(level), msg, attrs(rec, "msg", "level", "time", "component")), true
	case strings.Contains(msg, "workers resolved"):
		return "   launcher: discovery: " + msg, true
	case msg == "phase done":
		return fmt.Sprintf("   launcher: phase %v done in %vs (ok=%v)", rec["phase"], rec["seconds"], rec["ok"]), true
	case msg == "hostfile written":
		path, _ := rec["path"].(string)
		b, _ := os.ReadFile(path)
		return fmt.Sprintf("== hostfile %s (%v, %v hosts, %v slots)\n%s", path, rec["format"], rec["hosts"], rec["slots"], strings.TrimRight(string(b), "\n")), true
	case msg == "worker passed the SSH probe":
		lat, _ := rec["latency_seconds"].(float64)
		probeRows = append(probeRows, fmt.Sprintf("%v:%v\tok\t%s\t%v\t%v", rec["host"], rec["port"],
			time.Duration(lat*float64(time.Second)).Round(100*time.Microsecond), rec["attempts"], rec["daemon"]))
		return "", false
	case msg == "probe done":
		var b strings.Builder
		fmt.Fprintf(&b, "== probe (%v/%v workers reachable)\n", rec["ok"], rec["workers"])
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tRESULT\tLATENCY\tATTEMPTS\tDAEMON")
		for _, r := range probeRows {
			fmt.Fprintln(tw, r)
		}
		_ = tw.Flush()
		return strings.TrimRight(b.String(), "\n"), true
	case msg == "running":
		return fmt.Sprintf("== init done in %vs; running %v", rec["init_seconds"], rec["argv0"]), true
	}
	return "", false
}

func attrs(rec map[string]any, skip ...string) string {
	var keys []string
	for k := range rec {
		if !slices.Contains(skip, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, rec[k])
	}
	return b.String()
}

// formatMetrics keeps the launcher's init samples of a Prometheus exposition
// that a reader looks at first: durations, outcomes and worker counts. Left
// out: the build info, the exit code (unknown while mpirun runs), timestamps,
// histogram buckets and failure counters that are zero.
func formatMetrics(body string) string {
	skip := []string{"podmpi_launcher_build_info", "podmpi_launcher_mpirun_exit_code",
		"podmpi_launcher_start_timestamp_seconds", "podmpi_launcher_phase_start_timestamp_seconds",
		"podmpi_launcher_probe_latency_seconds_bucket"}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
lines:
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "podmpi_launcher_") {
			continue
		}
		for _, p := range skip {
			if strings.HasPrefix(l, p) {
				continue lines
			}
		}
		if strings.HasPrefix(l, "podmpi_launcher_probe_failures_total") && strings.HasSuffix(l, " 0") {
			continue
		}
		b.WriteString("   " + l + "\n")
	}
	if b.Len() == 0 {
		return "   (no podmpi_launcher_ metrics)\n"
	}
	return b.String()
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
