package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podmpi/podmpi/test/cluster"
)

// fault is one of the drills' faults: applied for a while mid-job, then
// undone.
type fault struct {
	name string
	d    time.Duration
	// start applies the fault to the job's node pod and returns what
	// undoes it.
	start func(t *testing.T, node corev1.Pod) (undo func())
}

// podDrop drops every packet between a node pod and the other pods for d,
// with nftables in the pod's own network namespace; the node's address
// (the kubelet's probes, CoreDNS) stays allowed, so Kubernetes still sees
// the pod healthy: a partition between pods, not a dead pod.
func podDrop(d time.Duration) fault {
	return fault{name: fmt.Sprintf("pod-drop-%s", d), d: d, start: func(t *testing.T, node corev1.Pod) func() {
		t.Helper()
		netns := podNetns(t, node.Status.PodIP)
		gw, pods := cluster.Gateway, cluster.PodCIDR
		script := fmt.Sprintf(`table inet podmpi_partition {
  chain in {
    type filter hook input priority -10; policy accept;
    ip saddr %[1]s accept
    ip saddr %[2]s drop
  }
  chain out {
    type filter hook output priority -10; policy accept;
    ip daddr %[1]s accept
    ip daddr %[2]s drop
  }
}
`, gw, pods)
		nft(t, netns, script)
		return func() { nft(t, netns, "delete table inet podmpi_partition\n") }
	}}
}

// dnsPause stops CoreDNS (SIGSTOP) for d: every lookup times out, as when
// the cluster DNS is overloaded or restarting.
func dnsPause(d time.Duration) fault {
	return fault{name: fmt.Sprintf("coredns-pause-%s", d), d: d, start: func(t *testing.T, _ corev1.Pod) func() {
		t.Helper()
		pid, ok := cluster.DaemonPID(cluster.DefaultLayout(""), "coredns")
		if !ok {
			t.Fatal("CoreDNS is not running")
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		cont := func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT to CoreDNS (pid %d): %v", pid, err)
			}
		}
		t.Cleanup(cont) // a failed test must not leave the cluster without DNS
		return cont
	}}
}

// TestPartition: faults a long job meets while it runs, which the same job
// on OpenSSH carries through, must not end it: one node pod cut off from
// the other pods for 90 s, and the cluster DNS paused for 60 s, while
// mpirun runs and the ranks wait; then the ranks allreduce. The TrainJob
// must Complete with the launcher never restarted.
func TestPartition(t *testing.T) {
	need(t)
	installRuntimes(t, nil)
	for _, f := range []fault{podDrop(90 * time.Second), dnsPause(60 * time.Second)} {
		t.Run(f.name, func(t *testing.T) {
			r := partitionDrill(t, "podmpi", f)
			if !r.complete {
				t.Fatalf("the job did not live through %s: %s", f.name, r.why)
			}
			if r.restarts != 0 {
				t.Errorf("the launcher restarted %d times", r.restarts)
			}
			if !strings.Contains(r.log, "a worker-agent stopped answering") && f.name[:3] == "pod" {
				t.Errorf("the launcher's watch did not see the partitioned worker stop answering:\n%s", lastLines(r.log, 30))
			}
			if strings.Contains(r.log, `"level":"ERROR"`) {
				t.Errorf("the launcher logged an ERROR for a fault the job lived through:\n%s", grepLines(r.log, `"level":"ERROR"`))
			}
			t.Logf("%s: Complete in %s, launcher restarts %d", f.name, r.took.Round(time.Second), r.restarts)
		})
	}
}

// TestPartitionBaseline runs the partition drill on the OpenSSH baseline
// runtime and on podmpi's, for each duration in PODMPI_CLUSTER_PARTITION
// (e.g. "90s,420s"), and reports which lived: the tolerance to match. A
// measurement, not a test (docs/cluster.md has the figures).
func TestPartitionBaseline(t *testing.T) {
	spec := os.Getenv("PODMPI_CLUSTER_PARTITION")
	if spec == "" {
		t.Skip("measurement, not a test: PODMPI_CLUSTER_PARTITION=90s,420s")
	}
	need(t)
	installRuntimes(t, nil)
	installOpenSSHRuntime(t, "openmpi")
	var lines []string
	for _, s := range strings.Split(spec, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("PODMPI_CLUSTER_PARTITION: %v", err)
		}
		for _, rt := range []string{"openssh", "podmpi"} {
			r := partitionDrill(t, rt, podDrop(d))
			verdict := "Complete"
			if !r.complete {
				verdict = "failed: " + r.why
			}
			lines = append(lines, fmt.Sprintf("%s, pod-to-pod drop %s: %s after %s (launcher restarts %d)", rt, d, verdict, r.took.Round(time.Second), r.restarts))
			t.Log(lines[len(lines)-1])
		}
	}
	t.Log("\n" + strings.Join(lines, "\n"))
}

// drillResult is how a drilled TrainJob ended.
type drillResult struct {
	complete bool
	why      string
	restarts int32
	log      string
	took     time.Duration
}

