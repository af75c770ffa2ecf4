package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

const (
	trainJobFile = "examples/trainer/trainjob-allreduce.yaml"
	launcherSel  = "jobset.sigs.k8s.io/replicatedjob-name=launcher"
	nodeSel      = "jobset.sigs.k8s.io/replicatedjob-name=node"
)

// installRuntimes applies the podmpi ClusterTrainingRuntimes of
// deploy/runtimes with this cluster's images (mutate, if set, changes them
// first) and waits until Trainer serves them.
func installRuntimes(t *testing.T, mutate func(mpi string, o *unstructured.Unstructured)) {
	t.Helper()
	var runtimes []string
	for mpi, f := range cluster.RuntimeFiles {
		objs := readObjects(t, f)
		for _, o := range objs {
			cluster.SetImages(o, e.info.Images[mpi], e.info.Images)
			if mutate != nil {
				mutate(mpi, o)
			}
			if o.GetKind() == "ClusterTrainingRuntime" {
				runtimes = append(runtimes, o.GetName())
			}
		}
		apply(t, "", objs...)
	}
	waitRuntimesServed(t, runtimes...)
}

// runtimesServedWithin bounds waitRuntimesServed: after a switch of
// controllers Trainer's new process serves its webhook before its
// informers' caches hold every runtime (a TrainJob was refused with
// "runtime 'podmpi-openmpi' not found" after apply's own 30 s of retries).
const runtimesServedWithin = 3 * time.Minute

// waitRuntimesServed waits until Trainer's TrainJob webhook takes a
// TrainJob naming each of runtimes: a server-side dry run of trainJob(rt)
// is no longer refused because it does not see the runtime yet, nor fails
// to reach the webhook. Any other answer is final; so is the bound.
func waitRuntimesServed(t *testing.T, runtimes ...string) {
	t.Helper()
	ctx := ctxT(t, runtimesServedWithin+time.Minute)
	start := time.Now()
	for _, rt := range runtimes {
		tj := trainJob(t, rt)
		tj.SetNamespace(metav1.NamespaceDefault)
		for {
			_, err := e.dyn.Resource(trainJobGVR).Namespace(metav1.NamespaceDefault).Create(ctx, tj,
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "podmpi-cluster-test"})
			if err == nil {
				break
			}
			if !runtimeNotCachedYet(err) && !strings.Contains(err.Error(), "failed calling webhook") {
				t.Fatalf("a dry-run TrainJob on runtime %s: %v", rt, err)
			}
			if time.Since(start) > runtimesServedWithin {
				t.Fatalf("Trainer's webhook does not take a TrainJob on runtime %s %s after the runtimes were applied: %v", rt, runtimesServedWithin, err)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for Trainer to serve runtime %s: %v (last: %v)", rt, ctx.Err(), err)
			case <-time.After(time.Second):
			}
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("Trainer took %s to serve the runtimes %v", d.Round(100*time.Millisecond), runtimes)
	}
}

// trainJob is examples/trainer/trainjob-allreduce.yaml on runtime rt, changed
// only in its CPU request (2 CPUs per pod do not fit three pods on this
// 2-core node), under a unique name.
func trainJob(t *testing.T, rt string) *unstructured.Unstructured {
	t.Helper()
	objs := readObjects(t, trainJobFile)
	if len(objs) != 1 || objs[0].GetKind() != "TrainJob" {
		t.Fatalf("%s: want one TrainJob", trainJobFile)
	}
	tj := objs[0]
	tj.SetName("allreduce-" + randSuffix())
	setNested(t, tj, rt, "spec", "runtimeRef", "name")
	setNested(t, tj, "100m", "spec", "trainer", "resourcesPerNode", "requests", "cpu")
	return tj
}

// trainJobCPU is the CPU, in millicores, that one TrainJob of trainJob
// requests on the node: three pods of 100m (under Trainer v2.0 too, see
// sizeNodesAsAsked).
const trainJobCPU = 3 * 100

// sizeNodesAsAsked gives ClusterTrainingRuntime o's node pods the CPU that
// trainJob asks for each node (trainer.resourcesPerNode 100m) under Trainer
// v2.0 (v), which passes that to the launcher only: with the runtimes'
// 500m, one such job at a time would fit this 2-core node, and the jobs of
// TestTrainer run side by side. Later releases pass it to the node pods
// themselves; there o is left as shipped.
func sizeNodesAsAsked(t *testing.T, v string, o *unstructured.Unstructured) {
	t.Helper()
	if envOnLauncherOnly(v) && o.GetKind() == "ClusterTrainingRuntime" {
		setNodeRequests(t, o, "100m", "1Gi")
	}
}

