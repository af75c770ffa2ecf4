package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// TestTrainerStatus: Trainer's TrainJob status API (gate TrainJobStatus,
// which this cluster turns on under v2.2 and later) on MPI TrainJobs.
// Trainer gives its variables to the launcher only; rank 0 calls the
// Kubeflow SDK's own update_trainjob_status, unchanged, from a node pod
// (the launcher not a node) or from the launcher's pod (a node, where Open
// MPI puts rank 0 on mpirun's own host): its progress shows in
// .status.trainerStatus, beside podmpi's metrics.
// The SDK is the venv of scripts/sdk-venv.sh, mounted read-only into the
// job's pods at its own path (a namespace without the restricted standard:
// hostPath), whose python is the image's (Debian bookworm's 3.11, as the
// host's). The namespace has deploy/rbac: the failures' Events are checked
// too.
//
// Under both layouts of the runtime (the shipped one, whose launcher runs
// ranks too, and the launcher not a node), side by side: statusRuns
// successful TrainJobs in a row, each with more work than Trainer's pace of
// one request per trainerPace and rank 0 posting its
// progress near the end, must each end with podmpi's end state in the
// status, the rank's last post beside it; and a rank that exits within its
// first millisecond, on a node pod and (launcher as a node) on the
// launcher's pod, must be named with the host it printed itself, in the
// status and in the Warning Event.
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
	applyRBAC(t, ns)
	venv := filepath.Dir(filepath.Dir(py))
	layouts := []statusLayout{
		{name: "launcher-as-node", runtime: sdkMountedRuntime(t, ns, venv, "podmpi-openmpi-sdk-node", true), launcherAsNode: true},
		{name: "launcher-off", runtime: sdkMountedRuntime(t, ns, venv, "podmpi-openmpi-sdk", false)},
	}

	t.Run("progress", func(t *testing.T) {
		tj := statusTrainJob(t, layouts[1].runtime, `if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
  echo "rank 0 on $(hostname)"
  `+sdkPost(py, 50, `"loss": 0.25`)+`
fi`)
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
		checkStatusLines(t, r.log)
		t.Logf("TrainJob %s: .status.trainerStatus progress %d, metrics %v", r.name, progress, m)
	})

	t.Run("layouts", func(t *testing.T) {
		for _, lay := range layouts {
			t.Run(lay.name, func(t *testing.T) {
				t.Parallel()
				t.Run(fmt.Sprintf("%d-in-a-row", statusRuns), func(t *testing.T) {
					t.Parallel()
					statusInARow(t, ns, py, lay)
				})
				t.Run("rank-exits-at-once/node-pod", func(t *testing.T) {
					t.Parallel()
					rankExitsAtOnce(t, ns, lay, "*-node-0-0")
				})
				if lay.launcherAsNode {
					t.Run("rank-exits-at-once/launcher-pod", func(t *testing.T) {
						t.Parallel()
						rankExitsAtOnce(t, ns, lay, "*-launcher-0-0")
					})
				}
			})
		}
	})
}

// statusLayout is a runtime of TestTrainerStatus: the launcher a node
// (it runs ranks, as the shipped runtime has it) or not.
type statusLayout struct {
	name           string
	runtime        string
	launcherAsNode bool
}

// statusRuns is how many successful TrainJobs in a row each layout runs.
const statusRuns = 5

// trainerPace is the least time between two of the launcher's requests to
// Trainer's status endpoint (podmpi's trainerstatus.MinInterval, the
// Kubeflow SDK's own pace).
const trainerPace = 5 * time.Second

// statusTrainJob is a TrainJob on rt (a TrainingRuntime of the test's
// namespace) of 2 nodes x 1 rank, small requests, whose ranks run script.
func statusTrainJob(t *testing.T, rt, script string) *unstructured.Unstructured {
	t.Helper()
	tj := trainJob(t, rt)
	setNested(t, tj, "TrainingRuntime", "spec", "runtimeRef", "kind")
	setNested(t, tj, int64(2), "spec", "trainer", "numNodes")
	setNested(t, tj, int64(1), "spec", "trainer", "numProcPerNode")
	setNested(t, tj, "50m", "spec", "trainer", "resourcesPerNode", "requests", "cpu")
	setNested(t, tj, "256Mi", "spec", "trainer", "resourcesPerNode", "requests", "memory")
	setNested(t, tj, []any{"mpirun", "bash", "-c", script}, "spec", "trainer", "args")
	return tj
}

