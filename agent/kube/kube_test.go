package kube_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/kube/kubetest"
)

const ns = "team-a"

func pod(name, host string, labels map[string]string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: ktypes.UID("uid-" + name), Labels: labels,
		CreationTimestamp: metav1.Now()},
		Spec:   corev1.PodSpec{Hostname: host, NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func meta(gvr schema.GroupVersionResource, kind, name, uid string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvr.GroupVersion().String(), Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: ktypes.UID(uid)},
	}
}

// client is a kube.Client over fake API clients holding objs (core) and owners
// (metadata).
func client(t *testing.T, podName string, objs []runtime.Object, owners ...runtime.Object) (*kube.Client, *fake.Clientset, *bytes.Buffer) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	scheme := metafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mc := metafake.NewSimpleMetadataClient(scheme, owners...)
	var logs bytes.Buffer
	c, why := kube.Connect(kube.Options{PodName: podName, Core: kubetest.Core(cs.CoreV1()), Metadata: mc, Namespace: ns, Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if c == nil {
		t.Fatal(why)
	}
	return c, cs, &logs
}

func TestConnectOff(t *testing.T) {
	c, why := kube.Connect(kube.Options{Mode: "off"})
	if c != nil || !strings.Contains(why, "--kube.api off") {
		t.Fatalf("kube.Connect(off) = %v, %q", c, why)
	}
	// Outside a pod: no KUBERNETES_SERVICE_HOST.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	c, why = kube.Connect(kube.Options{})
	if c != nil || !strings.Contains(why, "not in a Kubernetes pod") {
		t.Fatalf("kube.Connect outside Kubernetes = %v, %q", c, why)
	}
	// A nil client does nothing and says so by its results.
	if c.Event(context.Background(), kube.Warning, "X", "y") || c.Job() != nil || c.Resolve(context.Background()) != nil {
		t.Error("a nil client did something")
	}
	if _, ok := c.Pods(context.Background()); ok {
		t.Error("a nil client listed pods")
	}
}

func TestResolveTrainJob(t *testing.T) {
	lbl := map[string]string{kube.LabelJobSetName: "tj"}
	c, cs, _ := client(t, "tj-launcher-0-0-abcde",
		[]runtime.Object{pod("tj-launcher-0-0-abcde", "tj-launcher-0-0", lbl)},
		meta(kube.TrainJobs, "TrainJob", "tj", "tj-uid"))
	if err := c.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	j := c.Job()
	if j == nil || j.Kind != "TrainJob" || j.UID != "tj-uid" || j.Name != "tj" || j.APIVersion != "trainer.kubeflow.org/v1alpha1" {
		t.Fatalf("job = %+v", j)
	}
	// The Event goes on the TrainJob (by uid) and on the launcher's pod,
	// with what the Kubeflow SDK needs (firstTimestamp) and a count.
	if !c.Event(context.Background(), kube.Warning, "ProbeFailed", "tj-node-0-1.tj:2222: auth: key rejected") {
		t.Fatal("no Event written")
	}
	evs, _ := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 2 {
		t.Fatalf("%d Events, want 2 (TrainJob, pod)", len(evs.Items))
	}
	kinds := map[string]corev1.Event{}
	for _, e := range evs.Items {
		kinds[e.InvolvedObject.Kind] = e
	}
	e := kinds["TrainJob"]
	if e.InvolvedObject.UID != "tj-uid" || e.Type != kube.Warning || e.Reason != "ProbeFailed" || e.FirstTimestamp.IsZero() ||
		e.Count != 1 || e.Source.Component != kube.ReportingComponent || e.ReportingController != kube.ReportingComponent {
		t.Errorf("TrainJob Event = %+v", e)
	}
	if p := kinds["Pod"]; p.InvolvedObject.Name != "tj-launcher-0-0-abcde" || p.InvolvedObject.UID != "uid-tj-launcher-0-0-abcde" {
		t.Errorf("pod Event on %+v", p.InvolvedObject)
	}
	// The same Event again is the same Event, counted.
	c.Event(context.Background(), kube.Warning, "ProbeFailed", "tj-node-0-1.tj:2222: auth: key rejected")
	evs, _ = cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 2 {
		t.Fatalf("%d Events after a repeat, want 2", len(evs.Items))
	}
	patched := false
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "events" {
			patched = true
		}
	}
	if !patched {
		t.Error("a repeated Event was not a patch of the first (count)")
	}
}

