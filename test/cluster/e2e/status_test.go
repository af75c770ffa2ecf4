package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// TestTrainerStatus: Trainer's TrainJob status API (gate TrainJobStatus,
// which this cluster turns on under v2.2 and later) on an MPI TrainJob.
// Trainer gives its variables to the launcher only; rank 0 runs on a node
// pod and calls the Kubeflow SDK's own update_trainjob_status, unchanged:
// its progress shows in .status.trainerStatus, beside podmpi's metrics.
// A TrainJob whose rank fails says why there. The SDK is the venv of
// scripts/sdk-venv.sh, mounted read-only into the job's pods at its own
// path (a namespace without the restricted standard: hostPath), whose
// python is the image's (Debian bookworm's 3.11, as the host's).
func TestTrainerStatus(t *testing.T) {
	need(t)
	v := e.pins.Trainer[0]
	if !cluster.TrainerStatus(v) {
		t.Skipf("Trainer %s has no TrainJob status API", v)
	}
	tool(t, "controllers", "--trainer", v, "--mpi-operator", "none")
	installRuntimes(t, nil)
	py := sdkPython(t)
	ns := namespace(t, "status", false)
	rt := sdkMountedRuntime(t, ns, filepath.Dir(filepath.Dir(py)))

	t.Run("progress", func(t *testing.T) {
		tj := trainJob(t, rt)
		setNested(t, tj, "TrainingRuntime", "spec", "runtimeRef", "kind")
		setNested(t, tj, int64(2), "spec", "trainer", "numNodes")
		setNested(t, tj, []any{"mpirun", "bash", "-c", `if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
  echo "rank 0 on $(hostname)"
  ` + py + ` -c 'from kubeflow.trainer import update_trainjob_status as u; import sys; sys.exit(0 if u(progress_percent=50, metrics={"loss": 0.25}) else 1)' || exit 9
fi`}, "spec", "trainer", "args")
		r := runTrainJob(t, ns, tj, 4*time.Minute)
		if !r.complete {
			t.Fatalf("TrainJob %s: %s; launcher log:\n%s", r.name, r.message, lastLines(r.log, 40))
		}
		if !strings.Contains(r.log, "rank 0 on "+r.name+"-node-0-0") {
			t.Errorf("rank 0 did not run on a node pod:\n%s", lastLines(r.log, 20))
		}
		st := trainerStatus(t, ns, r.name)
		progress, _, _ := unstructured.NestedInt64(st, "progressPercentage")
		m := statusMetrics(st)
		if progress != 50 || m["loss"] != "0.25" || m["podmpi_phase"] != "succeeded" || m["podmpi_exit_code"] != "0" || m["podmpi_slots"] == "" ||
			m["podmpi_workers_expected"] != "2" || m["podmpi_workers_probed"] != "2" || m["podmpi_workers_reachable"] != "2" {
			t.Errorf(".status.trainerStatus: progress %d, metrics %v; want 50, loss 0.25, podmpi's end and both workers probed and reachable", progress, m)
		}
		lines := grepLines(r.log, "trainer-status")
		if !strings.Contains(lines, "reporting the launcher's state to the TrainJob's status") || strings.Contains(lines, `"level":"WARN"`) {
			t.Errorf("the launcher's status lines, want the INFO line and no warning:\n%s", lines)
		}
		t.Logf("TrainJob %s: .status.trainerStatus progress %d, metrics %v", r.name, progress, m)
	})

	t.Run("failure", func(t *testing.T) {
		tj := trainJob(t, rt)
		setNested(t, tj, "TrainingRuntime", "spec", "runtimeRef", "kind")
		setNested(t, tj, int64(2), "spec", "trainer", "numNodes")
		// Rank 1 lives 2 s, as a failing training process does: the
		// worker-agents sample their ranks every 500 ms, and one that ends
		// within milliseconds of its start may be seen by none.
		setNested(t, tj, []any{"mpirun", "bash", "-c", `[ "$OMPI_COMM_WORLD_RANK" = 1 ] && { sleep 2; exit 3; }; sleep 8`}, "spec", "trainer", "args")
		r := runTrainJob(t, ns, tj, 3*time.Minute)
		if r.complete {
			t.Fatalf("TrainJob %s completed; its rank 1 exits 3", r.name)
		}
		if took := r.finished.Sub(r.created); took > 2*time.Minute+30*time.Second {
			t.Errorf("Failed %s after creation", took.Round(time.Second))
		}
		m := statusMetrics(trainerStatus(t, ns, r.name))
		if m["podmpi_phase"] != "failed" || m["podmpi_exit_code"] != "3" || m["podmpi_reason"] != "RankFailed" ||
			!strings.Contains(m["podmpi_root_cause"], "rank 1") || !strings.HasPrefix(m["podmpi_root_cause_host"], r.name+"-node-0-") ||
			m["podmpi_root_cause_rank"] != "1" {
			t.Errorf(".status.trainerStatus.metrics of the failed TrainJob: %v", m)
		}
		t.Logf("TrainJob %s Failed (%s); .status.trainerStatus.metrics %v", r.name, r.message, m)
	})
}