// trainJobResult is what a finished TrainJob left.
type trainJobResult struct {
	name      string
	complete  bool
	message   string
	launchers []corev1.Pod
	nodes     []corev1.Pod
	log       string // the first launcher's log
	created   time.Time
	finished  time.Time
}

// runTrainJob creates tj in ns and waits until it is Complete or Failed.
func runTrainJob(t *testing.T, ns string, tj *unstructured.Unstructured, timeout time.Duration) trainJobResult {
	t.Helper()
	ctx := ctxT(t, timeout+time.Minute)
	r := trainJobResult{name: tj.GetName(), created: time.Now()}
	sel := "jobset.sigs.k8s.io/jobset-name=" + tj.GetName()
	// The node pods as last seen, by name, also while the job ran: once
	// the launcher's job succeeds, JobSet deletes the node jobs that still
	// run, and their pods can be gone before the end is read (seen with
	// jobs side by side on this node).
	nodes := map[string]corev1.Pod{}
	seeNodes := func() error {
		pods, err := podsWith(ctx, ns, sel+","+nodeSel)
		for _, p := range pods {
			nodes[p.Name] = p
		}
		return err
	}
	apply(t, ns, tj)
	r.complete, r.message = waitJobEnd(t, ctx, trainJobGVR, ns, tj.GetName(), "Complete", "Failed", timeout, func() bool {
		_ = seeNodes() // a failed list is read again at the next poll and at the end
		return false
	})
	r.finished = time.Now()
	var err error
	if r.launchers, err = podsWith(ctx, ns, sel+","+launcherSel); err != nil {
		t.Fatal(err)
	}
	if err := seeNodes(); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		r.nodes = append(r.nodes, nodes[name])
	}
	if len(r.launchers) > 0 {
		r.log = podLogs(ctx, ns, r.launchers[0].Name, false)
	}
	return r
}

// launcherPodsOf returns how many pods the JobSet's launcher replicated job
// would run: replicas x parallelism (each defaults to 1).
func launcherPodsOf(js *unstructured.Unstructured) (int64, error) {
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	for _, x := range rjs {
		rj, _ := x.(map[string]any)
		if rj["name"] != "launcher" {
			continue
		}
		replicas, ok, _ := unstructured.NestedInt64(rj, "replicas")
		if !ok {
			replicas = 1
		}
		par, ok, _ := unstructured.NestedInt64(rj, "template", "spec", "parallelism")
		if !ok {
			par = 1
		}
		return replicas * par, nil
	}
	return 0, fmt.Errorf("JobSet %s has no launcher replicated job", js.GetName())
}

// renderedLauncherPods creates tj suspended... Trainer renders the JobSet at
// once; this reads it and deletes the TrainJob.
func renderedLauncherPods(t *testing.T, ns string, tj *unstructured.Unstructured) int64 {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	apply(t, ns, tj)
	defer func() {
		_ = e.dyn.Resource(trainJobGVR).Namespace(ns).Delete(context.Background(), tj.GetName(), metav1.DeleteOptions{})
	}()
	var n int64
	waitFor(t, time.Minute, "JobSet of TrainJob "+tj.GetName(), func() (bool, error) {
		js, err := getObj(ctx, jobSetGVR, ns, tj.GetName())
		if err != nil {
			return false, err
		}
		n, err = launcherPodsOf(js)
		return err == nil, err
	})
	return n
}

