package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/podmpi/podmpi/test/cluster"
)

// openSSHContainerfile is the baseline image: the podmpi Open MPI image plus
// OpenSSH's server and client, configured the way mpi-operator's base image
// and Trainer's runtime images are (client: no host key checking, port 2222;
// a non-root sshd whose host key is the job's key, StrictModes off). podmpi
// leaves PATH: its mpirun and ssh would otherwise stand in front of Open
// MPI's and OpenSSH's, and the baseline would measure podmpi.
const openSSHContainerfile = `FROM %s
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-server openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/run/sshd \
 && printf 'Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    Port 2222\n' >> /etc/ssh/ssh_config \
 && printf 'StrictModes no\nPort 2222\n' >> /etc/ssh/sshd_config \
 && printf 'PidFile /home/mpiuser/sshd.pid\nHostKey /home/mpiuser/.ssh/id_rsa\nStrictModes no\nPort 2222\n' > /home/mpiuser/.sshd_config \
 && chown 1000:0 /home/mpiuser/.sshd_config
USER 1000:0
`

// openSSHRuntime is Trainer's deepspeed-distributed runtime with the
// baseline image: sshd on 2222 as UID 1000 in the workers, a tcp readiness
// probe after 5 s, the launcher running whatever the TrainJob says.
const openSSHRuntime = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: openssh-%[2]s
spec:
  mlPolicy:
    numNodes: 1
    mpi:
      numProcPerNode: 1
      mpiImplementation: OpenMPI
      sshAuthMountPath: /home/mpiuser/.ssh
      runLauncherAsNode: true
  template:
    spec:
      network:
        publishNotReadyAddresses: true
      successPolicy:
        operator: All
        targetReplicatedJobs:
          - launcher
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  securityContext:
                    fsGroup: 1000
                  containers:
                    - name: node
                      image: %[1]s
                      securityContext:
                        runAsUser: 1000
                      command:
                        - /usr/sbin/sshd
                      args:
                        - -De
                        - -f
                        - /home/mpiuser/.sshd_config
                      readinessProbe:
                        tcpSocket:
                          port: 2222
                        initialDelaySeconds: 5
        - name: launcher
          dependsOn:
            - name: node
              status: Ready
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  securityContext:
                    fsGroup: 1000
                  containers:
                    - name: node
                      image: %[1]s
                      securityContext:
                        runAsUser: 1000
