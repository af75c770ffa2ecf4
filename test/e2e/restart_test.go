package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentRestartedBeforeTheDaemon: a worker-agent restarts after mpirun
// started but before the job's daemon reached it (mpirun here waits for a
// file the test writes once the new agent is ready); the daemon then runs
// on the new agent, and the job completes. The launcher, which asks every
// agent each second, finds an agent younger than the run that first runs
// none of its daemons, then runs one: it restarted before the daemon
// reached it, and nothing was replaced (the launcher used to stop mpirun,
// exit 74, at the new agent's first answer).
func TestAgentRestartedBeforeTheDaemon(t *testing.T) {
	ctx := testCtx(t, 5*time.Minute)
	f := newFixture(t, "ar", 3)
	f.startAgents(t, ctx, 1, 2, 3)
	marks, err := os.MkdirTemp(work, "ar-marks-") // the launcher's uid writes there
	if err == nil {
		err = MakeDir(marks)
	}
	if err != nil {
		t.Fatal(err)
	}
	started, gate := filepath.Join(marks, "started"), filepath.Join(marks, "gate")
	// The launcher's command says it runs (the launcher watches from
	// then), waits for the gate (a minute at most), then runs the real
	// mpirun with the launcher's wiring in its environment.
	script := `: > ` + started + `; i=0; while [ ! -e ` + gate + ` ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; ` +
		`exec mpirun.openmpi -np 6 ` + allreduceOMPI + ` 6`
	flags := append(f.workersFlag(3), "--mpi.implementation", "openmpi4", "--diagnosis.watch-interval", "1s")
	start := time.Now()
	p := f.launch(t, ctx, flags, "sh", "-c", script)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the launcher's command did not start within a minute:\n%s", readLog(p))
		}
	}
	// A second later ar-node-0-2's agent restarts: younger than the run by
	// far more than the launcher's margin for it (100 ms).
	time.Sleep(time.Second)
	f.startAgent(t, ctx, 3, AgentOptions{})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := wait(t, p, start, 2*time.Minute)
	mustSucceed(t, r)
	checkAllreduce(t, r, 6, map[string]int{"ar-node-0-0": 2, "ar-node-0-1": 2, "ar-node-0-2": 2})
	if strings.Contains(r.out, "another worker-agent answers under a worker's name") {
		t.Errorf("the restarted agent was taken for a replacement:\n%s", r.out)
	}
	if !strings.Contains(r.out, "runs this launcher's MPI daemon: it restarted before the daemon reached it") {
		t.Errorf("the launcher did not say that the restarted agent runs its daemon:\n%s", r.out)
	}
}
