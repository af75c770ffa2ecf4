package launcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/kube/kubetest"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

const kns = "ml"

// fakeAPI is a Kubernetes API holding the pods of TrainJob "tj" (the
// launcher's and the workers'), for the launcher's Events and pod states.
type fakeAPI struct {
	cs *fake.Clientset
	c  *kube.Client
}

func newFakeAPI(t *testing.T, pods ...*corev1.Pod) *fakeAPI {
	t.Helper()
	objs := []runtime.Object{jobPod("tj-launcher-0-0-aa", "tj-launcher-0-0")}
	for _, p := range pods {
		objs = append(objs, p)
	}
	cs := fake.NewClientset(objs...)
	scheme := metafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: kns, UID: "tj-uid"}}
	c, why := kube.Connect(kube.Options{PodName: "tj-launcher-0-0-aa", Core: kubetest.Core(cs.CoreV1()), Metadata: metafake.NewSimpleMetadataClient(scheme, tj),
		Namespace: kns, Timeout: 2 * time.Second})
	if c == nil {
		t.Fatal(why)
	}
	return &fakeAPI{cs: cs, c: c}
}

func jobPod(name, host string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kns, UID: ktypes.UID("uid-" + name),
		Labels: map[string]string{kube.LabelJobSetName: "tj"}, CreationTimestamp: metav1.Now()},
		Spec:   corev1.PodSpec{Hostname: host},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, m := range mut {
		m(p)
	}
	return p
}

// unschedulable makes a pod Pending, not scheduled for want of room.
func unschedulable(p *corev1.Pod) {
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/1 nodes are available: 1 Insufficient cpu."}}
}

// waitingConfig is a launcher that waits for workers whose names never
// resolve, for timeout.
func waitingConfig(timeout time.Duration, workers ...string) Config {
	cfg := Defaults()
	cfg.Discovery = discovery.Spec{Workers: workers, Self: "tj-launcher-0-0"}
	cfg.Resolver = newNames(nil) // nothing resolves
	cfg.DiscoveryTimeout = timeout
	cfg.Implementation = "openmpi4"
	cfg.Command = []string{"mpirun", "true"}
	return cfg
}

// watchedConfig is a launcher that runs command as mpirun over worker
// tj-node-0-1.tj, whose agent a answers on 127.0.0.1, without the probe,
// asking the agent every 200ms and stopping mpirun 300ms after a verdict.
func watchedConfig(t *testing.T, a *fakeAgent, command ...string) Config {
	cfg := Defaults()
	cfg.Discovery = discovery.Spec{Workers: []string{"tj-node-0-1.tj=2"}, Self: "tj-launcher-0-0"}
	cfg.Resolver = newNames(map[string]string{"tj-node-0-1.tj": "127.0.0.1"})
	cfg.Implementation, cfg.SkipProbe, cfg.Slots = "openmpi4", true, 2
	cfg.WorkerWebPort = a.port
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	cfg.TempDir, cfg.Executable = t.TempDir(), "/bin/true"
	cfg.DiagnosisWatch, cfg.LaunchGrace, cfg.KillGrace = 200*time.Millisecond, 300*time.Millisecond, time.Second
	cfg.Command = command
	return cfg
}

// events returns the Events on the TrainJob.
func (a *fakeAPI) events(t *testing.T) []corev1.Event {
	t.Helper()
	list, err := a.cs.CoreV1().Events(kns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "TrainJob" && e.InvolvedObject.UID == "tj-uid" {
			out = append(out, e)
		}
	}
	return out
}

// runJobWithAPI is RunJob (the command line's path: Events at the end)
// with the fake API.
func runJobWithAPI(t *testing.T, api *fakeAPI, cfg Config) (exitcode.Code, string, string) {
	t.Helper()
	var logs sshtest.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Kube = api.c
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	cfg.WebAddr = ""
	var out sshtest.Buffer
	cfg.Stdout, cfg.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code, _ := RunJob(ctx, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("output:\n%s\nlog:\n%s", out.String(), logs.String())
		}
	})
	msg, err := os.ReadFile(cfg.TerminationLog)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(msg), logs.String()
}

