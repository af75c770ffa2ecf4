package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// The Horovod tests run PyPI's horovod, compiled against Debian's PyTorch
// and Open MPI by scripts/horovod-wheel.sh (with Gloo), the way people
// start it: horovodrun in the launcher pod with podmpi's bin dir and the
// venv on PATH, the job's Trainer-shaped names, the arbitrary uid.

// EnvHorovodVenv names the Horovod venv to test instead of the one
// scripts/horovod-wheel.sh --print names.
const EnvHorovodVenv = "PODMPI_HOROVOD_VENV"

// EnvHorovodTest set to 1 makes the test wait for the Horovod venv
// (scripts/horovod-wheel.sh, which .ci/run starts in the background:
// callers take turns on its lock) and fail without it, instead of skipping
// when it is not built yet.
const EnvHorovodTest = "PODMPI_HOROVOD_TEST"

// horovodWait bounds the wait for a Horovod build under EnvHorovodTest.
const horovodWait = 30 * time.Minute

// horovodVenv is the venv holding horovodrun and horovod.torch, or skips t
// (fails it under PODMPI_HOROVOD_TEST=1) saying how to build it.
func horovodVenv(t *testing.T) string {
	t.Helper()
	if venv := os.Getenv(EnvHorovodVenv); venv != "" {
		if _, err := os.Stat(filepath.Join(venv, "bin", "horovodrun")); err != nil {
			t.Fatalf("%s=%s: %v", EnvHorovodVenv, venv, err)
		}
		return venv
	}
	script := filepath.Join(mustModuleRoot(t), "scripts", "horovod-wheel.sh")
	if os.Getenv(EnvHorovodTest) == "1" {
		ctx, cancel := context.WithTimeout(t.Context(), horovodWait)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(ctx, script).CombinedOutput()
		if err != nil {
			t.Fatalf("%s (%s=1): %v after %v:\n%s", script, EnvHorovodTest, err, time.Since(start).Round(time.Second), out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Logf("Horovod ready after %v: %s", time.Since(start).Round(time.Second), lines[0])
		return lines[len(lines)-1]
	}
	out, err := exec.CommandContext(t.Context(), script, "--print").CombinedOutput()
	venv := strings.TrimSpace(string(out))
	if err == nil {
		_, err = os.Stat(filepath.Join(venv, "bin", "horovodrun"))
	}
	if err != nil {
		t.Skipf("no Horovod venv (%v %s); scripts/horovod-wheel.sh builds it, about 8 CPU-minutes, and %s=1 waits for it",
			err, venv, EnvHorovodTest)
	}
	return venv
}

var (
	hvdRankLine = regexp.MustCompile(`(?m)rank (\d+)/(\d+) on (\S+): allreduce=(\S+) \(expect (\S+)\) ok$`)
	elasticLine = regexp.MustCompile(`(?m)elastic: rank (\d+)/(\d+) on (\S+) at step (\d+)$`)
)

// checkHorovodRanks checks that images/src/horovod_allreduce.py reported
// its sum once per host, np ranks, and its verdict.
func checkHorovodRanks(t *testing.T, r result, np int, hosts ...string) {
	t.Helper()
	got := map[string]int{}
	for _, m := range hvdRankLine.FindAllStringSubmatch(r.out, -1) {
		if m[2] != fmt.Sprint(np) || m[4] != m[5] {
			t.Errorf("bad rank line %q (np %d)", m[0], np)
		}
		got[m[3]]++
	}
	for _, h := range hosts {
		if got[h] != 1 {
			t.Errorf("Horovod rank lines per host %v, want one on each of %v", got, hosts)
			break
		}
	}
	if !strings.Contains(r.out, "podmpi-horovod-check: OK") {
		t.Errorf("no \"podmpi-horovod-check: OK\" line")
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", r.out)
	}
}

// TestHorovod: a launcher pod and 3 worker pods (Trainer's names), every
// worker-agent with podmpi's bin dir and the Horovod venv first on PATH,
// as the Horovod image has them.
func TestHorovod(t *testing.T) {
	venv := horovodVenv(t)
	ctx := testCtx(t, 12*time.Minute)
	root := mustModuleRoot(t)
	// The scripts the Horovod image ships, readable by the arbitrary uid.
	progs := filepath.Join(work, "horovod")
	if err := os.MkdirAll(progs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"horovod_allreduce.py", "horovod_elastic.py"} {
		b, err := os.ReadFile(filepath.Join(root, "images", "src", s))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(progs, s), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	train := filepath.Join(progs, "horovod_allreduce.py")
	path := binDir() + ":" + filepath.Join(venv, "bin") + ":/usr/bin:/bin"

	f := newFixture(t, "hv", 3)
	for pod := 1; pod <= 3; pod++ {
		f.startAgent(t, ctx, pod, AgentOptions{Slots: 1, Env: []string{"PATH=" + path}})
	}
	workers := []string{"hv-node-0-0", "hv-node-0-1", "hv-node-0-2"}
	var hostSlots []string
	for i := range workers {
		hostSlots = append(hostSlots, f.workerName(i)+":1")
	}
	// The environment of a compose-like launcher pod: podmpi's settings as
	// a runtime sets them, and no operator variable: in particular no
	// OMPI_MCA_orte_keep_fqdn_hostnames, without which Open MPI 4 strips
	// horovodrun's -H names to hv-node-0-0, which does not resolve.
	env := func(run string) []string {
		e := adoptEnv(run)
		for i, kv := range e {
			if strings.HasPrefix(kv, "PATH=") {
				e[i] = "PATH=" + path
			}
		}
		return e
	}
	const runFor = 3 * time.Minute

	// horovodrun as its documentation writes it: ssh pre-flight and the
	// task servers through podmpi's ssh, then `mpirun -H ...`, which is
	// podmpi's mpirun running Open MPI's at once (the command names its
	// hosts) with keep_fqdn_hostnames.
	t.Run("horovodrun", func(t *testing.T) {
		run := f.runDir(t, "hvd")
		start := time.Now()
		p := f.startAdopted(t, ctx, env(run), "horovodrun", "-np", "3", "-H", strings.Join(hostSlots, ","), "-p", "2222",
			"python3", train)
		r := wait(t, p, start, runFor)
		mustSucceed(t, r)
		checkHorovodRanks(t, r, 3, workers...)
	})

	// `launcher -- horovodrun ...`: the launcher's phases first (wait,
	// probe, wiring), then horovodrun, whose mpirun runs at once
	// (PODMPI_LAUNCHER_PID) with the launcher's wiring.
	t.Run("launcher-dashdash", func(t *testing.T) {
		start := time.Now()
		p := f.launchEnv(t, ctx, []string{"PATH=" + path}, f.workersFlag(3),
			"horovodrun", "-np", "3", "-H", strings.Join(hostSlots, ","), "-p", "2222", "python3", train)
		r := wait(t, p, start, runFor)
		mustSucceed(t, r)
		checkHorovodRanks(t, r, 3, workers...)
		if n := strings.Count(r.out, "== init done"); n != 1 {
			t.Errorf("the phases ran %d times, want once", n)
		}
	})

	// Elastic Horovod (Gloo) with `launcher discover-hosts` as the host
	// discovery script: the job starts on the two workers that resolve,
	// and grows to three when the third one's DNS record appears, as a pod
	// that Kubernetes publishes late.
	t.Run("elastic", func(t *testing.T) {
		if err := f.c.Unpublish(ctx, 3); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := f.c.Publish(context.Background(), 3); err != nil {
				t.Error(err)
			}
		}()
		run := f.runDir(t, "elastic")
		// horovodrun runs the script through the shell: a command line
		// does, no wrapper file needed.
		discover := bin.Launcher + " discover-hosts --log.format text --workers " +
			strings.Join([]string{f.workerName(0), f.workerName(1), f.workerName(2)}, ",")
		start := time.Now()
		p := f.startAdopted(t, ctx, env(run), "horovodrun", "-np", "2", "--min-np", "2", "--max-np", "3",
			"--host-discovery-script", discover, "-p", "2222",
			"python3", filepath.Join(progs, "horovod_elastic.py"), "--grow-to", "3", "--steps-after", "20")
		sshtest.Eventually(t, 2*time.Minute, "elastic training on 2 ranks", func() bool {
			b, _ := os.ReadFile(p.Log)
			return len(elasticLine.FindAllString(string(b), -1)) >= 2
		})
		if err := f.c.Publish(ctx, 3); err != nil {
			t.Fatal(err)
		}
		r := wait(t, p, start, runFor)
		mustSucceed(t, r)
		sizes := map[string]map[string]bool{} // size -> hosts that trained at it
		for _, m := range elasticLine.FindAllStringSubmatch(r.out, -1) {
			if sizes[m[2]] == nil {
				sizes[m[2]] = map[string]bool{}
			}
			sizes[m[2]][m[3]] = true
		}
		if len(sizes["2"]) != 2 || sizes["2"][workers[2]] || len(sizes["3"]) != 3 {
			t.Errorf("hosts per job size %v: want the first two workers at 2 ranks, then all three at 3", sizes)
		}
		if !strings.Contains(r.out, "podmpi-horovod-elastic: OK") {
			t.Errorf("no \"podmpi-horovod-elastic: OK\" line")
		}
		if t.Failed() {
			t.Fatalf("output:\n%s", r.out)
		}
	})

	t.Run("no_leftovers", func(t *testing.T) {
		f.noLeftovers(t, 10*time.Second)
	})
}