// sdkPost is a shell line that posts progress and metrics (a Python dict's
// inside) with the SDK's update_trainjob_status and exits 9 when it
// returns False.
func sdkPost(py string, progress int, metrics string) string {
	return py + fmt.Sprintf(` -c 'from kubeflow.trainer import update_trainjob_status as u; import sys; sys.exit(0 if u(progress_percent=%d, metrics={%s}) else 1)' || exit 9`, progress, metrics)
}

// checkStatusLines: the launcher said it reports to the TrainJob's status,
// and never warned about it.
func checkStatusLines(t *testing.T, log string) {
	t.Helper()
	lines := grepLines(log, "trainer-status")
	if !strings.Contains(lines, "reporting the launcher's state to the TrainJob's status") || strings.Contains(lines, `"level":"WARN"`) {
		t.Errorf("the launcher's status lines, want the INFO line and no warning:\n%s", lines)
	}
}

// statusInARow runs statusRuns TrainJobs one after the other on the
// layout's runtime, each about 10 s of work, twice Trainer's pace: rank 0
// posts progress 50 after 2 s and 90 a second before the end, inside the
// pace of the launcher's own requests. Each must be Complete with
// podmpi's end (phase succeeded, exit code 0) and the rank's last post in
// its status as soon as it is Complete: the launcher's end goes without the
// pace, and before the launcher exits.
func statusInARow(t *testing.T, ns, py string, lay statusLayout) {
	script := `sleep 2
if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then ` + sdkPost(py, 50, `"step": 1`) + `; fi
sleep 6
if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then ` + sdkPost(py, 90, `"step": 2`) + `; fi
sleep 1`
	var took []string
	for i := 1; i <= statusRuns; i++ {
		tj := statusTrainJob(t, lay.runtime, script)
		r := runTrainJob(t, ns, tj, 4*time.Minute)
		if !r.complete {
			t.Fatalf("run %d of %d: TrainJob %s: %s; launcher log:\n%s", i, statusRuns, r.name, r.message, lastLines(r.log, 40))
		}
		st := trainerStatus(t, ns, r.name)
		progress, _, _ := unstructured.NestedInt64(st, "progressPercentage")
		m := statusMetrics(st)
		if m["podmpi_phase"] != "succeeded" || m["podmpi_exit_code"] != "0" || progress != 90 || m["step"] != "2" {
			t.Errorf("run %d of %d: TrainJob %s Complete, .status.trainerStatus progress %d, metrics %v; want podmpi_phase succeeded, podmpi_exit_code 0, and rank 0's last post (progress 90, step 2)",
				i, statusRuns, r.name, progress, m)
		}
		checkStatusLines(t, r.log)
		work := rankWork(r)
		if work < 2*trainerPace-time.Second {
			t.Errorf("run %d: the launcher ran mpirun %s, want about 10 s, twice the pace of %s", i, work, trainerPace)
		}
		took = append(took, fmt.Sprintf("%s (mpirun %s)", r.finished.Sub(r.created).Round(100*time.Millisecond), work.Round(100*time.Millisecond)))
	}
	t.Logf("%s: %d TrainJobs in a row Complete, each with podmpi_phase succeeded, podmpi_exit_code 0 and rank 0's last post in its status; created to Complete: %s",
		lay.name, statusRuns, strings.Join(took, ", "))
}

// rankWork is how long the launcher's mpirun ran, from its "phase done"
// line; 0 when it logged none.
func rankWork(r trainJobResult) time.Duration {
	for _, line := range strings.Split(r.log, "\n") {
		var j struct {
			Msg     string  `json:"msg"`
			Phase   string  `json:"phase"`
			Seconds float64 `json:"seconds"`
		}
		if json.Unmarshal([]byte(line), &j) == nil && j.Msg == "phase done" && j.Phase == "mpirun" {
			return time.Duration(j.Seconds * float64(time.Second))
		}
	}
	return 0
}

// atOnceRuns is how many times rankExitsAtOnce runs its TrainJob when
// Open MPI names no failed process.
const atOnceRuns = 3

