package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podmpi/podmpi/test/cluster"
)

// The fault suite. Each fault hits the same job twice, side by side: once on
// podmpi's runtime and once on the upstream-shaped OpenSSH runtime of make
// cluster-bench (OpenSSH's sshd and ssh with their defaults, the launcher
// rerun by its Job on failure, as upstream ships it). The ranks sleep past
// the fault, then allreduce. The rule the suite holds podmpi to: where
// OpenSSH's job lives through a fault, podmpi's must complete with its
// launcher never restarted; where OpenSSH's dies, podmpi's must fail naming
// the host and the cause, in the launcher's termination message and in an
// Event on the job, within 2 minutes of the fault. Either way a TrainJob's
// status must say how podmpi's job ended. The TrainJob faults alternate
// between the runtime's two layouts (the launcher a node or not; OpenSSH's
// runtime the same). docs/reliability.md has the table of a run.
//
// "Lives" means the run of the launcher the fault hit completes: a Job that
// reruns a failed launcher runs the whole job again from the start, which
// is the job failing and being retried, not living through the fault.

// fault is one of the drills' faults: applied mid-job, while the ranks of
// both jobs sleep, and undone after d.
type fault struct {
	seq  int           // the table's row order
	name string        // the subtest
	what string        // the fault as docs/reliability.md's table names it
	d    time.Duration // how long it lasts; 0: over once start returns
	// start applies the fault to one job, l.target being the pod it hits
	// (the first node pod, or the launcher's with onLauncher), and returns
	// what undoes it (nil: nothing to undo). A cluster-wide fault starts
	// once for both jobs (l is podmpi's). Checks that the fault took hold
	// (a sidecar restarted, a pod NotReady) belong in undo, so that start
	// returns at once and both jobs meet the fault together.
	start       func(t *testing.T, l *leg) (undo func())
	clusterWide bool // hits every job on the cluster: run alone, one at a time
	pausesAPI   bool // the API server does not answer while it lasts: the drill does not ask it
	onLauncher  bool // hits the launcher pod
	mpiJob      bool // the jobs are MPIJobs under mpi-operator (else TrainJobs under Trainer)
	// launcherOff: the TrainJobs' runtimes do not run ranks on the launcher
	// (runLauncherAsNode false; else true, as deploy/runtimes ships it).
	launcherOff bool
	noRBAC      bool // podmpi's namespace without deploy/rbac: the launcher sees only DNS and the agents
	sidecar     bool // the node pods run a native sidecar (an init container with restartPolicy Always)
	gate        bool // the node pods have a readiness gate, held True by the drill but while the fault lasts
	// prelude runs in the rank on the launcher pod before its sleep, given
	// the target's name as the hostfile has it.
	prelude func(host string) string
	// sleep is the ranks' sleep: the fault starts once the ranks of both
	// jobs run, and must end well before the first job's ranks wake
	// (default d plus a minute: the jobs start up to half a minute apart).
	sleep time.Duration
	// nameWithin bounds the time from the fault to podmpi's launcher's end
	// when podmpi's job must fail (default 2 minutes).
	nameWithin time.Duration
	cause      string // a word podmpi's termination message must hold when it fails, besides the host
	warn       string // what podmpi's launcher must log (at WARN) when its job lives: its watch saw the fault
	mustFail   bool   // podmpi's job must fail, named, whatever OpenSSH's job does (a worker pod deleted)
	// check, when set, runs on each job once both ended.
	check func(t *testing.T, l *leg)
}

func (f fault) rankSleep() time.Duration {
	if f.sleep > 0 {
		return f.sleep
	}
	return f.d + time.Minute
}

// withLauncherOff is f on the runtimes' other layout: the launcher not a
// node (see fault.launcherOff).
func withLauncherOff(f fault) fault {
	f.launcherOff = true
	return f
}

// layout names the TrainJobs' layout of f for the table.
func (f fault) layout() string {
	switch {
	case f.mpiJob:
		return ""
	case f.launcherOff:
		return "TrainJob, the launcher not a node"
	default:
		return "TrainJob, the launcher a node"
	}
}

// podDrop drops every packet between a node pod and the other pods for d,
// with nftables in the pod's own network namespace; the node's address
// (the kubelet's probes, CoreDNS, the API server) stays allowed, so
// Kubernetes still sees the pod healthy: a partition between pods, not a
// dead pod.
func podDrop(d time.Duration) fault {
	return fault{name: fmt.Sprintf("pod-drop-%s", d), d: d, what: fmt.Sprintf("a worker cut off from the other pods for %s (packets dropped)", d),
		warn: "a worker-agent stopped answering", start: func(t *testing.T, l *leg) func() {
			return cut(t, l.target)
		}}
}

// cut drops every packet between pod and the other pods (see podDrop)
// until the returned function runs.
func cut(t *testing.T, pod corev1.Pod) func() {
	t.Helper()
	netns := podNetns(t, pod.Status.PodIP)
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
	return func() {
		// A pod gone meanwhile took its network namespace and the table.
		if _, ok := findPodNetns(pod.Status.PodIP); ok {
			nft(t, netns, "delete table inet podmpi_partition\n")
		}
	}
}

// daemonPause stops a daemon of the cluster (SIGSTOP) for d: CoreDNS (every
// lookup times out, as when the cluster DNS is overloaded or restarting) or
// the API server (every client waits, as during a control-plane outage).
func daemonPause(name string, d time.Duration) fault {
	f := fault{name: fmt.Sprintf("%s-pause-%s", name, d), d: d, clusterWide: true,
		what: fmt.Sprintf("%s stopped (SIGSTOP) for %s", name, d), start: func(t *testing.T, l *leg) func() {
			t.Helper()
			pid, ok := cluster.DaemonPID(cluster.DefaultLayout(""), name)
			if !ok {
				t.Fatalf("%s is not running", name)
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			running := runningControllers()
			var once sync.Once
			cont := func() {
				once.Do(func() {
					if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
						t.Errorf("SIGCONT to %s (pid %d): %v", name, pid, err)
					}
				})
			}
			t.Cleanup(cont) // a failed test must not leave the cluster without it
			return func() {
				cont()
				// A controller that lost its leader lease meanwhile exits a
				// moment after the API answers again.
				time.Sleep(10 * time.Second)
				var ended []string
				for c, pid := range running {
					if now, ok := cluster.ControllerPID(cluster.DefaultLayout(""), c); !ok || now != pid {
						ended = append(ended, c)
					}
				}
				if len(ended) == 0 {
					return
				}
				sort.Strings(ended)
				tool(t, "controllers") // Trainer (with JobSet) and mpi-operator, started again if they stopped
				for _, c := range ended {
					if _, ok := cluster.ControllerPID(cluster.DefaultLayout(""), c); !ok {
						t.Errorf("%s exited while %s was stopped, and podmpi-cluster controllers did not start it again", c, name)
					}
				}
				l.notef("%s exited meanwhile (the cluster tool started it again)", strings.Join(ended, ", "))
			}
		}}
	switch name {
	case "coredns":
		f.what = fmt.Sprintf("CoreDNS paused (SIGSTOP) for %s", d)
	case "kube-apiserver":
		f.what, f.pausesAPI = fmt.Sprintf("the API server stopped (SIGSTOP) for %s", d), true
	}
	return f
}

func dnsPause(d time.Duration) fault { return daemonPause("coredns", d) }

// runningControllers are the PIDs of the cluster's controllers that run.
func runningControllers() map[string]int {
	out := map[string]int{}
	for _, c := range cluster.Controllers {
		if pid, ok := cluster.ControllerPID(cluster.DefaultLayout(""), c); ok {
			out[c] = pid
		}
	}
	return out
}

// kubeletRestart restarts the kubelet through the cluster tool (SIGTERM,
// then the same daemon started again and healthy), as an upgrade or a
// crash of the node agent would: the containers run on under containerd.
func kubeletRestart() fault {
	return fault{name: "kubelet-restart", clusterWide: true, sleep: 100 * time.Second,
		what: "the kubelet restarted", start: func(t *testing.T, l *leg) func() {
			t.Helper()
			layout := cluster.DefaultLayout("")
			before, _ := cluster.DaemonPID(layout, "kubelet")
			start := time.Now()
			tool(t, "restart", "kubelet")
			after, ok := cluster.DaemonPID(layout, "kubelet")
			if !ok || after == before {
				t.Fatalf("the kubelet did not restart (pid %d before, %d after)", before, after)
			}
			l.notef("the kubelet down and back healthy in %s", time.Since(start).Round(100*time.Millisecond))
			return nil
		}}
}

