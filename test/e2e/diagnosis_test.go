package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDiagnosis breaks a running job the ways long runs die and checks that
// the launcher names host and cause first in its termination message,
// within 30 s of the failure, with mpirun's exit code passed through: a
// rank OOM-killed in a real memory cgroup with a limit, a rank that dies of
// SIGSEGV (also after the job's own script had an ssh fail), a rank on the
// launcher's own pod that exits non-zero, a worker pod whose every process
// is killed (its agent too), and a Hydra job whose proxy podmpi-rsh cannot
// start (mpiexec.hydra would wait for it for ever).
func TestDiagnosis(t *testing.T) {
	ctx := testCtx(t, 8*time.Minute)
	prog := buildFailRank(t, ctx)
	f := newFixture(t, "dg", 2)
	f.startAgents(t, ctx, 1, 2)
	workers := f.workersFlag(2)

	t.Run("oom_in_memory_cgroup", func(t *testing.T) {
		const limit = 256 << 20
		cg := newMemCgroup(t, limit)
		// The second worker's agent, and so every process it starts, lives in
		// the cgroup, which its pod sees at /sys/fs/cgroup as a container does.
		f.startAgent(t, ctx, 2, AgentOptions{Wrap: cg.wrapper(), Args: []string{"--account.interval", "250ms"}})
		defer f.startAgent(t, ctx, 2, AgentOptions{})
		start := time.Now()
		p := f.launch(t, ctx, workers, "mpirun.openmpi", "-np", "4", prog, "oom", "3", "1024")
		waitOutput(t, p, ": ready", 4, 60*time.Second)
		r := wait(t, p, start, 30*time.Second)
		first := f.expectRootCause(t, r, "OOM", "rank 3", "dg-node-0-1.dg", "at its container's memory limit of 256 MiB")
		t.Logf("termination message: %s", first)
		if strings.Contains(r.out, "was not killed") {
			t.Errorf("rank 3 allocated its memory unharmed: the cgroup's limit did not apply")
		}
	})

	t.Run("rank_segfault", func(t *testing.T) {
		start := time.Now()
		p := f.launch(t, ctx, workers, "mpirun.openmpi", "-np", "4", prog, "segv", "1")
		waitOutput(t, p, ": ready", 4, 60*time.Second)
		r := wait(t, p, start, 30*time.Second)
		first := f.expectRootCause(t, r, "rank 1 on dg-node-0-0.dg", "signal 11 (SIGSEGV", "core dump")
		t.Logf("termination message: %s", first)
	})

	t.Run("script_ssh_fails_then_rank_segfaults", func(t *testing.T) {
		// The job's own script uses podmpi's ssh client (what ssh is with
		// the images' PATH; here the launcher's own podmpi-rsh, since ssh is
		// this machine's OpenSSH), with the failure directory in its
		// environment, for something that is not an MPI daemon, and that
		// fails; then rank 1 dies of SIGSEGV. The crash is the root cause,
		// the failed ssh a line of context.
		start := time.Now()
		script := "podmpi-rsh -o ConnectionAttempts=1 -o ConnectTimeout=1 -p 1 " + f.workerName(0) + " git-upload-pack /srv/repo.git; " +
			"exec mpirun.openmpi -np 4 " + prog + " segv 1"
		p := f.launch(t, ctx, append(append([]string{}, workers...), "--mpi.implementation", "openmpi"), "sh", "-c", script)
		waitOutput(t, p, ": ready", 4, 60*time.Second)
		r := wait(t, p, start, 30*time.Second)
		first := f.expectRootCause(t, r, "rank 1 on dg-node-0-0.dg", "signal 11 (SIGSEGV")
		t.Logf("termination message: %s", first)
		if !strings.Contains(r.out, "also: podmpi-rsh could not run git-upload-pack on "+f.workerName(0)+":1 (not an MPI daemon") {
			t.Errorf("the script's failed ssh is not listed as context; output:\n%s", r.out)
		}
	})

	t.Run("rank_fails_on_the_launchers_pod", func(t *testing.T) {
		// runLauncherAsNode: the launcher's own name is in the hostfile and
		// it runs ranks; one of those exits with status 3. Open MPI names
		// the rank without its host; the launcher's account of its own pod
		// places it there.
		hf := filepath.Join(work, "hostfile-dg-launcher-as-node")
		self := "dg-launcher-0-0.dg"
		if err := os.WriteFile(hf, []byte(f.workerName(0)+" slots=2\n"+f.workerName(1)+" slots=2\n"+self+" slots=2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p := f.launch(t, ctx, []string{"--hostfile", hf, "--self", self}, "mpirun.openmpi", "-np", "6", prog, "exithost", "dg-launcher-0-0", "3")
		waitOutput(t, p, ": ready", 6, 60*time.Second)
		r := wait(t, p, start, 30*time.Second)
		first := f.expectRootCause(t, r, "on "+self+" (the launcher's own pod)", "exited with status 3")
		t.Logf("termination message: %s", first)
	})

	for _, tc := range []struct {
		name      string
		unpublish bool // its name leaves DNS, as a deleted pod's does
		want      []string
	}{
		// A deleted pod: every process killed and its name out of DNS.
		// Without the Kubernetes API that is named, never taken for proof:
		// a pod that is only not Ready leaves DNS too.
		{"worker_pod_deleted", true, []string{"worker dg-node-0-1.dg did not answer and its name is missing from DNS", "nothing answers at the address it had",
			"deleted, or is not Ready and cut off", "kubectl describe pod"}},
		// Every process of the pod killed, its name still there (a
		// container that died, or a pod that is being deleted): named for
		// what was seen, never as gone.
		{"worker_pod_killed", false, []string{"worker dg-node-0-1.dg did not answer", "connection refused", "kubectl describe pod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p := f.launch(t, ctx, workers, "mpirun.openmpi", "-np", "4", prog, "sleep", "-1")
			waitOutput(t, p, ": ready", 4, 60*time.Second)
			if err := f.c.KillPod(2); err != nil {
				t.Fatal(err)
			}
			delete(f.agents, 2)
			defer f.startAgent(t, ctx, 2, AgentOptions{})
			if tc.unpublish {
				if err := f.c.Unpublish(ctx, 2); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := f.c.Publish(ctx, 2); err != nil {
						t.Error(err)
					}
				}()
			}
			r := wait(t, p, start, 30*time.Second)
			first := f.expectRootCause(t, r, tc.want...)
			t.Logf("termination message: %s", first)
			f.noLeftovers(t, 5*time.Second)
		})
	}

	t.Run("hydra_proxy_not_started", func(t *testing.T) {
		// The second worker's agent is not running: podmpi-rsh cannot start
		// hydra_pmi_proxy there, and mpiexec.hydra waits for it. The probe,
		// which would catch this before mpirun, is skipped; so is the slot
		// query.
		f.stopAgent(t, 2)
		defer f.startAgent(t, ctx, 2, AgentOptions{})
		start := time.Now()
		flags := append(append([]string{}, workers...), "--probe.skip", "--slots", "2", "--mpirun.kill-grace", "5s")
		p, err := StartLauncher(ctx, f.c, 0, bin, LauncherOptions{
			AuthDir: authDir, RunDir: f.nextRunDir(), Flags: flags, Command: []string{"mpiexec.hydra", "hostname"},
			Env: []string{"PODMPI_SSH_WAIT=0"}, // podmpi-rsh fails at once instead of waiting for a late worker
			Log: filepath.Join(f.c.LogDir(), fmt.Sprintf("launcher-%d.log", f.seq)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop() })
		waitOutput(t, p, "podmpi-rsh could not start an MPI daemon", 1, 60*time.Second)
		failed := time.Now()
		r := wait(t, p, start, 30*time.Second)
		t.Logf("launcher ended %v after the failed launch", time.Since(failed).Round(time.Millisecond))
		first := f.expectRootCause(t, r, "podmpi-rsh could not start", "on dg-node-0-1.dg:2222: tcp-refused", "hint: ")
		t.Logf("termination message: %s", first)
		if r.code != 73 && !strings.Contains(r.out, "mpirun exited") {
			t.Errorf("exit %d", r.code)
		}
		t.Logf("exit %d (73: the launcher stopped mpiexec.hydra; else its own code)", r.code)
	})
}

var (
	failRankOnce sync.Once
	failRankPath string
	failRankErr  error
)

// buildFailRank compiles testdata/failrank.c for Open MPI once.
func buildFailRank(t *testing.T, ctx context.Context) string {
	t.Helper()
	failRankOnce.Do(func() {
		src, err := filepath.Abs("testdata/failrank.c")
		if err != nil {
			failRankErr = err
			return
		}
		out := filepath.Join(work, "progs", "failrank-ompi")
		if out2, err := exec.CommandContext(ctx, "mpicc.openmpi", "-O2", "-o", out, src).CombinedOutput(); err != nil {
			failRankErr = fmt.Errorf("mpicc.openmpi %s: %w\n%s", src, err, out2)
			return
		}
		failRankPath = out
	})
	if failRankErr != nil {
		t.Fatal(failRankErr)
	}
	return failRankPath
}

// nextRunDir is the run directory of the next launch (as launch names it).
func (f *fixture) nextRunDir() string {
	f.seq++
	return filepath.Join(work, fmt.Sprintf("run-%s-%d", f.job, f.seq))
}

var mpirunExitedRe = regexp.MustCompile(`msg="mpirun exited" .*exit_code=(-?\d+)`)

// expectRootCause checks a failed run: the termination message's first
// line is the root cause and holds every want; the launcher's exit code is
// mpirun's own (or 73 when the launcher had to stop it). It returns that line.
func (f *fixture) expectRootCause(t *testing.T, r result, want ...string) string {
	t.Helper()
	msg, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("run-%s-%d", f.job, f.seq), "termination-log"))
	if err != nil {
		t.Fatalf("no termination message: %v\noutput:\n%s", err, r.out)
	}
	first, _, _ := strings.Cut(string(msg), "\n")
	if !strings.HasPrefix(first, "root cause: ") {
		t.Errorf("the termination message does not start with the root cause:\n%s", msg)
	}
	for _, w := range want {
		if !strings.Contains(first, w) {
			t.Errorf("root cause lacks %q:\n%s", w, first)
		}
	}
	if r.code == 0 {
		t.Errorf("launcher exit 0 after a failure")
	}
	if m := mpirunExitedRe.FindStringSubmatch(r.out); m != nil && r.code != 73 {
		if code, _ := strconv.Atoi(m[1]); code != r.code {
			t.Errorf("mpirun exited with %d but the launcher with %d: its code must pass through", code, r.code)
		}
	} else if m == nil {
		t.Errorf("no \"mpirun exited\" line in the launcher's log")
	}
	if !strings.Contains(r.out, "== "+first) {
		t.Errorf("the launcher's report lacks the root cause line")
	}
	if t.Failed() {
		t.Logf("termination message:\n%s\nlauncher output:\n%s", msg, r.out)
	}
	return first
}