// TestEventBeforeResolve: an Event recorded before anything resolved the
// job's objects (the launcher's first Event can beat the background
// lookup) still goes on the TrainJob.
func TestEventBeforeResolve(t *testing.T) {
	lbl := map[string]string{kube.LabelJobSetName: "tj"}
	c, cs, _ := client(t, "tj-launcher-0-0-abcde",
		[]runtime.Object{pod("tj-launcher-0-0-abcde", "tj-launcher-0-0", lbl)},
		meta(kube.TrainJobs, "TrainJob", "tj", "tj-uid"))
	if !c.Event(context.Background(), kube.Normal, "Initialized", "init done") {
		t.Fatal("no Event written")
	}
	evs, _ := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	var on []string
	for _, e := range evs.Items {
		on = append(on, e.InvolvedObject.Kind+"/"+string(e.InvolvedObject.UID))
	}
	slices.Sort(on)
	if want := []string{"Pod/uid-tj-launcher-0-0-abcde", "TrainJob/tj-uid"}; !slices.Equal(on, want) {
		t.Errorf("Events on %v, want %v", on, want)
	}
}

// TestDescribeStarted: a pod's containers have started once one of them
// (a sidecar init container too) runs or ran; a new pod's have not, nor
// those of a new pod through its regular init containers (podmpi's own,
// which copies /opt/podmpi in, done or running): no worker-agent serves
// from one.
func TestDescribeStarted(t *testing.T) {
	creating := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	}
	sidecar := func(p *corev1.Pod) {
		creating(p)
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{}}}}
	}
	// The same sidecar as the spec shows it: restartPolicy Always.
	sidecarInSpec := func(p *corev1.Pod) {
		sidecar(p)
		p.Spec.InitContainers = []corev1.Container{{Name: "agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	}
	// podmpi's init container (deploy/runtimes, deploy/mpi-operator), done
	// or running, and the worker-agent's container not started yet.
	initDone := func(p *corev1.Pod) {
		creating(p)
		p.Spec.InitContainers = []corev1.Container{{Name: "podmpi"}}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "podmpi", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}}
	}
	initRunning := func(p *corev1.Pod) {
		initDone(p)
		p.Status.InitContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	}
	// Through podmpi's init container, the worker's running.
	initThenRunning := func(p *corev1.Pod) {
		initDone(p)
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	}
	running := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{}}}}
	}
	for _, c := range []struct {
		name string
		mut  func(*corev1.Pod)
		want bool
	}{{"creating", creating, false}, {"sidecar", sidecar, true}, {"sidecar-in-spec", sidecarInSpec, true}, {"init-container-done", initDone, false},
		{"init-container-running", initRunning, false}, {"init-container-then-running", initThenRunning, true}, {"running", running, true}} {
		if got := kube.Describe(pod("w-1-abc", "w-1", nil, c.mut)).Started; got != c.want {
			t.Errorf("%s: Started = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestResolveMPIJobByAddressAndPlainJobSet(t *testing.T) {
	c, _, _ := client(t, "pi-launcher-xyz",
		[]runtime.Object{pod("pi-launcher-xyz", "", map[string]string{kube.LabelMPIJobName: "pi"})},
		meta(kube.MPIJobs, "MPIJob", "pi", "pi-uid"))
	if err := c.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if j := c.Job(); j == nil || j.Kind != "MPIJob" || j.UID != "pi-uid" {
		t.Fatalf("job = %+v", j)
	}
	// A JobSet that no TrainJob owns.
	c, _, _ = client(t, "js-a-0-0-x", []runtime.Object{pod("js-a-0-0-x", "js-a-0-0", map[string]string{kube.LabelJobSetName: "js"})},
		meta(kube.JobSets, "JobSet", "js", "js-uid"))
	if err := c.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if j := c.Job(); j == nil || j.Kind != "JobSet" || j.UID != "js-uid" {
		t.Fatalf("job = %+v", j)
	}
}

// TestForbidden: without deploy/rbac every call is refused (403); the
// launcher says so once at INFO and goes on.
func TestForbidden(t *testing.T) {
	c, cs, logs := client(t, "p", nil)
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("RBAC: no"))
	})
	if err := c.Resolve(context.Background()); err == nil || !strings.Contains(err.Error(), "forbidden by RBAC") {
		t.Fatalf("Resolve = %v", err)
	}
	for range 3 {
		if c.Event(context.Background(), kube.Warning, "X", "y") {
			t.Fatal("an Event was written")
		}
		if _, ok := c.Pods(context.Background()); ok {
			t.Fatal("pods were listed")
		}
	}
	if n := strings.Count(logs.String(), "level=INFO"); n != 1 || !strings.Contains(logs.String(), "apply deploy/rbac") {
		t.Errorf("want one INFO line naming deploy/rbac, got %d:\n%s", n, logs)
	}
}

