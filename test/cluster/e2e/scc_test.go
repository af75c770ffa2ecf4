package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/podmpi/podmpi/test/cluster"
)

// The OpenShift install of the runtimes (deploy/openshift/runtimes) and the
// sample MPIJobs as they run on OpenShift (examples/openshift, with
// deploy/openshift/mpi-operator).
const (
	openshiftRuntimes = "deploy/openshift/runtimes"
	openshiftMPIJobs  = "examples/openshift"
)

// project is an OpenShift-like project: a namespace under the restricted-v2
// emulation (cluster.SCCLabel), the restricted Pod Security Standard and the
// shipped NetworkPolicy, with UID and supplemental group ranges as
// OpenShift's project controller assigns them (1000NN0000/10000, NN random).
// It returns the namespace and the first UID and GID of its ranges.
func project(t *testing.T, prefix string) (string, int64, int64) {
	t.Helper()
	ns := namespace(t, prefix, true)
	n, err := rand.Int(rand.Reader, big.NewInt(90))
	if err != nil {
		t.Fatal(err)
	}
	first := int64(1000000000) + (n.Int64()+10)*10000
	rng := fmt.Sprintf("%d/10000", first)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q,%q:%q}}}`,
		cluster.SCCLabel, cluster.SCCLabelValue, cluster.SCCUIDRange, rng, cluster.SCCSupplementalGID, rng)
	if _, err := kubectl(ctxT(t, time.Minute), nil, "patch", "namespace", ns, "--type=merge", "-p", patch); err != nil {
		t.Fatal(err)
	}
	return ns, first, first
}

// idPod runs `id -u; id -g; id -G` in a restricted pod that sets no UID,
// and returns its output, or the admission error.
func idPod(t *testing.T, ns string, runAsUser *int64) (string, error) {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	p := restrictedPod("id-"+randSuffix(), e.info.Images["openmpi"], "", []string{"sh", "-c", "id -u; id -g; id -G"})
	p.Spec.Volumes = p.Spec.Volumes[1:]
	p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[1:]
	p.Spec.Containers[0].SecurityContext.RunAsUser = runAsUser
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	waitFor(t, 2*time.Minute, "pod "+p.Name+" to end", func() (bool, error) {
		st, err := terminated(ctx, ns, p.Name)
		return st != nil, err
	})
	return podLogs(ctx, ns, p.Name, false), nil
}

// TestRestrictedV2 checks the restricted-v2 emulation itself: a pod that
// sets no UID runs as the project's first UID, with GID 0 and the project's
// first supplemental GID (fsGroup) among its groups, and a pod asking for a
// UID outside the range is refused naming the range. The same pods in a
// namespace outside the emulation run as the image's UID 1000 and are
// admitted: the checks can fail.
func TestRestrictedV2(t *testing.T) {
	need(t)
	ns, uid, gid := project(t, "scc")
	plain := namespace(t, "noscc", true)
	idOK := func(out string) bool {
		f := strings.Fields(out)
		return len(f) >= 3 && f[0] == strconv.FormatInt(uid, 10) && f[1] == "0" &&
			strings.Contains(" "+strings.Join(f[2:], " ")+" ", " "+strconv.FormatInt(gid, 10)+" ")
	}

	out, err := idPod(t, ns, nil)
	if err != nil {
		t.Fatalf("a pod with no UID in project %s: %v", ns, err)
	}
	if !idOK(out) {
		t.Errorf("in project %s: id -u, -g, -G printed %q, want UID %d, GID 0 and group %d", ns, out, uid, gid)
	}
	t.Logf("project %s (range %d/10000): id -u, -g, -G: %s", ns, uid, strings.Join(strings.Fields(out), " "))

	_, err = idPod(t, ns, ptr.To[int64](1000))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d/10000", uid)) {
		t.Errorf("a pod with runAsUser 1000 in project %s: err %v, want a refusal naming the range %d/10000", ns, err, uid)
	} else {
		t.Logf("runAsUser 1000 refused: %v", err)
	}

	// Without the emulation the same checks fail.
	out, err = idPod(t, plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	if idOK(out) {
		t.Errorf("outside the emulation the pod also ran as %d: the UID check cannot fail", uid)
	}
	if _, err := idPod(t, plain, ptr.To[int64](1000)); err != nil {
		t.Errorf("outside the emulation runAsUser 1000 is refused too (%v): the refusal check cannot fail", err)
	}
	t.Logf("outside the emulation: id printed %q, runAsUser 1000 admitted", strings.Join(strings.Fields(out), " "))
}

// openshiftObjects renders dir (kubectl kustomize) and returns the objects
// of kind with this cluster's images, Intel MPI's left out.
func openshiftObjects(t *testing.T, dir, kind string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, o := range kustomized(t, dir) {
		if o.GetKind() != kind {
			continue
		}
		mpi := "openmpi"
		if strings.Contains(o.GetName(), "mpich") {
			mpi = "mpich"
		}
		if strings.Contains(o.GetName(), "intelmpi") {
			// Time: a job per release here for what TestMPIOperator's
			// Intel MPIJob and the arbitrary-UID runs of test/e2e and
			// make image-test already show.
			continue
		}
		cluster.SetImages(o, e.info.Images[mpi], e.info.Images)
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		t.Fatalf("%s renders no %s", dir, kind)
	}
	return objs
}

// checkProjectPods checks that every pod of a job in a project ran as a UID
// of its range, with the range's fsGroup, as the emulated admission set them.
func checkProjectPods(t *testing.T, ns string, uid, gid int64, selector string) {
	t.Helper()
	pods, err := podsWith(context.Background(), ns, selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) == 0 {
		t.Fatalf("no pods with %s in %s", selector, ns)
	}
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != uid {
				t.Errorf("pod %s container %s: runAsUser %v, want %d from the project's range", p.Name, c.Name, c.SecurityContext, uid)
			}
		}
		if p.Spec.SecurityContext == nil || p.Spec.SecurityContext.FSGroup == nil || *p.Spec.SecurityContext.FSGroup != gid {
			t.Errorf("pod %s: fsGroup %v, want %d", p.Name, p.Spec.SecurityContext, gid)
		}
	}
	t.Logf("%d pods ran as UID %d, GID 0, fsGroup %d, read-only root", len(pods), uid, gid)
}

// trainerOpenShift runs examples/trainer's TrainJob on the OpenShift
// runtimes in a project. They are applied under names of their own: applied
// over the cluster's, they would keep the fields only those set (the
// runAsUser that deploy/openshift/runtimes leaves to the SCC), which
// server-side apply leaves to the manager that set them. Under Trainer v2.0
// (v) their node pods are sized as sizeNodesAsAsked says.
func trainerOpenShift(t *testing.T, v string) {
	ns, uid, gid := project(t, "openshift")
	var names []string
	for _, rt := range openshiftObjects(t, openshiftRuntimes, "ClusterTrainingRuntime") {
		rt.SetName(rt.GetName() + "-openshift")
		sizeNodesAsAsked(t, v, rt)
		apply(t, "", rt)
		names = append(names, rt.GetName())
	}
	tj := trainJob(t, "podmpi-openmpi-openshift")
	t.Cleanup(func() { deleteRuntimes(names...) })
	waitRuntimesServed(t, names...)
	r := runTrainJob(t, ns, tj, 4*time.Minute)
	checkTrainJob(t, ns, r, 3, 6)
	checkProjectPods(t, ns, uid, gid, "jobset.sigs.k8s.io/jobset-name="+tj.GetName())
}

// mpiOperatorOpenShift runs the OpenShift sample MPIJobs in a project.
func mpiOperatorOpenShift(t *testing.T) {
	ns, uid, gid := project(t, "openshift")
	for _, job := range openshiftObjects(t, openshiftMPIJobs, "MPIJob") {
		job.SetName(job.GetName() + "-" + randSuffix())
		setCPURequest(t, job, "Worker", "100m")
		r := runMPIJobOnce(t, ns, func() *unstructured.Unstructured { return job })
		if !r.ok {
			t.Fatalf("MPIJob %s in project %s failed: %s; log:\n%s", r.name, ns, r.message, lastLines(r.log, 30))
		}
		checkRanks(t, r.log, 4)
		checkProjectPods(t, ns, uid, gid, "training.kubeflow.org/job-name="+job.GetName())
	}
}

// decodeYAML splits a rendered YAML stream into objects.
func decodeYAML(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(s, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}