// TestWaitNamesWhatKubernetesSays: a worker whose pod cannot be scheduled
// never resolves. The launcher's progress names Kubernetes' reason, warns
// with an Event as soon as it knows, and at the deadline the termination
// message's first line (also the failure Event's message) says it.
func TestWaitNamesWhatKubernetesSays(t *testing.T) {
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1", unschedulable), jobPod("tj-node-0-2-cc", "tj-node-0-2", unschedulable))
	cfg := waitingConfig(3*time.Second, "tj-node-0-1.tj.invalid", "tj-node-0-2.tj.invalid")
	code, msg, logs := runJobWithAPI(t, api, cfg)
	if code != exitcode.DiscoveryTimeout {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.DiscoveryTimeout)
	}
	const why = "is Pending, not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
	if !strings.Contains(logs, "waiting for tj-node-0-1.tj.invalid (pod tj-node-0-1-bb "+why+" (no node has room") {
		t.Errorf("no progress line names Kubernetes' reason:\n%s", logs)
	}
	first, _, _ := strings.Cut(msg, "\n")
	// One sentence: the first worker's reason, a count of the others, and
	// the fix (the pod's, as the wait's own has none).
	if !strings.Contains(first, "Kubernetes says: tj-node-0-1.tj.invalid: pod tj-node-0-1-bb "+why+" (and 1 more); hint: no node has room") {
		t.Errorf("termination message's first line: %s", first)
	}
	if !strings.Contains(msg, "tj-node-0-2.tj.invalid: pod tj-node-0-2-cc "+why) {
		t.Errorf("the termination message does not name the second worker's pod:\n%s", msg)
	}
	var waiting, failed *corev1.Event
	for _, e := range api.events(t) {
		switch e.Reason {
		case "WorkerNotReady":
			if strings.Contains(e.Message, "tj-node-0-1-bb") {
				waiting = &e
			}
		case "WorkersNotResolved":
			failed = &e
		}
	}
	if waiting == nil || waiting.Type != kube.Warning || !strings.Contains(waiting.Message, "pod tj-node-0-1-bb "+why) ||
		!strings.Contains(waiting.Message, "hint: no node has room for the pod's requests") {
		t.Errorf("no Warning while waiting: %+v", waiting)
	}
	if failed == nil || failed.Type != kube.Warning || failed.Message != first {
		t.Errorf("failure Event %+v; want the termination message's first line %q", failed, first)
	}
}

// TestAPIGoneStopsMPIRun: while mpirun runs, the API shows a worker's pod
// deleted; mpirun goes on as if nothing happened. The launcher stops it
// (exit 74) naming the worker gone with the API's words, and records the
// WorkerGone Event; a job that succeeded records Initialized and Completed.
func TestAPIGoneStopsMPIRun(t *testing.T) {
	a := startAgent(t)
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1"))
	cfg := watchedConfig(t, a, "sleep", "30")
	go func() {
		// Once the watch has asked the agent, the pod is deleted.
		if !a.waitAsked(30 * time.Second) {
			return // the test fails on its own: nothing asked the agent
		}
		_ = api.cs.CoreV1().Pods(kns).Delete(context.Background(), "tj-node-0-1-bb", metav1.DeleteOptions{})
	}()
	start := time.Now()
	code, msg, logs := runJobWithAPI(t, api, cfg)
	if code != exitcode.WorkerGone {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.WorkerGone)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %s", d)
	}
	first, _, _ := strings.Cut(msg, "\n")
	if !strings.Contains(first, "worker tj-node-0-1.tj is gone: its pod tj-node-0-1-bb no longer exists (deleted), as the Kubernetes API shows it") {
		t.Errorf("first line: %s", first)
	}
	if !strings.Contains(logs, "Kubernetes says a worker's pod is gone while mpirun runs") {
		t.Errorf("log lacks the API's verdict:\n%s", logs)
	}
	reasons := map[string]corev1.Event{}
	for _, e := range api.events(t) {
		reasons[e.Reason] = e
	}
	if e, ok := reasons["WorkerGone"]; !ok || e.Message != first {
		t.Errorf("WorkerGone Event %+v, want message %q (have %v)", e, first, reasons)
	}
	if e, ok := reasons["Initialized"]; !ok || e.Type != kube.Normal || !strings.Contains(e.Message, "init done in") {
		t.Errorf("no Normal Initialized Event: %v", reasons)
	}
}

