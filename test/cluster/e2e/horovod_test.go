package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
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
	cluster.SetImages(rt, image)
	apply(t, "", rt)
	ns := namespace(t, "horovod", true)
	tj := trainJob(t, "podmpi-horovod")
	setNested(t, tj, int64(1), "spec", "trainer", "numProcPerNode")
	unstructured.RemoveNestedField(tj.Object, "spec", "trainer", "args")
	setNested(t, tj, []any{"horovodrun", "-np", "3", "--hostfile", "/etc/mpi/hostfile", "-p", "2222",
		"python3", "/usr/local/share/podmpi/horovod_allreduce.py"}, "spec", "trainer", "command")
	r := runTrainJob(t, ns, tj, 5*time.Minute)
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

// horovodImage is the Horovod image of the cluster's tag in the cluster's
// containerd: built with images/build.sh unless podman has it (make
// image-test builds it before make cluster-test; a dirty tree is rebuilt,
// from the layer cache), from the binaries the cluster's images were built
// from, then imported.
func horovodImage(t *testing.T) string {
	t.Helper()
	openmpi := e.info.Images["openmpi"]
	ref := strings.Replace(openmpi, "/openmpi:", "/horovod:", 1)
	if ref == openmpi {
		t.Fatalf("cannot name the Horovod image after the Open MPI image %q", openmpi)
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	pm := []string{"--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file"}
	if exec.Command("podman", append(pm, "image", "exists", ref)...).Run() != nil || strings.HasSuffix(tag, "-dirty") {
		start := time.Now()
		cmd := exec.Command(filepath.Join(e.repo, "images", "build.sh"), "horovod")
		cmd.Dir = e.repo
		cmd.Env = append(os.Environ(), "PODMPI_TAG="+tag, "PODMPI_IMAGE_PREFIX=podmpi", "PODMPI_PLATFORMS=linux/"+runtime.GOARCH)
		if _, err := os.Stat(filepath.Join(e.repo, "bin", "worker-agent")); err == nil {
			cmd.Env = append(cmd.Env, "PODMPI_PREBUILT="+filepath.Join(e.repo, "bin"))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("images/build.sh horovod: %v\n%s", err, lastLines(string(out), 30))
		}
		t.Logf("built %s in %s", ref, time.Since(start).Round(time.Second))
	}
	start := time.Now()
	tool(t, "import-image", ref)
	t.Logf("%s in the cluster after %s", ref, time.Since(start).Round(time.Second))
	return ref
}
