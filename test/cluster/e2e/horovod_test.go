package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// TestHorovod runs PyPI's Horovod (compiled against Debian's PyTorch, the
// Horovod image) as a TrainJob on a copy of the podmpi-openmpi runtime with
// that image, with the command a Horovod user writes and no "launcher --":
//
//	horovodrun -np 3 --hostfile /etc/mpi/hostfile -p 2222 python3 .../horovod_allreduce.py
//
// horovodrun reads Trainer's hostfile, makes its ssh pre-flight and task
// servers through podmpi's ssh, and runs `mpirun -H ...`, podmpi's mpirun
// running Open MPI's at once; every rank (the launcher's too) allreduces and
// trains, and the TrainJob is Complete.
func TestHorovod(t *testing.T) {
	need(t)
	image := horovodImage(t)
	var rt *unstructured.Unstructured
	for _, o := range readObjects(t, cluster.RuntimeFiles["openmpi"]) {
		if o.GetKind() == "ClusterTrainingRuntime" {
			rt = o
		}
	}
	if rt == nil {
		t.Fatalf("%s: no ClusterTrainingRuntime", cluster.RuntimeFiles["openmpi"])
	}
	rt.SetName("podmpi-horovod")
	rt.SetLabels(map[string]string{"trainer.kubeflow.org/framework": "podmpi-horovod"})
	cluster.SetImages(rt, image, e.info.Images)
	// The image's venv on the runtime's PATH, which replaces the image's,
	// as images/README.md tells a Horovod user to write it.
	cluster.SetEnv(rt, "PATH", podmpiPath("horovod"))
	apply(t, "", rt)
	ns := namespace(t, "horovod", true)
	tj := trainJob(t, "podmpi-horovod")
	setNested(t, tj, int64(1), "spec", "trainer", "numProcPerNode")
	unstructured.RemoveNestedField(tj.Object, "spec", "trainer", "args")
	setNested(t, tj, []any{"horovodrun", "-np", "3", "--hostfile", "/etc/mpi/hostfile", "-p", "2222",
		"python3", "/usr/local/share/podmpi/horovod_allreduce.py"}, "spec", "trainer", "command")
	checkHorovod(t, runTrainJob(t, ns, tj, 5*time.Minute))
}

// horovodImage is the Horovod image of the cluster's tag in the cluster's
// registry, where make cluster-test's make release pushed it; when it is
// not there (this test run on its own), released there as make release
// does it (scripts/release.sh build push: built from the layers make
// image-test left, or anew), so that the node pulls it.
func horovodImage(t *testing.T) string {
	t.Helper()
	ref := cluster.RegistryImage("horovod", e.info.ImageTag)
	ctx := ctxT(t, 45*time.Minute)
	if ok, err := inRegistry(ctx, "horovod", e.info.ImageTag); err != nil {
		t.Fatal(err)
	} else if !ok {
		start := time.Now()
		cmd := exec.CommandContext(ctx, filepath.Join(e.repo, "scripts", "release.sh"), "build", "push")
		cmd.Dir = e.repo
		cmd.Env = append(os.Environ(), cluster.ReleaseEnv(e.info.ImageTag, "linux/"+runtime.GOARCH, []string{"horovod"})...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/release.sh build push (horovod): %v\n%s", err, lastLines(string(out), 30))
		}
		t.Logf("released %s in %s", ref, time.Since(start).Round(time.Second))
	}
	return ref
}