// TestAPIGoneBeforeVerdict: a worker's pod is deleted and mpirun fails a
// moment later, before the next poll of the pods. The verdict asks the API
// again first: the worker is gone, not merely silent or unknown.
func TestAPIGoneBeforeVerdict(t *testing.T) {
	a := startAgent(t)
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1"))
	dir := t.TempDir()
	started, deleted := filepath.Join(dir, "started"), filepath.Join(dir, "deleted")
	// The worker resolves once the launcher has listed the job's pods, so
	// that the watch starts with its pod as the API showed it.
	names := newNames(map[string]string{})
	cfg := podChangeConfig(t, a, names, started, deleted)
	go func() {
		for i := 0; i < 400 && !listedPods(api.cs); i++ {
			time.Sleep(25 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		names.mu.Lock()
		names.m["tj-node-0-1.tj"] = "127.0.0.1"
		names.mu.Unlock()
	}()
	whenStarted(started, deleted, func() {
		_ = api.cs.CoreV1().Pods(kns).Delete(context.Background(), "tj-node-0-1-bb", metav1.DeleteOptions{})
	})
	first := runPodChange(t, api, cfg)
	if !strings.HasPrefix(first, "root cause: worker tj-node-0-1.tj is gone: its pod tj-node-0-1-bb no longer exists (deleted), as the Kubernetes API shows it") {
		t.Errorf("first line: %s", first)
	}
}

// TestReplacedBeforeFirstListIsGone: the worker's pod appears after the
// launcher's first list of the job's pods and before the next poll (every
// 5 s), mpirun starts, and the pod is deleted and replaced at once by its
// controller (same name and host name, a new UID, its containers running
// by the time mpirun fails). The watch lists the pods as mpirun starts, so
// the replacement is proof that the pod mpirun's daemon ran in went: the
// first line names the worker gone. Listed only after the failure, the
// replacement was the first pod the launcher saw, and it said only that the
// worker did not answer (TestWorkerDeletedMidJob/rbac on the cluster).
func TestReplacedBeforeFirstListIsGone(t *testing.T) {
	a := startAgent(t)
	api := newFakeAPI(t)
	dir := t.TempDir()
	started, replaced := filepath.Join(dir, "started"), filepath.Join(dir, "replaced")
	names := newNames(map[string]string{})
	cfg := podChangeConfig(t, a, names, started, replaced)
	go func() {
		// The pod is created after the launcher's first list, then its
		// name resolves.
		for i := 0; i < 400 && !listedPods(api.cs); i++ {
			time.Sleep(25 * time.Millisecond)
		}
		_, _ = api.cs.CoreV1().Pods(kns).Create(context.Background(), jobPod("tj-node-0-1", "tj-node-0-1"), metav1.CreateOptions{})
		names.mu.Lock()
		names.m["tj-node-0-1.tj"] = "127.0.0.1"
		names.mu.Unlock()
	}()
	whenStarted(started, replaced, func() {
		pods := api.cs.CoreV1().Pods(kns)
		_ = pods.Delete(context.Background(), "tj-node-0-1", metav1.DeleteOptions{})
		_, _ = pods.Create(context.Background(), jobPod("tj-node-0-1", "tj-node-0-1", func(p *corev1.Pod) {
			p.UID = "uid-replacement"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}), metav1.CreateOptions{})
	})
	first := runPodChange(t, api, cfg)
	if !strings.HasPrefix(first, "root cause: worker tj-node-0-1.tj is gone") {
		t.Errorf("first line: %s", first)
	}
}

// podChangeConfig is a launcher of one worker, tj-node-0-1.tj (2 slots),
// that resolver resolves, with the agent a as its worker-agent and no probe,
// whose mpirun stand-in touches started and fails (exit 1) once done
// exists (at most 20 s). The pods are listed every podPoll (5 s): no poll
// comes between a change of the worker's pod and the failure.
func podChangeConfig(t *testing.T, a *fakeAgent, resolver *names, started, done string) Config {
	t.Helper()
	cfg := Defaults()
	cfg.Discovery = discovery.Spec{Workers: []string{"tj-node-0-1.tj=2"}, Self: "tj-launcher-0-0"}
	cfg.Resolver = resolver
	cfg.Implementation, cfg.SkipProbe, cfg.Slots = "openmpi4", true, 2
	cfg.WorkerWebPort = a.port
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	cfg.TempDir, cfg.Executable = t.TempDir(), "/bin/true"
	cfg.DiagnosisWatch = 0
	cfg.Command = []string{"sh", "-c", `touch "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 1`,
		"sh", started, done}
	return cfg
}

// whenStarted runs change once podChangeConfig's mpirun stand-in has
// touched started (at most 20 s), then writes done, which ends the stand-in.
func whenStarted(started, done string, change func()) {
	go func() {
		for i := 0; i < 400; i++ {
			if _, err := os.Stat(started); err == nil {
				change()
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = os.WriteFile(done, nil, 0o600)
	}()
}

// runPodChange runs a podChangeConfig job, checks that it ended with the
// stand-in's own exit 1, and returns the termination message's first line.
func runPodChange(t *testing.T, api *fakeAPI, cfg Config) string {
	t.Helper()
	code, msg, _ := runJobWithAPI(t, api, cfg)
	if code != 1 {
		t.Errorf("exit %d, want mpirun's own 1 (it exited on its own)", code)
	}
	first, _, _ := strings.Cut(msg, "\n")
	return first
}

// listedPods reports whether the fake API was asked for a list of pods.
func listedPods(cs *fake.Clientset) bool {
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			return true
		}
	}
	return false
}

// TestNoAPI: outside Kubernetes (no token) the launcher says so once at
// INFO and runs the job as before.
func TestNoAPI(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg := Defaults()
	cfg.Discovery = discovery.Spec{Workers: []string{"127.0.0.1=1"}, Self: "launcher-not-listed"}
	cfg.Implementation, cfg.SkipProbe, cfg.Slots = "openmpi4", true, 1
	cfg.WorkerWebPort = sshtest.FreePort(t)
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	cfg.TempDir, cfg.Executable = t.TempDir(), "/bin/true"
	cfg.TerminationLog, cfg.WebAddr = "", ""
	cfg.Command = []string{"sh", "-c", "exit 0"}
	var logs sshtest.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	code, err := RunJob(t.Context(), cfg)
	if code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if n := strings.Count(logs.String(), "the Kubernetes API is not used"); n != 1 || !strings.Contains(logs.String(), "level=INFO msg=\"the Kubernetes API is not used: not in a Kubernetes pod") {
		t.Errorf("want one INFO line saying the API is not used, got %d:\n%s", n, logs.String())
	}
}

// TestContainerRestartIsNotGone: while mpirun runs, the API shows a
// container of a worker's pod restarted: a sidecar (istio-proxy, which
// Kubeflow namespaces inject), a native sidecar (an init container that
// keeps running), or the worker-agent's own container while the same
// agent answers (its restart came before the probe, after the list the
// launcher compares with). None is proof about the agent: the job runs to
// its end, the restart is a WARN, and nothing is logged at ERROR. It
// used to stop mpirun (exit 74, "its pod ...'s container restarted").
func TestContainerRestartIsNotGone(t *testing.T) {
	restarted := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, RestartCount: 1, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}
	}
	running := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	always := corev1.ContainerRestartPolicyAlways
	for _, c := range []struct {
		name   string
		before func(*corev1.Pod) // the pod when mpirun starts
		after  func(*corev1.Pod) // once the agent was asked
		want   string            // the WARN line
	}{
		{"istio-proxy", func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{{Name: "node"}, {Name: "istio-proxy"}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("node"), running("istio-proxy")}
		}, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[1] = restarted("istio-proxy")
		}, "a container beside a worker's worker-agent restarted"},
		{"native-sidecar", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "log-shipper", RestartPolicy: &always}}
			p.Spec.Containers = []corev1.Container{{Name: "node"}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{running("log-shipper")}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("node")}
		}, func(p *corev1.Pod) {
			p.Status.InitContainerStatuses[0] = restarted("log-shipper")
		}, "a container beside a worker's worker-agent restarted"},
		{"agent-container-same-agent", func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{{Name: "node"}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("node")}
		}, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0] = restarted("node")
		}, "the container that runs a worker's worker-agent restarted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := startAgent(t)
			api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1", c.before))
			cfg := watchedConfig(t, a, "sleep", "3")
			go func() {
				if !a.waitAsked(30 * time.Second) {
					return // the test fails on its own: nothing asked the agent
				}
				p, err := api.cs.CoreV1().Pods(kns).Get(context.Background(), "tj-node-0-1-bb", metav1.GetOptions{})
				if err != nil {
					return
				}
				c.after(p)
				_, _ = api.cs.CoreV1().Pods(kns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
			}()
			code, msg, logs := runJobWithAPI(t, api, cfg)
			if code != exitcode.OK {
				t.Fatalf("exit %d (%s), want 0: a container restart stopped the job", code, msg)
			}
			if !strings.Contains(logs, "level=WARN msg=\""+c.want) {
				t.Errorf("log lacks the restart at WARN (%q):\n%s", c.want, logs)
			}
			if strings.Contains(logs, "level=ERROR") {
				t.Errorf("an ERROR record for a container restart:\n%s", logs)
			}
		})
	}
}

