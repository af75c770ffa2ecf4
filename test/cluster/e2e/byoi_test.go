package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// Bring your own image: users' images that are not ours (test/images:
// Debian's or PyPI's MPI and what it pulls in, the OpenSSH client among
// it; no podmpi, no sshd, no USER line), run by podmpi's runtimes, which
// bring podmpi into the pod themselves: an init container copies
// /opt/podmpi out of the binaries-only podmpi image into an emptyDir that
// the MPI container mounts at /opt/podmpi, first on its PATH, and the pods
// run as 1000:0 (runAsUser, runAsGroup) in namespaces that enforce the
// restricted Pod Security Standard.

// testImages are the images of test/images/build.sh, built once per run
// (and per machine: build.sh tags them by what they are made of) and
// imported into the cluster once each.
var testImages struct {
	once  sync.Once
	refs  map[string]string // name -> reference
	took  map[string]int    // name -> seconds its build took (0: it was there)
	total time.Duration
	err   error

	mu       sync.Mutex
	imported map[string]*importOnce // reference -> its import
}

// importOnce is one image's import into the cluster.
type importOnce struct {
	once sync.Once
	err  error
}

// testImageNames are the images test/images/build.sh builds.
var testImageNames = []string{"openmpi4", "openmpi5", "mpich", "intelmpi", "horovod", "musl", "nompi"}

// buildTestImages runs test/images/build.sh once for all the images, side
// by side.
func buildTestImages() {
	testImages.once.Do(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoDir(), "test", "images", "build.sh"), testImageNames...)
		cmd.Dir = repoDir()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		testImages.refs, testImages.took = map[string]string{}, map[string]int{}
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 4 && f[0] == "IMAGE" {
				testImages.refs[f[1]] = f[2]
				testImages.took[f[1]], _ = strconv.Atoi(f[3])
			}
		}
		testImages.total = time.Since(start)
		if err != nil {
			testImages.err = fmt.Errorf("test/images/build.sh: %w\n%s", err, lastLines(errb.String(), 40))
		}
	})
}

// importImage imports ref into the cluster's containerd, once per run;
// different images import side by side.
func importImage(t *testing.T, ref string) {
	t.Helper()
	testImages.mu.Lock()
	if testImages.imported == nil {
		testImages.imported = map[string]*importOnce{}
	}
	o := testImages.imported[ref]
	if o == nil {
		o = &importOnce{}
		testImages.imported[ref] = o
	}
	testImages.mu.Unlock()
	o.once.Do(func() {
		start := time.Now()
		cmd := exec.Command(e.tool, "import-image", ref)
		cmd.Dir = e.repo
		if out, err := cmd.CombinedOutput(); err != nil {
			o.err = fmt.Errorf("podmpi-cluster import-image %s: %v\n%s", ref, err, out)
			return
		}
		t.Logf("%s in the cluster after %s", ref, time.Since(start).Round(100*time.Millisecond))
	})
	if o.err != nil {
		t.Fatal(o.err)
	}
}

// testImage is the reference of test image name in the cluster's
// containerd: all of them are built side by side the first time one is
// asked for, each imported when first asked for.
func testImage(t *testing.T, name string) string {
	t.Helper()
	buildTestImages()
	ref := testImages.refs[name]
	if ref == "" {
		t.Fatalf("no test image %s (%v)", name, testImages.err)
	}
	importImage(t, ref)
	return ref
}

// podmpiBinariesImage is the binaries-only podmpi image (FROM scratch:
// /opt/podmpi) of the cluster's release, as the install manifests name it:
// the node pulls it from the cluster's registry, where make cluster-up (and
// make cluster-test's release) pushed it. The runtimes' init container
// copies podmpi from it.
func podmpiBinariesImage(t *testing.T) string {
	t.Helper()
	ref := e.info.Images["podmpi"]
	if ref == "" {
		t.Fatalf("the cluster names no binaries-only podmpi image (cluster.json's images: %v)", e.info.Images)
	}
	return ref
}