func TestDescribe(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		mut  func(*corev1.Pod)
		want string
	}{
		{"running", nil, ""},
		{"unschedulable", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/1 nodes are available: 1 Insufficient cpu."}}
		}, "is Pending, not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."},
		{"image", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ErrImagePull", Message: `failed to pull image "nope:1"`}}}}
		}, `is Pending: container node ErrImagePull: failed to pull image "nope:1"`},
		{"crashloop", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", RestartCount: 4,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 65}}}}
		}, "is Running: container node CrashLoopBackOff: back-off 40s (restarted 4 times, last Error, exit 65)"},
		{"sidecar restart", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", Ready: true}, {Name: "istio-proxy", RestartCount: 1, Ready: true,
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
		}, "is Running and Ready: container istio-proxy restarted 1 times (last Error, exit 1)"},
		{"oom restart", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", RestartCount: 1, Ready: true,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
		}, "is Running and Ready: container node restarted 1 times (last OOMKilled, exit 137)"},
		{"deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, "is being deleted"},
		{"evicted", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "TerminationByKubelet", Message: "The node was low on resource: memory."})
		}, "is being disrupted: TerminationByKubelet: The node was low on resource: memory."},
		{"not ready", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, "is Running but not Ready"},
		{"failed with a message", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Error", ExitCode: 75, Message: "\nworker-agent: the image cannot run worker-agent: this image has musl libc instead\npodmpi worker-agent failed (exit code 75)\n"}}}}
		}, "has failed; container worker Error, exit 75: worker-agent: the image cannot run worker-agent: this image has musl libc instead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := kube.Describe(pod("w-1-abc", "w-1", nil, func(p *corev1.Pod) {
				if tc.mut != nil {
					tc.mut(p)
				}
			}))
			if s.Why != tc.want {
				t.Errorf("Why = %q, want %q", s.Why, tc.want)
			}
			if s.Hostname != "w-1" {
				t.Errorf("Hostname = %q", s.Hostname)
			}
		})
	}
}