// sidecarRestart kills the processes of the node pod's native sidecar (an
// init container with restartPolicy Always, as Istio's proxy or a log
// shipper runs): the kubelet starts it again and its restartCount rises,
// while the worker's own container runs on.
func sidecarRestart() fault {
	return fault{name: "sidecar-restart", d: 15 * time.Second, sidecar: true,
		what: "a native sidecar of the worker pod restarted", warn: "a container beside a worker's worker-agent restarted",
		start: func(t *testing.T, l *leg) func() {
			t.Helper()
			before := containerStatus(l.target, sidecarName)
			killContainer(t, l.target, before.ContainerID)
			return func() {
				p, err := e.cs.CoreV1().Pods(l.ns).Get(ctxT(t, time.Minute), l.target.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				now := containerStatus(*p, sidecarName)
				if now.RestartCount <= before.RestartCount {
					t.Fatalf("%s: the sidecar did not restart within %s (restartCount %d)", l.runtime, l.f.d, now.RestartCount)
				}
				l.notef("the sidecar's restartCount %d to %d", before.RestartCount, now.RestartCount)
			}
		}}
}

// sidecarName is the native sidecar of the sidecar-restart drill's runtimes.
const sidecarName = "sidecar"

// workerNotReady takes a worker pod out of Ready for d through its
// readiness gate (a pod condition the drill sets through the API), without
// touching its containers. Under mpi-operator, whose headless Service does
// not publish addresses that are not ready, the worker's name leaves DNS
// meanwhile.
func workerNotReady(d time.Duration) fault {
	return fault{name: fmt.Sprintf("worker-notready-%s", d), d: d, mpiJob: true, noRBAC: true, gate: true,
		what: fmt.Sprintf("a worker NotReady for %s under mpi-operator (readiness gate; its name leaves DNS)", d),
		start: func(t *testing.T, l *leg) func() {
			t.Helper()
			setGate(t, l.target, corev1.ConditionFalse)
			flipped := time.Now()
			return func() {
				t.Helper()
				ready, inDNS := readyAndInDNS(t, l.target)
				if ready == nil || ready.Status != corev1.ConditionFalse {
					t.Fatalf("%s: the kubelet kept %s Ready %s after its readiness gate went False: readiness gates are not honoured here", l.runtime, l.target.Name, d)
				}
				if inDNS {
					t.Fatalf("%s: %s's name still resolves with its pod NotReady: the fault is not what it should be", l.runtime, l.target.Name)
				}
				// The condition's time has whole seconds.
				l.notef("NotReady within %s of the gate going False, and out of DNS", max(ready.LastTransitionTime.Sub(flipped), 0).Truncate(time.Second)+time.Second)
				setGate(t, l.target, corev1.ConditionTrue)
			}
		}}
}

// readyAndInDNS reads the pod's Ready condition now, and whether its name
// (host name and subdomain, in its namespace) resolves at the cluster DNS.
func readyAndInDNS(t *testing.T, pod corev1.Pod) (*corev1.PodCondition, bool) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	p, err := e.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fqdn := fmt.Sprintf("%s.%s.%s.svc.%s", p.Spec.Hostname, p.Spec.Subdomain, p.Namespace, cluster.ClusterDomain)
	_, err = clusterLookup(ctx, fqdn)
	return podCondition(*p, corev1.PodReady), !isNXDomain(err)
}

// faultGate is the readiness gate of the worker-notready drill's pods.
const faultGate = "podmpi.io/fault-ready"

// sshDuringCut cuts a node pod off from the other pods for d and, at
// once, has the rank on the launcher pod open a new ssh session to it. On
// OpenSSH that ssh makes a connection of its own, and waits (TCP retries
// its SYN); on podmpi it asks for a session on the launcher's shared
// connection to that worker, and must wait the same way: the session
// request is answered once the cut ends. The job fails if the ssh fails.
func sshDuringCut(d time.Duration) fault {
	return fault{name: fmt.Sprintf("ssh-during-cut-%s", d), d: d,
		what: fmt.Sprintf("a new ssh to a worker during a %s cut between the pods", d),
		prelude: func(host string) string {
			// The test drops /tmp/podmpi-fault-on into the launcher's
			// container once the cut is in place.
			return `for i in $(seq 600); do [ -e /tmp/podmpi-fault-on ] && break; sleep 1; done; SECONDS=0; ` +
				`if ssh -p 2222 ` + host + ` true </dev/null; then echo "fault-ssh: ok after ${SECONDS} s, shared connection: ${PODMPI_RSH_SOCKET:+yes}"; ` +
				`else echo "fault-ssh: failed after ${SECONDS} s"; exit 3; fi; `
		},
		start: func(t *testing.T, l *leg) func() {
			shell := podShell(t, l.launcher)
			undo := cut(t, l.target)
			dropFile(t, shell, "/tmp/podmpi-fault-on")
			return undo
		},
		check: func(t *testing.T, l *leg) {
			line := sshOutcome(l.r.log)
			if line == "" && l.r.Complete {
				t.Errorf("%s: the job completed but its rank never ran the ssh of the drill", l.runtime)
			}
			if line != "" {
				l.notef("the new ssh: %s", strings.TrimPrefix(line, "fault-ssh: "))
			}
			if l.runtime != "podmpi" || os.Getenv(envShare) == "off" {
				return
			}
			if l.r.Complete && !strings.Contains(line, "shared connection: yes") {
				t.Errorf("podmpi: the rank's ssh did not run with the launcher's shared connection (%q)", line)
			}
			// The worker-agent names each session's connection; the
			// launcher says when a request went unanswered on a held
			// connection (which it keeps).
			for _, r := range logRecords(l.r.log) {
				if r.Level == "WARN" && strings.HasPrefix(r.Msg, "a worker did not answer a session request") {
					l.notef("the launcher: %s", r.Msg)
					break
				}
			}
			conn := func(session string) string { c, _, _ := strings.Cut(session, "/"); return c }
			var daemon, ssh string
			for _, r := range logRecords(podLogs(ctxT(t, time.Minute), l.ns, l.target.Name, false)) {
				switch {
				case r.Msg != "ssh session started":
				case strings.Contains(r.Cmd, "orted") && daemon == "":
					daemon = conn(r.Session)
				case r.Cmd == "true" && ssh == "":
					ssh = conn(r.Session)
				}
			}
			switch {
			case ssh == "":
				// The session never opened: the job failed before it did.
			case ssh == daemon:
				l.notef("the new ssh's session opened on the MPI daemon's connection (%s)", daemon)
			default:
				l.notef("the new ssh's session opened on connection %s, the MPI daemon's is %s", ssh, daemon)
			}
		}}
}

// cpuStarve holds a worker pod at 1% of a CPU for d through its cgroup's
// CPU quota (cpu.max on cgroup v2, cpu.cfs_quota_us on v1; the kubelet's
// cgroupfs driver): the worker-agent (or sshd), the MPI daemon and the
// ranks all but stop, and the readiness probe fails.
//
// Under mpi-operator, without deploy/rbac: podmpi's worker fails its
// readiness probe within seconds (period 2 s, failureThreshold 1), its name
// leaves DNS (the headless Service publishes only Ready addresses), and
// the launcher has neither the API nor the name to tell a slow worker
// from a deleted one, only the agent at the address the name had.
func cpuStarve(d time.Duration) fault {
	return fault{name: fmt.Sprintf("cpu-starve-%s", d), d: d, mpiJob: true, noRBAC: true,
		what: fmt.Sprintf("a worker pod held at 1%% of a CPU for %s under mpi-operator (its cgroup's CPU quota)", d),
		start: func(t *testing.T, l *leg) func() {
			t.Helper()
			q := podCPUQuota(t, l.target)
			q.set(t, q.starved)
			throttled := q.throttled()
			return func() {
				if got := q.read(t); got != q.starved {
					t.Errorf("%s: the pod's CPU quota was %q at the fault's end, not %q: something reset it", l.runtime, got, q.starved)
				}
				ready, inDNS := readyAndInDNS(t, l.target)
				q.set(t, q.was)
				state := "Ready"
				if ready == nil || ready.Status != corev1.ConditionTrue {
					state = "NotReady"
				}
				if !inDNS {
					state += " and out of DNS"
				}
				l.notef("throttled %d times; %s at the fault's end", q.throttled()-throttled, state)
			}
		}}
}

// workerDeleted deletes a worker pod (grace 0) once the ranks run on it: no
// runtime can carry the job on, and podmpi must name the worker and why
// within a minute.
func workerDeleted() fault {
	return fault{name: "worker-deleted", mustFail: true, nameWithin: time.Minute, cause: "gone",
		what: "a worker pod deleted (grace 0)", start: func(t *testing.T, l *leg) func() {
			t.Helper()
			if err := e.cs.CoreV1().Pods(l.ns).Delete(ctxT(t, time.Minute), l.target.Name,
				metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			return nil
		}}
}

// launcherLost loses the launcher pod as a node that dies loses it: cut off
// from the workers first, so that nothing of its end (no FIN) reaches them,
// then evicted at once (the Eviction API, grace 0; a DisruptionTarget,
// which podmpi's runtime does not count as the job's failure). Its Job
// starts a new launcher, which runs the job again from the start. The old
// launcher's MPI daemon and ranks are left on the workers (orphans):
// OpenSSH's sshd keeps them until TCP keepalive (about 2 hours) or until
// they fail on their own; podmpi's worker-agent must end them when the new
// launcher of the same job says who it is.
func launcherLost() fault {
	return fault{name: "launcher-lost", onLauncher: true, sleep: 100 * time.Second,
		what: "the launcher pod lost (cut off, then evicted with grace 0) and made anew by its Job",
		start: func(t *testing.T, l *leg) func() {
			t.Helper()
			cut(t, l.target)
			err := e.cs.PolicyV1().Evictions(l.ns).Evict(ctxT(t, time.Minute), &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Name: l.target.Name, Namespace: l.ns},
				DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
			})
			if err != nil {
				t.Fatal(err)
			}
			return nil
		},
		check: func(t *testing.T, l *leg) {
			if l.runtime != "podmpi" {
				return
			}
			// The worker-agent says when it ends an older launcher's sessions.
			for _, n := range l.nodes {
				for _, m := range logRecords(podLogs(ctxT(t, time.Minute), l.ns, n.Name, false)) {
					if m.Level == "WARN" && strings.HasPrefix(m.Msg, "a newer launcher of the job connected: ending") {
						l.notef("%s's worker-agent: %s", n.Spec.Hostname, m.Msg)
						break
					}
				}
			}
		}}
}

