package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// mpiJobSamples are the sample MPIJobs with deploy/mpi-operator, the
// Component that brings podmpi into their pods, as a user applies them
// (kubectl apply -k): the MPIJob files alone no longer run podmpi.
const mpiJobSamples = "examples/mpi-operator"

// mpiImplementations are the MPIJobs' spec.mpiImplementation by the MPI of
// their image.
var mpiImplementations = map[string]string{"openmpi": "OpenMPI", "mpich": "MPICH", "intelmpi": "Intel"}

// mpiJobCPU is the CPU, in millicores, that one MPIJob of mpiJob requests
// on the node: the launcher's 100m and two workers of 100m.
const mpiJobCPU = 3 * 100

// mpiJob is an example MPIJob with this cluster's images and the workers'
// CPU request lowered (two workers asking for 2 CPUs each do not fit this
// 2-core node), under a unique name.
func mpiJob(t *testing.T, mpi string, mutate func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	var job *unstructured.Unstructured
	for _, o := range kustomized(t, mpiJobSamples) {
		if impl, _, _ := unstructured.NestedString(o.Object, "spec", "mpiImplementation"); o.GetKind() == "MPIJob" && impl == mpiImplementations[mpi] {
			job = o
		}
	}
	if job == nil {
		t.Fatalf("%s renders no MPIJob of mpiImplementation %q", mpiJobSamples, mpiImplementations[mpi])
	}
	job.SetName(job.GetName() + "-" + randSuffix())
	cluster.SetImages(job, e.info.Images[mpi], e.info.Images)
	setCPURequest(t, job, "Worker", "100m")
	if mutate != nil {
		mutate(job)
	}
	return job
}

// kustomizeCache holds each kustomization kustomized rendered, by folder.
var kustomizeCache = struct {
	sync.Mutex
	objs map[string][]*unstructured.Unstructured
}{objs: map[string][]*unstructured.Unstructured{}}

// kustomized renders dir of the repository as kubectl apply -k does
// (kubectl kustomize), once per test binary, and returns copies of its
// objects.
func kustomized(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kustomizeCache.Lock()
	defer kustomizeCache.Unlock()
	objs, ok := kustomizeCache.objs[dir]
	if !ok {
		out, err := kubectl(ctxT(t, time.Minute), nil, "kustomize", filepath.Join(e.repo, dir))
		if err != nil {
			t.Fatal(err)
		}
		objs = decodeYAML(t, out)
		kustomizeCache.objs[dir] = objs
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out
}

func setCPURequest(t *testing.T, job *unstructured.Unstructured, role, cpu string) {
	t.Helper()
	path := []string{"spec", "mpiReplicaSpecs", role, "template", "spec", "containers"}
	cs, _, _ := unstructured.NestedSlice(job.Object, path...)
	for _, c := range cs {
		m := c.(map[string]any)
		res, _ := m["resources"].(map[string]any)
		if res == nil {
			res = map[string]any{}
			m["resources"] = res
		}
		req, _ := res["requests"].(map[string]any)
		if req == nil {
			req = map[string]any{}
			res["requests"] = req
		}
		req["cpu"] = cpu
	}
	setNested(t, job, cs, path...)
}

type mpiJobResult struct {
	name     string
	ok       bool
	hung     bool // every rank reported, yet mpirun did not return (see finalizeHangWait)
	message  string
	launcher *corev1.Pod
	log      string
	took     time.Duration
}

// finalizeHangWait is how long after rank 0's OK summary a job may take to
// end before it counts as hung in MPI_Finalize. Debian bookworm's MPICH
// 4.0.2 (ch4:ucx, UCX 1.13) sometimes never returned from MPI_Finalize over
// UCX's TCP transport (openucx/ucx#8738): one rank spun in UCX progress
// beside a half-closed connection while the others waited in the PMI
// barrier, so mpiexec.hydra never exited (1 MPIJob in 6 here, most compose
// runs). The MPICH image is now built on trixie (MPICH 4.2.1, UCX 1.18);
// should the hang come back, the test names it at once instead of timing
// out.
const finalizeHangWait = 60 * time.Second

// runMPIJob creates job in ns and waits until it Succeeded or Failed, or
// hangs after every rank reported.
func runMPIJob(t *testing.T, ns string, job *unstructured.Unstructured, timeout time.Duration) mpiJobResult {
	t.Helper()
	ctx := ctxT(t, timeout+time.Minute)
	r := mpiJobResult{name: job.GetName()}
	start := time.Now()
	apply(t, ns, job)
	sel := "training.kubeflow.org/job-role=launcher,training.kubeflow.org/job-name=" + job.GetName()
	var okSeen, lastLog time.Time
	r.ok, r.message = waitJobEnd(t, ctx, mpiJobGVR, ns, job.GetName(), "Succeeded", "Failed", timeout, func() bool {
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			if pods, err := podsWith(ctx, ns, sel); err == nil && len(pods) > 0 && okSeen.IsZero() &&
				strings.Contains(podLogs(ctx, ns, pods[len(pods)-1].Name, false), "podmpi-allreduce: OK") {
				okSeen = time.Now()
			}
		}
		r.hung = !okSeen.IsZero() && time.Since(okSeen) > finalizeHangWait
		return r.hung
	})
	r.took = time.Since(start)
	pods, err := podsWith(ctx, ns, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) > 0 {
		r.launcher = &pods[len(pods)-1]
		r.log = podLogs(ctx, ns, r.launcher.Name, false)
	}
	if r.hung {
		_ = e.dyn.Resource(mpiJobGVR).Namespace(ns).Delete(context.Background(), job.GetName(), metav1.DeleteOptions{})
	}
	return r
}

