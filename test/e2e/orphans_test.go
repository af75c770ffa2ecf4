package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/proc"
	"github.com/podmpi/podmpi/test/harness"
)

// TestLauncherReplacedEndsOrphans: launcher A's mpirun runs sleep on two
// workers; a client that declares nothing (a person's ssh from a worker,
// as Hydra's or Open MPI's tree spawn connects) ends nothing. A is then
// frozen with SIGSTOP, every process of its pod: its connections stay
// open and no FIN reaches the workers, as when a launcher's node dies.
// Launcher B of the same job, in a replacement pod, starts: A's orted and
// ranks are gone from both workers within seconds, each worker says so in
// its log (WARN, both launchers) and in /events (launcher-replaced), and
// the undeclared client's command runs on. B's own job runs to its end.
func TestLauncherReplacedEndsOrphans(t *testing.T) {
	ctx := testCtx(t, 4*time.Minute)
	f := newFixturePods(t, "or", []harness.PodSpec{
		{Hostname: "or-launcher-0-0", Role: harness.RoleLauncher, Publish: true},
		{Hostname: "or-node-0-0", Role: harness.RoleWorker, Publish: true},
		{Hostname: "or-node-0-1", Role: harness.RoleWorker, Publish: true},
		{Hostname: "or-launcher-0-0-b", Role: harness.RoleLauncher, Publish: true},
	})
	f.startAgents(t, ctx, 1, 2)
	workers := f.workersFlag(2)
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = f.c.KillPod(0) // SIGKILL ends stopped processes too
		}
	})

	// Launcher A: 2 ranks of sleep on each worker.
	a := f.launchIn(t, ctx, 0, workers, "mpirun.openmpi", "-np", "4", "sleep", "600")
	jobA := map[int][]Proc{}
	waitJob := func(what string, want func(map[int][]Proc) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			for _, pod := range []int{1, 2} {
				jobA[pod] = Procs(f.c, pod, f.agents[pod].PID())
			}
			if want(jobA) {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(a.Log)
				t.Fatalf("%s: workers run %v; launcher A's output:\n%s", what, jobA, b)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitJob("launcher A's ranks", func(m map[int][]Proc) bool {
		return countComm(m[1], "sleep") == 2 && countComm(m[2], "sleep") == 2
	})
	var pidsA []int
	for _, pod := range []int{1, 2} {
		for _, p := range jobA[pod] {
			pidsA = append(pidsA, p.PID)
		}
	}
	t.Logf("launcher A's processes on the workers: %v", jobA)

	// A client that declares nothing runs a command on worker 0 from the
	// other worker's pod.
	u, err := f.c.Start(context.Background(), 2, AnyUID, AnyGID, []string{"HOME=" + work, "PODMPI_SSH_AUTH_DIR=" + authDir},
		"", bin.WorkerAgent, "rsh", "-p", strconv.Itoa(SSHPort), f.workerName(0), "exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Stop() })
	var undeclared int
	sshDeadline := time.Now().Add(30 * time.Second)
	for undeclared == 0 && time.Now().Before(sshDeadline) {
		for _, p := range Procs(f.c, 1, f.agents[1].PID()) {
			if p.Comm == "sleep" && !slices.Contains(pidsA, p.PID) {
				undeclared = p.PID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if undeclared == 0 {
		t.Fatal("the undeclared client's command did not start on worker 0")
	}
	time.Sleep(2 * time.Second)
	if _, gone := running(pidsA); len(gone) > 0 {
		t.Fatalf("a client that declares nothing ended launcher A's processes %v", gone)
	}

	// A is lost: every process of its pod frozen, its connections open.
	for _, pid := range f.c.PIDs(0) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
	}
	frozen = true

	// Launcher B, the replacement pod, runs the job again.
	start := time.Now()
	b := f.launchIn(t, ctx, 3, workers, "mpirun.openmpi", "-np", "4", "sh", "-c", "sleep 3; hostname")
	deadline := time.Now().Add(30 * time.Second)
	for alive, _ := running(pidsA); len(alive) > 0 && time.Now().Before(deadline); alive, _ = running(pidsA) {
		time.Sleep(100 * time.Millisecond)
	}
	if left, _ := running(pidsA); len(left) > 0 {
		t.Fatalf("launcher A's processes %v still run %v after launcher B started", left, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("launcher A's orted and ranks ended %v after launcher B started", time.Since(start).Round(time.Millisecond))

	r := wait(t, b, start, 90*time.Second)
	if r.code != 0 {
		t.Errorf("launcher B exit %d, want 0; output:\n%s", r.code, r.out)
	}
	if want := map[string]int{"or-node-0-0": 2, "or-node-0-1": 2}; fmt.Sprint(countHosts(r.out, want)) != fmt.Sprint(want) {
		t.Errorf("launcher B's ranks: hostname lines %v, want 2 per worker", countHosts(r.out, want))
	}
	if alive, _ := running([]int{undeclared}); len(alive) == 0 {
		t.Errorf("the undeclared client's command (pid %d) was ended", undeclared)
	}

	for _, pod := range []int{1, 2} {
		log, err := os.ReadFile(f.agents[pod].Log)
		if err != nil {
			t.Fatal(err)
		}
		var warn string
		for l := range strings.SplitSeq(string(log), "\n") {
			if strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "a newer launcher of the job connected") {
				warn = l
			}
		}
		if !strings.Contains(warn, "launcher or-launcher-0-0 (") || !strings.Contains(warn, "launcher or-launcher-0-0-b (") {
			t.Errorf("worker %s: no WARN naming both launchers; log:\n%s", f.c.Pod(pod).Hostname, tailBytes(log, 6000))
		}
		code, body, err := HTTPGetInPod(ctx, f.c, 3, net.JoinHostPort(f.c.Pod(pod).IP.String(), strconv.Itoa(WebPort)), "/events")
		if err != nil || code != 200 || !strings.Contains(body, `"kind": "launcher-replaced"`) || !strings.Contains(body, `"hostname": "or-launcher-0-0-b"`) {
			t.Errorf("worker %s: /events = %d %v, want a launcher-replaced event:\n%s", f.c.Pod(pod).Hostname, code, err, body)
		}
	}

	if err := f.c.KillPod(0); err != nil {
		t.Error(err)
	}
	frozen = false
	_ = u.Stop()
	f.noLeftovers(t, 10*time.Second)
}

func countComm(ps []Proc, comm string) int {
	n := 0
	for _, p := range ps {
		if p.Comm == comm {
			n++
		}
	}
	return n
}

// running lists the pids that still run (a zombie has ended); gone the
// others.
func running(pids []int) (alive, gone []int) {
	for _, pid := range pids {
		if st, err := proc.ReadStat(proc.DefaultRoot, pid); err == nil && !st.Exited() {
			alive = append(alive, pid)
		} else {
			gone = append(gone, pid)
		}
	}
	return alive, gone
}