// TestWaitWarnsOnlyForWorkers: while the launcher waits, the job has pods
// that are not workers: a Trainer initializer that has Succeeded, a worker
// of another replicated job not in the hostfile. Only the hostfile's
// workers get a WorkerNotReady Warning ("the launcher waits for worker
// ...-initializer-0-0" used to be written).
func TestWaitWarnsOnlyForWorkers(t *testing.T) {
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1", unschedulable),
		jobPod("tj-dataset-initializer-0-0-dd", "tj-dataset-initializer-0-0", succeeded),
		jobPod("tj-node-0-9-ee", "tj-node-0-9", unschedulable))
	cfg := waitingConfig(2*time.Second, "tj-node-0-1.tj.invalid")
	code, msg, logs := runJobWithAPI(t, api, cfg)
	if code != exitcode.DiscoveryTimeout {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.DiscoveryTimeout)
	}
	var warned []string
	for _, e := range api.events(t) {
		if e.Reason == "WorkerNotReady" {
			warned = append(warned, e.Message)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "the launcher waits for worker tj-node-0-1.tj.invalid: pod tj-node-0-1-bb is Pending") {
		t.Errorf("WorkerNotReady Events %q, want one, for the hostfile's worker", warned)
	}
	for _, pod := range []string{"initializer", "tj-node-0-9"} {
		if strings.Contains(logs, pod) {
			t.Errorf("a pod that is not a worker (%s) was warned about:\n%s", pod, logs)
		}
	}
}

