// Package e2e runs podmpi's shipped examples on the single-node Kubernetes
// of make cluster-up, under the real Trainer, JobSet and mpi-operator
// controllers, in namespaces that enforce the restricted Pod Security
// Standard, and checks every rank's output, the launchers' termination
// messages and the metrics endpoints. make cluster-test runs it (see
// docs/cluster.md); without a cluster every test skips with one line.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/podmpi/podmpi/test/cluster"
)

// env is the running cluster the tests use.
type env struct {
	info cluster.Info
	l    cluster.Layout
	cs   kubernetes.Interface
	dyn  dynamic.Interface
	repo string
	tool string // podmpi-cluster
	pins cluster.Pins
	skip string // why every test skips
}

var e env

func TestMain(m *testing.M) {
	e = setup()
	if e.skip == "" {
		fmt.Printf("cluster: Kubernetes %s, CoreDNS %s, Trainer %s + JobSet %s, mpi-operator %s, Kueue %s, kube-router %s; debian: etcd %s, containerd %s, runc %s, cni-plugins %s, podman %s, docker-compose %s; images %s %s %s\n",
			e.info.Kubernetes, e.info.CoreDNS, e.info.Trainer, e.info.JobSet, e.info.MPIOperator, e.info.Kueue, e.info.KubeRouter,
			e.info.Debian["etcd"], e.info.Debian["containerd"], e.info.Debian["runc"], e.info.Debian["cni-plugins"],
			e.info.Debian["podman"], e.info.Debian["docker-compose"], e.info.Images["openmpi"], e.info.Images["mpich"], e.info.Images["intelmpi"])
	}
	os.Exit(m.Run())
}

func setup() env {
	var x env
	l := cluster.DefaultLayout("")
	info, err := cluster.ReadInfo(l)
	if err != nil {
		x.skip = "no cluster running (" + err.Error() + "); make cluster-test starts one, or make cluster-up"
		if os.Getenv("PODMPI_CLUSTER_TEST") == "1" {
			fmt.Fprintln(os.Stderr, "PODMPI_CLUSTER_TEST=1 but", x.skip)
			os.Exit(1)
		}
		return x
	}
	x.info, x.l = info, l
	cfg, err := clientcmd.BuildConfigFromFlags("", info.Kubeconfig)
	if err != nil {
		x.skip = err.Error()
		return x
	}
	cfg.QPS, cfg.Burst = 50, 100
	x.cs = kubernetes.NewForConfigOrDie(cfg)
	x.dyn = dynamic.NewForConfigOrDie(cfg)
	wd, _ := os.Getwd()
	x.repo = filepath.Clean(filepath.Join(wd, "..", "..", ".."))
	x.tool = os.Getenv("PODMPI_CLUSTER_TOOL")
	if x.tool == "" {
		x.tool = filepath.Join(x.repo, "bin", "podmpi-cluster")
	}
	x.pins, err = cluster.LoadPins()
	if err != nil {
		x.skip = err.Error()
	}
	return x
}

func need(t *testing.T) {
	t.Helper()
	if e.skip != "" {
		t.Skip(e.skip)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (the cluster's files are root's)")
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func randSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// namespace creates a namespace that enforces the restricted Pod Security
// Standard and deploy/networkpolicy (or neither when restricted is false)
// and deletes it after the test, logging its pods and events first when the
// test failed.
func namespace(t *testing.T, prefix string, restricted bool) string {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	// A node that takes no pods (disk pressure, say) fails every test that
	// follows at its first wait, minutes later, and with only "Pending":
	// say so at once, with the cause.
	if err := nodeHealth(ctx); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + randSuffix(), Labels: map[string]string{}}}
	if restricted {
		for _, mode := range []string{"enforce", "audit", "warn"} {
			ns.Labels["pod-security.kubernetes.io/"+mode] = "restricted"
			ns.Labels["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
		}
	}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, ns.Name)
		}
		if os.Getenv("PODMPI_CLUSTER_KEEP_NAMESPACES") == "1" {
			t.Logf("keeping namespace %s (PODMPI_CLUSTER_KEEP_NAMESPACES=1)", ns.Name)
			return
		}
		_ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if restricted {
		// Every example runs under the shipped NetworkPolicy, enforced.
		isolate(t, ns.Name)
	}
	return ns.Name
}

