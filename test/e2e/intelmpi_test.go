package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/environ"
)

// intelRoot is the Intel MPI that scripts/intelmpi.sh installs from PyPI's
// impi-rt and impi-devel wheels (a venv: bin/mpirun, bin/mpiexec.hydra,
// bin/hydra_bstrap_proxy, bin/mpicc, lib/libmpi.so.12, and mpi4py).
func intelRoot() string {
	if d := os.Getenv("PODMPI_INTELMPI_ROOT"); d != "" {
		return d
	}
	return "/var/cache/podmpi/intelmpi-2021.19.0/venv"
}

// intelEnv is what the Intel MPI image sets (images/intelmpi.Dockerfile),
// for the launcher pod and the worker-agents alike: podmpi's bin dir first
// on PATH, then Intel's, then the system's (whose /usr/bin/mpirun and
// mpiexec.hydra are Open MPI's and MPICH's: the shims must find Intel's,
// the next on PATH); libfabric's TCP provider between pods.
func intelEnv(root string) []string {
	return []string{"PATH=" + binDir() + ":" + filepath.Join(root, "bin") + ":/usr/bin:/bin", "I_MPI_ROOT=" + root,
		"I_MPI_FABRICS=shm:ofi", "FI_PROVIDER=tcp"}
}

// privateTmp runs "DIR cmd..." as AnyUID:AnyGID with a fresh tmpfs on DIR,
// seen only by cmd and its children: `ip netns exec` gives each pod
// command its own mount namespace. The launcher's TMPDIR there holds its
// private podmpi-rsh and socket, as a pod's own /tmp would: the pods of the
// harness share one file system, and a worker must not reach the
// launcher's files through it (a worker pod on Kubernetes cannot).
const privateTmp = `#!/bin/sh
set -e
dir=$1
shift
mount -t tmpfs -o mode=1777,size=64m podmpi-private-tmp "$dir"
exec setpriv --reuid=1000680000 --regid=0 --clear-groups --inh-caps=-all -- "$@"
`