// TestEndEventAfterFlappingWarnings: a worker's image cannot be pulled,
// and its pod flaps between ErrImagePull and ImagePullBackOff (each a new
// message) while the launcher waits. That is one trouble, warned about
// once; and however many Warnings come before it, the Event of the
// launcher's end (WorkersNotResolved) is written. The flaps used to take
// client-go's whole budget of 25 Warnings, and the end Event was dropped.
func TestEndEventAfterFlappingWarnings(t *testing.T) {
	pulling := func(reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = nil
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: reason, Message: reason + ` for image "registry.invalid/nope:1"`}}}}
		}
	}
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1", pulling("ErrImagePull")))
	stop := make(chan struct{})
	flapped := make(chan int)
	go func() {
		n := 0
		defer func() { flapped <- n }()
		// 40 flaps, more than client-go's budget of 25, within the wait's
		// 10 s even on a loaded machine.
		for reason := "ImagePullBackOff"; n < 40; {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			p := jobPod("tj-node-0-1-bb", "tj-node-0-1", pulling(reason))
			if _, err := api.cs.CoreV1().Pods(kns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err == nil {
				n++
			}
			if reason == "ErrImagePull" {
				reason = "ImagePullBackOff"
			} else {
				reason = "ErrImagePull"
			}
		}
	}()
	cfg := waitingConfig(10*time.Second, "tj-node-0-1.tj.invalid")
	cfg.DiagnosisWatch = 50 * time.Millisecond // the pods are listed as often
	code, msg, _ := runJobWithAPI(t, api, cfg)
	close(stop)
	if n := <-flapped; n < 30 {
		t.Fatalf("the pod flapped %d times; the test needs more than client-go's 25 Warnings", n)
	}
	if code != exitcode.DiscoveryTimeout {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.DiscoveryTimeout)
	}
	reasons := map[string]int{}
	for _, e := range api.events(t) {
		reasons[e.Reason]++
	}
	if reasons["WorkersNotResolved"] != 1 {
		t.Errorf("Events by reason %v: the end Event (WorkersNotResolved) was not written", reasons)
	}
	if reasons["WorkerNotReady"] != 1 {
		t.Errorf("Events by reason %v: want one WorkerNotReady for the one trouble", reasons)
	}
}