`

// benchSample is one TrainJob's timeline, in seconds from its creation.
type benchSample struct {
	MPI        string // openmpi or mpich: the image (and for OpenSSH, the mpirun) of both runtimes
	Runtime    string
	Nodes      int
	Procs      int // ranks per node pod
	Rep        int
	AllRunning float64 // every pod's container started
	MPIInit    float64 // the first rank's line (after MPI_Init and two allreduces of a few ms)
	Complete   float64 // TrainJob Complete
	Phases     map[string]float64
	InitDone   float64 // podmpi: the launcher's start to mpirun, as it logs it (init_seconds)
	Failed     string  // why the run did not complete (its TrainJob's message or the timeout, and the launcher's last lines)
}

// TestBench measures TrainJob created -> all pods Running -> the first
// rank past MPI_Init -> TrainJob Complete for podmpi's runtime and for an
// OpenSSH runtime in upstream's shape on the same image, Open MPI and
// MPICH, at 2 and 4 nodes (PODMPI_CLUSTER_BENCH_NODES, _MPI), runs
// alternated; and the podmpi launcher's phases. make cluster-bench.
func TestBench(t *testing.T) {
	if os.Getenv("PODMPI_CLUSTER_BENCH") != "1" {
		t.Skip("measurement, not a test: make cluster-bench (PODMPI_CLUSTER_BENCH=1)")
	}
	need(t)
	reps := 3
	if v, err := strconv.Atoi(os.Getenv("PODMPI_CLUSTER_BENCH_REPS")); err == nil && v > 0 {
		reps = v
	}
	tool(t, "controllers", "--trainer", e.pins.Trainer[0], "--mpi-operator", "none")
	installRuntimes(t, nil)
	mpis := []string{"openmpi", "mpich"}
	if v := os.Getenv("PODMPI_CLUSTER_BENCH_MPI"); v != "" {
		mpis = strings.Split(v, ",")
	}
	for _, mpi := range mpis {
		if mpi != "openmpi" && mpi != "mpich" {
			t.Fatalf("PODMPI_CLUSTER_BENCH_MPI=%q: want openmpi, mpich or both, comma-separated", os.Getenv("PODMPI_CLUSTER_BENCH_MPI"))
		}
		installOpenSSHRuntime(t, mpi)
	}
	// No Pod Security labels: the OpenSSH runtime runs sshd with a
	// writable root, as upstream's does.
	ns := namespace(t, "bench", false)

	sizes := []int{2, 4}
	if v := os.Getenv("PODMPI_CLUSTER_BENCH_NODES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 64 {
				t.Fatalf("PODMPI_CLUSTER_BENCH_NODES=%q: want node counts from 1 to 64, comma-separated", v)
			}
			sizes = append(sizes, n)
		}
	}
	// The example TrainJob's 2 ranks per pod, or PODMPI_CLUSTER_BENCH_PROCS:
	// past 16 node pods the 2 cores here run more busy-polling ranks than
	// MPICH's wire-up survives under either runtime, and 1 per pod halves them.
	procs := 2
	if v := os.Getenv("PODMPI_CLUSTER_BENCH_PROCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 8 {
			t.Fatalf("PODMPI_CLUSTER_BENCH_PROCS=%q: want ranks per node pod from 1 to 8", v)
		}
		procs = n
	}
	// PODMPI_CLUSTER_BENCH_ENV (NAME=value,...) goes into both runtimes'
	// TrainJobs (trainer.env), e.g. UCX_TCP_MAX_CONN_RETRIES for MPICH's
	// wire-up of many ranks on the one node; the report lists it.
	var env []any
	if v := os.Getenv("PODMPI_CLUSTER_BENCH_ENV"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || k == "" {
				t.Fatalf("PODMPI_CLUSTER_BENCH_ENV=%q: want NAME=value pairs, comma-separated", v)
			}
			env = append(env, map[string]any{"name": k, "value": val})
		}
	}
	var samples []benchSample
	for _, mpi := range mpis {
		for _, nodes := range sizes {
			for rep := 0; rep < reps; rep++ {
				order := []string{"podmpi", "openssh"}
				if rep%2 == 1 {
					order = []string{"openssh", "podmpi"}
				}
				for _, r := range order {
					s := benchOnce(t, ns, mpi, r, nodes, procs, env)
					s.Rep = rep
					samples = append(samples, s)
					if s.Failed != "" {
						// The other runtime still runs: whether it fails the
						// same way tells the job's own failure from ours.
						t.Errorf("%s %s %d nodes rep %d failed: %s", mpi, r, nodes, rep, s.Failed)
						continue
					}
					t.Logf("%s %s %d nodes rep %d: all Running %.1f s, MPI_Init %.1f s, Complete %.1f s %v", mpi, r, nodes, rep, s.AllRunning, s.MPIInit, s.Complete, s.Phases)
				}
			}
		}
	}
	report := benchReport(samples)
	if v := os.Getenv("PODMPI_CLUSTER_BENCH_ENV"); v != "" {
		report += "\nBoth runtimes' TrainJobs had trainer.env " + v + ".\n"
	}
	t.Log("\n" + report)
	if out := os.Getenv("PODMPI_CLUSTER_BENCH_OUT"); out != "" {
		b, _ := json.MarshalIndent(samples, "", "  ")
		_ = os.WriteFile(out+".json", b, 0o644)
		_ = os.WriteFile(out+".md", []byte(report), 0o644)
	}
}

// installOpenSSHRuntime builds the OpenSSH baseline image on podmpi's image
// of mpi (openmpi, mpich), applies the openssh-<mpi>
// ClusterTrainingRuntime with it, and returns the image.
func installOpenSSHRuntime(t *testing.T, mpi string) string {
	t.Helper()
	image := buildOpenSSHImage(t, mpi)
	apply(t, "", openSSHRuntimeObject(t, mpi, image))
	return image
}

// openSSHRuntimeObject is the openssh-<mpi> ClusterTrainingRuntime on image.
func openSSHRuntimeObject(t *testing.T, mpi, image string) *unstructured.Unstructured {
	t.Helper()
	var rt unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(openSSHRuntime, image, mpi)), &rt.Object); err != nil {
		t.Fatal(err)
	}
	return &rt
}

// openSSHTrainJob makes tj (a TrainJob on podmpi-<mpi>) run on the
// OpenSSH baseline runtime: the same ranks, under OpenSSH's ssh and the
// image's own mpirun. Trainer writes an Open MPI hostfile ("host slots=N")
// whatever the MPI; an MPICH image without podmpi reads it only rewritten
// into Hydra's "host:N", as such images' entrypoints do.
func openSSHTrainJob(t *testing.T, tj *unstructured.Unstructured, mpi string) {
	t.Helper()
	args, _, _ := unstructured.NestedStringSlice(tj.Object, "spec", "trainer", "args")
	if len(args) == 0 || args[0] != "mpirun" {
		t.Fatalf("TrainJob %s: args %q do not start with mpirun", tj.GetName(), args)
	}
	setNested(t, tj, "openssh-"+mpi, "spec", "runtimeRef", "name")
	unstructured.RemoveNestedField(tj.Object, "spec", "trainer", "args")
	var cmd []any
	switch mpi {
	case "mpich":
		// Hydra takes Trainer's FQDN of the launcher's own entry for
		// another host and ssh's to it, and tells the proxies to call back
		// to its short host name, which does not resolve in their pods:
		// the launcher runs an sshd too, and names itself by the FQDN.
		script := `self=$(grep "^$(hostname)\." /etc/mpi/hostfile | cut -d' ' -f1) && ` +
			`/usr/sbin/sshd -f /home/mpiuser/.sshd_config && ` +
			`sed 's/ slots=/:/' /etc/mpi/hostfile > /tmp/hosts && exec mpiexec -launcher ssh -localhost "$self" -f /tmp/hosts`
		for _, a := range args[1:] {
			script += " '" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd = []any{"sh", "-c", script}
	default:
		cmd = []any{"mpirun", "--hostfile", "/etc/mpi/hostfile"}
		for _, a := range args[1:] {
			cmd = append(cmd, a)
		}
	}
	setNested(t, tj, cmd, "spec", "trainer", "command")
}

// buildOpenSSHImage builds the OpenSSH baseline on podman's copy of
// podmpi's image of mpi and pushes it into the cluster's registry, where
// the node pulls it from.
func buildOpenSSHImage(t *testing.T, mpi string) string {
	t.Helper()
	base := cluster.PodmpiImage(mpi, e.info.ImageTag)
	ref := cluster.RegistryImage(mpi+"-openssh", e.info.ImageTag)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(fmt.Sprintf(openSSHContainerfile, base)), 0o644); err != nil {
		t.Fatal(err)
	}
	pm := []string{"--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file"}
	cmd := exec.Command("podman", append(pm, "build", "--network=host", "-t", ref, "-f", filepath.Join(dir, "Containerfile"), dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the OpenSSH baseline image: %v\n%s", err, lastLines(string(out), 30))
	}
	start := time.Now()
	if out, err := exec.Command("podman", append(pm, "push", "-q", "--tls-verify=false", ref)...).CombinedOutput(); err != nil {
		t.Fatalf("pushing %s to the cluster's registry: %v\n%s", ref, err, lastLines(string(out), 30))
	}
	t.Logf("pushed %s in %s", ref, time.Since(start).Round(100*time.Millisecond))
	return ref
}

func benchOnce(t *testing.T, ns, mpi, runtime string, nodes, procs int, env []any) benchSample {
	t.Helper()
	ctx := ctxT(t, 6*time.Minute)
	tj := trainJob(t, "podmpi-"+mpi)
	setNested(t, tj, int64(nodes), "spec", "trainer", "numNodes")
	setNested(t, tj, int64(procs), "spec", "trainer", "numProcPerNode")
	if len(env) > 0 {
		old, _, _ := unstructured.NestedSlice(tj.Object, "spec", "trainer", "env")
		setNested(t, tj, append(old, env...), "spec", "trainer", "env")
	}
	// Every pod on the one 2-core node: past 12 node pods, 100m each would
	// not fit its allocatable CPU, and past 22 the example's 1Gi would not
	// fit its memory (the ranks use a few MB each).
	setNested(t, tj, fmt.Sprintf("%dm", min(100, 1200/nodes)), "spec", "trainer", "resourcesPerNode", "requests", "cpu")
	mem := fmt.Sprintf("%dMi", min(1024, 16384/nodes))
	setNested(t, tj, mem, "spec", "trainer", "resourcesPerNode", "requests", "memory")
	setNested(t, tj, mem, "spec", "trainer", "resourcesPerNode", "limits", "memory")
	if runtime == "openssh" {
		openSSHTrainJob(t, tj, mpi)
	}
	s := benchSample{MPI: mpi, Runtime: runtime, Nodes: nodes, Procs: procs, Phases: map[string]float64{}}
	created := time.Now()
	apply(t, ns, tj)
	sel := "jobset.sigs.k8s.io/jobset-name=" + tj.GetName()
	var allRunning time.Time
	for {
		if time.Since(created) > 5*time.Minute {
			return benchFailed(t, ns, tj.GetName(), s, "not Complete after 5 minutes")
		}
		if allRunning.IsZero() {
			pods, err := podsWith(ctx, ns, sel)
			if err == nil && len(pods) == nodes && allStarted(pods) {
				allRunning = time.Now()
			}
		}
		o, err := getObj(ctx, trainJobGVR, ns, tj.GetName())
		if err == nil {
			if st, _ := condition(o, "Complete"); st == "True" {
				break
			}
			if st, msg := condition(o, "Failed"); st == "True" {
				return benchFailed(t, ns, tj.GetName(), s, "Failed: "+msg)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	complete := time.Now()
	if allRunning.IsZero() {
		allRunning = complete // pods came and went between two polls
	}
	launchers, err := podsWith(ctx, ns, sel+","+launcherSel)
	if err != nil || len(launchers) != 1 {
		t.Fatalf("launcher pods: %v (%d)", err, len(launchers))
	}
	log := podLogs(ctx, ns, launchers[0].Name, true)
	checkRanks(t, stripTimestamps(log), procs*nodes)
	var first time.Time
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ts, line, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		if first.IsZero() {
			first = at
		}
		if s.MPIInit == 0 && rankLine.MatchString(line) {
			s.MPIInit = at.Sub(created).Seconds()
		}
		var j struct {
			Msg         string  `json:"msg"`
			Phase       string  `json:"phase"`
			Seconds     float64 `json:"seconds"`
			InitSeconds float64 `json:"init_seconds"`
		}
		if json.Unmarshal([]byte(line), &j) == nil {
			switch j.Msg {
			case "phase done":
				s.Phases[j.Phase] = j.Seconds
			case "running":
				s.InitDone = j.InitSeconds
			}
		}
	}
	if runtime == "openssh" && len(s.Phases) > 0 {
		t.Fatalf("the OpenSSH baseline ran podmpi's launcher (phases %v): its image must not have podmpi on PATH", s.Phases)
	}
	s.AllRunning = allRunning.Sub(created).Seconds()
	s.Complete = complete.Sub(created).Seconds()
	return s
}

// benchFailed records why a run did not complete, with the last lines of its
// launcher's log, and deletes its TrainJob, waiting (bounded) for its pods to
// go so that the next run has the node to itself.
func benchFailed(t *testing.T, ns, name string, s benchSample, why string) benchSample {
	t.Helper()
	ctx := ctxT(t, 4*time.Minute)
	sel := "jobset.sigs.k8s.io/jobset-name=" + name
	if ls, err := podsWith(ctx, ns, sel+","+launcherSel); err == nil && len(ls) > 0 {
		why += "; launcher log, its last lines other than podmpi's INFO:\n" + lastLines(notInfo(podLogs(ctx, ns, ls[0].Name, false)), 15)
	}
	s.Failed = "TrainJob " + name + " " + why
	policy := metav1.DeletePropagationForeground
	if err := e.dyn.Resource(trainJobGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil && !isNotFound(err) {
		t.Fatalf("deleting the failed TrainJob %s: %v", name, err)
	}
	// Deleted in the foreground, the TrainJob goes only after its JobSet,
	// Jobs and pods; until then a Job may still replace a pod that ended.
	waitFor(t, 3*time.Minute, "the failed TrainJob "+name+" and its pods gone", func() (bool, error) {
		if _, err := getObj(ctx, trainJobGVR, ns, name); !isNotFound(err) {
			return false, err
		}
		pods, err := podsWith(ctx, ns, sel)
		return err == nil && len(pods) == 0, err
	})
	return s
}

// notInfo drops podmpi's INFO lines from log (a worker-agent answering
// again, say), which would otherwise hide the MPI library's own errors.
func notInfo(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `"level":"INFO"`) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func allStarted(pods []corev1.Pod) bool {
	for _, p := range pods {
		if len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		st := p.Status.ContainerStatuses[0].State
		if st.Running == nil && st.Terminated == nil {
			return false
		}
	}
	return true
}

func stripTimestamps(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if _, rest, ok := strings.Cut(l, " "); ok {
			b.WriteString(rest)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchReport renders the medians as the tables of BENCHMARKS.md, one row
// per MPI, node count and runtime measured.
func benchReport(samples []benchSample) string {
	type key struct {
		mpi          string
		nodes, procs int
	}
	var keys []key
	for _, s := range samples {
		if k := (key{s.MPI, s.Nodes, s.Procs}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		if a.mpi != b.mpi {
			return strings.Compare(b.mpi, a.mpi) // openmpi first
		}
		if a.nodes != b.nodes {
			return a.nodes - b.nodes
		}
		return a.procs - b.procs
	})
	// nodes is the node pod count, and the ranks per pod where they are
	// not the example TrainJob's 2.
	nodes := func(k key) string {
		if k.procs == 0 || k.procs == 2 {
			return strconv.Itoa(k.nodes)
		}
		return fmt.Sprintf("%d (%d per pod)", k.nodes, k.procs)
	}
	// pick returns the runs of k under rt that completed, and how many did not.
	pick := func(k key, rt string) (ok []benchSample, failed int) {
		for _, s := range samples {
			if (key{s.MPI, s.Nodes, s.Procs}) == k && s.Runtime == rt {
				if s.Failed != "" {
					failed++
				} else {
					ok = append(ok, s)
				}
			}
		}
		return ok, failed
	}
	of := func(ss []benchSample, f func(benchSample) float64) float64 {
		var xs []float64
		for _, s := range ss {
			xs = append(xs, f(s))
		}
		return median(xs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| MPI | nodes | runtime | runs | all pods Running | first rank past MPI_Init | TrainJob Complete |\n|---|---|---|---|---|---|---|\n")
	for _, k := range keys {
		for _, rt := range []string{"podmpi", "openssh"} {
			ss, failed := pick(k, rt)
			runs := strconv.Itoa(len(ss))
			if failed > 0 {
				runs += fmt.Sprintf(" (%d failed)", failed)
			}
			if len(ss) == 0 {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | | | |\n", k.mpi, nodes(k), rt, runs)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f s | %.1f s | %.1f s |\n", k.mpi, nodes(k), rt, runs,
				of(ss, func(s benchSample) float64 { return s.AllRunning }), of(ss, func(s benchSample) float64 { return s.MPIInit }),
				of(ss, func(s benchSample) float64 { return s.Complete }))
		}
	}
	fmt.Fprintf(&b, "\n| MPI | nodes | podmpi / OpenSSH, create to Complete |\n|---|---|---|\n")
	for _, k := range keys {
		complete := func(s benchSample) float64 { return s.Complete }
		pOK, pFailed := pick(k, "podmpi")
		oOK, oFailed := pick(k, "openssh")
		if len(pOK) == 0 || len(oOK) == 0 {
			fmt.Fprintf(&b, "| %s | %s | no ratio: podmpi %d of %d completed, OpenSSH %d of %d |\n", k.mpi, nodes(k),
				len(pOK), len(pOK)+pFailed, len(oOK), len(oOK)+oFailed)
			continue
		}
		p, o := of(pOK, complete), of(oOK, complete)
		fmt.Fprintf(&b, "| %s | %s | %.2fx (%.1f s vs %.1f s) |\n", k.mpi, nodes(k), p/o, p, o)
	}
	fmt.Fprintf(&b, "\n| MPI | nodes | launcher start to mpirun | discovery | dns-wait | slots | hostfile | probe | mpirun |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range keys {
		ss, _ := pick(k, "podmpi")
		if len(ss) == 0 {
			continue
		}
		ph := func(name string) float64 { return of(ss, func(s benchSample) float64 { return s.Phases[name] }) }
		fmt.Fprintf(&b, "| %s | %s | %.2f s | %.3f s | %.3f s | %.3f s | %.3f s | %.3f s | %.2f s |\n", k.mpi, nodes(k),
			of(ss, func(s benchSample) float64 { return s.InitDone }),
			ph("discovery"), ph("dns-wait"), ph("slots"), ph("hostfile"), ph("probe"), ph("mpirun"))
	}
	header := "\nFailed runs:\n"
	for _, s := range samples {
		if s.Failed == "" {
			continue
		}
		b.WriteString(header)
		header = ""
		fmt.Fprintf(&b, "- %s %s nodes %s rep %d: %s\n", s.MPI, nodes(key{s.MPI, s.Nodes, s.Procs}), s.Runtime, s.Rep, s.Failed)
	}
	return b.String()
}

var _ = context.Background

// TestBenchReport: every MPI and node count measured gets its rows, Open
// MPI first, sizes in order.
func TestBenchReport(t *testing.T) {
	var samples []benchSample
	for _, mpi := range []string{"mpich", "openmpi"} {
		for _, n := range []int{32, 2} {
			for _, rt := range []string{"podmpi", "openssh"} {
				c := float64(n)
				if rt == "openssh" {
					c *= 2
				}
				samples = append(samples, benchSample{MPI: mpi, Runtime: rt, Nodes: n, Complete: c, InitDone: 0.5,
					Phases: map[string]float64{"probe": 0.01}})
			}
		}
	}
	// A failed run is named, left out of the medians, and takes the ratio
	// away when no run of its runtime completed.
	samples = append(samples,
		benchSample{MPI: "openmpi", Runtime: "podmpi", Nodes: 2, Rep: 1, Complete: 999, Failed: "TrainJob x Failed: boom"},
		benchSample{MPI: "mpich", Runtime: "podmpi", Nodes: 64, Failed: "TrainJob y not Complete after 5 minutes"},
		benchSample{MPI: "mpich", Runtime: "openssh", Nodes: 64, Complete: 50},
		// One rank per pod is its own row, and says so.
		benchSample{MPI: "mpich", Runtime: "podmpi", Nodes: 32, Procs: 1, Complete: 10},
		benchSample{MPI: "mpich", Runtime: "openssh", Nodes: 32, Procs: 1, Complete: 40})
	got := benchReport(samples)
	var order []int
	for _, want := range []string{
		"| openmpi | 2 | podmpi | 1 (1 failed) | 0.0 s | 0.0 s | 2.0 s |",
		"| openmpi | 32 | openssh | 1 | 0.0 s | 0.0 s | 64.0 s |",
		"| mpich | 2 | podmpi |",
		"| mpich | 32 | 0.50x (32.0 s vs 64.0 s) |",
		"| openmpi | 32 | 0.50 s | 0.000 s | 0.000 s | 0.000 s | 0.000 s | 0.010 s | 0.00 s |",
		"| mpich | 64 | podmpi | 0 (1 failed) | | | |",
		"| mpich | 64 | openssh | 1 | 0.0 s | 0.0 s | 50.0 s |",
		"| openmpi | 2 | 0.50x (2.0 s vs 4.0 s) |",
		"| mpich | 64 | no ratio: podmpi 0 of 1 completed, OpenSSH 1 of 1 |",
		"| mpich | 32 (1 per pod) | 0.25x (10.0 s vs 40.0 s) |",
		"\nFailed runs:\n- openmpi 2 nodes podmpi rep 1: TrainJob x Failed: boom\n- mpich 64 nodes podmpi rep 0: TrainJob y not Complete",
	} {
		i := strings.Index(got, want)
		if i < 0 {
			t.Fatalf("report lacks %q:\n%s", want, got)
		}
		order = append(order, i)
	}
	if !(order[0] < order[1] && order[1] < order[2]) {
		t.Fatalf("rows out of order:\n%s", got)
	}
}

// TestNotInfo: a failed run's launcher lines keep the MPI library's errors
// and podmpi's warnings, not its INFO lines.
func TestNotInfo(t *testing.T) {
	log := `{"level":"INFO","msg":"a worker-agent answers again"}
[x] UCX  ERROR connect failed: Connection refused
{"level":"WARN","msg":"a worker-agent stopped answering"}
{"level":"INFO","msg":"running"}`
	got := notInfo(log)
	if strings.Contains(got, "INFO") || !strings.Contains(got, "UCX  ERROR") || !strings.Contains(got, `"level":"WARN"`) {
		t.Fatalf("notInfo kept the wrong lines:\n%s", got)
	}
}