// podmpiPath is the PATH of the MPI container in a pod that runs an image
// that is not ours: podmpi's bin first (its ssh and mpirun), then the
// image's own MPI where the image keeps it off the standard PATH (the
// runtime's PATH replaces the image's).
func podmpiPath(mpi string) string {
	extra := ""
	switch mpi {
	case "intelmpi":
		extra = "/opt/intel/mpi/bin:"
	case "horovod":
		extra = "/opt/venv/bin:"
	}
	return "/opt/podmpi/bin:" + extra + "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// restrictedSecurity is a container security context that the restricted
// Pod Security Standard admits.
func restrictedSecurity() map[string]any {
	return map[string]any{
		"allowPrivilegeEscalation": false,
		"readOnlyRootFilesystem":   true,
		"runAsNonRoot":             true,
		"capabilities":             map[string]any{"drop": []any{"ALL"}},
		"seccompProfile":           map[string]any{"type": "RuntimeDefault"},
	}
}

// hasPodmpiInit reports whether a pod spec already brings podmpi (an init
// container named podmpi: the shipped runtimes do).
func hasPodmpiInit(pod map[string]any) bool {
	ics, _, _ := unstructured.NestedSlice(pod, "initContainers")
	for _, x := range ics {
		if m, ok := x.(map[string]any); ok && m["name"] == "podmpi" {
			return true
		}
	}
	return false
}

// bringPodmpi makes a pod spec of podmpi's runtimes or examples (its first
// container the MPI one, whose command is worker-agent or launcher) run
// any image, as the shipped runtimes do: the init container podmpi copies
// /opt/podmpi out of the binaries-only image into the emptyDir podmpi,
// which the MPI container mounts read-only at /opt/podmpi and has first on
// PATH; the pod runs as 1000:0. A pod that has the init container already
// only gets mpi's PATH.
func bringPodmpi(t *testing.T, pod map[string]any, binaries, mpi string) {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(pod, "containers")
	if len(cs) == 0 {
		t.Fatal("a pod template without containers")
	}
	c := cs[0].(map[string]any)
	cluster.SetContainerEnv(c, "PATH", podmpiPath(mpi))
	if !hasPodmpiInit(pod) {
		vols, _, _ := unstructured.NestedSlice(pod, "volumes")
		pod["volumes"] = append(vols, map[string]any{"name": "podmpi", "emptyDir": map[string]any{}})
		ics, _, _ := unstructured.NestedSlice(pod, "initContainers")
		pod["initContainers"] = append(ics, podmpiInit(binaries))
		mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
		c["volumeMounts"] = append(mounts, map[string]any{"name": "podmpi", "mountPath": "/opt/podmpi", "readOnly": true})
		if cmd, _, _ := unstructured.NestedStringSlice(c, "command"); len(cmd) > 0 && !strings.HasPrefix(cmd[0], "/") {
			cmd[0] = "/opt/podmpi/bin/" + cmd[0]
			c["command"] = toAny(cmd)
		}
		sc, _, _ := unstructured.NestedMap(pod, "securityContext")
		if sc == nil {
			sc = map[string]any{}
		}
		sc["runAsUser"], sc["runAsGroup"] = int64(1000), int64(0)
		pod["securityContext"] = sc
	}
	cs[0] = c
	pod["containers"] = cs
}

// podmpiInit is the init container that brings podmpi into a pod, as the
// shipped runtimes have it: the binaries-only image's launcher copies
// /opt/podmpi into the emptyDir podmpi.
var podmpiInit = func(binaries string) map[string]any {
	return map[string]any{
		"name":            "podmpi",
		"image":           binaries,
		"imagePullPolicy": "IfNotPresent",
		"command":         []any{"/opt/podmpi/bin/launcher", "install", "/podmpi"},
		"volumeMounts":    []any{map[string]any{"name": "podmpi", "mountPath": "/podmpi"}},
		"securityContext": restrictedSecurity(),
		"resources":       map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"}},
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// eachPodSpec calls f with each replicated job's name and pod spec of a
// runtime, writing back what f changed.
func eachPodSpec(t *testing.T, rt *unstructured.Unstructured, f func(rj string, pod map[string]any)) {
	t.Helper()
	rjs, _, _ := unstructured.NestedSlice(rt.Object, "spec", "template", "spec", "replicatedJobs")
	for i, x := range rjs {
		rj := x.(map[string]any)
		pod, _, _ := unstructured.NestedMap(rj, "template", "spec", "template", "spec")
		f(fmt.Sprint(rj["name"]), pod)
		if err := unstructured.SetNestedMap(rj, pod, "template", "spec", "template", "spec"); err != nil {
			t.Fatal(err)
		}
		rjs[i] = rj
	}
	if err := unstructured.SetNestedSlice(rt.Object, rjs, "spec", "template", "spec", "replicatedJobs"); err != nil {
		t.Fatal(err)
	}
}

// byoiRuntime is podmpi's runtime of mpi (the MPI of the shipped runtime:
// openmpi, mpich or intelmpi) as a runtime that brings podmpi itself,
// named name: a ClusterTrainingRuntime when ns is "" (deleted after the
// test), else a TrainingRuntime in ns. Its node containers run nodeImage,
// or podmpi's image of that MPI when nodeImage is "" (what a TrainJob's
// image does not reach under Trainer v2.3: only the launcher runs it).
// pathMPI picks the PATH (podmpiPath); mutate, when set, changes it last.
func byoiRuntime(t *testing.T, ns, mpi, name, nodeImage, pathMPI string, mutate func(*unstructured.Unstructured)) string {
	t.Helper()
	var rt *unstructured.Unstructured
	for _, o := range readObjects(t, cluster.RuntimeFiles[mpi]) {
		if o.GetKind() == "ClusterTrainingRuntime" {
			rt = o
		}
	}
	if rt == nil {
		t.Fatalf("%s: no ClusterTrainingRuntime", cluster.RuntimeFiles[mpi])
	}
	binaries := podmpiBinariesImage(t)
	rt.SetName(name)
	rt.SetLabels(map[string]string{"trainer.kubeflow.org/framework": name})
	if ns != "" {
		rt.SetKind("TrainingRuntime")
	}
	eachPodSpec(t, rt, func(rj string, pod map[string]any) {
		cs, _, _ := unstructured.NestedSlice(pod, "containers")
		c := cs[0].(map[string]any)
		c["image"] = e.info.Images[mpi]
		if rj == "node" && nodeImage != "" {
			c["image"] = nodeImage
		}
		// podCPU where the TrainJob's resourcesPerNode does not reach: a
		// launcher that is not a node keeps the runtime's request.
		if err := unstructured.SetNestedField(c, fmt.Sprintf("%dm", podCPU), "resources", "requests", "cpu"); err != nil {
			t.Fatal(err)
		}
		cs[0] = c
		pod["containers"] = cs
		bringPodmpi(t, pod, binaries, pathMPI)
		// The shipped runtimes' init container names the released
		// binaries-only image: this cluster has its own.
		ics, _, _ := unstructured.NestedSlice(pod, "initContainers")
		for _, x := range ics {
			if m := x.(map[string]any); m["name"] == "podmpi" {
				m["image"], m["imagePullPolicy"] = binaries, "IfNotPresent"
			}
		}
		pod["initContainers"] = ics
	})
	if mutate != nil {
		mutate(rt)
	}
	if ns == "" {
		t.Cleanup(func() { deleteRuntimes(name) })
	}
	apply(t, ns, rt)
	return name
}

// byoiTrainJob is the example TrainJob on runtime rt (a TrainingRuntime in
// the TrainJob's namespace when namespaced) with image, numNodes nodes of
// procs ranks each at 200m CPU (podCPU), and args.
func byoiTrainJob(t *testing.T, rt string, namespaced bool, image string, nodes, procs int64, args []any) *unstructured.Unstructured {
	t.Helper()
	tj := trainJob(t, rt)
	tj.SetName("byoi-" + randSuffix())
	if namespaced {
		setNested(t, tj, "TrainingRuntime", "spec", "runtimeRef", "kind")
	}
	setNested(t, tj, image, "spec", "trainer", "image")
	setNested(t, tj, nodes, "spec", "trainer", "numNodes")
	setNested(t, tj, procs, "spec", "trainer", "numProcPerNode")
	setNested(t, tj, map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"}}, "spec", "trainer", "resourcesPerNode")
	setNested(t, tj, args, "spec", "trainer", "args")
	return tj
}

// podCPU is the CPU request, in millicores, of each pod of the jobs that
// run side by side.
const podCPU = 200

// cpuBudget is the CPU the side-by-side jobs may request at once: what the
// node can allocate less a tenth. A job waits for its pods' share before
// it starts, so that no job's pods hold CPU while another's cannot start:
// a TrainJob's launcher starts only after its node pods are Ready, and
// node pods of several jobs could take the whole node, each job waiting
// for a launcher that cannot be scheduled.
var cpuBudget struct {
	sync.Mutex
	cond        *sync.Cond
	total, free int
}

// reserveCPU waits until need millicores of the budget are free and takes
// them until the test ends.
func reserveCPU(t *testing.T, need int) {
	t.Helper()
	cpuBudget.Lock()
	if cpuBudget.cond == nil {
		cpuBudget.cond = sync.NewCond(&cpuBudget.Mutex)
		cpuBudget.total = 1800
		if n, err := e.cs.CoreV1().Nodes().Get(ctxT(t, time.Minute), cluster.NodeName, metav1.GetOptions{}); err == nil {
			cpuBudget.total = int(n.Status.Allocatable.Cpu().MilliValue() * 9 / 10)
		}
		cpuBudget.free = cpuBudget.total
	}
	if need > cpuBudget.total {
		cpuBudget.Unlock()
		t.Fatalf("the job's pods need %dm CPU, the node has %dm for side-by-side jobs", need, cpuBudget.total)
	}
	deadline := time.Now().Add(20 * time.Minute)
	for cpuBudget.free < need {
		if time.Now().After(deadline) {
			cpuBudget.Unlock()
			t.Fatalf("no %dm CPU free for this job after 20 minutes", need)
		}
		waitCond(cpuBudget.cond, time.Second)
	}
	cpuBudget.free -= need
	cpuBudget.Unlock()
	t.Cleanup(func() {
		cpuBudget.Lock()
		cpuBudget.free += need
		cpuBudget.cond.Broadcast()
		cpuBudget.Unlock()
	})
}

// sideBySide runs f as a parallel subtest of t named name once need
// millicores of the CPU budget are free (reserveCPU): the jobs of a test
// run side by side without one job's pods holding CPU that another's
// need to start.
func sideBySide(t *testing.T, name string, need int, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		reserveCPU(t, need)
		f(t)
	})
}

// waitCond waits on c (its lock held) for a Broadcast or d, whichever
// comes first.
func waitCond(c *sync.Cond, d time.Duration) {
	tm := time.AfterFunc(d, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	c.Wait()
	tm.Stop()
}

// podImages are the images of the first container of each pod, by pod.
func podImages(pods []corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		if len(p.Spec.Containers) > 0 {
			out[p.Name] = p.Spec.Containers[0].Image
		}
	}
	return out
}

// checkRunsAs: every pod ran as 1000:0, with podmpi's init container, and
// its first container in image (when not "").
func checkRunsAs(t *testing.T, pods []corev1.Pod, image string) {
	t.Helper()
	for _, p := range pods {
		sc := p.Spec.SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1000 || sc.RunAsGroup == nil || *sc.RunAsGroup != 0 {
			t.Errorf("pod %s: securityContext %+v, want runAsUser 1000, runAsGroup 0 (the image has no USER)", p.Name, sc)
		}
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != "podmpi" {
			t.Errorf("pod %s: no podmpi init container", p.Name)
		}
		if image != "" && p.Spec.Containers[0].Image != image {
			t.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, image)
		}
	}
}

// allreduceArgs runs the test images' allreduce program under mpirun.
var allreduceArgs = []any{"mpirun", "allreduce", "65536"}

// failArgs: rank 1 lives 2 s and exits 7 (the worker-agents sample their
// ranks every 500 ms); the others sleep. With 3 pods of one rank each,
// rank 1 runs on a node pod (the launcher's entry is the hostfile's
// last), where a worker-agent sees it end. ${...}, never $(...): Kubernetes
// expands $(NAME) in args.
var failArgs = []any{"mpirun", "bash", "-c", `r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; [ "$r" = 1 ] && { read -r h < /proc/sys/kernel/hostname; echo "podmpi-rank-fails: rank $r on $h"; sleep 2; exit 7; }; sleep 8`}

// rankFailsLine is what failArgs' rank 1 prints: its host, as the kernel
// names it in its pod. Not $HOSTNAME: Hydra hands every rank mpiexec's
// environment, HOSTNAME (the launcher pod's, which Kubernetes sets)
// included, and bash keeps a HOSTNAME it inherits.
var rankFailsLine = regexp.MustCompile(`(?m)^podmpi-rank-fails: rank 1 on (\S+)$`)

// horovodArgs runs the Horovod image's program with horovodrun, as its
// users write it.
var horovodArgs = []any{"horovodrun", "-np", "3", "--hostfile", "/etc/mpi/hostfile", "-p", "2222", "python", "/usr/local/share/train/horovod_allreduce.py"}

// byoiMPIs are the MPI test images and the MPI of the podmpi runtime each
// one runs under.
var byoiMPIs = []struct{ image, runtime string }{
	{"openmpi4", "openmpi"}, {"openmpi5", "openmpi"}, {"mpich", "mpich"}, {"intelmpi", "intelmpi"}, {"horovod", "openmpi"},
}

// TestBYOI: each MPI image that is not ours runs under podmpi's runtimes
// on the real controllers, and the two images podmpi cannot serve say so at
// once.
//
//   - Trainer v2.3 shape: the Kubeflow SDK's CustomTrainer(image=<image>)
//     against the runtime of its MPI: the image reaches the launcher only,
//     the node pods keep podmpi's image of that MPI (Open MPI 4, MPICH and
//     Intel MPI, whose podmpi images match the test images' MPI; the Open
//     MPI 5 and Horovod images have no such twin).
//   - Trainer v2.4 shape (kubeflow/trainer#4301: the TrainJob's image on the
//     node pods too), emulated on v2.3.0 by a runtime variant whose node
//     pods run the image (v2.3.0's runtimePatches cannot set a container's
//     image), with the TrainJob's trainer.image the same: every rank
//     allreduces; then a rank that exits 7, named in a podmpi Warning on
//     the TrainJob and in its .status.trainerStatus.
//   - mpi-operator: the example MPIJob of the MPI with the image in the
//     launcher and the workers, and the podmpi init container (Open MPI
//     5's is TestOpenMPI5's).
//   - musl and no MPI: as the launcher (the v2.3 shape), the launcher's
//     termination message and its Warning Event name the cause. musl as
//     the workers of an MPIJob: each worker's termination message names it
//     on its first run, and the launcher's WorkerNotReady Warning carries
//     it; as Trainer's node pods (the v2.4 shape) the termination message
//     does (the launcher never starts: it waits for the node pods to be
//     Ready, and the node pods have no token to record an Event with). No
//     MPI in every pod of an MPIJob: the launcher names it.
//
// The jobs run side by side at 200m CPU per pod, as many at once as the
// node's CPU holds whole (reserveCPU); the images are built once
// (test/images/build.sh, side by side) and the build time is logged.
func TestBYOI(t *testing.T) {
	need(t)
	// After every other test, beside TestOpenMPI5: .ci/run builds the
	// test images in the background from the cluster's start, and a cold
	// build (Horovod's PyTorch the bulk) would otherwise hold the suite
	// here while the other tests could run.
	t.Parallel()
	tool(t, "controllers", "--trainer", e.pins.Trainer[0], "--mpi-operator", e.pins.MPIOperator[0])
	buildTestImages()
	for _, name := range testImageNames {
		t.Logf("test image %s: %s (built in %d s; 0: it was there)", name, testImages.refs[name], testImages.took[name])
	}
	t.Logf("test/images/build.sh took %s", testImages.total.Round(time.Second))
	if testImages.err != nil {
		t.Fatal(testImages.err)
	}
	ns := namespace(t, "byoi", true)
	applyRBAC(t, ns)
	sdkPython(t)
	// The shipped runtimes, as deploy/runtimes has them: running last, this
	// test cannot count on an earlier one's.
	installRuntimes(t, nil)
	// The runtimes of the v2.3 shape, shared by the subtests (a copy made
	// here is deleted when they all have ended).
	shipped := map[string]string{}
	for _, mpi := range []string{"openmpi", "mpich", "intelmpi"} {
		shipped[mpi] = shippedRuntime(t, mpi)
	}

	for _, m := range []struct{ image, runtime string }{{"openmpi4", "openmpi"}, {"mpich", "mpich"}, {"intelmpi", "intelmpi"}} {
		t.Run("trainer-v2.3/sdk/"+m.image, func(t *testing.T) {
			t.Parallel()
			byoiSDK(t, ns, m.image, shipped[m.runtime])
		})
	}
	for _, m := range byoiMPIs {
		t.Run("trainer-v2.4/"+m.image, func(t *testing.T) {
			t.Parallel()
			image := testImage(t, m.image)
			rt := byoiRuntime(t, ns, m.runtime, "byoi-"+m.image, image, m.image, nil)
			reserveCPU(t, 3*podCPU)
			args, procs := allreduceArgs, int64(1)
			if m.image == "openmpi4" {
				procs = 2 // two ranks in one pod too (shared memory, all capabilities dropped)
			}
			if m.image == "horovod" {
				args = horovodArgs
			}
			r := runTrainJob(t, ns, byoiTrainJob(t, rt, true, image, 3, procs, args), 6*time.Minute)
			checkRunsAs(t, append(r.launchers, r.nodes...), image)
			if m.image == "horovod" {
				checkHorovod(t, r)
				return
			}
			checkTrainJob(t, ns, r, 3, int(3*procs))
		})
		t.Run("trainer-v2.4/"+m.image+"/rank-fails", func(t *testing.T) {
			t.Parallel()
			image := testImage(t, m.image)
			rt := byoiRuntime(t, ns, m.runtime, "byoi-"+m.image+"-fail", image, m.image, nil)
			reserveCPU(t, 3*podCPU)
			r := runTrainJob(t, ns, byoiTrainJob(t, rt, true, image, 3, 1, failArgs), 5*time.Minute)
			checkRankFailed(t, ns, r, m.image == "mpich" || m.image == "intelmpi")
		})
		if m.image == "openmpi5" {
			continue // TestOpenMPI5 runs its MPIJob
		}
		t.Run("mpi-operator/"+m.image, func(t *testing.T) {
			t.Parallel()
			byoiMPIJob(t, ns, m.image, m.runtime)
		})
	}
	for _, bad := range []string{"musl", "nompi"} {
		t.Run("unservable/"+bad+"/launcher", func(t *testing.T) {
			t.Parallel()
			badLauncher(t, ns, bad, shipped["openmpi"])
		})
	}
	// musl: worker-agent cannot run there at all.
	t.Run("unservable/musl/mpi-operator-workers", func(t *testing.T) {
		t.Parallel()
		badWorkers(t, ns, "musl")
	})
	t.Run("unservable/musl/trainer-nodes", func(t *testing.T) {
		t.Parallel()
		badNodes(t, ns, "musl")
	})
	// No MPI: worker-agent runs (it serves more than MPI's daemons), and
	// the launcher, in the same image, names the missing MPI.
	t.Run("unservable/nompi/mpi-operator", func(t *testing.T) {
		t.Parallel()
		badMPIJobLauncher(t, ns, "nompi")
	})
}

// byoiSDK: the SDK's CustomTrainer(image=...) on rt, the runtime of the
// image's MPI, as its users call it (the v2.3 shape: the image runs the
// launcher, the node pods podmpi's image of that MPI).
func byoiSDK(t *testing.T, ns, name, rt string) {
	image := testImage(t, name)
	reserveCPU(t, 3*podCPU)
	r := runSDK(t, ns, 8*time.Minute, "--runtime", rt, "--function", "ranks", "--num-nodes", "3",
		"--image", image, "--cpu", fmt.Sprintf("%dm", podCPU), "--timeout", "420")
	if r.Status != "Complete" {
		t.Fatalf("TrainJob %s: %q after %.0f s, want Complete; steps %+v; launcher log (get_job_logs):\n%s", r.Job, r.Status, r.Seconds, r.Steps, lastLines(strings.Join(r.Logs, "\n"), 40))
	}
	hosts, _ := sdkRanks(r.Logs)
	if len(hosts) != 3 {
		t.Errorf("get_job_logs shows %d ranks (%v), want 3", len(hosts), hosts)
	}
	ctx := ctxT(t, time.Minute)
	sel := "jobset.sigs.k8s.io/jobset-name=" + r.Job
	launchers, err := podsWith(ctx, ns, sel+","+launcherSel)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := podsWith(ctx, ns, sel+","+nodeSel)
	if err != nil {
		t.Fatal(err)
	}
	checkRunsAs(t, launchers, image)
	checkRunsAs(t, nodes, "")
	t.Logf("TrainJob %s (SDK, image %s): Complete in %.0f s; ranks on %v; pods' images %v %v", r.Job, image, r.Seconds, hosts, podImages(launchers), podImages(nodes))
}

// shippedRuntime is the ClusterTrainingRuntime podmpi-<mpi> that make
// cluster-up installed when it brings podmpi itself (an init container
// named podmpi), else a copy of it that does (podmpi-<mpi>-byoi, deleted
// after the test), made as the shipped runtimes are.
func shippedRuntime(t *testing.T, mpi string) string {
	t.Helper()
	rt := "podmpi-" + mpi
	o, err := e.dyn.Resource(ctrGVR).Get(ctxT(t, time.Minute), rt, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := true
	eachPodSpec(t, o, func(_ string, pod map[string]any) { ready = ready && hasPodmpiInit(pod) })
	if ready {
		return rt
	}
	t.Logf("runtime %s has no podmpi init container: using a copy that has (%s-byoi)", rt, rt)
	return byoiRuntime(t, "", mpi, rt+"-byoi", "", mpi, nil)
}

// checkHorovod: the Horovod program's line from each of the 3 pods, and
// its check.
func checkHorovod(t *testing.T, r trainJobResult) {
	t.Helper()
	if !r.complete {
		t.Fatalf("TrainJob %s: %s; launcher log:\n%s", r.name, r.message, lastLines(r.log, 60))
	}
	hosts := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)rank (\d)/3 on (\S+): allreduce=6 \(expect 6\) ok$`).FindAllStringSubmatch(r.log, -1) {
		hosts[m[2]] = true
	}
	if len(hosts) != 3 || !strings.Contains(r.log, "podmpi-horovod-check: OK") {
		t.Fatalf("want a correct allreduce on each of the 3 pods and podmpi-horovod-check: OK; ranks on %v; launcher log:\n%s", hosts, lastLines(r.log, 60))
	}
	t.Logf("TrainJob %s: Complete in %s; Horovod ranks on %v", r.name, r.finished.Sub(r.created).Round(100*time.Millisecond), hosts)
}

// checkRankFailed: a TrainJob whose rank 1 exited 7 is Failed within 2
// minutes of its launcher's start, with a podmpi Warning on the TrainJob
// naming the host rank 1 printed it ran on, and .status.trainerStatus
// naming that host and mpirun's exit 7. The rank is named too where the
// MPI's words or the agents' account say it: always under Open MPI; under
// Hydra (MPICH 4.2, Intel MPI) only when the agents saw it, since Hydra's
// list of exit codes names each process by its host and status alone
// ("[mpiexec@l] Exit codes: [h] 0,1792,0"), and podmpi never works a rank
// out from a model of the mapping. A rank it names must be rank 1.
func checkRankFailed(t *testing.T, ns string, r trainJobResult, hydra bool) {
	t.Helper()
	if r.complete {
		t.Fatalf("TrainJob %s completed; its rank 1 exits 7", r.name)
	}
	started := launcherStart(r)
	if d := r.finished.Sub(started); started.IsZero() || d > 2*time.Minute {
		t.Errorf("TrainJob %s Failed %s after its launcher started (at %s), want within 2 minutes", r.name, d.Round(time.Second), started)
	}
	p := rankFailsLine.FindStringSubmatch(r.log)
	if p == nil {
		t.Fatalf("TrainJob %s: rank 1's own line is not in mpirun's output:\n%s", r.name, lastLines(r.log, 30))
	}
	host := p[1]
	rankOK := func(s string) bool {
		if rank1.MatchString(s) {
			return true
		}
		return hydra && !regexp.MustCompile(`\brank \d`).MatchString(s)
	}
	var seen []string
	var named *corev1.Event
	for _, ev := range podmpiEvents(t, ns, "TrainJob", r.name) {
		seen = append(seen, ev.Type+" "+ev.Reason+": "+ev.Message)
		if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, host+".") && rankOK(ev.Message) && named == nil {
			named = &ev
		}
	}
	if named == nil {
		t.Errorf("TrainJob %s has no podmpi Warning naming rank 1's host %s (and rank 1, or no rank under Hydra); podmpi's Events:\n%s\nlauncher log:\n%s", r.name, host, strings.Join(seen, "\n"), lastLines(r.log, 30))
	}
	if cluster.TrainerStatus(e.info.Trainer) {
		m := statusMetrics(trainerStatus(t, ns, r.name))
		causeHost, _, _ := strings.Cut(m["podmpi_root_cause_host"], ".")
		rank := m["podmpi_root_cause_rank"]
		if m["podmpi_phase"] != "failed" || causeHost != host || m["podmpi_exit_code"] != "7" || !(rank == "1" || hydra && rank == "") {
			t.Errorf("TrainJob %s: .status.trainerStatus.metrics %v, want podmpi_phase failed, podmpi_root_cause_host %s (rank 1's), podmpi_root_cause_rank 1 (or none under Hydra), podmpi_exit_code 7", r.name, m, host)
		}
	}
	if named != nil {
		t.Logf("TrainJob %s Failed %s after its launcher started; rank 1 on %s; Warning %s: %s", r.name, r.finished.Sub(started).Round(time.Second), host, named.Reason, named.Message)
	}
}

// rank1 is rank 1 in a podmpi message.
var rank1 = regexp.MustCompile(`\brank 1\b`)

// byoiMPIJob: the example MPIJob of the image's MPI with the image in the
// launcher and the workers, made to bring podmpi as the runtimes do.
func byoiMPIJob(t *testing.T, ns, name, mpi string) {
	image := testImage(t, name)
	binaries := podmpiBinariesImage(t)
	job := mpiJob(t, mpi, func(j *unstructured.Unstructured) {
		cluster.SetImages(j, image, e.info.Images)
		for _, role := range []string{"Launcher", "Worker"} {
			path := []string{"spec", "mpiReplicaSpecs", role, "template", "spec"}
			pod, _, _ := unstructured.NestedMap(j.Object, path...)
			bringPodmpi(t, pod, binaries, name)
			setNested(t, j, pod, path...)
		}
		args := []string{"mpirun", "-np", "4", "allreduce", "65536"}
		if name == "horovod" {
			args = []string{"mpirun", "-np", "4", "python", "/usr/local/share/train/horovod_allreduce.py"}
		}
		setLauncherArgs(t, j, args...)
		setCPURequest(t, j, "Worker", fmt.Sprintf("%dm", podCPU))
	})
	reserveCPU(t, 3*podCPU)
	r := runMPIJobOnce(t, ns, func() *unstructured.Unstructured { return job })
	if !r.ok {
		msg := ""
		if r.launcher != nil {
			msg = terminationMessage(t, ns, r.launcher.Name)
		}
		t.Fatalf("MPIJob %s (image %s) failed: %s; launcher termination message: %s; log:\n%s", r.name, image, r.message, msg, lastLines(r.log, 40))
	}
	pods, err := podsWith(ctxT(t, time.Minute), ns, "training.kubeflow.org/job-name="+r.name)
	if err != nil {
		t.Fatal(err)
	}
	checkRunsAs(t, pods, image)
	if name == "horovod" {
		hosts := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)rank (\d)/4 on (\S+): allreduce=10 \(expect 10\) ok$`).FindAllStringSubmatch(r.log, -1) {
			hosts[m[2]] = true
		}
		if len(hosts) != 2 {
			t.Fatalf("want Horovod's 4 ranks on the 2 workers, got %v; log:\n%s", hosts, lastLines(r.log, 40))
		}
		t.Logf("MPIJob %s Succeeded in %s; Horovod ranks on %v", r.name, r.took.Round(100*time.Millisecond), hosts)
		return
	}
	hosts := checkRanks(t, r.log, 4)
	if len(hosts) != 2 {
		t.Errorf("ranks ran on %v, want the 2 workers", hosts)
	}
	t.Logf("MPIJob %s (image %s) Succeeded in %s; 4 ranks on %v", r.name, image, r.took.Round(100*time.Millisecond), hosts)
}