// podFaults hit one pod of each job: they run side by side, each pair of
// jobs in namespaces of its own.
//
// The TrainJob faults alternate between the runtimes' two layouts (the
// launcher a node, as shipped, and not), one run of the suite covering both
// without running every fault twice; sshDuringCut needs the rank on the
// launcher's pod.
func podFaults() []fault {
	return []fault{
		withLauncherOff(sidecarRestart()),
		workerNotReady(20 * time.Second),
		sshDuringCut(30 * time.Second),
		cpuStarve(30 * time.Second),
		withLauncherOff(podDrop(90 * time.Second)),
		workerDeleted(),
		withLauncherOff(launcherLost()),
	}
}

// clusterFaults hit every job on the cluster: one at a time, with nothing
// else of the suite running.
func clusterFaults() []fault {
	return []fault{daemonPause("kube-apiserver", time.Minute), withLauncherOff(kubeletRestart()), dnsPause(time.Minute)}
}

// TestFaults runs every fault of podFaults and clusterFaults against a
// podmpi job and an OpenSSH job at once, fails where podmpi's does worse or
// its TrainJob's status does not say how it ended (judge), and logs the
// table docs/reliability.md shows (PODMPI_CLUSTER_FAULTS_OUT=<file> writes
// it there too).
//
// The pod faults run side by side (-parallel 8), each job asking for 0.05
// CPU and 256 MiB per pod (2 pods a TrainJob whose launcher is a node, 3 one
// whose launcher is not and an MPIJob: all 14 jobs fit the 2-core node at
// once; the ranks sleep). The cluster faults follow, one
// after the other: they would hit the other drills' jobs too. A paused API
// server costs mpi-operator its leader lease, and it exits: the drill starts
// it again (podmpi-cluster controllers) and the table says so; the group
// does so once more at its end, should a drill have stopped halfway.
func TestFaults(t *testing.T) {
	need(t)
	start := time.Now()
	tool(t, "controllers")
	installRuntimes(t, nil)
	openSSHImage := installOpenSSHRuntime(t, "openmpi")
	installFaultRuntimes(t, openSSHImage)
	var rows faultRows
	run := func(t *testing.T, f fault) {
		row := faultDrill(t, f, openSSHImage)
		rows.add(row)
		for _, p := range judge(f, row.openssh, row.podmpi) {
			t.Error(p)
		}
		t.Logf("%s\n  OpenSSH: %s\n  podmpi:  %s\n  podmpi's message: %s\n  podmpi's TrainJob status: %s", row.fault(), row.openssh.summary(), row.podmpi.summary(),
			row.podmpi.message(), row.podmpi.statusSummary())
	}
	pod, clusterWide := podFaults(), clusterFaults()
	for i := range pod {
		pod[i].seq = i
	}
	for i := range clusterWide {
		clusterWide[i].seq = len(pod) + i
	}
	t.Run("pod", func(t *testing.T) {
		for _, f := range pod {
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				run(t, f)
			})
		}
	})
	t.Run("cluster", func(t *testing.T) {
		defer tool(t, "controllers")
		for _, f := range clusterWide {
			t.Run(f.name, func(t *testing.T) { run(t, f) })
		}
	})
	table := rows.table()
	t.Logf("fault suite: %s wall\n%s", time.Since(start).Round(time.Second), table)
	if out := os.Getenv("PODMPI_CLUSTER_FAULTS_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// TestPartitionBaseline runs the pod-drop drill for each duration in
// PODMPI_CLUSTER_PARTITION (e.g. "90s,420s") on podmpi's runtime and the
// OpenSSH runtime at once, and reports which lived: the tolerance to match.
// A measurement, not a test (docs/reliability.md has the figures).
func TestPartitionBaseline(t *testing.T) {
	spec := os.Getenv("PODMPI_CLUSTER_PARTITION")
	if spec == "" {
		t.Skip("measurement, not a test: PODMPI_CLUSTER_PARTITION=90s,420s")
	}
	need(t)
	installRuntimes(t, nil)
	image := installOpenSSHRuntime(t, "openmpi")
	var rows faultRows
	for _, s := range strings.Split(spec, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("PODMPI_CLUSTER_PARTITION: %v", err)
		}
		rows.add(faultDrill(t, podDrop(d), image))
	}
	t.Log("\n" + rows.table())
}

// leg is one runtime's job of a fault drill, and what the drill saw of it.
type leg struct {
	f       fault
	runtime string // podmpi or openssh
	ns      string
	job     *unstructured.Unstructured
	gvr     schema.GroupVersionResource
	// success and failure are the job's end conditions.
	success, failure     string
	launcherSel, nodeSel string
	targetSuffix         string // the host name of the node pod the faults hit ends so
	created, running     time.Time
	nodes                []corev1.Pod // at the fault
	launcher, target     corev1.Pod   // at the fault
	faultAt              time.Time
	daemons              []proc // onLauncher: the old launcher's daemons and ranks on the node pods
	orphansGone          time.Time
	failed               map[string]bool     // launcher runs seen failed after the fault (pod UID/end time)
	runs                 map[types.UID]int32 // each launcher pod seen: the runs of its container (1 + restarts)
	runsAtFault          int32
	mu                   sync.Mutex
	notes                []string
	r                    legResult
}

// legResult is how one job of a fault drill ended: what the table shows and
// judge weighs.
type legResult struct {
	Runtime  string
	RBAC     bool   // the launcher could record Events (deploy/rbac)
	Host     string // the host the fault hit (its first DNS label)
	Complete bool
	Ended    bool          // the job reached its end condition (else the drill stopped waiting)
	After    time.Duration // from the fault to the job's end (or to when the drill stopped waiting)
	Message  string        // the job's end condition's message
	// Runs counts the launcher's runs from the fault on: 1 when the run the
	// fault hit (with onLauncher: the new launcher's first run) was the last.
	Runs int
	// Died is the first launcher run that ended in failure after the fault.
	Died *launcherEnd
	// TermMessage is the first failed launcher run's termination message
	// (podmpi's root cause; OpenSSH's launcher writes none).
	TermMessage string
	// Events are podmpi's Warnings on the job ("Reason: message").
	Events []string
	// Status is podmpi's TrainJob's .status.trainerStatus.metrics by name
	// when the job ended (nil for an MPIJob, or without Trainer's status
	// API); StatusAPI says it is expected.
	Status    map[string]string
	StatusAPI bool
	Warn      string // the first WARN line of podmpi's launcher (its msg and host)
	Errors    string // ERROR lines of podmpi's launcher in a job that lived
	// Orphans (onLauncher): how long the old launcher's daemons and ranks
	// outlived the new launcher's start (OrphansLeft: still running when the
	// job ended), and whether they ended before their own sleep did (so that
	// something ended them rather than their own failure).
	Orphans      time.Duration
	OrphansLeft  bool
	OrphansEnded bool
	Notes        []string // what the drill measured of the fault on this job
	log          string
}

// launcherEnd is one failed run of a launcher.
type launcherEnd struct {
	After    time.Duration // from the fault
	ExitCode int32
	Line     string // what it said: the termination message's or log's telling line
}

func (l *leg) notef(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, fmt.Sprintf(format, a...))
}

// newLeg creates the namespace and the job object of one runtime's leg.
func newLeg(t *testing.T, f fault, runtime, openSSHImage string) *leg {
	t.Helper()
	l := &leg{f: f, runtime: runtime, failed: map[string]bool{}, runs: map[types.UID]int32{}}
	l.ns = namespace(t, f.name+"-"+runtime, runtime == "podmpi")
	if runtime == "podmpi" && !f.noRBAC {
		applyRBAC(t, l.ns)
	}
	if f.mpiJob {
		l.mpiJobLeg(t, openSSHImage)
	} else {
		l.trainJobLeg(t)
	}
	return l
}

// ranksScript is what every rank runs: the prelude on the launcher's rank,
// the sleep, then the allreduce.
func (l *leg) ranksScript(host string) string {
	s := ""
	if l.f.prelude != nil {
		// $HOSTNAME: the pod's host name, which names the launcher.
		s = `case "$HOSTNAME" in *-launcher*) ` + l.f.prelude(host) + `;; esac; `
	}
	return s + fmt.Sprintf("sleep %d; exec podmpi-allreduce 1048576", int(l.f.rankSleep().Seconds()))
}

// trainJobLeg: the example TrainJob on 2 nodes x 1 rank (the launcher runs
// the second rank, or with launcherOff a second node pod), small requests.
func (l *leg) trainJobLeg(t *testing.T) {
	t.Helper()
	rt := "podmpi-openmpi"
	tj := trainJob(t, rt)
	name := tj.GetName()
	setNested(t, tj, int64(2), "spec", "trainer", "numNodes")
	setNested(t, tj, int64(1), "spec", "trainer", "numProcPerNode")
	setNested(t, tj, "50m", "spec", "trainer", "resourcesPerNode", "requests", "cpu")
	setNested(t, tj, "256Mi", "spec", "trainer", "resourcesPerNode", "requests", "memory")
	setNested(t, tj, "256Mi", "spec", "trainer", "resourcesPerNode", "limits", "memory")
	setNested(t, tj, []any{"mpirun", "bash", "-c", l.ranksScript(name + "-node-0-0." + name)}, "spec", "trainer", "args")
	if l.runtime == "openssh" {
		openSSHTrainJob(t, tj, "openmpi")
		rt = "openssh-openmpi"
	}
	if l.f.launcherOff {
		if l.f.prelude != nil {
			t.Fatalf("%s: the launcher is not a node, so no rank runs the prelude on its pod", l.f.name)
		}
		rt += launcherOffSuffix
	}
	if l.f.sidecar {
		rt += sidecarSuffix
	}
	setNested(t, tj, rt, "spec", "runtimeRef", "name")
	sel := "jobset.sigs.k8s.io/jobset-name=" + name
	l.job, l.gvr, l.success, l.failure = tj, trainJobGVR, "Complete", "Failed"
	l.launcherSel, l.nodeSel, l.targetSuffix = sel+","+launcherSel, sel+","+nodeSel, "-node-0-0"
}