// TestPodsAndEnded: the API's word that a worker's pod has ended is its
// deletion, its replacement (a new uid) or its failure; a restart of one
// of its containers is listed (RestartedSince), never an end: a sidecar
// restarts alone, and only the worker-agent's own start time says it
// restarted.
func TestPodsAndEnded(t *testing.T) {
	lbl := map[string]string{kube.LabelJobSetName: "tj"}
	objs := []runtime.Object{pod("tj-launcher-0-0-a", "tj-launcher-0-0", lbl), pod("tj-node-0-0-a", "tj-node-0-0", lbl),
		pod("tj-node-0-1-a", "tj-node-0-1", lbl), pod("other", "other", map[string]string{kube.LabelJobSetName: "x"})}
	c, cs, _ := client(t, "tj-launcher-0-0-a", objs, meta(kube.TrainJobs, "TrainJob", "tj", "u"))
	ps, ok := c.Pods(context.Background())
	if !ok || len(ps.ByHost) != 3 {
		t.Fatalf("kube.Pods = %v, %v; want the 3 of the job", ps.ByHost, ok)
	}
	before, ok := ps.For("tj-node-0-1.tj.team-a.svc.cluster.local.")
	if !ok || before.Name != "tj-node-0-1-a" {
		t.Fatalf("For = %+v, %v", before, ok)
	}
	if why, ended := kube.PodEnded(before, ps); ended {
		t.Fatalf("a running pod has ended: %s", why)
	}
	// Replaced: deleted and recreated under the same host name.
	ctx := context.Background()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "tj-node-0-1-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, _ = c.Pods(ctx)
	if why, ended := kube.PodEnded(before, ps); !ended || !strings.Contains(why, "no longer exists") {
		t.Errorf("deleted: %q, %v", why, ended)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod("tj-node-0-1-b", "tj-node-0-1", lbl), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, _ = c.Pods(ctx)
	if why, ended := kube.PodEnded(before, ps); !ended || !strings.Contains(why, "replaced by tj-node-0-1-b") {
		t.Errorf("replaced: %q, %v", why, ended)
	}
	// Restarts of the worker's containers, its own and its sidecars', are
	// listed and are no end of the pod.
	n0, _ := ps.For("tj-node-0-0")
	p := pod("tj-node-0-0-a", "tj-node-0-0", lbl, func(p *corev1.Pod) {
		p.UID = n0.UID
		p.Spec.Containers = []corev1.Container{{Name: "node"}, {Name: "istio-proxy"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node"}, {Name: "istio-proxy", RestartCount: 1,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 137}}}}
	})
	if _, err := cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, _ = c.Pods(ctx)
	if why, ended := kube.PodEnded(n0, ps); ended {
		t.Errorf("a sidecar's restart ended the pod: %s", why)
	}
	rs := kube.RestartedSince(n0, ps)
	if len(rs) != 1 || rs[0].Container != "istio-proxy" || rs[0].Agent || rs[0].LastEnd != "Error, exit 137" {
		t.Errorf("RestartedSince = %+v, want istio-proxy's one restart, not the agent's", rs)
	}
	// Compared with the list that showed that restart, nothing new.
	n0, _ = ps.For("tj-node-0-0")
	if rs := kube.RestartedSince(n0, ps); len(rs) != 0 {
		t.Errorf("RestartedSince the same list = %+v", rs)
	}
}

// TestAgentContainer: the worker-agent's container by the operators'
// conventions (Trainer's node, else the first), so that a restart of a
// sidecar is told apart from one of the agent's own container, init
// containers (native sidecars) never being it.
func TestAgentContainer(t *testing.T) {
	for _, c := range []struct {
		name       string
		containers []string
		want       string
	}{
		{"trainer", []string{"istio-proxy", "node"}, "node"},
		{"mpi-operator", []string{"worker", "log-shipper"}, "worker"},
		{"none", nil, ""},
	} {
		p := pod("w-1-a", "w-1", nil)
		for _, n := range c.containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n})
		}
		if got := kube.AgentContainer(p); got != c.want {
			t.Errorf("%s: AgentContainer = %q, want %q", c.name, got, c.want)
		}
	}
	// A native sidecar (an init container that keeps running) named like
	// the agent's container is not it.
	p := pod("w-1-a", "w-1", nil, func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: "node"}}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "node", RestartCount: 2}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", RestartCount: 1}}
	})
	rs := kube.Describe(p).Restarts
	if len(rs) != 2 || rs[0].Agent || !rs[1].Agent {
		t.Errorf("Restarts = %+v, want the init container's not the agent's, the container's the agent's", rs)
	}
}

func TestWhyRestarted(t *testing.T) {
	old, recent := metav1.NewTime(time.Now().Add(-time.Hour)), metav1.Now()
	c, _, _ := client(t, "p", []runtime.Object{
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: ns}, InvolvedObject: corev1.ObjectReference{Name: "w-1-a"},
			Reason: "Killing", Message: "Stopping container node", LastTimestamp: old},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e2", Namespace: ns}, InvolvedObject: corev1.ObjectReference{Name: "w-1-a"},
			Reason: "Killing", Message: "Container node failed liveness probe, will be restarted", LastTimestamp: recent},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e3", Namespace: ns}, InvolvedObject: corev1.ObjectReference{Name: "w-1-a"},
			Reason: "Unhealthy", Message: "Liveness probe failed: HTTP probe failed with statuscode: 503", LastTimestamp: recent},
	})
	if got := c.WhyRestarted(context.Background(), "w-1-a"); got != "Container node failed liveness probe, will be restarted" {
		t.Errorf("WhyRestarted = %q", got)
	}
}