// unservable is what podmpi must say of each image it cannot serve, and
// what it must not (the kernel's or the runtime's words for the same).
var unservable = map[string]*regexp.Regexp{
	"musl":  regexp.MustCompile(`musl`),
	"nompi": regexp.MustCompile(`(?i)\bno MPI\b|without (an )?MPI|MPI (is )?not installed|no mpirun`),
}

var rawExecErrors = regexp.MustCompile(`exec format error|no such file or directory|executable file not found`)

// checkUnservableMessage: msg names the cause of bad and none of the raw
// exec errors.
func checkUnservableMessage(t *testing.T, what, bad, msg string) {
	t.Helper()
	if !unservable[bad].MatchString(msg) || rawExecErrors.MatchString(msg) {
		t.Errorf("%s: %q names no %s (want %s, none of %s)", what, msg, bad, unservable[bad], rawExecErrors)
	}
}

// badLauncher: the image runs the launcher (the TrainJob's image under
// Trainer v2.3, on rt, the Open MPI runtime): the TrainJob is Failed within 2 minutes, the launcher's
// termination message names the cause on its only run, and so does a
// podmpi Warning.
func badLauncher(t *testing.T, ns, bad, rt string) {
	image := testImage(t, bad)
	reserveCPU(t, 2*podCPU)
	r := runTrainJob(t, ns, byoiTrainJob(t, rt, false, image, 2, 1, allreduceArgs), 3*time.Minute)
	if r.complete {
		t.Fatalf("TrainJob %s with launcher image %s completed", r.name, image)
	}
	if d := r.finished.Sub(r.created); d > 2*time.Minute {
		t.Errorf("TrainJob %s Failed %s after creation, want within 2 minutes", r.name, d.Round(time.Second))
	}
	if len(r.launchers) != 1 {
		t.Fatalf("%d launcher pods, want the one failed run", len(r.launchers))
	}
	st := r.launchers[0].Status.ContainerStatuses
	if len(st) != 1 || st[0].State.Terminated == nil {
		t.Fatalf("launcher %s: %+v, want its container terminated", r.launchers[0].Name, st)
	}
	if code := st[0].State.Terminated.ExitCode; code == 0 || code == 126 || code == 127 {
		t.Errorf("launcher exit code %d, want podmpi's own", code)
	}
	checkUnservableMessage(t, "launcher termination message", bad, terminationMessage(t, ns, r.launchers[0].Name))
	found := false
	var seen []string
	for _, kind := range []string{"TrainJob", "Pod"} {
		name := r.name
		if kind == "Pod" {
			name = r.launchers[0].Name
		}
		for _, ev := range podmpiEvents(t, ns, kind, name) {
			seen = append(seen, kind+" "+ev.Type+" "+ev.Reason+": "+ev.Message)
			found = found || (ev.Type == corev1.EventTypeWarning && unservable[bad].MatchString(ev.Message))
		}
	}
	if !found {
		t.Errorf("no podmpi Warning names %s; podmpi's Events:\n%s", bad, strings.Join(seen, "\n"))
	}
	t.Logf("TrainJob %s Failed in %s: launcher exit %d: %s", r.name, r.finished.Sub(r.created).Round(time.Second), st[0].State.Terminated.ExitCode, st[0].State.Terminated.Message)
}