// mpiJobLeg: the example MPIJob on 2 workers x 1 slot, small requests.
func (l *leg) mpiJobLeg(t *testing.T, openSSHImage string) {
	t.Helper()
	job := mpiJob(t, "openmpi", nil)
	name := job.GetName()
	setNested(t, job, int64(1), "spec", "slotsPerWorker")
	for _, role := range []string{"Launcher", "Worker"} {
		setResources(t, job, role, "50m", "256Mi")
	}
	setLauncherArgs(t, job, "mpirun", "-np", "2", "bash", "-c", l.ranksScript(name+"-worker-0."+name))
	if l.f.gate {
		setNested(t, job, []any{map[string]any{"conditionType": faultGate}},
			"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "readinessGates")
	}
	if l.runtime == "openssh" {
		openSSHMPIJob(t, job, openSSHImage)
	}
	sel := "training.kubeflow.org/job-name=" + name
	l.job, l.gvr, l.success, l.failure = job, mpiJobGVR, "Succeeded", "Failed"
	l.launcherSel, l.nodeSel, l.targetSuffix = sel+",training.kubeflow.org/job-role=launcher", sel+",training.kubeflow.org/job-role=worker", "-worker-0"
}

// setResources sets a replica's CPU request and its memory request and
// limit (the examples' 1 GiB per pod would not let 14 jobs fit the node).
func setResources(t *testing.T, job *unstructured.Unstructured, role, cpu, mem string) {
	t.Helper()
	setCPURequest(t, job, role, cpu)
	path := []string{"spec", "mpiReplicaSpecs", role, "template", "spec", "containers"}
	cs, _, _ := unstructured.NestedSlice(job.Object, path...)
	res := cs[0].(map[string]any)["resources"].(map[string]any)
	res["requests"].(map[string]any)["memory"] = mem
	res["limits"] = map[string]any{"memory": mem}
	setNested(t, job, cs, path...)
}

// openSSHMPIJob makes job (an MPIJob of examples/mpi-operator) the shape of
// mpi-operator's own examples on the OpenSSH baseline image: the workers
// run sshd -De -f ~/.sshd_config as UID 1000, the launcher runs mpirun
// itself, restarted by its Job on failure (restartPolicy and backoffLimit
// left to mpi-operator's defaults). The workers get a TCP readiness probe
// on sshd's port, so that WaitForWorkersReady (kept from the example)
// starts the launcher once sshd listens, as Trainer's OpenSSH runtimes do;
// without it the first launcher run would race the workers' start.
func openSSHMPIJob(t *testing.T, job *unstructured.Unstructured, image string) {
	t.Helper()
	unstructured.RemoveNestedField(job.Object, "spec", "runPolicy", "backoffLimit")
	unstructured.RemoveNestedField(job.Object, "spec", "mpiReplicaSpecs", "Launcher", "restartPolicy")
	for _, role := range []string{"Launcher", "Worker"} {
		spec := []string{"spec", "mpiReplicaSpecs", role, "template", "spec"}
		unstructured.RemoveNestedField(job.Object, append(spec, "securityContext")...)
		// Nothing of podmpi: its init container and the volume it fills
		// (deploy/mpi-operator's).
		unstructured.RemoveNestedField(job.Object, append(spec, "initContainers")...)
		vols, _, _ := unstructured.NestedSlice(job.Object, append(spec, "volumes")...)
		setNested(t, job, withoutNamed(vols, podmpiVolume), append(spec, "volumes")...)
		cs, _, _ := unstructured.NestedSlice(job.Object, append(spec, "containers")...)
		c := cs[0].(map[string]any)
		c["image"] = image
		c["securityContext"] = map[string]any{"runAsUser": int64(1000)}
		mounts, _ := c["volumeMounts"].([]any)
		c["volumeMounts"] = withoutNamed(mounts, podmpiVolume)
		delete(c, "env")
		delete(c, "livenessProbe")
		if role == "Launcher" {
			args, _ := c["args"].([]any)
			if len(args) == 0 || args[0] != "mpirun" {
				t.Fatalf("MPIJob %s: launcher args %v do not start with mpirun", job.GetName(), args)
			}
			c["command"], c["args"] = []any{"mpirun"}, args[1:]
		} else {
			c["command"], c["args"] = []any{"/usr/sbin/sshd"}, []any{"-De", "-f", "/home/mpiuser/.sshd_config"}
			c["readinessProbe"] = map[string]any{"tcpSocket": map[string]any{"port": int64(2222)}, "periodSeconds": int64(2)}
		}
		setNested(t, job, cs, append(spec, "containers")...)
	}
}

// podmpiVolume is the emptyDir into which the runtimes' and
// deploy/mpi-operator's init container copies /opt/podmpi.
const podmpiVolume = "podmpi"

// withoutNamed is list (of volumes, mounts, containers) without the items
// named name.
func withoutNamed(list []any, name string) []any {
	out := []any{}
	for _, x := range list {
		if m, ok := x.(map[string]any); !ok || m["name"] != name {
			out = append(out, x)
		}
	}
	return out
}

// The runtimes of the fault drills besides podmpi-openmpi and
// openssh-openmpi are named by these suffixes: the launcher not a node
// (fault.launcherOff), and a native sidecar in the node pods (fault.sidecar),
// in that order.
const (
	launcherOffSuffix = "-launcher-off"
	sidecarSuffix     = "-sidecar"
)

// installFaultRuntimes applies the variants of podmpi-openmpi and
// openssh-openmpi the drills run: each with the launcher not a node
// (runLauncherAsNode false), with a native sidecar in the node pods (an
// init container with restartPolicy Always that only idles, in the shape of
// the restricted Pod Security Standard), and with both.
func installFaultRuntimes(t *testing.T, openSSHImage string) {
	t.Helper()
	var bases []*unstructured.Unstructured
	for _, o := range readObjects(t, cluster.RuntimeFiles["openmpi"]) {
		if o.GetKind() == "ClusterTrainingRuntime" {
			cluster.SetImages(o, e.info.Images["openmpi"], e.info.Images)
			bases = append(bases, o)
		}
	}
	bases = append(bases, openSSHRuntimeObject(t, "openmpi", openSSHImage))
	var rts []*unstructured.Unstructured
	for _, base := range bases {
		// The node container's image: podmpi's init container may have
		// the binaries-only image, which has no tail.
		image := e.info.Images["openmpi"]
		if !strings.HasPrefix(base.GetName(), "podmpi-") {
			image = openSSHImage
		}
		for _, v := range []struct {
			launcherOff, sidecar bool
		}{{true, false}, {false, true}, {true, true}} {
			rt := base.DeepCopy()
			if v.launcherOff {
				rt.SetName(rt.GetName() + launcherOffSuffix)
				setNested(t, rt, false, "spec", "mlPolicy", "mpi", "runLauncherAsNode")
				// The TrainJob's resourcesPerNode no longer reaches the
				// node pods (see setNodeRequests): OpenSSH's ask for none.
				if strings.HasPrefix(base.GetName(), "podmpi-") {
					setNodeRequests(t, rt, "50m", "256Mi")
				}
			}
			if v.sidecar {
				rt.SetName(rt.GetName() + sidecarSuffix)
				addSidecar(t, rt, image)
			}
			rts = append(rts, rt)
		}
	}
	apply(t, "", rts...)
}

// addSidecar adds the sidecar-restart drill's native sidecar (image) to the
// node pods of runtime rt.
func addSidecar(t *testing.T, rt *unstructured.Unstructured, image string) {
	t.Helper()
	jobs, _, _ := unstructured.NestedSlice(rt.Object, "spec", "template", "spec", "replicatedJobs")
	for _, x := range jobs {
		rj := x.(map[string]any)
		if rj["name"] != "node" {
			continue
		}
		spec := []string{"template", "spec", "template", "spec"}
		// After podmpi's own init container, which the node container
		// needs first.
		inits, _, _ := unstructured.NestedSlice(rj, append(spec, "initContainers")...)
		if err := unstructured.SetNestedSlice(rj, append(inits, map[string]any{
			"name": sidecarName, "image": image, "restartPolicy": "Always",
			// tail, not sleep: the drills tell the ranks' sleep by its name.
			"command": []any{"tail", "-f", "/dev/null"},
			"resources": map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "16Mi"},
				"limits": map[string]any{"memory": "16Mi"}},
			"securityContext": map[string]any{
				"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true,
				"capabilities":   map[string]any{"drop": []any{"ALL"}},
				"seccompProfile": map[string]any{"type": "RuntimeDefault"},
			},
		}), append(spec, "initContainers")...); err != nil {
			t.Fatal(err)
		}
	}
	setNested(t, rt, jobs, "spec", "template", "spec", "replicatedJobs")
}

// faultRow is one fault's two jobs.
type faultRow struct {
	f               fault
	notes           []string // what the drill measured of the fault itself
	openssh, podmpi legResult
}

func (r faultRow) fault() string {
	s := r.f.what
	if l := r.f.layout(); l != "" {
		s += "; " + l
	}
	if r.f.noRBAC {
		s += "; podmpi without deploy/rbac"
	}
	if len(r.notes) > 0 {
		s += " (" + strings.Join(r.notes, "; ") + ")"
	}
	return s
}

type faultRows struct {
	mu   sync.Mutex
	rows []faultRow
}