// atOnceLine is what the failing rank of rankExitsAtOnce prints before it
// exits: its rank and its host.
var atOnceLine = regexp.MustCompile(`(?m)^podmpi-exits-at-once: rank (\d+) on (\S+)$`)

// rankExitsAtOnce: the rank on the pod whose host name matches pattern (a
// shell pattern) prints its rank and host and exits 5, all within its first
// millisecond (bash's own echo and $HOSTNAME: no process started); the
// others sleep. The TrainJob fails, and podmpi names that rank on that
// host: in .status.trainerStatus (podmpi_root_cause_host and _rank, the
// exit code and the reason) and in the RankFailed Warning on the TrainJob.
// The host is the one the rank printed, not one the test works out.
//
// Open MPI 4 does not always say which rank failed: when the other ranks'
// end (the job's abort) overtakes it, mpirun prints only that 1 process
// returned a non-zero exit code, with no process name and no binding
// report, and the agents' 500 ms account never saw a rank that lived a
// millisecond. podmpi then says it does not know, as it must. Such a run
// (no host named, and no "Process name:" in mpirun's output) is run again,
// up to atOnceRuns times, and logged; a host that podmpi names is checked
// at once. The rank on mpirun's own host (the launcher's pod) goes
// unnamed most often: its end reaches mpirun before the remote daemons
// have said their ranks started, and all atOnceRuns runs may go so (CI saw
// it): then the last one must carry podmpi's honest "root cause unknown"
// everywhere (checkUnnamed), never a host or rank.
func rankExitsAtOnce(t *testing.T, ns string, lay statusLayout, pattern string) {
	var r trainJobResult
	var m map[string]string
	var rank, host string
	named := false
	for run := 1; ; run++ {
		tj := statusTrainJob(t, lay.runtime, `case "$HOSTNAME" in `+pattern+`) echo "podmpi-exits-at-once: rank $OMPI_COMM_WORLD_RANK on $HOSTNAME"; exit 5;; esac; sleep 30`)
		r = runTrainJob(t, ns, tj, 3*time.Minute)
		if r.complete {
			t.Fatalf("TrainJob %s completed; a rank exits 5", r.name)
		}
		if took := r.finished.Sub(r.created); took > 2*time.Minute {
			t.Errorf("Failed %s after creation", took.Round(time.Second))
		}
		p := atOnceLine.FindStringSubmatch(r.log)
		if p == nil {
			t.Fatalf("the failing rank's own line is not in the launcher's log (mpirun's output):\n%s", lastLines(r.log, 40))
		}
		rank, host = p[1], p[2]
		m = statusMetrics(trainerStatus(t, ns, r.name))
		named = m["podmpi_root_cause_host"] != "" || strings.Contains(r.log, "Process name:")
		if named || run == atOnceRuns {
			break
		}
		t.Logf("%s: run %d of at most %d: mpirun named no failed process (its output has no process name) and podmpi named no host (%q): run again",
			lay.name, run, atOnceRuns, m["podmpi_root_cause"])
	}
	if !named {
		checkUnnamed(t, ns, lay, r, m, rank, host)
		return
	}
	causeHost, _, _ := strings.Cut(m["podmpi_root_cause_host"], ".")
	if m["podmpi_phase"] != "failed" || m["podmpi_exit_code"] != "5" || m["podmpi_reason"] != "RankFailed" ||
		causeHost != host || m["podmpi_root_cause_rank"] != rank || !strings.Contains(m["podmpi_root_cause"], "rank "+rank) {
		t.Errorf("rank %s on %s exited 5; .status.trainerStatus.metrics of the failed TrainJob: %v; want podmpi_phase failed, podmpi_exit_code 5, podmpi_reason RankFailed, the root cause's host %s and rank %s",
			rank, host, m, host, rank)
	}
	var warning string
	for _, ev := range podmpiEvents(t, ns, "TrainJob", r.name) {
		if ev.Type == corev1.EventTypeWarning && ev.Reason == "RankFailed" {
			warning = ev.Message
		}
	}
	if !strings.Contains(warning, host) || !strings.Contains(warning, "rank "+rank) {
		t.Errorf("podmpi's RankFailed Warning on TrainJob %s does not name rank %s on %s: %q", r.name, rank, host, warning)
	}
	msg := launcherEvidence(t, ns, r, "rank "+rank, host)
	t.Logf("%s: rank %s on %s exited 5 at once; Failed %s after creation; status %s rank %s; Warning: %s; termination message: %s", lay.name, rank, host,
		r.finished.Sub(r.created).Round(time.Second), m["podmpi_root_cause_host"], m["podmpi_root_cause_rank"], warning, firstLine(msg))
}

