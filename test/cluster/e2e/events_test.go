package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// What a user sees of a failed job, where users look: kubectl describe of
// the TrainJob or MPIJob, the Kubeflow Python SDK's get_job_events(), the launcher
// pod's termination message and log, which stay after the failure.

// applyRBAC applies deploy/rbac in ns, as docs/install.md says.
func applyRBAC(t *testing.T, ns string) {
	t.Helper()
	if _, err := kubectl(ctxT(t, time.Minute), nil, "apply", "-n", ns, "-k", e.repo+"/deploy/rbac"); err != nil {
		t.Fatal(err)
	}
}

// podmpiEvents are the launcher's Events on the object of kind/name.
func podmpiEvents(t *testing.T, ns, kind, name string) []corev1.Event {
	t.Helper()
	list, err := e.cs.CoreV1().Events(ns).List(ctxT(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Source.Component == "podmpi-launcher" {
			out = append(out, ev)
		}
	}
	return out
}

// describeShows checks that `kubectl describe <kind> <name>` lists a podmpi
// Warning whose reason is reason and whose line holds every want (reason
// and each want may list alternatives, "a|b"), and returns that line.
func describeShows(t *testing.T, ns, kind, name, reason string, want ...string) string {
	t.Helper()
	out, err := kubectl(ctxT(t, time.Minute), nil, "describe", "-n", ns, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	_, events, _ := strings.Cut(out, "\nEvents:")
	for _, line := range strings.Split(events, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "Warning" || !containsAll(f[1], []string{reason}) || !strings.Contains(line, "podmpi-launcher") {
			continue
		}
		if containsAll(line, want) {
			return line
		}
	}
	t.Errorf("kubectl describe %s %s shows no podmpi Warning %s with %q; Events:%s", kind, name, reason, want, events)
	return ""
}

// sdkShows checks that the Kubeflow Python SDK's get_job_events(trainJob)
// (the real one, testdata/sdk/trainjob.py --events-of) returns podmpi's
// Event on the TrainJob with reason and every want in its message. The SDK
// keeps neither an Event's type nor its source: the reason, on the
// TrainJob, is what makes it podmpi's Warning.
func sdkShows(t *testing.T, ns, trainJob, reason string, want ...string) {
	t.Helper()
	r := runSDK(t, ns, 2*time.Minute, "--events-of", trainJob)
	var seen []string
	for _, ev := range r.Events {
		if ev.Kind == "TrainJob" && ev.Name == trainJob && ev.Reason == reason && containsAll(ev.Message, want) {
			return
		}
		seen = append(seen, ev.Kind+"/"+ev.Name+" "+ev.Reason+": "+ev.Message)
	}
	t.Errorf("the SDK's get_job_events(%s) returns no %s on the TrainJob with %q; it returned:\n%s", trainJob, reason, want, strings.Join(seen, "\n"))
}

// launcherEvidence checks that a failed TrainJob's launcher ran once and
// that its pod is still there with the root cause in its termination
// message and log; it returns the termination message.
func launcherEvidence(t *testing.T, ns string, r trainJobResult, want ...string) string {
	t.Helper()
	if len(r.launchers) != 1 {
		t.Fatalf("%d launcher pods after the failure, want 1 (the failed one, kept)", len(r.launchers))
	}
	p := r.launchers[0]
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("launcher pod %s: restartPolicy %s, statuses %+v; want Never and no restart", p.Name, p.Spec.RestartPolicy, p.Status.ContainerStatuses)
	}
	msg := terminationMessage(t, ns, p.Name)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("termination message lacks %q:\n%s", w, msg)
		}
		if !strings.Contains(r.log, w) {
			t.Errorf("launcher log lacks %q", w)
		}
	}
	return msg
}

// trainJobFailures: TrainJobs whose ranks fail are Failed within 2 minutes
// of their launcher's start, with one launcher run whose pod stays with the
// root cause; kubectl describe and the SDK show the podmpi Warning. In ns,
// which has deploy/rbac; side by side with t's other jobs (sideBySide).
func trainJobFailures(t *testing.T, ns string) {
	sideBySide(t, "exit-7", trainJobCPU, func(t *testing.T) { rankExit7(t, ns, "podmpi-openmpi", exit7) })
	sideBySide(t, "segfault", trainJobCPU, func(t *testing.T) {
		tj := trainJob(t, "podmpi-openmpi")
		setNested(t, tj, segfault1, "spec", "trainer", "args")
		r := runTrainJob(t, ns, tj, 4*time.Minute)
		if r.complete {
			t.Fatalf("a TrainJob whose rank segfaults completed; launcher log:\n%s", lastLines(r.log, 30))
		}
		launcherEvidence(t, ns, r, "rank 1", "SIGSEGV")
		describeShows(t, ns, "trainjob", r.name, "RankCrashed", "rank 1", "SIGSEGV", "hint:")
		sdkShows(t, ns, r.name, "RankCrashed", "rank 1", "SIGSEGV")
	})
}