// TestTrainer runs examples/trainer's TrainJob under every pinned Trainer
// (each with the JobSet its go.mod names) on deploy/runtimes' Open MPI and
// MPICH runtimes, checking one launcher pod, the node pods and every rank's line
// (the Intel MPI runtime too, under the first release), then the failure
// drills.
func TestTrainer(t *testing.T) {
	need(t)
	defer tool(t, "controllers", "--trainer", e.pins.Trainer[0], "--mpi-operator", "none")
	for _, v := range e.pins.Trainer {
		t.Run(v, func(t *testing.T) {
			tool(t, "controllers", "--trainer", v, "--mpi-operator", "none")
			if envOnLauncherOnly(v) {
				t.Cleanup(func() { installRuntimes(t, nil) })
			}
			installRuntimes(t, func(_ string, o *unstructured.Unstructured) { sizeNodesAsAsked(t, v, o) })
			ns := namespace(t, "trainer", true)
			applyRBAC(t, ns)

			// Item 4: a runtime rendered by the real Trainer must give the
			// launcher job exactly one pod.
			t.Run("launcher-count", func(t *testing.T) {
				for _, rt := range []string{"podmpi-openmpi", "podmpi-mpich"} {
					if n := renderedLauncherPods(t, ns, trainJob(t, rt)); n != 1 {
						t.Errorf("runtime %s: Trainer %s renders %d launcher pods, want 1 (mlPolicy.numNodes of the runtime sizes the launcher job; keep it 1)", rt, v, n)
					}
				}
			})

			// The jobs below run side by side, each once its pods' CPU
			// is free (sideBySide).
			sideBySide(t, "openmpi", trainJobCPU, func(t *testing.T) {
				tj := trainJob(t, "podmpi-openmpi")
				probe := withTrainerEnvCheck(t, tj, envOnLauncherOnly(v))
				r := runTrainJob(t, ns, tj, 4*time.Minute)
				checkTrainJob(t, ns, r, 3, 6)
				checkTrainerEnv(t, r.log, probe, 6)
				// Without the TrainJob status API (v2.0.0 has none) the
				// launcher says nothing of it; with it, it reports.
				if lines := grepLines(r.log, "trainer-status"); cluster.TrainerStatus(v) != (lines != "") {
					t.Errorf("Trainer %s (status API %t): the launcher's status lines:\n%s", v, cluster.TrainerStatus(v), lines)
				}
				// A healthy job says so where users look.
				if !hasEvent(t, ns, "TrainJob", r.name, corev1.EventTypeNormal, "Initialized", "init done in") {
					t.Errorf("a successful TrainJob has no Normal Initialized Event from podmpi")
				}
			})
			sideBySide(t, "mpich", trainJobCPU, func(t *testing.T) {
				tj := trainJob(t, "podmpi-mpich")
				probe := withTrainerEnvCheck(t, tj, false)
				r := runTrainJob(t, ns, tj, 4*time.Minute)
				checkTrainJob(t, ns, r, 3, 6)
				checkTrainerEnv(t, r.log, probe, 6)
			})
			if v == e.pins.Trainer[0] {
				// Intel MPI under one release: what differs between
				// releases (the runtime's rendering, resourcesPerNode) the
				// other runtimes show under each; the launcher's side of
				// Intel MPI does not depend on it.
				sideBySide(t, "intelmpi", trainJobCPU, func(t *testing.T) {
					if n := renderedLauncherPods(t, ns, trainJob(t, "podmpi-intelmpi")); n != 1 {
						t.Errorf("runtime podmpi-intelmpi: Trainer %s renders %d launcher pods, want 1", v, n)
					}
					r := runTrainJob(t, ns, trainJob(t, "podmpi-intelmpi"), 4*time.Minute)
					checkTrainJob(t, ns, r, 3, 6)
				})
				sideBySide(t, "intelmpi/exit-7", trainJobCPU, func(t *testing.T) { rankExit7(t, ns, "podmpi-intelmpi", exit7Intel) })
			}
			trainJobFailures(t, ns)
			// The isolation drills on this Trainer's pods.
			sideBySide(t, "networkpolicy", trainJobCPU+netpolProbesCPU, trainerNetworkPolicy)
			sideBySide(t, "openshift-restricted-v2", trainJobCPU, func(t *testing.T) { trainerOpenShift(t, v) })
			sideBySide(t, "kueue", 2*trainJobCPU, trainerKueue)
			sideBySide(t, "quota", trainJobCPU, trainerQuota)
		})
	}
	t.Run("no-rbac", trainJobWithoutRBAC)
}

// checkTrainJob checks a finished TrainJob: Complete, one launcher pod,
// pods-1 node pods, every rank's line, ranks spread over every pod.
func checkTrainJob(t *testing.T, ns string, r trainJobResult, pods, ranks int) {
	t.Helper()
	if !r.complete {
		msg := ""
		if len(r.launchers) > 0 {
			msg = terminationMessage(t, ns, r.launchers[0].Name)
		}
		t.Fatalf("TrainJob %s failed: %s; launcher termination message: %s; launcher log:\n%s", r.name, r.message, msg, lastLines(r.log, 40))
	}
	if len(r.launchers) != 1 {
		t.Errorf("%d launcher pods, want 1", len(r.launchers))
	}
	if len(r.nodes) != pods-1 {
		t.Errorf("%d node pods, want %d", len(r.nodes), pods-1)
	}
	hosts := checkRanks(t, r.log, ranks)
	if len(hosts) != pods {
		t.Errorf("ranks ran on %d hosts %v, want %d (the launcher runs ranks too)", len(hosts), hosts, pods)
	}
	t.Logf("TrainJob %s: Complete in %s; %d ranks on %v; launcher %s", r.name, r.finished.Sub(r.created).Round(100*time.Millisecond), ranks, hosts, launcherPhases(r.log))
}

