package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/podmpi/podmpi/test/cluster"
)

// prteV24 are the four PRRTE variables Trainer v2.4 sets in the launcher
// of an OpenMPI runtime (kubeflow/trainer#4029), with numProcPerNode's
// value for the slots; v2.3.0 sets none, so the tests set them through the
// runtime's launcher env, exactly as v2.4 does.
func prteV24(numProcPerNode int64) map[string]string {
	return map[string]string{
		"PRTE_MCA_prte_default_hostfile":    "/etc/mpi/hostfile",
		"PRTE_MCA_prte_keep_fqdn_hostnames": "false",
		"PRTE_MCA_prte_set_default_slots":   fmt.Sprint(numProcPerNode),
		"PRTE_MCA_plm_ssh_args":             "-o ConnectionAttempts=10",
	}
}

// ompi5Procs is the ranks per pod of the Open MPI 5 TrainJobs: two, so
// that the slots PRRTE is told (the hostfile's, or
// PRTE_MCA_prte_set_default_slots) decide where ranks go.
const ompi5Procs = 2

// TestOpenMPI5: Debian trixie's Open MPI 5 (PRRTE), in the test image that
// is not ours (test/images/openmpi5.Dockerfile), on the real controllers:
// Trainer with runLauncherAsNode true and false, each without and with
// Trainer v2.4's four PRTE_MCA_* values in the launcher, and mpi-operator's
// MPIJob, which sets only the ORTE variables Open MPI 5 ignores
// (kubeflow/mpi-operator#842). Each completes with every rank on the pods
// it belongs on, and the launcher's log shows no ssh to the launcher
// itself.
func TestOpenMPI5(t *testing.T) {
	need(t)
	t.Parallel() // at the end, beside TestBYOI: both wait for the test images
	tool(t, "controllers", "--trainer", e.pins.Trainer[0], "--mpi-operator", e.pins.MPIOperator[0])
	image := testImage(t, "openmpi5")
	ns := namespace(t, "ompi5", true)
	applyRBAC(t, ns)
	for _, asNode := range []bool{true, false} {
		for _, prte := range []bool{false, true} {
			name := fmt.Sprintf("launcher-as-node-%t", asNode)
			if prte {
				name += "/prte-v2.4"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ompi5TrainJob(t, ns, image, asNode, prte)
			})
		}
	}
	t.Run("mpi-operator", func(t *testing.T) {
		t.Parallel()
		byoiMPIJob(t, ns, "openmpi5", "openmpi")
	})
}

func ompi5TrainJob(t *testing.T, ns, image string, asNode, prte bool) {
	rtName := fmt.Sprintf("ompi5-node-%t-prte-%t", asNode, prte)
	rt := byoiRuntime(t, ns, "openmpi", rtName, image, "openmpi5", func(rt *unstructured.Unstructured) {
		setNested(t, rt, asNode, "spec", "mlPolicy", "mpi", "runLauncherAsNode")
		if !prte {
			return
		}
		eachPodSpec(t, rt, func(rj string, pod map[string]any) {
			if rj != "launcher" {
				return
			}
			cs, _, _ := unstructured.NestedSlice(pod, "containers")
			for k, v := range prteV24(ompi5Procs) {
				cluster.SetContainerEnv(cs[0].(map[string]any), k, v)
			}
			pod["containers"] = cs
		})
	})
	const nodes = 3
	pods := nodes
	if !asNode {
		pods++ // the launcher, besides numNodes node pods
	}
	reserveCPU(t, pods*podCPU)
	r := runTrainJob(t, ns, byoiTrainJob(t, rt, true, image, nodes, ompi5Procs, allreduceArgs), 6*time.Minute)
	if !r.complete {
		msg := ""
		if len(r.launchers) > 0 {
			msg = terminationMessage(t, ns, r.launchers[0].Name)
		}
		t.Fatalf("TrainJob %s failed: %s; launcher termination message: %s; launcher log:\n%s", r.name, r.message, msg, lastLines(r.log, 40))
	}
	checkRunsAs(t, append(r.launchers, r.nodes...), image)
	// runLauncherAsNode true: numNodes-1 node pods and the launcher, each a
	// host of the hostfile; false: numNodes node pods, the launcher none.
	nodePods := nodes - 1
	if !asNode {
		nodePods = nodes
	}
	if len(r.nodes) != nodePods {
		t.Errorf("%d node pods, want %d", len(r.nodes), nodePods)
	}
	hosts := checkRanks(t, r.log, nodes*ompi5Procs)
	launcherHost := ""
	if len(r.launchers) == 1 {
		launcherHost = r.launchers[0].Spec.Hostname
	}
	if len(hosts) != nodes {
		t.Errorf("ranks on %d hosts %v, want %d", len(hosts), hosts, nodes)
	}
	for h, n := range hosts {
		if n != ompi5Procs {
			t.Errorf("%d ranks on %s, want %d (numProcPerNode)", n, h, ompi5Procs)
		}
	}
	if _, on := hosts[launcherHost]; launcherHost == "" || on != asNode {
		t.Errorf("runLauncherAsNode %t: ranks on %v, launcher %q among them: %t", asNode, hosts, launcherHost, on)
	}
	if lines := sshToSelf(r.log, launcherHost); lines != "" {
		t.Errorf("the launcher's log shows ssh to the launcher itself (%s):\n%s", launcherHost, lines)
	}
	t.Logf("TrainJob %s (runLauncherAsNode %t, PRTE v2.4 variables %t): Complete in %s; %d ranks on %v; launcher %s",
		r.name, asNode, prte, r.finished.Sub(r.created).Round(100*time.Millisecond), nodes*ompi5Procs, hosts, launcherPhases(r.log))
}

// sshLine is a log line about an ssh connection or command.
var sshLine = regexp.MustCompile(`(?i)podmpi-rsh|not-worker-agent|\bssh\b|:2222\b`)

// sshToSelf returns the lines of the launcher's log that speak of ssh and
// name the launcher's own host as where it goes: PRRTE or ORTE reaching
// the launcher through ssh instead of starting its ranks locally (podmpi's
// client names the host it could not reach; nothing listens for ssh on
// the launcher's pod). Rank output and the MPI's own lines, which start
// with "[<its host>:<pid>]", are not about a target.
func sshToSelf(log, host string) string {
	if host == "" {
		return ""
	}
	var out []string
	for _, l := range strings.Split(log, "\n") {
		// The launcher's INFO lines say what it did, such as writing its own
		// hostfile entry as its host name so that the MPI needs no ssh
		// there: an ssh to itself would be podmpi-rsh's line, a WARN or an
		// ERROR.
		if strings.HasPrefix(l, "["+host+":") || rankLine.MatchString(l) || strings.Contains(l, `"level":"INFO"`) {
			continue
		}
		if strings.Contains(l, host) && sshLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