// TestIntelMPI runs Intel MPI 2021 (PyPI's wheels, Debian's libfabric)
// across 1 launcher pod and 3 worker pods with 2 slots each, every process
// as the arbitrary UID, the launcher pod with a /tmp of its own, in the
// ways people start it: `launcher -- mpirun`, `mpirun -f` without the
// launcher (podmpi's mpirun runs its phases, then Intel's), a plain
// `mpiexec.hydra -f` with nothing of podmpi in front but its ssh, the
// `-hosts ... -bootstrap-exec-args "-p 2222"` horovodrun sends, Hydra's
// hierarchical launch (workers start other workers' proxies through
// podmpi's ssh in their worker-agent sessions) and mpi4py. The install is
// shared by every pod at one path, as Hydra needs: it starts
// hydra_bstrap_proxy by the absolute path it has on the launcher.
func TestIntelMPI(t *testing.T) {
	root := intelRoot()
	if _, err := os.Stat(filepath.Join(root, "bin/mpiexec.hydra")); err != nil {
		msg := fmt.Sprintf("Intel MPI: nothing in %s (scripts/intelmpi.sh installs it from PyPI)", root)
		if os.Getenv("PODMPI_E2E_INTELMPI") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx := testCtx(t, 8*time.Minute)
	// The C allreduce compiled with Intel's mpicc (gcc underneath; it links
	// with an rpath to Intel's lib).
	prog := filepath.Join(work, "progs", "allreduce-intel")
	cc := exec.CommandContext(ctx, filepath.Join(root, "bin/mpicc"), "-O2", "-o", prog, mustAbs(t, "testdata/allreduce.c"))
	cc.Env = append(os.Environ(), "I_MPI_ROOT="+root)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cc.Args, err, out)
	}
	wrapper := filepath.Join(work, "private-tmp")
	if err := os.WriteFile(wrapper, []byte(privateTmp), 0o755); err != nil {
		t.Fatal(err)
	}
	launcherTmp := filepath.Join(work, "launcher-tmp") // empty outside the launcher pod
	if err := MakeDir(launcherTmp); err != nil {
		t.Fatal(err)
	}
	env := intelEnv(root)
	if x := os.Getenv("DEBUG_INTEL_ENV"); x != "" {
		env = append(env, strings.Fields(x)...)
	}
	f := newFixture(t, "im", 3)
	for pod := 1; pod <= 3; pod++ {
		f.startAgent(t, ctx, pod, AgentOptions{Env: env})
	}
	perWorker := map[string]int{"im-node-0-0": 2, "im-node-0-1": 2, "im-node-0-2": 2}
	const runFor = 90 * time.Second
	hf := writeHostfile(t, f, "intel", 2, 1, 2, 3) // Trainer's "host slots=2"
	// start runs argv in the launcher pod as the arbitrary UID, with env
	// (the Intel variables, then extra) and a private /tmp.
	start := func(t *testing.T, name string, extra []string, argv ...string) result {
		t.Helper()
		run := f.runDir(t, name)
		penv := append(adoptEnv(run, env...), extra...)
		penv = environ.Set(penv, "PATH", environ.Get(env, "PATH"))
		penv = environ.Set(penv, "TMPDIR", launcherTmp)
		began := time.Now()
		p, err := f.c.Start(ctx, 0, -1, -1, penv, filepath.Join(f.c.LogDir(), name+".log"), wrapper, append([]string{launcherTmp}, argv...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop() })
		return wait(t, p, began, runFor)
	}
	launcherArgs := func(flags ...string) []string {
		return append([]string{bin.Launcher, "--ssh.auth-dir", authDir, "--log.format", "text"}, flags...)
	}

	// `launcher -- mpirun` with Intel's mpirun (a script around
	// mpiexec.hydra) after podmpi's on PATH, in the podmpi-intelmpi
	// runtime's shape (runLauncherAsNode: Trainer's hostfile lists the
	// launcher last, and it runs ranks too): the launcher detects Intel MPI,
	// writes its own entry as its host name (Hydra starts those ranks
	// without ssh) and runs Intel's mpirun, whose mpiexec.hydra call goes
	// through podmpi's mpiexec.hydra to Intel's.
	t.Run("launcher/mpirun/run-launcher-as-node", func(t *testing.T) {
		asNode := writeHostfile(t, f, "intel-as-node", 2, 1, 2, 3, 0)
		// Trainer's launcher environment too (Open MPI's names, which
		// Intel MPI ignores): the runtime keeps mpiImplementation OpenMPI.
		r := start(t, "launcher", TrainerLauncherEnv(asNode, 2),
			append(launcherArgs("--hostfile", asNode, "--self", f.c.Pod(0).ShortName), "--", "mpirun", prog)...)
		mustSucceed(t, r)
		want := map[string]int{"im-launcher-0-0": 2}
		for h, n := range perWorker {
			want[h] = n
		}
		checkAllreduce(t, r, 8, want)
		for _, want := range []string{"implementation=intelmpi", "im-node-0-0.im:2", "\nim-launcher-0-0:2\n",
			"== probe (3/3 workers reachable)", filepath.Join(root, "bin/hydra_bstrap_proxy")} {
			if !strings.Contains(r.out, want) {
				t.Errorf("launcher report lacks %q; output:\n%s", want, r.out)
			}
		}
	})

	// What mpi-operator gives an Intel MPIJob's launcher: its hostfile
	// (fully qualified names, host:N) named by I_MPI_HYDRA_HOST_FILE,
	// I_MPI_PERHOST and ssh arguments for the bootstrap program, which
	// podmpi's client takes.
	t.Run("launcher/mpirun/mpi-operator-env", func(t *testing.T) {
		opHosts := filepath.Join(work, "hostfile-im-operator")
		if err := os.WriteFile(opHosts, []byte("im-worker-0.im.default.svc:2\nim-worker-1.im.default.svc:2\nim-worker-2.im.default.svc:2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		opEnv := []string{"I_MPI_HYDRA_HOST_FILE=" + opHosts, "I_MPI_PERHOST=2", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS=-o ConnectionAttempts=10", "K_MPI_JOB_ROLE=launcher"}
		r := start(t, "operator", opEnv, append(launcherArgs("--hostfile", opHosts), "--", "mpirun", "-np", "6", prog)...)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
		if !strings.Contains(r.out, "== probe (3/3 workers reachable)") || !strings.Contains(r.out, "implementation=intelmpi") {
			t.Errorf("the launcher's phases did not run; output:\n%s", r.out)
		}
	})

	// `mpirun -f <Trainer's hostfile>` without `launcher --`: podmpi's
	// mpirun runs the launcher's phases and hands Intel's mpirun the
	// launcher's host:N file.
	t.Run("shim/mpirun-f", func(t *testing.T) {
		r := start(t, "shim", nil, "mpirun", "-f", hf, "-np", "6", prog)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
		for _, want := range []string{"== probe (3/3 workers reachable)", "implementation=intelmpi", "replacing the command's hostfile with the launcher's"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("output lacks %q: podmpi's mpirun did not run the launcher's phases", want)
			}
		}
	})

	// The same by mpiexec.hydra's name: podmpi's, first on PATH, runs the
	// phases, then the next mpiexec.hydra on PATH, Intel's (not MPICH's in
	// /usr/bin, which the name alone would suggest).
	t.Run("shim/mpiexec.hydra-f", func(t *testing.T) {
		r := start(t, "shim-hydra", nil, "mpiexec.hydra", "-f", hf, "-n", "3", "-ppn", "1", "hostname")
		mustSucceed(t, r)
		want := map[string]int{"im-node-0-0": 1, "im-node-0-1": 1, "im-node-0-2": 1}
		if got := countHosts(r.out, want); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("hostname lines per worker = %v, want %v; output:\n%s", got, want, r.out)
		}
		for _, want := range []string{"implementation=intelmpi", "im-node-0-0.im:2", "option=-f"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("output lacks %q; output:\n%s", want, r.out)
			}
		}
	})

	// Intel's own mpiexec.hydra by its path, nothing of podmpi in front:
	// Hydra's ssh bootstrap runs the first ssh on PATH, podmpi's client
	// (the job key from PODMPI_SSH_AUTH_DIR, port 2222). Without the
	// launcher nobody names the pod interface: on these pods' two NICs the
	// proxies' callback and libfabric need it said.
	hydraHosts := filepath.Join(work, "hostfile-im-hydra")
	if err := os.WriteFile(hydraHosts, []byte("im-node-0-0.im:2\nim-node-0-1.im:2\nim-node-0-2.im:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pinned := []string{"I_MPI_HYDRA_IFACE=eth0", "FI_TCP_IFACE=eth0"}
	t.Run("mpiexec.hydra-f/ssh", func(t *testing.T) {
		r := start(t, "hydra", pinned, filepath.Join(root, "bin/mpiexec.hydra"), "-f", hydraHosts, "-n", "6", prog)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
		if strings.Contains(r.out, "== probe") {
			t.Errorf("the launcher's phases ran; output:\n%s", r.out)
		}
	})

	// Hydra's hierarchical launch: with I_MPI_HYDRA_BRANCH_COUNT=1
	// mpiexec starts one hydra_bstrap_proxy, on the first worker, and that
	// proxy starts the others' through the ssh of its worker-agent
	// session (podmpi's client there; the launcher's private relay is in
	// the launcher pod's /tmp only).
	t.Run("hierarchical/branch-count", func(t *testing.T) {
		r := start(t, "tree", []string{"I_MPI_HYDRA_BRANCH_COUNT=1"},
			append(launcherArgs(f.workersFlag(3)...), "--", "mpirun", "-np", "6", prog)...)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
		// Each worker's proxy came over SSH from the worker before it: the
		// worker-agent of pod i logged a connection from pod i-1's address.
		for pod := 2; pod <= 3; pod++ {
			b, err := os.ReadFile(f.agents[pod].Log)
			if err != nil {
				t.Fatal(err)
			}
			from := `"msg":"ssh connection","component":"sshd","conn":`
			peer := `"remote":"` + f.c.Pod(pod-1).IP.String() + `:`
			found := false
			for l := range strings.SplitSeq(string(b), "\n") {
				found = found || strings.Contains(l, from) && strings.Contains(l, peer)
			}
			if !found {
				t.Errorf("the worker-agent of %s saw no SSH connection from %s (%s): no worker-to-worker launch", f.c.Pod(pod).Hostname, f.c.Pod(pod-1).Hostname, f.c.Pod(pod-1).IP)
			}
		}
	})

	// mpi4py's wheel on Intel MPI, as its documentation pairs them (pip
	// install mpi4py impi-rt): the venv's python3 loads Intel's libmpi.
	t.Run("mpi4py", func(t *testing.T) {
		r := start(t, "mpi4py", nil, append(launcherArgs(f.workersFlag(3)...), "--", "mpirun", "-np", "6", filepath.Join(root, "bin/python3"), allreducePy)...)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
		if n := strings.Count(r.out, "mpi4py"); n < 6 {
			t.Errorf("%d mpi4py rank lines, want 6", n)
		}
	})

	// What horovodrun runs for Intel MPI: `mpirun -l -n N -hosts h:s,...
	// -bootstrap=ssh -bootstrap-exec-args "-p 2222" cmd`. The command names
	// its hosts, so podmpi's mpirun runs Intel's at once; Hydra's ssh is
	// podmpi's, and PODMPI_SSH_PORT=1 (nothing listens there) shows that
	// the -p 2222 Hydra passes it is what it uses.
	t.Run("horovodrun/bootstrap-exec-args", func(t *testing.T) {
		hosts := "im-node-0-0.im:2,im-node-0-1.im:2,im-node-0-2.im:2"
		r := start(t, "horovodrun", append([]string{"PODMPI_SSH_PORT=1"}, pinned...),
			"mpirun", "-l", "-n", "6", "-hosts", hosts, "-bootstrap=ssh", "-bootstrap-exec-args", "-p 2222", prog)
		mustSucceed(t, r)
		r.out = rankLabel.ReplaceAllString(r.out, "") // -l: "[3] rank 3/6 ..."
		checkAllreduce(t, r, 6, perWorker)
	})

	// Ranks that fail (Intel's rank variable is PMI_RANK): the launcher
	// passes mpirun's code on and names the rank, its host and the cause,
	// from Hydra's report and the worker-agents' accounts.
	for _, d := range []struct {
		name, script string
		code         int
		cause        string
	}{
		{"rank-exit-7", `sleep 1; [ "$PMI_RANK" = 3 ] && exit 7; sleep 2`, 7,
			"root cause: rank 3 on im-node-0-1.im (bash) exited with status 7; hint: "},
		{"rank-segfault", `sleep 1; [ "$PMI_RANK" = 1 ] && kill -SEGV $$; sleep 5`, -1,
			"root cause: rank 1 on im-node-0-0.im (bash) "},
	} {
		t.Run("drill/"+d.name, func(t *testing.T) {
			r := start(t, d.name, nil, append(launcherArgs(f.workersFlag(3)...), "--", "mpirun", "-np", "6", "bash", "-c", d.script)...)
			if r.code == 0 || d.code > 0 && r.code != d.code {
				t.Errorf("exit %d, want %d (mpirun's code passed on)", r.code, d.code)
			}
			if !strings.Contains(r.out, d.cause) {
				t.Errorf("no %q in the output:\n%s", d.cause, r.out)
			}
			if d.name == "rank-segfault" && !strings.Contains(r.out, "SIGSEGV") {
				t.Errorf("the root cause does not name SIGSEGV:\n%s", r.out)
			}
		})
	}

	t.Run("no_leftovers", func(t *testing.T) {
		f.noLeftovers(t, 5*time.Second)
	})
}

// rankLabel is the "[rank] " Hydra's -l puts before each output line.
var rankLabel = regexp.MustCompile(`(?m)^\[\d+\] `)

// mustAbs is filepath.Abs or a fatal error.
func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