// TestEndEventHasItsOwnBudget: client-go's correlator lets 25 Warnings on
// one object through, then one every 5 minutes. Warnings along the way
// (different reasons and messages: no repeat to count) use that up; the
// launcher's last Event still lands, on both objects.
func TestEndEventHasItsOwnBudget(t *testing.T) {
	lbl := map[string]string{kube.LabelJobSetName: "tj"}
	c, cs, _ := client(t, "tj-launcher-0-0-abcde",
		[]runtime.Object{pod("tj-launcher-0-0-abcde", "tj-launcher-0-0", lbl)},
		meta(kube.TrainJobs, "TrainJob", "tj", "tj-uid"))
	ctx := context.Background()
	dropped := false
	for i := range 40 {
		if !c.Event(ctx, kube.Warning, fmt.Sprintf("Reason%d", i%2), fmt.Sprintf("warning %d", i)) {
			dropped = true
		}
	}
	if !dropped {
		t.Fatal("40 Warnings all written: the budget this test spends is not client-go's")
	}
	if !c.EndEvent(ctx, kube.Warning, "ProbeFailedAuth", "probe: the end") {
		t.Fatal("the end Event was not written")
	}
	evs, _ := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	on := map[string]bool{}
	for _, e := range evs.Items {
		if e.Reason == "ProbeFailedAuth" {
			on[e.InvolvedObject.Kind] = true
		}
	}
	if !on["TrainJob"] || !on["Pod"] {
		t.Errorf("the end Event is on %v, want the TrainJob and the pod", on)
	}
}

// TestDescribeReason: the trouble's one word stays the same while Why's
// words change: an image pull flapping between ErrImagePull and
// ImagePullBackOff is one trouble; an unscheduled pod is Unschedulable.
func TestDescribeReason(t *testing.T) {
	waiting := func(reason, msg string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: reason, Message: msg}}}}
		}
	}
	pull := kube.Describe(pod("w-1-a", "w-1", nil, waiting("ErrImagePull", `failed to pull image "nope:1"`)))
	backoff := kube.Describe(pod("w-1-a", "w-1", nil, waiting("ImagePullBackOff", `Back-off pulling image "nope:1"`)))
	if pull.Why == backoff.Why || pull.Reason != "ErrImagePull" || backoff.Reason != pull.Reason {
		t.Errorf("pull %q/%q, back-off %q/%q: want two messages, one reason", pull.Why, pull.Reason, backoff.Why, backoff.Reason)
	}
	unscheduled := kube.Describe(pod("w-1-a", "w-1", nil, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}
	}))
	if unscheduled.Reason != "Unschedulable" {
		t.Errorf("Reason = %q, want Unschedulable", unscheduled.Reason)
	}
	if r := kube.Describe(pod("w-1-a", "w-1", nil)); r.Reason != "" || r.Why != "" {
		t.Errorf("a running, ready pod: %q/%q", r.Why, r.Reason)
	}
}

// TestResolveAfterTransientError: an API server that does not answer the
// first question (503, as while it restarts) is asked again by the next
// call; RBAC's refusal is final (TestForbidden).
func TestResolveAfterTransientError(t *testing.T) {
	lbl := map[string]string{kube.LabelJobSetName: "tj"}
	c, cs, _ := client(t, "tj-launcher-0-0-abcde",
		[]runtime.Object{pod("tj-launcher-0-0-abcde", "tj-launcher-0-0", lbl)},
		meta(kube.TrainJobs, "TrainJob", "tj", "tj-uid"))
	failed := false
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrors.NewServiceUnavailable("the API server is restarting")
	})
	err := c.Resolve(context.Background())
	if err == nil || !kube.Transient(err) || c.Job() != nil {
		t.Fatalf("first Resolve = %v (transient %v), job %v; want the 503", err, kube.Transient(err), c.Job())
	}
	if err := c.Resolve(context.Background()); err != nil {
		t.Fatalf("second Resolve = %v", err)
	}
	if j := c.Job(); j == nil || j.Kind != "TrainJob" || j.UID != "tj-uid" {
		t.Fatalf("job = %+v after the API answered", j)
	}
	if ps, ok := c.Pods(context.Background()); !ok || len(ps.ByHost) != 1 {
		t.Errorf("Pods = %v, %v", ps.ByHost, ok)
	}
	for _, e := range []error{apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("RBAC")),
		apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"), apierrors.NewUnauthorized("token")} {
		if kube.Transient(e) {
			t.Errorf("Transient(%v) = true", e)
		}
	}
	for _, e := range []error{apierrors.NewTooManyRequests("slow down", 1), apierrors.NewInternalError(errors.New("etcd")),
		apierrors.NewTimeoutError("get", 1), context.DeadlineExceeded, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")} {
		if !kube.Transient(e) {
			t.Errorf("Transient(%v) = false", e)
		}
	}
}