// TestWaitEventsAreBounded: 12 workers that cannot be scheduled are each
// warned about in the log, and the first maxWaitEvents of them in Events,
// so that the run's other Warnings keep their place in client-go's budget.
func TestWaitEventsAreBounded(t *testing.T) {
	var pods []*corev1.Pod
	var workers []string
	for i := range 12 {
		pods = append(pods, jobPod(fmt.Sprintf("tj-node-0-%d-x", i), fmt.Sprintf("tj-node-0-%d", i), unschedulable))
		workers = append(workers, fmt.Sprintf("tj-node-0-%d.tj.invalid", i))
	}
	api := newFakeAPI(t, pods...)
	cfg := waitingConfig(2*time.Second, workers...)
	code, msg, logs := runJobWithAPI(t, api, cfg)
	if code != exitcode.DiscoveryTimeout {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.DiscoveryTimeout)
	}
	events := 0
	for _, e := range api.events(t) {
		if e.Reason == "WorkerNotReady" {
			events++
		}
	}
	if events != maxWaitEvents {
		t.Errorf("%d WorkerNotReady Events, want %d", events, maxWaitEvents)
	}
	if n := strings.Count(logs, "msg=\"the launcher waits for worker"); n != 12 {
		t.Errorf("%d warnings in the log, want one per worker (12)", n)
	}
	if !strings.Contains(logs, "further WorkerNotReady Events are not written") {
		t.Errorf("the log does not say the Events stopped:\n%s", logs)
	}
}

// TestAPIRetriedAfterTransientError: the API server does not answer the
// launcher's first question (503, as while it restarts). The launcher
// asks again with backoff in the background: while it waits for a worker
// that cannot be scheduled, it warns with Kubernetes' reason and ends
// with the failure Event, as with an API that answered at once. One
// failure used to turn the API off for the whole run.
func TestAPIRetriedAfterTransientError(t *testing.T) {
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1", unschedulable))
	var failed atomic.Bool
	api.cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.Swap(true) {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServiceUnavailable("the API server is restarting")
	})
	cfg := waitingConfig(4*time.Second, "tj-node-0-1.tj.invalid")
	code, msg, logs := runJobWithAPI(t, api, cfg)
	if code != exitcode.DiscoveryTimeout {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.DiscoveryTimeout)
	}
	if !failed.Load() {
		t.Fatal("the API's first answer was not the 503 this test is about")
	}
	if !strings.Contains(logs, "the Kubernetes API did not answer the launcher's first questions; asking again") {
		t.Errorf("the log does not say the API is asked again:\n%s", logs)
	}
	reasons := map[string]bool{}
	for _, e := range api.events(t) {
		reasons[e.Reason] = true
	}
	if !reasons["WorkerNotReady"] || !reasons["WorkersNotResolved"] {
		t.Errorf("Events %v; want WorkerNotReady and WorkersNotResolved", reasons)
	}
	if first, _, _ := strings.Cut(msg, "\n"); !strings.Contains(first, "Kubernetes says: tj-node-0-1.tj.invalid: pod tj-node-0-1-bb is Pending") {
		t.Errorf("first line: %s", first)
	}
}

// TestProbeReason: the reason of a probe failure is the phase most workers
// failed in (the unreachable ones counted together); a tie goes to the
// phase met later in a connection.
func TestProbeReason(t *testing.T) {
	refused, timeout, auth, hostKey := sshclient.PhaseTCPRefused, sshclient.PhaseTCPTimeout, sshclient.PhaseAuth, sshclient.PhaseHostKey
	for _, c := range []struct {
		phases []sshclient.Phase
		want   string
	}{
		{[]sshclient.Phase{auth, refused, refused, refused}, "Unreachable"},
		{[]sshclient.Phase{refused, timeout, refused, auth, auth}, "Unreachable"},
		{[]sshclient.Phase{refused, timeout, auth, auth}, "Auth"},
		{[]sshclient.Phase{refused, auth}, "Auth"},
		{[]sshclient.Phase{hostKey, auth}, "Auth"},
		{[]sshclient.Phase{hostKey, hostKey, auth}, "HostKey"},
		{[]sshclient.Phase{sshclient.PhaseConfig}, ""},
		{nil, ""},
	} {
		if got := probeReason(c.phases); got != c.want {
			t.Errorf("probeReason(%v) = %q, want %q", c.phases, got, c.want)
		}
	}
}