// launcherPhases summarises the launcher's "phase done" log lines.
func launcherPhases(log string) string {
	var parts []string
	for _, line := range strings.Split(log, "\n") {
		var j struct {
			Msg     string  `json:"msg"`
			Phase   string  `json:"phase"`
			Seconds float64 `json:"seconds"`
		}
		if json.Unmarshal([]byte(line), &j) == nil && j.Msg == "phase done" {
			parts = append(parts, fmt.Sprintf("%s %.3fs", j.Phase, j.Seconds))
		}
	}
	return strings.Join(parts, ", ")
}

// TestTrainerLauncherCountCheckCatches proves the launcher-count check can
// fail: a runtime with mlPolicy.numNodes 3 (what the runtimes once had) makes
// Trainer render three launcher pods. Run, such a job must fail within 30 s,
// each launcher naming the others.
func TestTrainerLauncherCountCheckCatches(t *testing.T) {
	need(t)
	ns := namespace(t, "launchers", true)
	installRuntimes(t, func(mpi string, o *unstructured.Unstructured) {
		o.SetName(o.GetName() + "-three")
		setNested(t, o, int64(3), "spec", "mlPolicy", "numNodes")
	})
	t.Cleanup(func() { deleteRuntimes("podmpi-openmpi-three", "podmpi-mpich-three") })
	if n := renderedLauncherPods(t, ns, trainJob(t, "podmpi-openmpi-three")); n != 3 {
		t.Fatalf("runtime with mlPolicy.numNodes 3: Trainer %s renders %d launcher pods; the check expects 3 here to show it catches the defect", e.info.Trainer, n)
	}

	t.Run("fails-fast", func(t *testing.T) {
		// JobSet tears the other Jobs down when one fails: watch the
		// launcher pods while the TrainJob runs and keep what each showed.
		ctx := ctxT(t, 5*time.Minute)
		tj := trainJob(t, "podmpi-openmpi-three")
		sel := "jobset.sigs.k8s.io/jobset-name=" + tj.GetName() + "," + launcherSel
		seen := map[string]*corev1.ContainerStateTerminated{}
		apply(t, ns, tj)
		var complete bool
		waitFor(t, 3*time.Minute, "TrainJob "+tj.GetName()+" Complete or Failed", func() (bool, error) {
			if pods, err := podsWith(ctx, ns, sel); err == nil {
				for _, p := range pods {
					if _, ok := seen[p.Name]; !ok {
						seen[p.Name] = nil
					}
					for _, st := range p.Status.ContainerStatuses {
						if st.State.Terminated != nil && seen[p.Name] == nil {
							seen[p.Name] = st.State.Terminated
						} else if st.LastTerminationState.Terminated != nil && seen[p.Name] == nil {
							seen[p.Name] = st.LastTerminationState.Terminated
						}
					}
				}
			}
			o, err := getObj(ctx, trainJobGVR, ns, tj.GetName())
			if err != nil {
				return false, err
			}
			if st, _ := condition(o, "Complete"); st == "True" {
				complete = true
				return true, nil
			}
			st, _ := condition(o, "Failed")
			return st == "True", nil
		})
		if complete {
			t.Fatalf("a TrainJob with three launcher pods completed")
		}
		if len(seen) < 2 {
			t.Fatalf("%d launcher pods seen, want several", len(seen))
		}
		named := 0
		for name, st := range seen {
			if st == nil {
				continue
			}
			d := st.FinishedAt.Sub(st.StartedAt.Time)
			t.Logf("launcher %s: exit %d after %s: %s", name, st.ExitCode, d, st.Message)
			if d > 30*time.Second {
				t.Errorf("launcher %s took %s to fail, want at most 30 s", name, d)
			}
			for other := range seen {
				// Pod names end in a random suffix; hostnames are
				// <trainjob>-launcher-0-<i>.
				if other != name && strings.Contains(st.Message, other[:strings.LastIndex(other, "-")]) {
					named++
					break
				}
			}
		}
		if named == 0 {
			t.Errorf("no launcher's termination message names another launcher pod")
		}
	})
}

// deleteRuntimes deletes ClusterTrainingRuntimes a test made, without
// waiting for them to go: Trainer's finalizer keeps a runtime while a
// TrainJob names it, and the TrainJobs of a test's namespace may be deleted
// only after the test's cleanup (Trainer v2.0.0 waits for every one,
// Complete or not). The runtime goes when its last TrainJob does.
func deleteRuntimes(names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range names {
		_, _ = kubectl(ctx, nil, "delete", "clustertrainingruntime", n, "--ignore-not-found", "--wait=false")
	}
}