// badMPIJobLauncher: every pod of the example MPIJob runs the image: the
// MPIJob fails within 2 minutes, and the launcher's termination message
// and a podmpi Warning on the MPIJob name the cause.
func badMPIJobLauncher(t *testing.T, ns, bad string) {
	image := testImage(t, bad)
	binaries := podmpiBinariesImage(t)
	job := mpiJob(t, "openmpi", func(j *unstructured.Unstructured) {
		cluster.SetImages(j, image, e.info.Images)
		for _, role := range []string{"Launcher", "Worker"} {
			path := []string{"spec", "mpiReplicaSpecs", role, "template", "spec"}
			pod, _, _ := unstructured.NestedMap(j.Object, path...)
			bringPodmpi(t, pod, binaries, "openmpi")
			setNested(t, j, pod, path...)
		}
		setCPURequest(t, j, "Worker", fmt.Sprintf("%dm", podCPU))
	})
	reserveCPU(t, 3*podCPU)
	r := runMPIJob(t, ns, job, 3*time.Minute)
	if r.ok {
		t.Fatalf("MPIJob %s with image %s succeeded", r.name, image)
	}
	if r.took > 2*time.Minute {
		t.Errorf("MPIJob %s Failed %s after creation, want within 2 minutes", r.name, r.took.Round(time.Second))
	}
	if r.launcher == nil {
		t.Fatalf("no launcher pod left after the failure (restartPolicy Never keeps it)")
	}
	checkUnservableMessage(t, "launcher termination message", bad, terminationMessage(t, ns, r.launcher.Name))
	var seen []string
	for _, ev := range podmpiEvents(t, ns, "MPIJob", r.name) {
		seen = append(seen, ev.Type+" "+ev.Reason+": "+ev.Message)
		if ev.Type == corev1.EventTypeWarning && unservable[bad].MatchString(ev.Message) {
			t.Logf("MPIJob %s Failed in %s: %s %s: %s", r.name, r.took.Round(time.Second), ev.Type, ev.Reason, ev.Message)
			return
		}
	}
	t.Errorf("no podmpi Warning on MPIJob %s names %s; podmpi's Events:\n%s", r.name, bad, strings.Join(seen, "\n"))
}