// memCgroup is a memory cgroup the test created, with a limit.
type memCgroup struct {
	version int
	dir     string // on the host
	rel     string // below the memory hierarchy's root
}

// newMemCgroup creates a child of this process's memory cgroup (cgroup v1,
// as this machine and OpenShift 4.13 run) or of the v2 root, limited to
// limit bytes. Cleanup kills what is left in it by PID and removes it.
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "podmpi-e2e-" + hex.EncodeToString(b[:])
	cg := &memCgroup{}
	switch {
	case isFile("/sys/fs/cgroup/memory/memory.usage_in_bytes"):
		self, err := ownV1MemoryPath()
		if err != nil {
			t.Skipf("cgroup v1 memory hierarchy, but %v", err)
		}
		cg.version, cg.rel = 1, filepath.Join(self, name)
		cg.dir = filepath.Join("/sys/fs/cgroup/memory", cg.rel)
	case strings.Contains(readTrim("/sys/fs/cgroup/cgroup.controllers"), "memory"):
		cg.version, cg.rel = 2, "/"+name
		cg.dir = filepath.Join("/sys/fs/cgroup", name)
	default:
		t.Skip("no cgroup memory controller mounted at /sys/fs/cgroup")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Skipf("cannot create a memory cgroup: %v", err)
	}
	t.Cleanup(func() { cg.remove(t) })
	file, value := "memory.limit_in_bytes", strconv.FormatInt(limit, 10)
	if cg.version == 2 {
		file = "memory.max"
		if _, err := os.Stat(filepath.Join(cg.dir, file)); err != nil {
			t.Skipf("cgroup v2: the memory controller is not enabled for %s (cgroup.subtree_control of the root)", cg.dir)
		}
	}
	if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(value), 0o644); err != nil {
		t.Fatalf("setting the limit: %v", err)
	}
	return cg
}