func (rs *faultRows) add(r faultRow) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.rows = append(rs.rows, r)
}

// table renders the rows as docs/reliability.md's table.
func (rs *faultRows) table() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var b strings.Builder
	b.WriteString("| fault | OpenSSH's job | podmpi's job | podmpi's message | podmpi's TrainJob status |\n|---|---|---|---|---|\n")
	sort.SliceStable(rs.rows, func(i, j int) bool { return rs.rows[i].f.seq < rs.rows[j].f.seq })
	for _, r := range rs.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cell(r.fault()), cell(r.openssh.summary()), cell(r.podmpi.summary()), cell(r.podmpi.message()),
			cell(r.podmpi.statusSummary()))
	}
	return b.String()
}

// cell makes s fit a Markdown table cell: one line, no bare pipes.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// summary says how a job met its fault, for the table.
func (r legResult) summary() string {
	var parts []string
	if r.Died != nil {
		parts = append(parts, fmt.Sprintf("the launcher's run failed %s after the fault (exit %d: %s)", secs(r.Died.After), r.Died.ExitCode, clip(r.Died.Line, 160)))
	}
	switch {
	case r.Complete && r.Runs <= 1 && r.Died == nil:
		parts = append(parts, "Complete, the launcher never restarted")
	case r.Complete:
		parts = append(parts, fmt.Sprintf("its Job ran the launcher %d times, the job again from the start each time: Complete %s after the fault", r.Runs, secs(r.After)))
	case r.Ended:
		parts = append(parts, fmt.Sprintf("Failed %s after the fault: %s", secs(r.After), clip(r.Message, 160)))
	default:
		parts = append(parts, fmt.Sprintf("still running its launcher's run %d, %s after the fault (the drill stopped waiting)", r.Runs, secs(r.After)))
	}
	if r.Orphans != 0 || r.OrphansLeft {
		switch {
		case r.OrphansLeft:
			parts = append(parts, fmt.Sprintf("the old launcher's MPI daemon and ranks still ran on the workers %s after the new launcher started", secs(r.Orphans)))
		case r.OrphansEnded:
			parts = append(parts, fmt.Sprintf("the old launcher's MPI daemon and ranks ended %s after the new launcher started", secs(r.Orphans)))
		default:
			parts = append(parts, fmt.Sprintf("the old launcher's MPI daemon and ranks ran on until they failed on their own, %s after the new launcher started", secs(r.Orphans)))
		}
	}
	parts = append(parts, r.Notes...)
	return strings.Join(parts, "; ")
}

// message is what podmpi told, for the table: the failed launcher's
// termination message and Events, or its first warning.
func (r legResult) message() string {
	if r.TermMessage != "" {
		first, _, _ := strings.Cut(strings.TrimSpace(r.TermMessage), "\n")
		s := clip(first, 300)
		var reasons []string
		for _, ev := range r.Events {
			reason, _, _ := strings.Cut(ev, ":")
			reasons = append(reasons, reason)
		}
		if len(reasons) > 0 {
			s += " (Event " + strings.Join(reasons, ", ") + ")"
		}
		return s
	}
	if r.Warn != "" {
		return "WARN " + clip(r.Warn, 300)
	}
	return "none (no WARN or ERROR)"
}

// statusSummary is what the TrainJob's status said of podmpi's job, for
// the table: its phase and exit code, and after a failure the reason, the
// root cause's host and rank, and the root cause.
func (r legResult) statusSummary() string {
	if !r.StatusAPI {
		return "-"
	}
	st := r.Status
	if st["podmpi_phase"] == "" {
		return "no podmpi_phase"
	}
	s := fmt.Sprintf("%s, exit code %s", st["podmpi_phase"], st["podmpi_exit_code"])
	for _, k := range []string{"podmpi_reason", "podmpi_root_cause_host", "podmpi_root_cause_rank", "podmpi_root_cause"} {
		if v := st[k]; v != "" {
			s += ", " + strings.TrimPrefix(k, "podmpi_") + " " + v
		}
	}
	return s
}

// sameHost: two host names (a bare one, a pod's FQDN) name the same pod,
// by their first label.
func sameHost(a, b string) bool {
	a, _, _ = strings.Cut(a, ".")
	b, _, _ = strings.Cut(b, ".")
	return a != "" && a == b
}

func secs(d time.Duration) string { return d.Round(time.Second).String() }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// judge returns where podmpi's job did worse than OpenSSH's under f: the
// suite's rule (see the top of this file), and what makes a lived job
// clean (no ERROR logged, the watch's WARN where the fault must show). A
// TrainJob's status (Trainer's status API) must say how podmpi's job ended:
// podmpi_phase succeeded and exit code 0 when Complete; failed, with the
// launcher's exit code, the reason and the root cause, and the host where
// the host must be named, when Failed.
func judge(f fault, openssh, podmpi legResult) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(f.name+": "+format, a...)) }
	lived := func(r legResult) bool { return r.Complete && r.Runs <= 1 && r.Died == nil }
	switch {
	case lived(openssh) && !f.mustFail:
		if !lived(podmpi) {
			add("OpenSSH's job lived through the fault; podmpi's did not: %s; podmpi's message: %s", podmpi.summary(), podmpi.message())
			break
		}
		if podmpi.Errors != "" {
			add("podmpi's launcher logged an ERROR for a fault its job lived through:\n%s", podmpi.Errors)
		}
		if f.warn != "" && !strings.Contains(podmpi.log, f.warn) {
			add("podmpi's launcher did not log %q: its watch did not see the fault", f.warn)
		}
	case lived(podmpi) && !f.mustFail:
		// Better than OpenSSH's.
	default:
		within := f.nameWithin
		if within == 0 {
			within = 2 * time.Minute
		}
		if podmpi.Died == nil {
			add("podmpi's job did not fail (%s); it must, naming the worker", podmpi.summary())
			break
		}
		if podmpi.Died.After > within {
			add("podmpi's launcher ended %s after the fault, want within %s", secs(podmpi.Died.After), within)
		}
		if !strings.Contains(podmpi.TermMessage, podmpi.Host) || !strings.Contains(podmpi.TermMessage, f.cause) {
			add("podmpi's termination message does not name the host %s and the cause %q:\n%s", podmpi.Host, f.cause, podmpi.TermMessage)
		}
		if podmpi.StatusAPI && podmpi.Ended && !sameHost(podmpi.Status["podmpi_root_cause_host"], podmpi.Host) {
			add("podmpi's TrainJob status does not name the host %s as the root cause's: %s", podmpi.Host, podmpi.statusSummary())
		}
		if podmpi.RBAC {
			named := false
			for _, ev := range podmpi.Events {
				named = named || strings.Contains(ev, podmpi.Host)
			}
			if !named {
				add("no podmpi Event on the job names %s: %q", podmpi.Host, podmpi.Events)
			}
		}
	}
	// The TrainJob's status says how podmpi's job ended, whichever way.
	if podmpi.StatusAPI && podmpi.Ended {
		st := podmpi.Status
		switch {
		case podmpi.Complete && (st["podmpi_phase"] != "succeeded" || st["podmpi_exit_code"] != "0"):
			add("podmpi's TrainJob is Complete, but its status says %s, not podmpi_phase succeeded and podmpi_exit_code 0", podmpi.statusSummary())
		case !podmpi.Complete && (st["podmpi_phase"] != "failed" || st["podmpi_reason"] == "" || st["podmpi_root_cause"] == "" ||
			podmpi.Died != nil && st["podmpi_exit_code"] != strconv.Itoa(int(podmpi.Died.ExitCode))):
			add("podmpi's TrainJob Failed, but its status says %s, not podmpi_phase failed with the launcher's exit code, the reason and the root cause", podmpi.statusSummary())
		}
	}
	if f.onLauncher && (podmpi.OrphansLeft || !podmpi.OrphansEnded) {
		add("podmpi left the old launcher's MPI daemon and ranks running on the workers (%s)", podmpi.summary())
	}
	return problems
}