// rankExit7: on runtime rt, a TrainJob whose rank 3 exits 7 (args) fails
// within 2 minutes of its launcher's start, and the launcher names the rank
// and its status where users look: termination message, describe, the
// SDK's get_job_events.
func rankExit7(t *testing.T, ns, rt string, args []any) {
	tj := trainJob(t, rt)
	setNested(t, tj, args, "spec", "trainer", "args")
	r := runTrainJob(t, ns, tj, 4*time.Minute)
	if r.complete {
		t.Fatal("a TrainJob whose rank exits 7 completed")
	}
	started := launcherStart(r)
	if d := r.finished.Sub(started); started.IsZero() || d > 2*time.Minute {
		t.Errorf("TrainJob Failed %s after its launcher started (at %s), want within 2 minutes", d.Round(time.Second), started)
	}
	launcherEvidence(t, ns, r, "rank 3", "exited with status 7")
	line := describeShows(t, ns, "trainjob", r.name, "RankFailed", "rank 3", "status 7", "hint:")
	sdkShows(t, ns, r.name, "RankFailed", "rank 3", "exited with status 7")
	t.Logf("Failed %s after the launcher started; describe: %s", r.finished.Sub(started).Round(time.Second), strings.Join(strings.Fields(line), " "))
}

// The ranks of the failure drills: rank 3 exits 7 after a second; rank 1
// sends itself SIGSEGV. Not $$: Kubernetes turns "$$" in a container's args
// into "$" (the escape of its $(VAR) expansion); $BASHPID is the same shell.
var (
	exit7     = []any{"mpirun", "bash", "-c", `sleep 1; [ "$OMPI_COMM_WORLD_RANK" = 3 ] && exit 7; sleep 2`}
	segfault1 = []any{"mpirun", "bash", "-c", `sleep 1; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -SEGV $BASHPID; sleep 5`}
	// exit7Intel is exit7 under Intel MPI, whose rank variable is PMI_RANK.
	exit7Intel = []any{"mpirun", "bash", "-c", `sleep 1; [ "$PMI_RANK" = 3 ] && exit 7; sleep 2`}
)

// trainJobWithoutRBAC: the same failure in a namespace without
// deploy/rbac: today's diagnosis in the termination message, the launcher
// saying once why it records no Event, and none recorded.
func trainJobWithoutRBAC(t *testing.T) {
	installRuntimes(t, nil)
	ns := namespace(t, "norbac", true)
	tj := trainJob(t, "podmpi-openmpi")
	setNested(t, tj, exit7, "spec", "trainer", "args")
	r := runTrainJob(t, ns, tj, 4*time.Minute)
	if r.complete {
		t.Fatal("a TrainJob whose rank exits 7 completed")
	}
	launcherEvidence(t, ns, r, "rank 3", "exited with status 7")
	noPodmpiEvents(t, ns, "TrainJob", r.name)
	if !strings.Contains(r.log, "apply deploy/rbac") {
		t.Errorf("the launcher does not say why it records no Event:\n%s", lastLines(r.log, 20))
	}
}

// hasEvent reports whether podmpi recorded an Event of type typ and reason
// on kind/name whose message holds msg.
func hasEvent(t *testing.T, ns, kind, name, typ, reason, msg string) bool {
	t.Helper()
	for _, ev := range podmpiEvents(t, ns, kind, name) {
		if ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Message, msg) {
			return true
		}
	}
	return false
}

// launcherStart is when the (first) launcher container started.
func launcherStart(r trainJobResult) time.Time {
	for _, p := range r.launchers {
		for _, st := range p.Status.ContainerStatuses {
			if t := st.State.Terminated; t != nil {
				return t.StartedAt.Time
			}
		}
	}
	return time.Time{}
}

// failedWaiting are the reasons of a launcher that waited for a worker in
// vain: its name never resolved (mpi-operator publishes only Ready pods),
// or it never answered.
const failedWaiting = "WorkersNotResolved|SlotsUnknown|ProbeFailedUnreachable"