// sdkMountedRuntime is a TrainingRuntime in ns: podmpi-openmpi with the SDK's venv
// (dir) mounted read-only at its own path in the launcher and node pods,
// and the launcher not a node (runLauncherAsNode false): every rank, rank 0
// too, runs on a node pod, which Trainer gives none of its status
// variables.
func sdkMountedRuntime(t *testing.T, ns, dir string) string {
	t.Helper()
	objs := readObjects(t, cluster.RuntimeFiles["openmpi"])
	if len(objs) != 1 {
		t.Fatalf("%s: want one runtime", cluster.RuntimeFiles["openmpi"])
	}
	rt := objs[0]
	cluster.SetImages(rt, e.info.Images["openmpi"])
	rt.SetKind("TrainingRuntime")
	rt.SetName("podmpi-openmpi-sdk")
	setNested(t, rt, false, "spec", "mlPolicy", "mpi", "runLauncherAsNode")
	rjs, _, _ := unstructured.NestedSlice(rt.Object, "spec", "template", "spec", "replicatedJobs")
	for i, rj := range rjs {
		pod, _, _ := unstructured.NestedMap(rj.(map[string]any), "template", "spec", "template", "spec")
		vols, _, _ := unstructured.NestedSlice(pod, "volumes")
		pod["volumes"] = append(vols, map[string]any{"name": "kubeflow-sdk", "hostPath": map[string]any{"path": dir, "type": "Directory"}})
		cs, _, _ := unstructured.NestedSlice(pod, "containers")
		for j := range cs {
			c := cs[j].(map[string]any)
			mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
			c["volumeMounts"] = append(mounts, map[string]any{"name": "kubeflow-sdk", "mountPath": dir, "readOnly": true})
			cs[j] = c
		}
		pod["containers"] = cs
		if err := unstructured.SetNestedMap(rj.(map[string]any), pod, "template", "spec", "template", "spec"); err != nil {
			t.Fatal(err)
		}
		rjs[i] = rj
	}
	if err := unstructured.SetNestedSlice(rt.Object, rjs, "spec", "template", "spec", "replicatedJobs"); err != nil {
		t.Fatal(err)
	}
	apply(t, ns, rt)
	return rt.GetName()
}

// trainerStatus is the TrainJob's .status.trainerStatus.
func trainerStatus(t *testing.T, ns, name string) map[string]any {
	t.Helper()
	o, err := getObj(ctxT(t, 30*time.Second), trainJobGVR, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	st, ok, _ := unstructured.NestedMap(o.Object, "status", "trainerStatus")
	if !ok {
		t.Fatalf("TrainJob %s has no .status.trainerStatus; status %v", name, o.Object["status"])
	}
	return st
}

// statusMetrics is a trainerStatus's metrics by name.
func statusMetrics(st map[string]any) map[string]string {
	ms, _, _ := unstructured.NestedSlice(st, "metrics")
	out := map[string]string{}
	for _, x := range ms {
		m, _ := x.(map[string]any)
		out[fmt.Sprint(m["name"])] = fmt.Sprint(m["value"])
	}
	return out
}
