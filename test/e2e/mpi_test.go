package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// TestMPI runs real jobs through the launcher and 3 worker-agents x 2 slots,
// one cluster shared by every subtest. Every pod has the docker0-like second
// interface, so each passing allreduce also proves that the launcher's
// wiring picked the pod interface by itself.
func TestMPI(t *testing.T) {
	ctx := testCtx(t, 8*time.Minute)
	f := newFixture(t, "tj", 3)
	f.startAgents(t, ctx, 1, 2, 3)
	perWorker := map[string]int{"tj-node-0-0": 2, "tj-node-0-1": 2, "tj-node-0-2": 2}
	const runFor = 90 * time.Second

	t.Run("openmpi/hostname/template", func(t *testing.T) {
		// No -np: the launcher injects the sum of the slots (6).
		r := f.run(t, ctx, runFor, []string{"--discovery.template", "tj-node-0-{i}.tj", "--workers-expected", "3"},
			"mpirun.openmpi", "hostname")
		mustSucceed(t, r)
		if got := countHosts(r.out, perWorker); fmt.Sprint(got) != fmt.Sprint(perWorker) {
			t.Errorf("hostname lines per worker = %v, want %v; output:\n%s", got, perWorker, r.out)
		}
		// The human report: hostfile, probe table, init time.
		for _, want := range []string{
			"== hostfile", "tj-node-0-0.tj slots=2", "tj-node-0-1.tj slots=2", "tj-node-0-2.tj slots=2",
			"== probe (3/3 workers reachable)", "tj-node-0-1.tj:2222", "/usr/bin/orted", "== init done in",
		} {
			if !strings.Contains(r.out, want) {
				t.Errorf("launcher report lacks %q; output:\n%s", want, r.out)
			}
		}
	})

	t.Run("openmpi/allreduce/mpi-operator-names", func(t *testing.T) {
		// mpi-operator's hostfile names: <job>-worker-<i>.<job>.<ns>.svc.
		r := f.run(t, ctx, runFor,
			[]string{"--workers", "tj-worker-0.tj.default.svc,tj-worker-1.tj.default.svc,tj-worker-2.tj.default.svc"},
			"mpirun.openmpi", "-np", "6", allreduceOMPI)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
	})

	t.Run("openmpi/mpi4py/srv", func(t *testing.T) {
		if mpi4pyMissing != "" {
			t.Skip(mpi4pyMissing)
		}
		// Discovery by the _ssh._tcp SRV records of the headless Service.
		r := f.run(t, ctx, runFor, []string{"--discovery.service", "tj", "--workers-expected", "3"},
			"mpirun.openmpi", "/usr/bin/python3", allreducePy)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
		if n := strings.Count(r.out, "mpi4py"); n < 6 {
			t.Errorf("%d mpi4py rank lines, want 6", n)
		}
	})

	t.Run("openmpi/allreduce/run-launcher-as-node", func(t *testing.T) {
		// Trainer v2 runLauncherAsNode: the launcher's own name is in the
		// hostfile (last, after the node job's pods) and it runs ranks itself.
		hf := filepath.Join(work, "hostfile-launcher-as-node")
		content := "tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-node-0-2.tj slots=2\ntj-launcher-0-0.tj slots=2\n"
		if err := os.WriteFile(hf, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		r := f.run(t, ctx, runFor, []string{"--hostfile", hf, "--self", "tj-launcher-0-0.tj"}, "mpirun.openmpi", allreduceOMPI)
		mustSucceed(t, r)
		want := map[string]int{"tj-launcher-0-0": 2}
		for h, n := range perWorker {
			want[h] = n
		}
		checkAllreduce(t, r, 8, want)
		if !strings.Contains(r.out, "== probe (3/3 workers reachable)") {
			t.Errorf("the launcher must probe the 3 workers but not itself; output:\n%s", r.out)
		}
	})

	t.Run("mpich/allreduce/run-launcher-as-node", func(t *testing.T) {
		// The same hostfile under MPICH: Hydra must run the launcher's own
		// entry locally (it would ssh to it, where no worker-agent listens,
		// and mpiexec.hydra then never exits).
		hf := filepath.Join(work, "hostfile-launcher-as-node-mpich")
		content := "tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-node-0-2.tj slots=2\ntj-launcher-0-0.tj slots=2\n"
		if err := os.WriteFile(hf, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		r := f.run(t, ctx, runFor, []string{"--hostfile", hf, "--self", "tj-launcher-0-0.tj"}, "mpiexec.hydra", allreduceMPICH)
		mustSucceed(t, r)
		want := map[string]int{"tj-launcher-0-0": 2}
		for h, n := range perWorker {
			want[h] = n
		}
		checkAllreduce(t, r, 8, want)
	})

	t.Run("mpich/hostname/workers", func(t *testing.T) {
		r := f.run(t, ctx, runFor, f.workersFlag(3), "mpiexec.hydra", "hostname")
		mustSucceed(t, r)
		if got := countHosts(r.out, perWorker); fmt.Sprint(got) != fmt.Sprint(perWorker) {
			t.Errorf("hostname lines per worker = %v, want %v; output:\n%s", got, perWorker, r.out)
		}
		if !strings.Contains(r.out, "tj-node-0-0.tj:2") {
			t.Errorf("MPICH hostfile (host:slots) not in the report; output:\n%s", r.out)
		}
	})

	t.Run("mpich/allreduce/srv", func(t *testing.T) {
		r := f.run(t, ctx, runFor, []string{"--discovery.service", "tj", "--workers-expected", "3"},
			"mpiexec.hydra", "-n", "6", allreduceMPICH)
		mustSucceed(t, r)
		checkAllreduce(t, r, 6, perWorker)
	})

	t.Run("connections-per-worker", func(t *testing.T) {
		// With sharing (the default), mpirun's daemons run on the probe's
		// connection: each worker-agent sees one connection per job; with
		// PODMPI_E2E_SHARE=off, the probe's and podmpi-rsh's own.
		want := 1
		if len(ShareEnv()) > 0 {
			want = 2
		}
		for _, job := range []struct{ mpirun, prog string }{{"mpirun.openmpi", allreduceOMPI}, {"mpiexec.hydra", allreduceMPICH}} {
			before := f.agentConnections(t)
			r := f.run(t, ctx, runFor, f.workersFlag(3), job.mpirun, "-np", "6", job.prog)
			mustSucceed(t, r)
			checkAllreduce(t, r, 6, perWorker)
			for pod, n := range f.agentConnections(t) {
				if got := n - before[pod]; got != want {
					t.Errorf("%s: worker-agent of pod %d saw %d connections during the job, want %d", job.mpirun, pod, got, want)
				}
			}
		}
	})

	t.Run("no_leftovers", func(t *testing.T) {
		f.noLeftovers(t, 5*time.Second)
	})
}

// TestLateWorkers starts the launcher before any worker exists: it waits for
// DNS with progress, and succeeds once the workers are published and their
// agents start 5 s later (tcp-refused while an agent starts is retried).
func TestLateWorkers(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	f := newFixture(t, "lw", 3, 1, 2, 3)
	start := time.Now()
	p := f.launch(t, ctx, []string{"--discovery.template", "lw-node-0-{i}.lw", "--workers-expected", "3",
		"--discovery.timeout", "60s", "--probe.timeout", "60s"}, "mpirun.openmpi", allreduceOMPI)
	select {
	case <-p.Done():
		b, _ := os.ReadFile(p.Log)
		t.Fatalf("launcher exited %d before the workers existed; output:\n%s", p.ExitCode(), b)
	case <-time.After(5 * time.Second):
	}
	for pod := 1; pod <= 3; pod++ {
		if err := f.c.Publish(ctx, pod); err != nil {
			t.Fatal(err)
		}
		f.startAgent(t, ctx, pod, AgentOptions{})
	}
	r := wait(t, p, start, 90*time.Second)
	mustSucceed(t, r)
	if r.took < 5*time.Second {
		t.Errorf("launcher finished in %v, before the workers started", r.took)
	}
	checkAllreduce(t, r, 6, map[string]int{"lw-node-0-0": 2, "lw-node-0-1": 2, "lw-node-0-2": 2})
	// Progress while waiting: "0/3 workers resolved; waiting for ...".
	if !strings.Contains(r.out, "0/3 workers resolved") || !strings.Contains(r.out, "waiting for") {
		t.Errorf("no discovery progress in the output:\n%s", r.out)
	}
	if i, j := strings.Index(r.out, "0/3 workers resolved"), strings.Index(r.out, "== hostfile"); i < 0 || j < 0 || i > j {
		t.Errorf("progress must come before the hostfile report:\n%s", r.out)
	}
}

// TestLateWorkersWithoutProbe: with the probe skipped, the first thing to
// reach a worker is mpirun's podmpi-rsh; the agents start 5 s after
// mpirun, and the launcher's shared sessions (or, with sharing off, each
// podmpi-rsh) wait for them (PODMPI_SSH_WAIT) instead of failing.
func TestLateWorkersWithoutProbe(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	f := newFixture(t, "lp", 2)
	perWorker := map[string]int{"lp-node-0-0": 2, "lp-node-0-1": 2}
	for _, job := range []struct{ mpirun, prog string }{{"mpirun.openmpi", allreduceOMPI}, {"mpiexec.hydra", allreduceMPICH}} {
		start := time.Now()
		p := f.launch(t, ctx, append(f.workersFlag(2), "--slots", "2", "--probe.skip"), job.mpirun, "-np", "4", job.prog)
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			t.Fatalf("%s: launcher exited %d before the agents started; output:\n%s", job.mpirun, p.ExitCode(), b)
		case <-time.After(5 * time.Second):
		}
		f.startAgents(t, ctx, 1, 2)
		r := wait(t, p, start, 90*time.Second)
		mustSucceed(t, r)
		checkAllreduce(t, r, 4, perWorker)
		f.stopAgent(t, 1)
		f.stopAgent(t, 2)
	}
	f.noLeftovers(t, 5*time.Second)
}

// TestLauncherInWorkersGroup: the launcher is pod 0 of the workers' own
// indexed group (a JobSet with one replicated job, an Indexed Job): its
// name, ig-node-0-0, looks like a sibling of every worker's, and the job
// runs; a name is no proof of another launcher.
func TestLauncherInWorkersGroup(t *testing.T) {
	ctx := testCtx(t, 4*time.Minute)
	pods := []harness.PodSpec{{Hostname: "ig-node-0-0", Role: harness.RoleLauncher, Publish: true}}
	for i := 1; i <= 2; i++ {
		pods = append(pods, harness.PodSpec{Hostname: fmt.Sprintf("ig-node-0-%d", i), Role: harness.RoleWorker, Publish: true})
	}
	f := newFixturePods(t, "ig", pods)
	f.startAgents(t, ctx, 1, 2)
	// The hostfile lists the launcher's own entry first, as Trainer's
	// runLauncherAsNode does.
	r := f.run(t, ctx, 90*time.Second, []string{"--workers", "ig-node-0-0.ig=2,ig-node-0-1.ig=2,ig-node-0-2.ig=2"},
		"mpirun.openmpi", "-np", "6", allreduceOMPI)
	mustSucceed(t, r)
	checkAllreduce(t, r, 6, map[string]int{"ig-node-0-0": 2, "ig-node-0-1": 2, "ig-node-0-2": 2})
}
