package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSDKShape runs the TrainJob the Kubeflow SDK makes for an MPI runtime:
// trainer.command replaces the runtime's "launcher --" with
// [mpirun, --hostfile, /etc/mpi/hostfile, bash, -c, <script>], so mpirun
// runs without the launcher in front of it and finds "ssh" on PATH.
func TestSDKShape(t *testing.T) {
	need(t)
	installRuntimes(t, nil)
	ns := namespace(t, "sdk", true)
	tj := trainJob(t, "podmpi-openmpi")
	unstructured.RemoveNestedField(tj.Object, "spec", "trainer", "args")
	setNested(t, tj, []any{"mpirun", "--hostfile", "/etc/mpi/hostfile", "bash", "-c", "podmpi-allreduce 65536"}, "spec", "trainer", "command")
	r := runTrainJob(t, ns, tj, 4*time.Minute)
	checkTrainJob(t, ns, r, 3, 6)
}

// TestHorovodSSH runs the pre-flight check horovodrun makes on every host
// from the launcher pod: ssh with its options after the host name.
func TestHorovodSSH(t *testing.T) {
	need(t)
	installRuntimes(t, nil)
	ns := namespace(t, "horovod", true)
	tj := trainJob(t, "podmpi-openmpi")
	host := tj.GetName() + "-node-0-0." + tj.GetName()
	unstructured.RemoveNestedField(tj.Object, "spec", "trainer", "args")
	setNested(t, tj, []any{"bash", "-c",
		"for i in 1 2 3 4 5; do ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no " + host +
			" -p 2222 -o ConnectTimeout=10 true && echo horovod-ssh-ok && exit 0; sleep 2; done; exit 1"},
		"spec", "trainer", "command")
	r := runTrainJob(t, ns, tj, 4*time.Minute)
	if !r.complete || !strings.Contains(r.log, "horovod-ssh-ok") {
		t.Fatalf("horovodrun-shaped ssh from the launcher pod failed: %s; log:\n%s", r.message, lastLines(r.log, 30))
	}
}