// faultDrill runs f against a podmpi job and an OpenSSH job at once:
// both created together; the fault applied once the ranks of both run
// (to each job's pod, or once for a cluster-wide fault), undone after f.d;
// then both jobs waited for. The test fails here only when a job could not
// be drilled (it ended before the fault, or never started); judge weighs the
// outcomes.
func faultDrill(t *testing.T, f fault, openSSHImage string) faultRow {
	t.Helper()
	legs := []*leg{newLeg(t, f, "podmpi", openSSHImage), newLeg(t, f, "openssh", openSSHImage)}
	sleep := f.rankSleep()
	ctx := ctxT(t, 2*sleep+15*time.Minute)
	for _, l := range legs {
		apply(t, l.ns, l.job)
	}
	// Until the ranks of both jobs run: the fault hits mid-job. A cut while
	// a daemon still calls back to mpirun is a start-up fault, which these
	// drills are not about.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		all := true
		for _, l := range legs {
			if f.gate {
				l.holdGates(t, ctx)
			}
			if l.running.IsZero() {
				l.checkRunning(t, ctx)
			}
			all = all && !l.running.IsZero()
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ranks of both jobs were not running 5 minutes after their creation")
		}
		time.Sleep(time.Second)
	}
	for _, l := range legs {
		l.atFault(t, ctx)
	}
	faultAt := time.Now()
	for _, l := range legs {
		l.faultAt = faultAt
	}
	var undos []func()
	if f.clusterWide {
		undos = append(undos, f.start(t, legs[0]))
	} else {
		for _, l := range legs {
			undos = append(undos, f.start(t, l))
		}
	}
	for _, l := range legs {
		t.Logf("%s at %s: %s's job %s/%s, ranks running %s after its creation, the fault on %s", f.name, faultAt.Format(time.TimeOnly),
			l.runtime, l.ns, l.job.GetName(), l.running.Sub(l.created).Round(time.Second), l.target.Name)
	}
	poll := func() {
		for _, l := range legs {
			if !l.done() {
				l.poll(t, ctx)
			}
		}
	}
	for time.Since(faultAt) < f.d {
		if !f.pausesAPI {
			poll()
		}
		time.Sleep(time.Second)
	}
	for _, undo := range undos {
		if undo != nil {
			undo()
		}
	}
	for _, l := range legs {
		// The fault must have ended with the ranks still asleep, with time to
		// spare for what it disturbed to settle.
		if wake := l.running.Add(sleep); time.Until(wake) < 15*time.Second && !l.f.onLauncher && !l.f.mustFail {
			t.Errorf("%s: the fault ended %s before the ranks' sleep: the job did not span it (lengthen the drill's sleep)", l.runtime, time.Until(wake).Round(time.Second))
		}
	}
	end := time.Now().Add(2*sleep + 8*time.Minute)
	for {
		poll()
		done := true
		for _, l := range legs {
			done = done && l.done()
		}
		if done {
			break
		}
		if time.Now().After(end) {
			for _, l := range legs {
				if !l.done() {
					l.finish(t, ctx, false)
				}
			}
			break
		}
		time.Sleep(time.Second)
	}
	row := faultRow{f: f}
	for _, l := range legs {
		if f.check != nil {
			f.check(t, l)
		}
		l.mu.Lock()
		if f.clusterWide {
			row.notes = append(row.notes, l.notes...)
		} else {
			l.r.Notes = append(l.r.Notes, l.notes...)
		}
		l.mu.Unlock()
	}
	row.podmpi, row.openssh = legs[0].r, legs[1].r
	return row
}

// countRuns adds what launchers show to the runs seen of each launcher pod:
// a pod replaced between two reads is still counted by the ones seen.
func (l *leg) countRuns(launchers []corev1.Pod) {
	for _, p := range launchers {
		l.runs[p.UID] = max(l.runs[p.UID], 1+restarts(p))
	}
}

// runsSinceFault counts the launcher's runs from the fault on, the run the
// fault hit being the first (with onLauncher, the new launcher's first).
func (l *leg) runsSinceFault() int {
	var n int32
	for uid, r := range l.runs {
		if !l.f.onLauncher || uid != l.target.UID {
			n += r
		}
	}
	if !l.f.onLauncher {
		n -= l.runsAtFault - 1
	}
	return int(n)
}

// done: the leg's outcome is recorded (finish ran).
func (l *leg) done() bool { return l.r.Runtime != "" }

// checkRunning sets l.running once the launcher runs and every node pod
// runs a rank (their sleep), and fails the test when the job ended first.
func (l *leg) checkRunning(t *testing.T, ctx context.Context) {
	t.Helper()
	if o, err := getObj(ctx, l.gvr, l.ns, l.job.GetName()); err == nil {
		l.created = o.GetCreationTimestamp().Time
		for _, c := range []string{l.success, l.failure} {
			if st, msg := condition(o, c); st == "True" {
				t.Fatalf("%s: the job is %s before its ranks ran: %s; launcher log:\n%s", l.runtime, c, msg, lastLines(l.launcherLog(ctx), 30))
			}
		}
	}
	launchers, err := podsWith(ctx, l.ns, l.launcherSel)
	if err != nil || len(launchers) == 0 || launchers[0].Status.Phase != corev1.PodRunning {
		return
	}
	nodes, err := podsWith(ctx, l.ns, l.nodeSel)
	if err != nil || len(nodes) == 0 {
		return
	}
	var target corev1.Pod
	for _, n := range nodes {
		if !hasProcess(t, n, "sleep") {
			return
		}
		if strings.HasSuffix(n.Spec.Hostname, l.targetSuffix) || strings.HasSuffix(n.Name, l.targetSuffix) {
			target = n
		}
	}
	if target.Name == "" {
		t.Fatalf("%s: no node pod whose name ends with %s among %d", l.runtime, l.targetSuffix, len(nodes))
	}
	l.running, l.nodes, l.launcher, l.target = time.Now(), nodes, launchers[0], target
	if l.f.onLauncher {
		l.target = launchers[0]
	}
}

// atFault records, just before the fault, what the job met before it: the
// launcher's runs that failed as the job started (upstream's OpenSSH
// launcher may start before its own name is in DNS: its mpirun then ssh's
// to itself, fails, and its Job runs it again), and (onLauncher) the MPI
// daemons and ranks on the node pods.
func (l *leg) atFault(t *testing.T, ctx context.Context) {
	t.Helper()
	launchers, err := podsWith(ctx, l.ns, l.launcherSel)
	if err != nil {
		t.Fatal(err)
	}
	l.countRuns(launchers)
	for _, r := range l.runs {
		l.runsAtFault += r
	}
	for _, p := range launchers {
		n := restarts(p)
		if n == 0 {
			continue
		}
		if l.runtime == "podmpi" {
			t.Errorf("podmpi's launcher restarted %d times before the fault", n)
		}
		st := p.Status.ContainerStatuses[0]
		l.notef("before the fault, its launcher's first %d run(s) failed as the job started, and its Job ran it again (%s)",
			n, clip(tellingLine(previousLogs(ctx, l.ns, p.Name, st.Name)), 120))
	}
	if l.f.onLauncher {
		for _, n := range l.nodes {
			l.daemons = append(l.daemons, mpiDaemons(podProcs(n))...)
		}
		if len(l.daemons) == 0 {
			t.Fatalf("%s: no MPI daemon (orted) on the node pods before the fault", l.runtime)
		}
	}
}

// holdGates sets the readiness gate True on every node pod that has none
// yet (until then no pod of the job is Ready).
func (l *leg) holdGates(t *testing.T, ctx context.Context) {
	t.Helper()
	nodes, err := podsWith(ctx, l.ns, l.nodeSel)
	if err != nil {
		return
	}
	for _, p := range nodes {
		if podCondition(p, faultGate) == nil {
			setGate(t, p, corev1.ConditionTrue)
		}
	}
}

// poll reads the job once: its end, its launcher runs that failed after the
// fault, and (onLauncher) whether the old launcher's processes still run.
func (l *leg) poll(t *testing.T, ctx context.Context) {
	t.Helper()
	if len(l.daemons) > 0 && l.orphansGone.IsZero() && !anyAlive(l.daemons) {
		l.orphansGone = time.Now()
	}
	launchers, err := podsWith(ctx, l.ns, l.launcherSel)
	if err == nil {
		l.countRuns(launchers)
		for _, p := range launchers {
			if l.f.onLauncher && p.UID == l.target.UID {
				continue // the fault's own end of it
			}
			for _, st := range p.Status.ContainerStatuses {
				for _, end := range []*corev1.ContainerStateTerminated{st.LastTerminationState.Terminated, st.State.Terminated} {
					// The status has whole seconds: an end in the fault's
					// second is the fault's.
					if end == nil || end.ExitCode == 0 || end.FinishedAt.Time.Before(l.faultAt.Truncate(time.Second)) {
						continue
					}
					key := fmt.Sprintf("%s/%s", p.UID, end.FinishedAt.UTC().Format(time.RFC3339))
					if l.failed[key] {
						continue
					}
					l.failed[key] = true
					if l.r.Died == nil {
						line := end.Message
						if line == "" {
							log := podLogs(ctx, l.ns, p.Name, false)
							if end == st.LastTerminationState.Terminated {
								log = previousLogs(ctx, l.ns, p.Name, st.Name)
							}
							line = tellingLine(log)
						}
						l.r.Died = &launcherEnd{After: max(end.FinishedAt.Sub(l.faultAt), 0), ExitCode: end.ExitCode, Line: line}
						// What kubectl get pod -o jsonpath='{...terminated.message}' shows.
						l.r.TermMessage = end.Message
					}
				}
			}
		}
	}
	o, err := getObj(ctx, l.gvr, l.ns, l.job.GetName())
	if err == nil {
		for _, c := range []string{l.success, l.failure} {
			if st, _ := condition(o, c); st == "True" {
				l.finish(t, ctx, true)
				return
			}
		}
	}
	// A job whose launcher keeps failing is rerun by its Job for minutes
	// (backoff): after one more job's length, its outcome is known enough.
	if l.r.Died != nil && time.Since(l.faultAt) > l.r.Died.After+l.f.rankSleep()+2*time.Minute {
		l.finish(t, ctx, false)
	}
}