// mpiJobFailures: MPIJobs that fail the ways users meet, each shown by
// kubectl describe mpijob as a podmpi Warning naming the host, the cause
// and the fix: a worker whose image does not exist and a worker that
// cannot be scheduled (mpi-operator's default starts the launcher at once,
// so it waits, and says why), a rank's SIGSEGV. The launcher fails once
// (restartPolicy Never, backoffLimit 0) and its pod stays. With rbac (ns
// has deploy/rbac) describe shows the Warnings; without, the termination
// message still names the worker or rank and the cause, and the launcher
// records no Event.
//
// The drills run side by side with the caller's other jobs (sideBySide;
// make cluster-test passes -parallel 8), each once its job's 0.3 CPU is
// free: a worker left Pending for want of CPU would be named for that, not
// for the cause the drill sets.
func mpiJobFailures(t *testing.T, ns string, rbac bool) {
	waitTimeout := func(job *unstructured.Unstructured) {
		setNested(t, job, "AtStartup", "spec", "launcherCreationPolicy")
		// The pods' causes (ErrImagePull, FailedScheduling) are known
		// within seconds; the deadline only has to outlast them.
		setLauncherEnv(t, job, "PODMPI_DISCOVERY_TIMEOUT", "30s")
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*unstructured.Unstructured)
		reasons []string // the Warnings describe must show, each with want
		want    []string
		plain   []string // what the termination message says without the API
	}{
		{"image-missing", func(j *unstructured.Unstructured) {
			waitTimeout(j)
			setWorkerImage(t, j, cluster.RegistryImage("does-not-exist", "0"))
		}, []string{"WorkerNotReady", failedWaiting}, []string{"worker-1", "ErrImagePull|ImagePullBackOff", "hint:"},
			[]string{"worker-1", "likely causes"}},
		{"unschedulable", func(j *unstructured.Unstructured) {
			waitTimeout(j)
			setCPURequest(t, j, "Worker", "64")
		}, []string{"WorkerNotReady", failedWaiting}, []string{"worker-1", "Insufficient cpu", "hint:"},
			[]string{"worker-1", "likely causes"}},
		{"segfault", func(j *unstructured.Unstructured) {
			args := []string{"mpirun", "-np", "4"}
			for _, a := range segfault1[1:] {
				args = append(args, a.(string))
			}
			setLauncherArgs(t, j, args...)
		}, []string{"RankCrashed"}, []string{"rank 1", "SIGSEGV", "hint:"}, []string{"rank 1", "SIGSEGV", "hint:"}},
	} {
		sideBySide(t, tc.name, mpiJobCPU, func(t *testing.T) {
			job := mpiJob(t, "openmpi", tc.mutate)
			r := runMPIJob(t, ns, job, 4*time.Minute)
			if r.ok {
				t.Fatalf("MPIJob %s succeeded; launcher log:\n%s", r.name, lastLines(r.log, 30))
			}
			if r.launcher == nil {
				t.Fatalf("no launcher pod left after the failure (restartPolicy Never keeps it)")
			}
			if st := r.launcher.Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 {
				t.Errorf("the launcher restarted: %+v", st)
			}
			if !rbac {
				msg := terminationMessage(t, ns, r.launcher.Name)
				if !containsAll(msg, tc.plain) {
					t.Errorf("termination message does not name %q:\n%s", tc.plain, msg)
				}
				noPodmpiEvents(t, ns, "MPIJob", r.name)
				return
			}
			for _, reason := range tc.reasons {
				describeShows(t, ns, "mpijob", r.name, reason, tc.want...)
			}
		})
	}
}

func containsAll(s string, want []string) bool {
	for _, w := range want {
		ok := false
		for _, alt := range strings.Split(w, "|") {
			ok = ok || strings.Contains(s, alt)
		}
		if !ok {
			return false
		}
	}
	return true
}

func setLauncherEnv(t *testing.T, job *unstructured.Unstructured, name, value string) {
	t.Helper()
	path := []string{"spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers"}
	cs, _, _ := unstructured.NestedSlice(job.Object, path...)
	c := cs[0].(map[string]any)
	env, _ := c["env"].([]any)
	found := false
	for _, x := range env {
		if m := x.(map[string]any); m["name"] == name {
			m["value"], found = value, true
			delete(m, "valueFrom")
		}
	}
	if !found {
		env = append(env, map[string]any{"name": name, "value": value})
	}
	c["env"] = env
	setNested(t, job, cs, path...)
}

func setWorkerImage(t *testing.T, job *unstructured.Unstructured, image string) {
	t.Helper()
	path := []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers"}
	cs, _, _ := unstructured.NestedSlice(job.Object, path...)
	cs[0].(map[string]any)["image"] = image
	cs[0].(map[string]any)["imagePullPolicy"] = "IfNotPresent"
	setNested(t, job, cs, path...)
}