// firstWorkerEnd waits up to d for a container of a pod matching sel to
// end (now or before a restart) and returns the pod, that end and the
// restarts seen by then.
func firstWorkerEnd(t *testing.T, ns, sel string, d time.Duration) (string, *corev1.ContainerStateTerminated, int32) {
	t.Helper()
	ctx := ctxT(t, d+time.Minute)
	var pod string
	var end *corev1.ContainerStateTerminated
	var restarts int32
	waitFor(t, d, "a container of "+sel+" to end", func() (bool, error) {
		pods, err := podsWith(ctx, ns, sel)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			for _, st := range p.Status.ContainerStatuses {
				if x := st.State.Terminated; x != nil {
					pod, end, restarts = p.Name, x, st.RestartCount
					return true, nil
				}
				if x := st.LastTerminationState.Terminated; x != nil {
					pod, end, restarts = p.Name, x, st.RestartCount
					return true, nil
				}
			}
		}
		return false, nil
	})
	return pod, end, restarts
}

// checkWorkerEnd: the first end of a worker running an unservable image
// is podmpi's: its own exit code and the cause in the termination message,
// within a minute of the pod's start, on its first run.
func checkWorkerEnd(t *testing.T, bad, pod string, end *corev1.ContainerStateTerminated, restarts int32) {
	t.Helper()
	if end.ExitCode == 0 || end.ExitCode == 126 || end.ExitCode == 127 || end.ExitCode == 128 {
		t.Errorf("worker %s exited %d (%s), want podmpi's own code", pod, end.ExitCode, end.Reason)
	}
	checkUnservableMessage(t, "worker "+pod+" termination message", bad, end.Message)
	if restarts > 1 {
		t.Errorf("worker %s had restarted %d times before its cause was seen", pod, restarts)
	}
	if d := end.FinishedAt.Sub(end.StartedAt.Time); d > 30*time.Second {
		t.Errorf("worker %s took %s to say why it cannot run, want seconds", pod, d)
	}
	t.Logf("worker %s: exit %d after %s: %s", pod, end.ExitCode, end.FinishedAt.Sub(end.StartedAt.Time), end.Message)
}