// checkUnnamed: in the run where neither mpirun nor podmpi named the rank
// that exited 5 (rank on host), podmpi says the root cause is unknown in
// the status, the Warning Event and the termination message, and names
// no host or rank.
func checkUnnamed(t *testing.T, ns string, lay statusLayout, r trainJobResult, m map[string]string, rank, host string) {
	t.Helper()
	if m["podmpi_phase"] != "failed" || m["podmpi_exit_code"] != "5" || m["podmpi_reason"] != "MPIRunFailed" ||
		m["podmpi_root_cause_host"] != "" || m["podmpi_root_cause_rank"] != "" {
		t.Errorf("rank %s on %s exited 5, named by neither mpirun nor podmpi in %d runs; .status.trainerStatus.metrics: %v; want podmpi_phase failed, podmpi_exit_code 5, podmpi_reason MPIRunFailed and no root cause host or rank",
			rank, host, atOnceRuns, m)
	}
	var warning string
	for _, ev := range podmpiEvents(t, ns, "TrainJob", r.name) {
		if ev.Type == corev1.EventTypeWarning && ev.Reason == "MPIRunFailed" {
			warning = ev.Message
		}
	}
	if !strings.HasPrefix(warning, "root cause unknown") {
		t.Errorf("podmpi's MPIRunFailed Warning on TrainJob %s: %q; want it to say the root cause is unknown", r.name, warning)
	}
	msg := launcherEvidence(t, ns, r, "root cause unknown", "read mpirun's output")
	t.Logf("%s: rank %s on %s exited 5 at once; in %d runs neither mpirun nor podmpi named it, and podmpi said so: Warning: %s; termination message: %s",
		lay.name, rank, host, atOnceRuns, warning, firstLine(msg))
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return first
}

// sdkMountedRuntime is a TrainingRuntime name in ns: podmpi-openmpi with
// the SDK's venv (dir) mounted read-only at its own path in the launcher
// and node pods, the launcher a node (runLauncherAsNode, as shipped) or
// not, and small requests for the node pods (setNodeRequests).
func sdkMountedRuntime(t *testing.T, ns, dir, name string, launcherAsNode bool) string {
	t.Helper()
	objs := readObjects(t, cluster.RuntimeFiles["openmpi"])
	if len(objs) != 1 {
		t.Fatalf("%s: want one runtime", cluster.RuntimeFiles["openmpi"])
	}
	rt := objs[0]
	cluster.SetImages(rt, e.info.Images["openmpi"], e.info.Images)
	rt.SetKind("TrainingRuntime")
	rt.SetName(name)
	setNested(t, rt, launcherAsNode, "spec", "mlPolicy", "mpi", "runLauncherAsNode")
	setNodeRequests(t, rt, "50m", "256Mi")
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

// setNodeRequests sets the CPU and memory requests of the node container in
// runtime rt's node pods. A TrainJob's trainer.resourcesPerNode does not
// reach them when the launcher is not a node: Trainer v2.3 merges it into
// the launcher's container, and into the node pods' only with
// runLauncherAsNode (their 500m of deploy/runtimes would leave room for
// two such jobs on this 2-core node).
func setNodeRequests(t *testing.T, rt *unstructured.Unstructured, cpu, memory string) {
	t.Helper()
	rjs, _, _ := unstructured.NestedSlice(rt.Object, "spec", "template", "spec", "replicatedJobs")
	for _, x := range rjs {
		rj := x.(map[string]any)
		if rj["name"] != "node" {
			continue
		}
		path := []string{"template", "spec", "template", "spec", "containers"}
		cs, _, _ := unstructured.NestedSlice(rj, path...)
		for _, c := range cs {
			if c := c.(map[string]any); c["name"] == "node" {
				c["resources"] = map[string]any{"requests": map[string]any{"cpu": cpu, "memory": memory}}
			}
		}
		if err := unstructured.SetNestedSlice(rj, cs, path...); err != nil {
			t.Fatal(err)
		}
	}
	setNested(t, rt, rjs, "spec", "template", "spec", "replicatedJobs")
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
