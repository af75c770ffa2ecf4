package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/podmpi/podmpi/test/cluster"
)

const (
	netpolFile              = "deploy/networkpolicy/networkpolicy.yaml"
	trainerStatusPolicyFile = "deploy/networkpolicy/trainer-status.yaml"
)

// nodeDNSPolicy adds what this cluster needs beyond deploy/networkpolicy:
// its CoreDNS is served by the node at the bridge address (as NodeLocal
// DNSCache is on a link-local one), not by kube-dns pods in kube-system, so
// DNS egress to that address is opened by a second policy, as the example's
// comment says to do.
func nodeDNSPolicy() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": "podmpi-node-dns"},
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": map[string]any{"podmpi.io/mpi": "true"}},
			"policyTypes": []any{"Egress"},
			"egress": []any{map[string]any{
				"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": e.info.Gateway + "/32"}}},
				"ports": []any{map[string]any{"protocol": "UDP", "port": int64(53)}, map[string]any{"protocol": "TCP", "port": int64(53)}},
			}},
		},
	}}
}

// nodeTrainerStatusPolicy adds, as nodeDNSPolicy does for DNS, what
// deploy/networkpolicy/trainer-status.yaml cannot select here: Trainer's
// controller runs on the node, not as a pod in kubeflow-system, so its
// status endpoint (the Service's port, which the node serves) is opened at
// the node's address, for the launcher pods only, as the example opens it.
func nodeTrainerStatusPolicy() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": "podmpi-node-trainer-status"},
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": map[string]any{"podmpi.io/mpi": "true", "podmpi.io/role": "launcher"}},
			"policyTypes": []any{"Egress"},
			"egress": []any{map[string]any{
				"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": e.info.Gateway + "/32"}}},
				"ports": []any{map[string]any{"protocol": "TCP", "port": int64(cluster.TrainerStatusPort)}},
			}},
		},
	}}
}

// isolate applies the shipped NetworkPolicies in ns (the namespace's and
// the launcher's egress to Trainer's status endpoint), with this cluster's
// stand-ins for the DNS and Trainer pods it does not have.
func isolate(t *testing.T, ns string) {
	t.Helper()
	objs := append(readObjects(t, netpolFile), readObjects(t, trainerStatusPolicyFile)...)
	apply(t, ns, append(objs, nodeDNSPolicy(), nodeTrainerStatusPolicy())...)
}

// probePod starts a restricted pod that sleeps, to connect from, with the
// given labels, and returns once it runs.
func probePod(t *testing.T, ns, name string, labels map[string]string, command ...string) *corev1.Pod {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	if len(command) == 0 {
		command = []string{"sleep", "3600"}
	}
	p := restrictedPod(name, e.info.Images["openmpi"], "", command)
	p.Labels = labels
	p.Spec.Volumes = p.Spec.Volumes[1:] // no job Secret
	p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[1:]
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	waitFor(t, 2*time.Minute, "pod "+ns+"/"+name+" running", func() (bool, error) {
		var err error
		got, err = e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "", err
	})
	return got
}

// connects reports whether a TCP connection from pod ns/from to ip:port is
// made within 3 s (bash's /dev/tcp in the pod).
func connects(t *testing.T, ns, from, ip string, port int) bool {
	t.Helper()
	_, err := kubectl(ctxT(t, 30*time.Second), nil, "-n", ns, "exec", from, "--", "timeout", "3", "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", ip, port))
	return err == nil
}

// target is one address a probe connects to.
type target struct {
	what string
	ip   string
	port int
}

// reach is one probe: from pod ns/from to t, which the policy allows or not.
type reach struct {
	ns, from string
	to       target
	allowed  bool
}

func (r reach) String() string {
	verdict := "refused"
	if r.allowed {
		verdict = "allowed"
	}
	return fmt.Sprintf("%s/%s -> %s (%s:%d) %s", r.ns, r.from, r.to.what, r.to.ip, r.to.port, verdict)
}

// waitReach polls a probe until it gives want (the firewall applies a new
// pod's rules a moment after the pod starts), and fails after d.
func waitReach(t *testing.T, r reach, want bool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if connects(t, r.ns, r.from, r.to.ip, r.to.port) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: connect=%v after %s, want %v", r, !want, d, want)
			return
		}
		time.Sleep(time.Second)
	}
}