// badWorkers: mpi-operator's workers run the image, the launcher podmpi's
// (created at once, so that it watches the workers): each worker's
// termination message names the cause on its first run, and the launcher's
// WorkerNotReady Warning carries it.
func badWorkers(t *testing.T, ns, bad string) {
	image := testImage(t, bad)
	binaries := podmpiBinariesImage(t)
	job := mpiJob(t, "openmpi", func(j *unstructured.Unstructured) {
		setNested(t, j, "AtStartup", "spec", "launcherCreationPolicy")
		setLauncherEnv(t, j, "PODMPI_DISCOVERY_TIMEOUT", "60s")
		path := []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec"}
		pod, _, _ := unstructured.NestedMap(j.Object, path...)
		cs, _, _ := unstructured.NestedSlice(pod, "containers")
		cs[0].(map[string]any)["image"] = image
		pod["containers"] = cs
		bringPodmpi(t, pod, binaries, "openmpi")
		setNested(t, j, pod, path...)
		setCPURequest(t, j, "Worker", fmt.Sprintf("%dm", podCPU))
	})
	reserveCPU(t, 3*podCPU)
	ctx := ctxT(t, 5*time.Minute)
	apply(t, ns, job)
	pod, end, restarts := firstWorkerEnd(t, ns, "training.kubeflow.org/job-role=worker,training.kubeflow.org/job-name="+job.GetName(), 2*time.Minute)
	checkWorkerEnd(t, bad, pod, end, restarts)
	var seen []string
	waitFor(t, 2*time.Minute, "a podmpi Warning on MPIJob "+job.GetName()+" naming "+bad, func() (bool, error) {
		seen = seen[:0]
		for _, ev := range podmpiEvents(t, ns, "MPIJob", job.GetName()) {
			seen = append(seen, ev.Type+" "+ev.Reason+": "+ev.Message)
			if ev.Type == corev1.EventTypeWarning && unservable[bad].MatchString(ev.Message) {
				t.Logf("MPIJob %s: %s %s: %s", job.GetName(), ev.Type, ev.Reason, ev.Message)
				return true, nil
			}
		}
		return false, nil
	})
	_ = e.dyn.Resource(mpiJobGVR).Namespace(ns).Delete(ctx, job.GetName(), metav1.DeleteOptions{})
}

// badNodes: Trainer's node pods run the image (the v2.4 shape): each node
// pod's termination message names the cause on its first run. The
// TrainJob is deleted after.
func badNodes(t *testing.T, ns, bad string) {
	image := testImage(t, bad)
	rt := byoiRuntime(t, ns, "openmpi", "byoi-"+bad, image, "openmpi", nil)
	tj := byoiTrainJob(t, rt, true, image, 2, 1, allreduceArgs)
	reserveCPU(t, 2*podCPU)
	apply(t, ns, tj)
	t.Cleanup(func() {
		_ = e.dyn.Resource(trainJobGVR).Namespace(ns).Delete(context.Background(), tj.GetName(), metav1.DeleteOptions{})
	})
	pod, end, restarts := firstWorkerEnd(t, ns, "jobset.sigs.k8s.io/jobset-name="+tj.GetName()+","+nodeSel, 2*time.Minute)
	checkWorkerEnd(t, bad, pod, end, restarts)
}

// ctrGVR is the ClusterTrainingRuntime resource.
var ctrGVR = trainJobGVR.GroupVersion().WithResource("clustertrainingruntimes")