// partitionDrill runs a TrainJob (3 pods x 2 ranks) whose ranks sleep past
// the fault, then allreduce; applies f to node pod 0 once the ranks run,
// undoes it after f.d, and waits for the job's end.
func partitionDrill(t *testing.T, runtime string, f fault) drillResult {
	t.Helper()
	ns := namespace(t, "part", runtime == "podmpi")
	tj := trainJob(t, "podmpi-openmpi")
	// The fault starts about 10 s into the ranks' sleep and lasts f.d; the
	// allreduce comes 30 s after it ended.
	sleep := int((f.d + 40*time.Second).Seconds())
	setNested(t, tj, []any{"mpirun", "bash", "-c", fmt.Sprintf("sleep %d; exec podmpi-allreduce 1048576", sleep)}, "spec", "trainer", "args")
	if runtime == "openssh" {
		openSSHTrainJob(t, tj, "openmpi")
	}
	timeout := time.Duration(sleep)*time.Second + 4*time.Minute
	ctx := ctxT(t, timeout+time.Minute)
	start := time.Now()
	apply(t, ns, tj)
	sel := "jobset.sigs.k8s.io/jobset-name=" + tj.GetName()
	var node corev1.Pod
	// The fault starts once the ranks run on every node pod (their sleep):
	// a partition mid-job. A cut while a daemon is still calling back to
	// mpirun is a start-up fault: the daemon's connection attempts to
	// mpirun give up, it exits, and mpirun reports that it could not
	// start its daemons, whatever started them.
	waitFor(t, 3*time.Minute, "the ranks running on every node pod", func() (bool, error) {
		launchers, err := podsWith(ctx, ns, sel+","+launcherSel)
		if err != nil || len(launchers) == 0 || launchers[0].Status.Phase != corev1.PodRunning {
			return false, err
		}
		nodes, err := podsWith(ctx, ns, sel+","+nodeSel)
		if err != nil || len(nodes) != 2 {
			return false, err
		}
		for _, n := range nodes {
			if !hasProcess(t, n, "sleep") {
				return false, nil
			}
			if strings.HasSuffix(n.Spec.Hostname, "-node-0-0") {
				node = n
			}
		}
		return node.Name != "", nil
	})
	t.Logf("%s: %s on %s (%s) for %s", runtime, f.name, node.Name, node.Status.PodIP, f.d)
	undo := f.start(t, node)
	time.Sleep(f.d)
	undo()
	var r drillResult
	r.complete, r.why = waitJobEnd(t, ctx, trainJobGVR, ns, tj.GetName(), "Complete", "Failed", timeout, nil)
	r.took = time.Since(start)
	launchers, err := podsWith(ctx, ns, sel+","+launcherSel)
	if err != nil {
		t.Fatal(err)
	}
	if len(launchers) > 0 {
		l := launchers[0]
		for _, st := range l.Status.ContainerStatuses {
			r.restarts += st.RestartCount
		}
		r.log = podLogs(ctx, ns, l.Name, false)
		if !r.complete {
			r.why += "; launcher: " + terminationMessage(t, ns, l.Name)
		}
	}
	if r.complete {
		checkRanks(t, r.log, 6)
	}
	return r
}

// hasProcess reports whether a process named comm runs in the pod: its
// network namespace holds a process of that name.
func hasProcess(t *testing.T, pod corev1.Pod, comm string) bool {
	t.Helper()
	if pod.Status.PodIP == "" {
		return false
	}
	netns, ok := findPodNetns(pod.Status.PodIP)
	if !ok {
		return false
	}
	out, err := exec.Command("ip", "netns", "pids", netns).Output()
	if err != nil {
		return false
	}
	for _, pid := range strings.Fields(string(out)) {
		if b, err := os.ReadFile(filepath.Join("/proc", pid, "comm")); err == nil && strings.TrimSpace(string(b)) == comm {
			return true
		}
	}
	return false
}

// podNetns is the name (under /var/run/netns) of the network namespace
// holding ip: the pod's, as containerd's CNI set it up.
func podNetns(t *testing.T, ip string) string {
	t.Helper()
	ns, ok := findPodNetns(ip)
	if !ok {
		t.Fatalf("no network namespace under %s holds %s", cluster.NetnsDir, ip)
	}
	return ns
}

func findPodNetns(ip string) (string, bool) {
	want, err := netip.ParseAddr(ip)
	if err != nil {
		return "", false
	}
	entries, err := os.ReadDir(cluster.NetnsDir)
	if err != nil {
		return "", false
	}
	for _, en := range entries {
		if !strings.HasPrefix(en.Name(), "cni-") {
			continue
		}
		out, err := exec.Command("ip", "-n", en.Name(), "-4", "-o", "addr", "show").Output()
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil && p.Addr() == want {
				return en.Name(), true
			}
		}
	}
	return "", false
}

// nft runs an nftables script in a network namespace.
func nft(t *testing.T, netns, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", netns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s\n%s", netns, err, out, script)
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
