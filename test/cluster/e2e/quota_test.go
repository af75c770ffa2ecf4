package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// quotaHard is what the drill's ResourceQuota requires of every pod: CPU and
// memory requests. No limits: the examples set none, as a CPU limit
// throttles ranks that busy-poll and the Kubeflow SDK (0.5.0) fails on pods
// whose limits name memory without cpu (docs/compatibility.md).
var quotaHard = corev1.ResourceList{
	corev1.ResourceRequestsCPU:    resource.MustParse("4"),
	corev1.ResourceRequestsMemory: resource.MustParse("8Gi"),
}

// quotaNamespace is a restricted namespace (the shipped NetworkPolicy
// enforced, deploy/rbac applied) under a ResourceQuota of quotaHard, and
// proves the quota enforces: a pod without requests or limits is refused.
func quotaNamespace(t *testing.T) string {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	ns := namespace(t, "quota", true)
	applyRBAC(t, ns)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute"}, Spec: corev1.ResourceQuotaSpec{Hard: quotaHard}}
	if _, err := e.cs.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Admission enforces what the quota controller has recorded in its status.
	waitFor(t, time.Minute, "ResourceQuota compute's status", func() (bool, error) {
		q, err := e.cs.CoreV1().ResourceQuotas(ns).Get(ctx, "compute", metav1.GetOptions{})
		return err == nil && len(q.Status.Hard) == len(quotaHard), err
	})
	bare := restrictedPod("no-resources", e.info.Images["openmpi"], "none", []string{"true"})
	bare.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	_, err := e.cs.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{})
	if err == nil {
		_ = e.cs.CoreV1().Pods(ns).Delete(ctx, bare.Name, metav1.DeleteOptions{})
		t.Fatalf("namespace %s admitted a pod without requests or limits: its quota enforces nothing, so the drill cannot fail", ns)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "must specify") {
		t.Fatalf("a pod without requests or limits in %s: %v, want the quota's refusal", ns, err)
	}
	t.Logf("namespace %s: ResourceQuota %v refuses a pod without them: %v", ns, resourceNames(quotaHard), err)
	return ns
}

func resourceNames(l corev1.ResourceList) []string {
	var names []string
	for n := range l {
		names = append(names, string(n))
	}
	slices.Sort(names)
	return names
}

// trainerQuota: both example runtimes' TrainJobs complete under the quota.
// On Trainer v2.0.0 this needs the runtimes' own resources on the worker
// container: that release gives the TrainJob's resourcesPerNode to the
// launcher only.
func trainerQuota(t *testing.T) {
	ns := quotaNamespace(t)
	for _, rt := range []string{"podmpi-openmpi", "podmpi-mpich"} {
		r := runTrainJob(t, ns, trainJob(t, rt), 4*time.Minute)
		checkTrainJob(t, ns, r, 3, 6)
	}
}

// mpiOperatorQuota: both example MPIJobs succeed under the quota.
func mpiOperatorQuota(t *testing.T) {
	ns := quotaNamespace(t)
	for _, mpi := range []string{"openmpi", "mpich"} {
		r := runMPIJobOnce(t, ns, func() *unstructured.Unstructured { return mpiJob(t, mpi, nil) })
		if !r.ok {
			t.Fatalf("MPIJob %s under the quota: %s; log:\n%s", r.name, r.message, lastLines(r.log, 30))
		}
		checkRanks(t, r.log, 4)
	}
}