// runMPIJobOnce runs a fresh job from mk and fails naming the MPI_Finalize
// hang (see finalizeHangWait) if the job hangs after every rank reported.
func runMPIJobOnce(t *testing.T, ns string, mk func() *unstructured.Unstructured) mpiJobResult {
	t.Helper()
	r := runMPIJob(t, ns, mk(), 4*time.Minute)
	if r.hung {
		t.Fatalf("MPIJob %s: every rank reported but mpirun had not returned %s later: a hang in MPI_Finalize (see finalizeHangWait); launcher log:\n%s",
			r.name, finalizeHangWait, lastLines(r.log, 20))
	}
	return r
}

// TestMPIOperator runs the examples/mpi-operator MPIJobs (with
// deploy/mpi-operator) (Open MPI and MPICH
// under every pinned mpi-operator, Intel MPI under the first) and checks
// every rank's line, then the failure drills.
func TestMPIOperator(t *testing.T) {
	need(t)
	defer tool(t, "controllers", "--trainer", "none", "--mpi-operator", e.pins.MPIOperator[0])
	for _, v := range e.pins.MPIOperator {
		t.Run(v, func(t *testing.T) {
			tool(t, "controllers", "--trainer", "none", "--mpi-operator", v)
			ns := namespace(t, "mpijob", true)
			applyRBAC(t, ns)
			mpis := []string{"openmpi", "mpich"}
			if v == e.pins.MPIOperator[0] {
				// Intel MPI under one release: mpi-operator's Intel
				// settings (hostfile, I_MPI_* variables) are the same in
				// every pinned one.
				mpis = append(mpis, "intelmpi")
			}
			// The jobs below run side by side, each once its pods' CPU
			// is free (sideBySide).
			for _, mpi := range mpis {
				sideBySide(t, mpi, mpiJobCPU, func(t *testing.T) {
					r := runMPIJobOnce(t, ns, func() *unstructured.Unstructured { return mpiJob(t, mpi, nil) })
					if !r.ok {
						msg := ""
						if r.launcher != nil {
							msg = terminationMessage(t, ns, r.launcher.Name)
						}
						t.Fatalf("MPIJob %s failed: %s; launcher termination message: %s; log:\n%s", r.name, r.message, msg, lastLines(r.log, 40))
					}
					hosts := checkRanks(t, r.log, 4)
					if len(hosts) != 2 {
						t.Errorf("ranks ran on %v, want the 2 workers", hosts)
					}
					t.Logf("MPIJob %s Succeeded in %s; 4 ranks on %v", r.name, r.took.Round(100*time.Millisecond), hosts)
				})
			}
			mpiJobFailures(t, ns, true)
			if v == e.pins.MPIOperator[0] {
				// Intel MPI's rank crash, once: what the launcher reads does
				// not depend on the release.
				sideBySide(t, "intelmpi/segfault", mpiJobCPU, func(t *testing.T) { intelRankCrash(t, ns) })
				// The same failures where the launcher may not use the API
				// (once: what they show does not depend on the release).
				t.Run("no-rbac", func(t *testing.T) {
					t.Parallel() // beside the drills above; each of its jobs takes its own CPU
					mpiJobFailures(t, namespace(t, "mpijob-norbac", true), false)
				})
			}
			// The isolation drills on this mpi-operator's pods.
			sideBySide(t, "networkpolicy", mpiJobCPU+netpolProbesCPU, mpiOperatorNetworkPolicy)
			sideBySide(t, "openshift-restricted-v2", mpiJobCPU, mpiOperatorOpenShift)
			sideBySide(t, "kueue", 2*mpiJobCPU, mpiOperatorKueue)
			sideBySide(t, "quota", mpiJobCPU, mpiOperatorQuota)
		})
	}
}

// intelRankCrash: in the Intel MPI MPIJob, rank 1 sends itself SIGSEGV
// (Intel's rank variable is PMI_RANK). The MPIJob fails, the launcher pod
// stays, and describe shows the launcher's RankCrashed Warning naming the
// rank and the signal.
func intelRankCrash(t *testing.T, ns string) {
	job := mpiJob(t, "intelmpi", func(j *unstructured.Unstructured) {
		setLauncherArgs(t, j, "mpirun", "-np", "4", "bash", "-c", `sleep 1; [ "$PMI_RANK" = 1 ] && kill -SEGV $BASHPID; sleep 5`)
	})
	r := runMPIJob(t, ns, job, 4*time.Minute)
	if r.ok {
		t.Fatalf("MPIJob %s succeeded; launcher log:\n%s", r.name, lastLines(r.log, 30))
	}
	if r.launcher == nil {
		t.Fatalf("no launcher pod left after the failure (restartPolicy Never keeps it)")
	}
	describeShows(t, ns, "mpijob", r.name, "RankCrashed", "rank 1", "SIGSEGV", "hint:")
}