// monitoringNamespace makes the namespace named monitoring that the shipped
// policy lets scrape port 9022 and receive the Pushgateway push on 9091, with
// a listener on 9091 and on 9092 (which the policy does not open), and
// returns the listener's address.
func monitoringNamespace(t *testing.T) (string, string) {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	const ns = "monitoring"
	_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	if err == nil {
		t.Cleanup(func() { _ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	name := "listener-" + randSuffix()
	listen := `import socket, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.close()
for p in (9091, 9092):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
threading.Event().wait()
`
	l := probePod(t, ns, name, nil, "python3", "-c", listen)
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	scraper := probePod(t, ns, "scraper-"+randSuffix(), nil)
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Pods(ns).Delete(context.Background(), scraper.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return l.Status.PodIP, scraper.Name
}

// networkPolicyDrill checks, in the isolated namespace ns where a job runs
// (worker and launcher given), what deploy/networkpolicy allows and
// refuses; then it deletes the policies and checks that every refused
// connection is made: the same checks pass without the policy, so they can
// fail.
func networkPolicyDrill(t *testing.T, ns string, worker, launcher *corev1.Pod) {
	t.Helper()
	other := namespace(t, "netpol-other", true)
	if err := e.cs.NetworkingV1().NetworkPolicies(other).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	mpi := probePod(t, ns, "mpi-probe", map[string]string{"podmpi.io/mpi": "true"})
	plain := probePod(t, ns, "plain-probe", nil)
	outside := probePod(t, other, "outside-probe", map[string]string{"podmpi.io/mpi": "true"})
	listener, scraper := monitoringNamespace(t)

	w2222 := target{"worker " + worker.Name + " ssh", worker.Status.PodIP, 2222}
	w9022 := target{"worker " + worker.Name + " http", worker.Status.PodIP, 9022}
	l9022 := target{"launcher " + launcher.Name + " http", launcher.Status.PodIP, 9022}
	push := target{"Pushgateway stand-in", listener, 9091}
	notPush := target{"monitoring port 9092", listener, 9092}
	refused := []reach{
		{other, outside.Name, w2222, false}, {other, outside.Name, w9022, false}, {other, outside.Name, l9022, false},
		{ns, plain.Name, w2222, false}, {ns, plain.Name, w9022, false}, {ns, plain.Name, l9022, false},
		{"monitoring", scraper, w2222, false},
		{ns, mpi.Name, notPush, false},
	}
	allowed := []reach{
		{ns, mpi.Name, w2222, true}, {ns, mpi.Name, w9022, true}, {ns, mpi.Name, l9022, true},
		{"monitoring", scraper, w9022, true}, {"monitoring", scraper, l9022, true},
		{ns, mpi.Name, push, true},
	}
	for _, r := range append(allowed, refused...) {
		waitReach(t, r, r.allowed, 30*time.Second)
	}
	// DNS through the policy: the MPI pod resolves the worker's name.
	if worker.Spec.Subdomain == "" {
		t.Errorf("worker %s has no subdomain: no DNS name to resolve", worker.Name)
	} else if out, err := kubectl(ctxT(t, 30*time.Second), nil, "-n", ns, "exec", mpi.Name, "--", "getent", "hosts",
		worker.Spec.Hostname+"."+worker.Spec.Subdomain+"."+ns+".svc."+cluster.ClusterDomain); err != nil || !strings.Contains(out, worker.Status.PodIP) {
		t.Errorf("DNS from an MPI pod under the policy: %v %q, want %s", err, out, worker.Status.PodIP)
	}
	if t.Failed() {
		return
	}
	t.Logf("under deploy/networkpolicy: %d connections allowed, %d refused as the policy says", len(allowed), len(refused))

	// The same checks without the policy: every refused connection is made.
	if err := e.cs.NetworkingV1().NetworkPolicies(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range refused {
		waitReach(t, r, true, 30*time.Second)
	}
	if !t.Failed() {
		t.Logf("without the policy all %d refused connections are made: the checks can fail", len(refused))
	}
}

// runningPods waits until the pods matching the launcher and worker selectors
// in ns run, and returns the first worker and the launcher.
func runningPods(t *testing.T, ns, launcherSel, workerSel string) (worker, launcher *corev1.Pod) {
	t.Helper()
	ctx := ctxT(t, 4*time.Minute)
	waitFor(t, 3*time.Minute, "a running launcher and worker in "+ns, func() (bool, error) {
		ls, err := podsWith(ctx, ns, launcherSel)
		if err != nil {
			return false, err
		}
		ws, err := podsWith(ctx, ns, workerSel)
		if err != nil {
			return false, err
		}
		for i := range ls {
			if ls[i].Status.Phase == corev1.PodRunning && ls[i].Status.PodIP != "" {
				launcher = &ls[i]
			}
		}
		for i := range ws {
			if ws[i].Status.Phase == corev1.PodRunning && ws[i].Status.PodIP != "" {
				worker = &ws[i]
			}
		}
		return launcher != nil && worker != nil, nil
	})
	return worker, launcher
}

// netpolProbesCPU is the CPU, in millicores, of networkPolicyDrill's own
// pods: five probePods of 50m (restrictedPod).
const netpolProbesCPU = 5 * 50

// trainerNetworkPolicy runs a TrainJob whose ranks sleep in an isolated
// namespace and drills the policy against its pods.
func trainerNetworkPolicy(t *testing.T) {
	ns := namespace(t, "netpol", true)
	tj := trainJob(t, "podmpi-openmpi")
	setNested(t, tj, []any{"mpirun", "bash", "-c", "sleep 600"}, "spec", "trainer", "args")
	apply(t, ns, tj)
	t.Cleanup(func() {
		_ = e.dyn.Resource(trainJobGVR).Namespace(ns).Delete(context.Background(), tj.GetName(), metav1.DeleteOptions{})
	})
	sel := "jobset.sigs.k8s.io/jobset-name=" + tj.GetName()
	worker, launcher := runningPods(t, ns, sel+","+launcherSel, sel+","+nodeSel)
	networkPolicyDrill(t, ns, worker, launcher)
}

// mpiOperatorNetworkPolicy is the same drill on an MPIJob.
func mpiOperatorNetworkPolicy(t *testing.T) {
	ns := namespace(t, "netpol", true)
	job := mpiJob(t, "openmpi", func(job *unstructured.Unstructured) {
		setLauncherArgs(t, job, "mpirun", "-np", "2", "bash", "-c", "sleep 600")
	})
	apply(t, ns, job)
	t.Cleanup(func() {
		_ = e.dyn.Resource(mpiJobGVR).Namespace(ns).Delete(context.Background(), job.GetName(), metav1.DeleteOptions{})
	})
	sel := "training.kubeflow.org/job-name=" + job.GetName()
	worker, launcher := runningPods(t, ns, sel+",training.kubeflow.org/job-role=launcher", sel+",training.kubeflow.org/job-role=worker")
	networkPolicyDrill(t, ns, worker, launcher)
}