// wrapper is the AgentOptions.Wrap that mounts the cgroup file system in
// the pod's own mount namespace (`ip netns exec` mounted a fresh sysfs,
// which hides the host's), moves the agent into the cgroup and drops to
// AnyUID, as the harness does.
func (cg *memCgroup) wrapper() []string {
	mount := "mount -t tmpfs -o mode=0755 podmpi-cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/memory && " +
		"mount -t cgroup -o memory podmpi-memory /sys/fs/cgroup/memory && echo $$ > /sys/fs/cgroup/memory" + cg.rel + "/cgroup.procs"
	if cg.version == 2 {
		mount = "mount -t cgroup2 podmpi-cgroup2 /sys/fs/cgroup && echo $$ > /sys/fs/cgroup" + cg.rel + "/cgroup.procs"
	}
	script := "set -e; " + mount + "; exec /usr/bin/setpriv --reuid=" + strconv.Itoa(AnyUID) + " --regid=" + strconv.Itoa(AnyGID) +
		` --clear-groups --inh-caps=-all --pdeathsig=keep -- "$@"`
	return []string{"/bin/sh", "-c", script, "podmpi-cgroup-wrap"}
}

// remove kills every process left in the cgroup by PID and removes it.
func (cg *memCgroup) remove(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := cg.pids()
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes %v still in %s", pids, cg.dir)
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		err := os.Remove(cg.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("removing %s: %v", cg.dir, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (cg *memCgroup) pids() []int {
	data, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// ownV1MemoryPath is this process's cgroup in the v1 memory hierarchy.
func ownV1MemoryPath() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",memory,") {
			return parts[2], nil
		}
	}
	return "", errors.New("/proc/self/cgroup names no memory cgroup")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}