// finish records how the job ended (ended false: the drill stops waiting
// for it).
func (l *leg) finish(t *testing.T, ctx context.Context, ended bool) {
	t.Helper()
	r := &l.r
	r.Runtime, r.Ended, r.After = l.runtime, ended, time.Since(l.faultAt)
	r.RBAC = l.runtime == "podmpi" && !l.f.noRBAC
	r.Host = l.target.Spec.Hostname
	if r.Host == "" {
		r.Host = l.target.Name
	}
	// The TrainJob's status as the job ended: TestFaults runs Trainer's
	// first pinned release.
	r.StatusAPI = l.runtime == "podmpi" && !l.f.mpiJob && cluster.TrainerStatus(e.pins.Trainer[0])
	if o, err := getObj(ctx, l.gvr, l.ns, l.job.GetName()); err == nil {
		if st, msg := condition(o, l.success); st == "True" {
			r.Complete, r.Message = true, msg
		} else if _, msg := condition(o, l.failure); msg != "" {
			r.Message = msg
		}
		if r.StatusAPI {
			st, _, _ := unstructured.NestedMap(o.Object, "status", "trainerStatus")
			r.Status = statusMetrics(st)
		}
	}
	if launchers, err := podsWith(ctx, l.ns, l.launcherSel); err == nil {
		l.countRuns(launchers)
	}
	r.Runs = l.runsSinceFault()
	r.log = l.launcherLog(ctx)
	switch {
	case !r.Complete:
	case l.runtime == "openssh":
		// The baseline is measured, not tested: a short world of its
		// mpirun is part of its outcome (once, under a CoreDNS pause with
		// the launcher a node, OpenSSH's mpirun started 1 of the 2 ranks).
		if n := worldSize(r.log); n != 2 {
			l.notef("OpenSSH's mpirun ran a world of %d ranks, not 2", n)
		}
	default:
		checkRanks(t, r.log, 2)
	}
	if len(l.daemons) > 0 {
		newStart := time.Time{}
		if launchers, err := podsWith(ctx, l.ns, l.launcherSel); err == nil {
			for _, p := range launchers {
				if p.UID == l.target.UID || len(p.Status.ContainerStatuses) == 0 {
					continue
				}
				if st := p.Status.ContainerStatuses[0]; st.State.Running != nil && newStart.IsZero() {
					newStart = st.State.Running.StartedAt.Time
				} else if st.State.Terminated != nil && newStart.IsZero() {
					newStart = st.State.Terminated.StartedAt.Time
				}
			}
		}
		switch {
		case newStart.IsZero():
			r.OrphansLeft = l.orphansGone.IsZero()
		case l.orphansGone.IsZero():
			r.OrphansLeft, r.Orphans = true, time.Since(newStart)
		default:
			r.Orphans = l.orphansGone.Sub(newStart)
			// Ended before their own sleep did: something ended them.
			r.OrphansEnded = !newStart.IsZero() && l.orphansGone.After(newStart) && l.orphansGone.Before(l.running.Add(l.f.rankSleep()))
		}
	}
	if l.runtime != "podmpi" {
		return
	}
	for _, ev := range podmpiEvents(t, l.ns, l.job.GetKind(), l.job.GetName()) {
		if ev.Type == corev1.EventTypeWarning {
			r.Events = append(r.Events, ev.Reason+": "+ev.Message)
		}
	}
	for _, j := range logRecords(r.log) {
		if j.Level == "WARN" && r.Warn == "" {
			r.Warn = j.Msg
			if j.Host != "" {
				r.Warn += " (host " + j.Host + ")"
			}
		}
		if j.Level == "ERROR" && r.Complete {
			r.Errors += j.line + "\n"
		}
	}
}

// launcherLog is the log of the job's newest launcher pod.
func (l *leg) launcherLog(ctx context.Context) string {
	launchers, err := podsWith(ctx, l.ns, l.launcherSel)
	if err != nil || len(launchers) == 0 {
		return ""
	}
	newest := launchers[0]
	for _, p := range launchers[1:] {
		if p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = p
		}
	}
	return podLogs(ctx, l.ns, newest.Name, false)
}

// tellingLine picks from a failed launcher's log the line that says why:
// Open MPI's and ssh's own words first, else the last line.
func tellingLine(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for _, want := range []string{"ssh:", "lost communication", "ORTE", "mpirun", "rror"} {
		for _, l := range lines {
			if strings.Contains(l, want) && !strings.HasPrefix(strings.TrimSpace(l), "---") {
				return strings.TrimSpace(l)
			}
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// sshOutcome is the line the drill's rank printed after its ssh, or "".
// Only the rank's own line counts: the launcher's log quotes the whole
// command (in mpirun's argv) with the same words in it.
func sshOutcome(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if l = strings.TrimSpace(l); sshOutcomeLine.MatchString(l) {
			return l
		}
	}
	return ""
}

var sshOutcomeLine = regexp.MustCompile(`^fault-ssh: (ok|failed) after [0-9]+ s(, shared connection:( yes)?)?$`)

// logRecord is one structured (JSON) line of a podmpi log.
type logRecord struct {
	Level, Msg, Host string
	Session, Cmd     string // worker-agent's "ssh session started": "<connection>/s<n>", and its command
	line             string
}

// logRecords are the structured lines of a podmpi log (the job's own
// output between them is skipped).
func logRecords(log string) []logRecord {
	var out []logRecord
	for _, line := range strings.Split(log, "\n") {
		var r logRecord
		if json.Unmarshal([]byte(line), &r) == nil && r.Level != "" {
			r.line = line
			out = append(out, r)
		}
	}
	return out
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, st := range p.Status.ContainerStatuses {
		n += st.RestartCount
	}
	return n
}

func containerStatus(p corev1.Pod, name string) corev1.ContainerStatus {
	for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if st.Name == name {
			return st
		}
	}
	return corev1.ContainerStatus{}
}

func podCondition(p corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// setGate sets the pod's readiness gate condition through the API (the
// status subresource, as a controller that owns the gate would).
func setGate(t *testing.T, p corev1.Pod, status corev1.ConditionStatus) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": faultGate, "status": status, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		"reason": "PodmpiFaultDrill",
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Pods(p.Namespace).Patch(ctxT(t, time.Minute), p.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("setting the readiness gate of %s %s: %v", p.Name, status, err)
	}
}

// clusterLookup asks the cluster DNS (CoreDNS on the node's address) for
// name's addresses.
func clusterLookup(ctx context.Context, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(cluster.Gateway, "53"))
	}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.LookupHost(ctx, name)
}

func isNXDomain(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// cpuQuota is a pod's CPU quota file: what it held, and what starves it.
type cpuQuota struct {
	file, stat   string
	was, starved string
}

// podCPUQuota finds the pod's CPU quota in its cgroup: cpu.max (v2: "1000
// 100000" is 1 ms of CPU time per 100 ms) or cpu.cfs_quota_us (v1, in the
// cpu hierarchy, against its 100 ms period).
func podCPUQuota(t *testing.T, pod corev1.Pod) *cpuQuota {
	t.Helper()
	for _, dir := range cluster.PodCgroups(string(pod.UID)) {
		for _, q := range []cpuQuota{
			{file: filepath.Join(dir, "cpu.max"), starved: "1000 100000"},
			{file: filepath.Join(dir, "cpu.cfs_quota_us"), starved: "1000"},
		} {
			if _, err := os.Stat(q.file); err != nil {
				continue
			}
			if q.file == filepath.Join(dir, "cpu.cfs_quota_us") {
				if b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us")); err != nil || strings.TrimSpace(string(b)) != "100000" {
					t.Fatalf("%s: the period is %q, not 100000: %v", dir, b, err)
				}
			}
			q.stat = filepath.Join(dir, "cpu.stat")
			q.was = q.read(t)
			return &q
		}
	}
	t.Fatalf("no CPU quota file in the cgroups of pod %s (uid %s): %v", pod.Name, pod.UID, cluster.PodCgroups(string(pod.UID)))
	return nil
}