// nodeHealth is cluster.NodeHealthError for the cluster's node; nil when
// the node cannot be read (the test's own calls then say why).
func nodeHealth(ctx context.Context) error {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return cluster.NodeHealthError(n, e.l)
}

func dumpNamespace(t *testing.T, ns string) {
	ctx := context.Background()
	if err := nodeHealth(ctx); err != nil {
		t.Log(err)
	}
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: phase %s", p.Name, p.Status.Phase)
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Terminated != nil {
				t.Logf("  %s terminated exit %d: %s", st.Name, st.State.Terminated.ExitCode, st.State.Terminated.Message)
			}
			if st.State.Waiting != nil {
				t.Logf("  %s waiting: %s %s", st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if prev := st.LastTerminationState.Terminated; prev != nil && st.RestartCount > 0 {
				t.Logf("  %s ended before (exit %d): %s", st.Name, prev.ExitCode, prev.Message)
				t.Logf("  log tail of that run:\n%s", lastLines(previousLogs(ctx, ns, p.Name, st.Name), 40))
			}
		}
		t.Logf("  log tail:\n%s", lastLines(podLogs(ctx, ns, p.Name, false), 30))
	}
	ev, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, x := range ev.Items {
			if x.Type != corev1.EventTypeNormal {
				t.Logf("event %s %s: %s", x.InvolvedObject.Name, x.Reason, x.Message)
			}
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// kubectl runs the cluster's kubectl.
func kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.info.Kubectl, append([]string{"--kubeconfig", e.info.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// controllersMu serialises `podmpi-cluster controllers`: the tests that
// run side by side at the end of the suite (TestBYOI, TestOpenMPI5) each
// ask for the versions they run on, and two switches at once would race on
// the controllers' state.
var controllersMu sync.Mutex

// tool runs podmpi-cluster (to switch controller versions, import images).
func tool(t *testing.T, args ...string) {
	t.Helper()
	if len(args) > 0 && args[0] == "controllers" {
		controllersMu.Lock()
		defer controllersMu.Unlock()
	}
	start := time.Now()
	cmd := exec.Command(e.tool, args...)
	cmd.Dir = e.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("podmpi-cluster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("podmpi-cluster %s (%s)", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
}

// inRegistry reports whether the cluster's registry has the podmpi image
// name:tag (a manifest list or an image manifest), asking its API as the
// node's containerd does.
func inRegistry(ctx context.Context, name, tag string) (bool, error) {
	url := "http://" + e.info.Registry + "/v2/" + cluster.RegistryPrefix + "/" + name + "/manifests/" + tag
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", strings.Join([]string{"application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json"}, ", "))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("the cluster's registry at %s: %w (make cluster-up starts it)", e.info.Registry, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("HEAD %s: %s", url, resp.Status)
}

// readObjects reads a YAML file of the repository.
func readObjects(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.repo, rel))
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, rel, string(b))
}

// parseObjects decodes the objects of a YAML stream (what names where it
// came from, for the failure).
func parseObjects(t *testing.T, what, text string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// apply applies objects (server-side) in ns ("" for cluster-scoped ones).
// envShare=off runs every launcher the tests start without connection
// sharing (--ssh.share-connections=false): each podmpi-rsh connects on
// its own, so that the drills prove both ways.
const envShare = "PODMPI_CLUSTER_SHARE"

func apply(t *testing.T, ns string, objs ...*unstructured.Unstructured) {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		if os.Getenv(envShare) == "off" {
			cluster.SetEnv(o, "PODMPI_SSH_SHARE_CONNECTIONS", "false")
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	args := []string{"apply", "--server-side", "--force-conflicts", "--field-manager", "podmpi-cluster-test", "-f", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	// Trainer's TrainJob webhook looks runtimes up in its informer's
	// cache, which may not have a runtime created a moment ago yet: that
	// refusal is retried for a while, every other error is final.
	ctx := ctxT(t, 2*time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := kubectl(ctx, buf.Bytes(), args...)
		if err == nil {
			return
		}
		if !runtimeNotCachedYet(err) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
}

// runtimeNotCachedYet: Trainer's webhook refused a TrainJob whose runtime it
// does not see (yet).
func runtimeNotCachedYet(err error) bool {
	s := err.Error()
	return strings.Contains(s, "denied the request: runtime '") && strings.Contains(s, "' not found")
}

// waitFor polls cond every 250 ms until it is true, fails, or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (last error: %v)", what, d, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// previousLogs is the log of the container's run before its restart.
func previousLogs(ctx context.Context, ns, pod, container string) string {
	b, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: true}).DoRaw(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}

func podLogs(ctx context.Context, ns, pod string, timestamps bool) string {
	b, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Timestamps: timestamps}).DoRaw(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}

// rankLine is one line of podmpi-allreduce.
var rankLine = regexp.MustCompile(`(?m)^rank (\d+)/(\d+) on (\S+): allreduce=(\d+) \(expect (\d+)\), vector of \d+ doubles (ok|WRONG)$`)

// checkRanks checks that the log holds one correct line from each of n
// ranks and rank 0's OK summary, and returns the hosts the ranks ran on.
func checkRanks(t *testing.T, log string, n int) map[string]int {
	t.Helper()
	seen := map[int]bool{}
	hosts := map[string]int{}
	for _, m := range rankLine.FindAllStringSubmatch(log, -1) {
		r, _ := strconv.Atoi(m[1])
		size, _ := strconv.Atoi(m[2])
		if size != n {
			t.Errorf("rank %d reports %d ranks, want %d", r, size, n)
		}
		if m[4] != m[5] || m[6] != "ok" {
			t.Errorf("rank %d: wrong result: %s", r, m[0])
		}
		if seen[r] {
			t.Errorf("rank %d printed twice", r)
		}
		seen[r] = true
		hosts[m[3]]++
	}
	if len(seen) != n {
		t.Errorf("%d of %d ranks reported; log:\n%s", len(seen), n, lastLines(log, 40))
	}
	if !regexp.MustCompile(fmt.Sprintf(`podmpi-allreduce: OK: %d ranks`, n)).MatchString(log) {
		t.Errorf("no OK summary for %d ranks from rank 0", n)
	}
	return hosts
}

// terminated returns the terminated state of a pod's first container.
func terminated(ctx context.Context, ns, pod string) (*corev1.ContainerStateTerminated, error) {
	p, err := e.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return nil, nil
	}
	return p.Status.ContainerStatuses[0].State.Terminated, nil
}

// terminationMessage reads a pod's message exactly as the issue asks users
// to: kubectl get pod -o jsonpath='{...state.terminated.message}'.
func terminationMessage(t *testing.T, ns, pod string) string {
	t.Helper()
	out, err := kubectl(ctxT(t, time.Minute), nil, "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].state.terminated.message}")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func podsWith(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items, nil
}

var (
	trainJobGVR = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	jobSetGVR   = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	mpiJobGVR   = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v2beta1", Resource: "mpijobs"}
)

// condition returns the status of a condition type on an object ("" if
// absent) and its message.
func condition(o *unstructured.Unstructured, typ string) (string, string) {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			msg, _ := m["message"].(string)
			return s, msg
		}
	}
	return "", ""
}

// waitJobEnd waits until the job object name of gvr in ns has condition
// success or failure True, and returns whether it succeeded and that
// condition's message. meanwhile, when not nil, runs on each poll and ends
// the wait early by returning true (ok false, message empty).
func waitJobEnd(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, ns, name, success, failure string,
	timeout time.Duration, meanwhile func() bool) (ok bool, message string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%s %s %s or %s", gvr.Resource, name, success, failure), func() (bool, error) {
		o, err := getObj(ctx, gvr, ns, name)
		if err != nil {
			return false, err
		}
		if s, msg := condition(o, success); s == "True" {
			ok, message = true, msg
			return true, nil
		}
		if s, msg := condition(o, failure); s == "True" {
			message = msg
			return true, nil
		}
		return meanwhile != nil && meanwhile(), nil
	})
	return ok, message
}

func getObj(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	return e.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// setNested sets a field, failing the test on a type clash.
func setNested(t *testing.T, o *unstructured.Unstructured, v any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(o.Object, v, path...); err != nil {
		t.Fatal(err)
	}
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

var errPending = errors.New("pending")
