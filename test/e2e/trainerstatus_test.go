package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvKubeflowSDK names a python3 with the Kubeflow SDK (package kubeflow,
// .ci/run installs one with scripts/sdk-venv.sh): the ranks of the status
// test call its update_trainjob_status unchanged.
const EnvKubeflowSDK = "PODMPI_KUBEFLOW_SDK"

// TestTrainerStatus: Trainer's status API gives its variables to the
// launcher's pod only; with podmpi, rank 0 on a worker pod calls the
// Kubeflow SDK's own update_trainjob_status, unchanged, and its progress
// reaches Trainer with the launcher's token, beside the launcher's own
// metrics; the rank never sees Trainer's token file. Under Open MPI (the
// ranks get the worker-agent's session variables) and MPICH (Hydra gives
// them mpiexec's, which name the launcher's port and files).
func TestTrainerStatus(t *testing.T) {
	py := os.Getenv(EnvKubeflowSDK)
	if py == "" {
		t.Skip(EnvKubeflowSDK + " is not set: no python3 with the Kubeflow SDK for the ranks (scripts/sdk-venv.sh prints one)")
	}
	ctx := testCtx(t, 6*time.Minute)
	f := newFixture(t, "st", 2)
	f.startAgents(t, ctx, 1, 2)
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"openmpi", []string{"mpirun.openmpi", "-np", "2", "--map-by", "node"}},
		{"mpich", []string{"mpiexec.hydra", "-np", "2", "-ppn", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := StartFakeTrainer(f.c, 0, filepath.Join(work, "trainer-"+tc.name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tr.Close)
			// Each rank prints where its variables point; rank 0 (on
			// st-node-0-0) reports 50 % and a loss through the SDK.
			script := `echo "rank ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} on $(hostname): url=$KUBEFLOW_TRAINER_SERVER_URL token=$KUBEFLOW_TRAINER_SERVER_TOKEN"
if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 0 ]; then
  ` + py + ` -c 'from kubeflow.trainer import update_trainjob_status as u; import sys; ok = u(progress_percent=50, metrics={"loss": 0.25}); print("sdk sent" if ok else "sdk not sent"); sys.exit(0 if ok else 1)'
fi`
			f.seq++
			run := filepath.Join(work, fmt.Sprintf("run-%s-%d", f.job, f.seq))
			start := time.Now()
			p, err := StartLauncher(ctx, f.c, 0, bin, LauncherOptions{
				AuthDir: authDir, RunDir: run, Flags: f.workersFlag(2), Env: tr.Env,
				Command: append(append([]string{}, tc.argv...), "sh", "-c", script),
				Log:     filepath.Join(f.c.LogDir(), fmt.Sprintf("launcher-%d.log", f.seq)),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop() })
			r := wait(t, p, start, 4*time.Minute)
			mustSucceed(t, r)
			if !strings.Contains(r.out, "sdk sent") {
				t.Fatalf("the SDK on rank 0 did not send its status:\n%s", r.out)
			}
			for _, l := range strings.Split(r.out, "\n") {
				if strings.HasPrefix(l, "rank ") && (!strings.Contains(l, "url=https://127.0.0.1:") || strings.Contains(l, "token="+filepath.Join(work, "trainer-"+tc.name))) {
					t.Errorf("a rank's variables: %s", l)
				}
			}
			got := tr.Requests()
			var rank0, last *FakeTrainerRequest
			for i := range got {
				if got[i].Auth != "Bearer "+FakeTrainerToken {
					t.Errorf("a request reached Trainer without the job's token: %q", got[i].Auth)
				}
				if got[i].Metric("loss") == "0.25" && rank0 == nil {
					rank0 = &got[i]
				}
			}
			if len(got) > 0 {
				last = &got[len(got)-1]
			}
			// The launcher paces its requests (one per 5 s): rank 0's
			// status goes at once or with the next request, the end's.
			if rank0 == nil || rank0.Status.ProgressPercentage == nil || *rank0.Status.ProgressPercentage != 50 || rank0.Metric("podmpi_phase") == "" {
				t.Fatalf("Trainer never got rank 0's status with the launcher's metrics: %+v", got)
			}
			if last.Metric("podmpi_phase") != "succeeded" || last.Metric("loss") != "0.25" || last.Status.ProgressPercentage == nil {
				t.Errorf("the last request lost the rank's progress or lacks the end: %+v", *last)
			}
			if n := len(got); n > 6 {
				t.Errorf("%d requests to Trainer for a job of a few seconds", n)
			}
			t.Logf("%s: %d requests to Trainer; rank 0's progress %d reached it (launcher phase %s); last phase %s, exit code %s", tc.name, len(got),
				*rank0.Status.ProgressPercentage, rank0.Metric("podmpi_phase"), last.Metric("podmpi_phase"), last.Metric("podmpi_exit_code"))
		})
	}
}