func (q *cpuQuota) read(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(q.file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (q *cpuQuota) set(t *testing.T, v string) {
	t.Helper()
	if err := os.WriteFile(q.file, []byte(v), 0o644); err != nil {
		t.Fatalf("writing %q to %s: %v", v, q.file, err)
	}
}

// throttled is cpu.stat's nr_throttled: the periods the quota held the
// cgroup back.
func (q *cpuQuota) throttled() int {
	b, _ := os.ReadFile(q.stat)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "nr_throttled" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// killContainer sends SIGKILL to every process of a container, found in
// its cgroup (the pod's cgroup, then the container's ID).
func killContainer(t *testing.T, pod corev1.Pod, containerID string) {
	t.Helper()
	_, id, ok := strings.Cut(containerID, "://")
	if !ok || id == "" {
		t.Fatalf("pod %s: no container ID in %q", pod.Name, containerID)
	}
	for _, dir := range cluster.PodCgroups(string(pod.UID)) {
		b, err := os.ReadFile(filepath.Join(dir, id, "cgroup.procs"))
		if err != nil {
			continue
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			continue
		}
		for _, s := range pids {
			if pid, err := strconv.Atoi(s); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return
	}
	t.Fatalf("pod %s: no process of container %s in its cgroups", pod.Name, id)
}

// podShell is a shell of a pod's main container: the rank's on that pod,
// which waits for a file (dropFile). It may start a little after the node
// pods' ranks run (OpenSSH's launcher, run again by its Job, starts its own
// rank last), so it is looked for up to a minute.
func podShell(t *testing.T, pod corev1.Pod) proc {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for _, p := range podProcs(pod) {
			if p.comm == "bash" {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: no shell of its container found within a minute", pod.Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// dropFile creates an empty file in the container of shell (podShell),
// through its mount namespace: a signal to the job's script.
func dropFile(t *testing.T, shell proc, path string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join("/proc", strconv.Itoa(shell.pid), "root", path), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("could not create %s in the shell's container: %v", path, err)
	}
	_ = f.Close()
}

// proc is a process of a pod: a PID with its start time, so that a reused
// PID is never taken for it.
type proc struct {
	pid, ppid   int
	comm, start string
}

func (p proc) alive() bool {
	q, ok := readProc(p.pid)
	return ok && q.start == p.start
}

func anyAlive(ps []proc) bool {
	for _, p := range ps {
		if p.alive() {
			return true
		}
	}
	return false
}

// readProc reads /proc/<pid>/stat: a zombie counts as gone.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return proc{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return proc{pid: pid, ppid: ppid, comm: s[open+1 : end], start: f[19]}, true
}

// podProcs lists the processes in the pod's network namespace: its
// containers' and its sandbox's.
func podProcs(pod corev1.Pod) []proc {
	if pod.Status.PodIP == "" {
		return nil
	}
	netns, ok := findPodNetns(pod.Status.PodIP)
	if !ok {
		return nil
	}
	out, err := exec.Command("ip", "netns", "pids", netns).Output()
	if err != nil {
		return nil
	}
	var ps []proc
	for _, s := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(s); err == nil {
			if p, ok := readProc(pid); ok {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// mpiDaemons are Open MPI's daemons (orted) among ps, with everything they
// started (the ranks).
func mpiDaemons(ps []proc) []proc {
	in := map[int]bool{}
	for _, p := range ps {
		if p.comm == "orted" {
			in[p.pid] = true
		}
	}
	for grown := true; grown; {
		grown = false
		for _, p := range ps {
			if !in[p.pid] && in[p.ppid] {
				in[p.pid], grown = true, true
			}
		}
	}
	var out []proc
	for _, p := range ps {
		if in[p.pid] {
			out = append(out, p)
		}
	}
	return out
}

// hasProcess reports whether a process named comm runs in the pod: its
// network namespace holds a process of that name.
func hasProcess(t *testing.T, pod corev1.Pod, comm string) bool {
	t.Helper()
	for _, p := range podProcs(pod) {
		if p.comm == comm {
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

// TestFaultJudge: the suite's rule, without a cluster. podmpi must live
// where OpenSSH's job lives (a rerun from the start is not living), cleanly
// (no ERROR, the watch's WARN where asked); where OpenSSH's dies, podmpi's
// must fail within the bound, naming the host and the cause in its
// termination message and in an Event (with RBAC); orphans must end.
func TestFaultJudge(t *testing.T) {
	lived := legResult{Complete: true, Ended: true, Runs: 1, Warn: "a worker-agent stopped answering (host job-node-0-0)",
		log: `{"level":"WARN","msg":"a worker-agent stopped answering","host":"job-node-0-0"}`}
	died := func(after time.Duration, msg string, events ...string) legResult {
		return legResult{Ended: true, Runs: 1, RBAC: true, Host: "job-node-0-0",
			Died: &launcherEnd{After: after, ExitCode: 74}, TermMessage: msg, Events: events}
	}
	rerun := legResult{Complete: true, Ended: true, Runs: 2, Died: &launcherEnd{After: 3 * time.Second, ExitCode: 1, Line: "ORTE has lost communication"}}
	named := died(20*time.Second, "root cause: worker job-node-0-0 is gone: deleted", "WorkerGone: worker job-node-0-0 is gone")
	drop := podDrop(90 * time.Second)
	// The same outcomes with the TrainJob's status read.
	withStatus := func(r legResult, st map[string]string) legResult {
		r.StatusAPI, r.Status = true, st
		return r
	}
	succeeded := map[string]string{"podmpi_phase": "succeeded", "podmpi_exit_code": "0"}
	failed := map[string]string{"podmpi_phase": "failed", "podmpi_exit_code": "74", "podmpi_reason": "WorkerGone",
		"podmpi_root_cause": "root cause: worker job-node-0-0 is gone: deleted", "podmpi_root_cause_host": "job-node-0-0.job"}
	without := func(m map[string]string, key string, v string) map[string]string {
		c := maps.Clone(m)
		c[key] = v
		return c
	}
	for _, tc := range []struct {
		name            string
		f               fault
		openssh, podmpi legResult
		want            []string // each problem holds one, in order; none: no problem
	}{
		{"both live", drop, lived, lived, nil},
		{"podmpi dies where OpenSSH lives", drop, lived, named, []string{"OpenSSH's job lived through the fault; podmpi's did not"}},
		{"podmpi reruns where OpenSSH lives", drop, lived, rerun, []string{"podmpi's did not"}},
		{"an ERROR in a job that lived", drop, lived, legResult{Complete: true, Ended: true, Runs: 1, log: lived.log, Errors: `{"level":"ERROR"}`},
			[]string{"logged an ERROR"}},
		{"the watch saw nothing", drop, lived, legResult{Complete: true, Ended: true, Runs: 1}, []string{"did not log"}},
		{"OpenSSH reran, podmpi named it", drop, rerun, named, nil},
		{"OpenSSH reran, podmpi lived", drop, rerun, lived, nil},
		{"named late, without host or Event", workerDeleted(), rerun, died(90*time.Second, "root cause: mpirun exited 1"),
			[]string{"ended 1m30s after the fault, want within 1m0s", "does not name the host", "no podmpi Event"}},
		{"a deleted worker must fail podmpi", workerDeleted(), lived, lived, []string{"podmpi's job did not fail"}},
		{"no Event asked without RBAC", workerDeleted(), rerun, func() legResult { r := named; r.RBAC, r.Events = false, nil; return r }(), nil},
		{"orphans left", launcherLost(), lived, legResult{Complete: true, Ended: true, Runs: 1, OrphansLeft: true, Orphans: time.Minute},
			[]string{"left the old launcher's MPI daemon"}},
		{"orphans that died on their own", launcherLost(), lived, legResult{Complete: true, Ended: true, Runs: 1, Orphans: time.Minute},
			[]string{"left the old launcher's MPI daemon"}},
		{"orphans ended", launcherLost(), lived, legResult{Complete: true, Ended: true, Runs: 1, Orphans: 5 * time.Second, OrphansEnded: true}, nil},
		{"a lived TrainJob whose status says so", drop, lived, withStatus(lived, succeeded), nil},
		{"a lived TrainJob whose status lacks the end", drop, lived, withStatus(lived, map[string]string{"podmpi_phase": "running"}),
			[]string{"Complete, but its status says running"}},
		{"a lived TrainJob whose status has no podmpi metric", drop, lived, withStatus(lived, map[string]string{}),
			[]string{"its status says no podmpi_phase"}},
		{"a failed TrainJob whose status names the host", workerDeleted(), rerun, withStatus(named, failed), nil},
		{"a failed TrainJob whose status names another host", workerDeleted(), rerun, withStatus(named, without(failed, "podmpi_root_cause_host", "job-node-0-1.job")),
			[]string{"status does not name the host job-node-0-0"}},
		{"a failed TrainJob whose status says succeeded", workerDeleted(), rerun, withStatus(named, without(failed, "podmpi_phase", "succeeded")),
			[]string{"Failed, but its status says succeeded"}},
		{"a failed TrainJob whose status has another exit code", workerDeleted(), rerun, withStatus(named, without(failed, "podmpi_exit_code", "1")),
			[]string{"Failed, but its status says failed, exit code 1"}},
		{"no status read of an MPIJob", drop, lived, lived, nil},
	} {
		got := judge(tc.f, tc.openssh, tc.podmpi)
		if len(got) != len(tc.want) {
			t.Errorf("%s: problems %q, want %d holding %q", tc.name, got, len(tc.want), tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %q lacks %q", tc.name, got[i], w)
			}
		}
	}

	var rows faultRows
	rows.add(faultRow{f: workerDeleted(), openssh: rerun, podmpi: withStatus(named, failed)})
	rows.add(faultRow{f: dnsPause(time.Minute), notes: []string{"x | y"}, openssh: lived, podmpi: lived})
	rows.add(faultRow{f: withLauncherOff(podDrop(90 * time.Second)), openssh: lived, podmpi: withStatus(lived, succeeded)})
	rows.add(faultRow{f: cpuStarve(30 * time.Second), openssh: lived, podmpi: lived})
	table := rows.table()
	for _, want := range []string{
		"| fault | OpenSSH's job | podmpi's job | podmpi's message | podmpi's TrainJob status |",
		"| a worker pod deleted (grace 0); TrainJob, the launcher a node | the launcher's run failed 3s after the fault (exit 1: ORTE has lost communication); its Job ran the launcher 2 times",
		"| root cause: worker job-node-0-0 is gone: deleted (Event WorkerGone) | failed, exit code 74, reason WorkerGone, root_cause_host job-node-0-0.job, root_cause root cause: worker job-node-0-0 is gone: deleted |",
		"| CoreDNS paused (SIGSTOP) for 1m0s; TrainJob, the launcher a node (x \\| y) | Complete, the launcher never restarted | Complete, the launcher never restarted | WARN a worker-agent stopped answering (host job-node-0-0) | - |",
		"| a worker cut off from the other pods for 1m30s (packets dropped); TrainJob, the launcher not a node | Complete, the launcher never restarted | Complete, the launcher never restarted | WARN a worker-agent stopped answering (host job-node-0-0) | succeeded, exit code 0 |",
		"| a worker pod held at 1% of a CPU for 30s under mpi-operator (its cgroup's CPU quota); podmpi without deploy/rbac | ",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestMPIDaemons: an orted and everything under it, not its siblings.
func TestMPIDaemons(t *testing.T) {
	ps := []proc{{pid: 1, comm: "pause"}, {pid: 7, comm: "worker-agent"}, {pid: 20, ppid: 7, comm: "orted"},
		{pid: 21, ppid: 20, comm: "bash"}, {pid: 22, ppid: 21, comm: "sleep"}, {pid: 30, ppid: 7, comm: "bash"}}
	var got []int
	for _, p := range mpiDaemons(ps) {
		got = append(got, p.pid)
	}
	if fmt.Sprint(got) != "[20 21 22]" {
		t.Errorf("mpiDaemons = %v, want [20 21 22]", got)
	}
}

// worldSize is the size of MPI_COMM_WORLD rank 0 reported in a log of
// podmpi-allreduce (0 when no rank did).
func worldSize(log string) int {
	for _, m := range rankLine.FindAllStringSubmatch(log, -1) {
		if m[1] == "0" {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return 0
}
