package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/cluster"
)

// The Kubeflow Python SDK, the real one from PyPI (the version pinned in
// testdata/sdk/requirements.txt), driving podmpi's runtimes on this
// cluster: testdata/sdk/trainjob.py makes the calls a user makes and
// prints what they returned, run with the venv of scripts/sdk-venv.sh and
// the cluster's kubeconfig.

// sdkDriver is the Python script the SDK tests run, relative to the
// repository.
const sdkDriver = "test/cluster/e2e/testdata/sdk/trainjob.py"

var (
	sdkOnce   sync.Once
	sdkPy     string
	sdkPyErr  error
	sdkPyTook time.Duration
)

// sdkPython is the python of the SDK's venv: scripts/sdk-venv.sh builds it
// once per machine (PyPI, about 25 MB) and later finds it in its cache.
func sdkPython(t *testing.T) string {
	t.Helper()
	sdkOnce.Do(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoDir(), "scripts", "sdk-venv.sh"))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			sdkPyErr = fmt.Errorf("scripts/sdk-venv.sh: %w: %s%s", err, errb.String(), out.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		sdkPy, sdkPyTook = lines[len(lines)-1], time.Since(start)
	})
	if sdkPyErr != nil {
		t.Fatal(sdkPyErr)
	}
	return sdkPy
}

// repoDir is the repository, with or without a cluster (setup finds it
// only with one).
func repoDir() string {
	if e.repo != "" {
		return e.repo
	}
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", "..", ".."))
}

// sdkResult is what testdata/sdk/trainjob.py prints.
type sdkResult struct {
	RuntimeTrainer struct {
		Framework   string   `json:"framework"`
		Command     []string `json:"command"`
		Image       string   `json:"image"`
		Device      string   `json:"device"`
		DeviceCount string   `json:"device_count"`
	} `json:"runtime_trainer"`
	Job         string  `json:"job"`
	Seconds     float64 `json:"seconds"`
	WaitedUntil float64 `json:"waited_until"` // Unix time when wait_for_job_status returned (this machine's clock)
	Status      string  `json:"status"`
	Steps       []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Pod    string `json:"pod"`
	} `json:"steps"`
	Logs   []string   `json:"logs"`
	Events []sdkEvent `json:"events"`
	Error  []string   `json:"error"`
}

// sdkEvent is one Event as the SDK's get_job_events returns it: no type
// and no source, only what it is about, the reason and the message.
type sdkEvent struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// runSDK runs the driver in namespace ns with args and returns what it
// printed; a call the SDK raised on fails the test, with its traceback.
func runSDK(t *testing.T, ns string, timeout time.Duration, args ...string) sdkResult {
	t.Helper()
	py := sdkPython(t)
	ctx := ctxT(t, timeout)
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(e.repo, sdkDriver), "--namespace", ns}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.info.Kubeconfig, "PYTHONDONTWRITEBYTECODE=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	runErr := cmd.Run()
	var r sdkResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%s %s: %v (%v); stdout:\n%s\nstderr:\n%s", sdkDriver, strings.Join(args, " "), runErr, err, out.String(), lastLines(errb.String(), 30))
	}
	if len(r.Error) > 0 || runErr != nil {
		t.Errorf("the Kubeflow SDK raised (%v):\n%s\nstderr:\n%s", runErr, strings.Join(r.Error, "\n"), lastLines(errb.String(), 30))
	}
	t.Logf("%s %s: %s in %s", filepath.Base(sdkDriver), strings.Join(args, " "), r.Status, time.Since(start).Round(100*time.Millisecond))
	return r
}

// TestSDKReadsRuntimes: the Kubeflow Python SDK takes every podmpi runtime
// of deploy/runtimes (Intel MPI's too, whether or not this cluster has its
// image) for an MPI runtime of podmpi's framework, and the command it would
// give a CustomTrainer's TrainJob runs the function: the driver reads each
// file with the functions get_runtime and train call, and the Go test runs
// the command's script as one rank would (python on PATH, the SDK's home in
// a temporary folder). No cluster needed; root for the venv's cache. The
// runtimes' memory-only limits once made the SDK raise here.
func TestSDKReadsRuntimes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (scripts/sdk-venv.sh caches the SDK in /var/cache/podmpi)")
	}
	py := sdkPython(t)
	repo := repoDir()
	files, err := filepath.Glob(filepath.Join(repo, "deploy", "runtimes", "clustertrainingruntime-*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no runtimes in deploy/runtimes (%v)", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "clustertrainingruntime-"), ".yaml"), func(t *testing.T) {
			home := t.TempDir()
			ctx := ctxT(t, 2*time.Minute)
			cmd := exec.CommandContext(ctx, py, filepath.Join(repo, sdkDriver), "--render", f)
			cmd.Env = append(os.Environ(), "DEFAULT_MPI_USER_HOME="+home, "PYTHONDONTWRITEBYTECODE=1")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			runErr := cmd.Run()
			var r struct {
				sdkResult
				Command []string `json:"trainjob_command"`
			}
			if err := json.Unmarshal(out.Bytes(), &r); err != nil || runErr != nil || len(r.Error) > 0 {
				t.Fatalf("the SDK on %s: %v %v\n%s\nstderr:\n%s", filepath.Base(f), runErr, err, strings.Join(r.Error, "\n"), lastLines(errb.String(), 20))
			}
			rt := "podmpi-" + strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "clustertrainingruntime-"), ".yaml")
			checkSDKRuntime(t, r.sdkResult, rt)
			if len(r.Command) != 6 || r.Command[3] != "bash" || r.Command[4] != "-c" {
				t.Fatalf("the SDK's TrainJob command %q, want mpirun --hostfile /etc/mpi/hostfile bash -c <script>", r.Command)
			}
			// One rank of it, here: the script writes the function into the
			// SDK's home and runs python on it.
			rank := exec.CommandContext(ctx, "bash", "-c", r.Command[5])
			rank.Env = []string{"PATH=" + filepath.Dir(py) + ":/usr/bin:/bin", "PMI_RANK=1", "PMI_SIZE=3", "PODMPI_SDK_PROBE=rendered"}
			b, err := rank.CombinedOutput()
			host, _ := os.Hostname()
			if want := fmt.Sprintf("sdk-rank 1 of 3 on %s: PODMPI_SDK_PROBE=rendered", host); err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("the SDK's script as rank 1: %v, output %q, want %q", err, b, want)
			}
		})
	}
}

// sdkRankLine is one rank's line of the driver's functions.
var sdkRankLine = regexp.MustCompile(`^sdk-rank (\d+) of (\d+) on (\S+)(?:: PODMPI_SDK_PROBE=(.*))?$`)

// sdkRanks are the ranks' lines in logs: host by rank, and each rank's
// PODMPI_SDK_PROBE.
func sdkRanks(logs []string) (hosts, probes map[string]string) {
	hosts, probes = map[string]string{}, map[string]string{}
	for _, l := range logs {
		if m := sdkRankLine.FindStringSubmatch(l); m != nil {
			hosts[m[1]], probes[m[1]] = m[3], m[4]
		}
	}
	return hosts, probes
}

// sdkRuntimes are the podmpi runtimes the SDK tests drive, by MPI: each
// runs when this cluster has its image and make cluster-up installs its
// runtime (cluster.RuntimeFiles); today Intel MPI's image is built only
// where its runtime is listed there too.
var sdkRuntimes = []string{"openmpi", "mpich", "intelmpi"}

// sdkNodes is the TrainJobs' numNodes: the launcher (a node too, with
// runLauncherAsNode) and two node pods, one rank each (the runtimes'
// numProcPerNode).
const sdkNodes = 3

// TestSDK: the Kubeflow Python SDK's TrainerClient on each podmpi runtime,
// as its users call it. get_runtime reads the runtime (the SDK refused the
// runtimes while their containers had a memory-only limit); train with a
// CustomTrainer, whose command the SDK writes itself (mpirun --hostfile
// /etc/mpi/hostfile bash -c '<function>', no "launcher --": the image's
// mpirun is podmpi's and runs the launcher's phases); wait_for_job_status
// until Complete; get_job_logs shows every rank's line. The TrainJob's
// trainer.env (CustomTrainer env) reaches the ranks on the node pods too,
// which OpenSSH's sshd does not let through (kubeflow/trainer#3427).
// Then a function that fails on one rank: Failed within 2 minutes of the
// launcher's start, and get_job_events holds podmpi's Warning naming the
// rank, its host and the cause.
func TestSDK(t *testing.T) {
	need(t)
	sdkPython(t)
	t.Logf("the SDK's venv ready in %s", sdkPyTook.Round(100*time.Millisecond))
	installRuntimes(t, nil)
	ns := namespace(t, "sdk", true)
	applyRBAC(t, ns)
	for _, mpi := range sdkRuntimes {
		t.Run(mpi, func(t *testing.T) {
			rt := sdkRuntime(t, mpi)
			probe := "trainer-env-" + randSuffix()
			r := runSDK(t, ns, 6*time.Minute, "--runtime", rt, "--function", "ranks",
				"--num-nodes", fmt.Sprint(sdkNodes), "--env", "PODMPI_SDK_PROBE="+probe, "--timeout", "300")
			if r.Status != "Complete" {
				t.Fatalf("TrainJob %s: %q after %.0f s, want Complete; steps %+v; launcher log (get_job_logs):\n%s", r.Job, r.Status, r.Seconds, r.Steps, lastLines(strings.Join(r.Logs, "\n"), 40))
			}
			checkSDKRuntime(t, r, rt)
			hosts, probes := sdkRanks(r.Logs)
			if len(hosts) != sdkNodes {
				t.Errorf("get_job_logs shows %d ranks (%v), want %d:\n%s", len(hosts), hosts, sdkNodes, lastLines(strings.Join(r.Logs, "\n"), 40))
			}
			onNodes := 0
			for rank, host := range hosts {
				if probes[rank] != probe {
					t.Errorf("rank %s on %s sees PODMPI_SDK_PROBE=%q, want the TrainJob's %q (trainer.env must reach every rank)", rank, host, probes[rank], probe)
				}
				if strings.HasPrefix(host, r.Job+"-node-") {
					onNodes++
				}
			}
			if onNodes != sdkNodes-1 {
				t.Errorf("%d ranks on node pods (hosts %v), want %d: the env check needs ranks outside the launcher pod", onNodes, hosts, sdkNodes-1)
			}
			if phases := launcherPhases(strings.Join(r.Logs, "\n")); phases == "" {
				t.Errorf("the launcher's log (get_job_logs) has no podmpi phase: the SDK's mpirun was not podmpi's")
			} else {
				t.Logf("TrainJob %s: Complete %.0f s after train(); ranks on %v; launcher %s", r.Job, r.Seconds, hosts, phases)
			}
		})
	}
	t.Run("rank-fails", func(t *testing.T) {
		r := runSDK(t, ns, 6*time.Minute, "--runtime", "podmpi-openmpi", "--function", "fail-rank-1",
			"--num-nodes", fmt.Sprint(sdkNodes), "--timeout", "300")
		if r.Status != "Failed" {
			t.Fatalf("TrainJob %s whose rank 1 exits 7: %q, want Failed; launcher log:\n%s", r.Job, r.Status, lastLines(strings.Join(r.Logs, "\n"), 40))
		}
		launchers, err := podsWith(ctxT(t, time.Minute), ns, "jobset.sigs.k8s.io/jobset-name="+r.Job+","+launcherSel)
		if err != nil {
			t.Fatal(err)
		}
		started := launcherStart(trainJobResult{launchers: launchers})
		failed := time.Unix(0, int64(r.WaitedUntil*1e9))
		if d := failed.Sub(started); started.IsZero() || d > 2*time.Minute {
			t.Errorf("TrainJob %s seen Failed %s after its launcher started (at %s), want within 2 minutes", r.Job, d.Round(time.Second), started)
		}
		hosts, _ := sdkRanks(r.Logs)
		host := hosts["1"]
		if host == "" {
			t.Fatalf("get_job_logs has no line of rank 1:\n%s", lastLines(strings.Join(r.Logs, "\n"), 40))
		}
		// The Warning podmpi recorded on the TrainJob, as the SDK returns it.
		want := []string{"rank 1", host, "exited with status 7"}
		var seen []string
		for _, ev := range r.Events {
			seen = append(seen, ev.Kind+"/"+ev.Name+" "+ev.Reason+": "+ev.Message)
			if ev.Kind == "TrainJob" && ev.Name == r.Job && ev.Reason == "RankFailed" && containsAll(ev.Message, want) {
				t.Logf("Failed %s after the launcher started; get_job_events: %s: %s", failed.Sub(started).Round(time.Second), ev.Reason, ev.Message)
				return
			}
		}
		t.Errorf("get_job_events(%s) has no RankFailed on the TrainJob naming %q; it returned:\n%s", r.Job, want, strings.Join(seen, "\n"))
	})
}

// sdkRuntime is the podmpi runtime of mpi, skipping the test when this
// cluster does not have it.
func sdkRuntime(t *testing.T, mpi string) string {
	t.Helper()
	if e.info.Images[mpi] == "" || cluster.RuntimeFiles[mpi] == "" {
		t.Skipf("no podmpi-%s runtime on this cluster (images %v; make cluster-up installs the runtimes of %v)", mpi, e.info.Images, slices.Sorted(maps.Keys(cluster.RuntimeFiles)))
	}
	return "podmpi-" + mpi
}

// checkSDKRuntime: the SDK took the runtime for what it is, an MPI runtime
// (mlPolicy.mpi: its command starts with mpirun and the hostfile Trainer
// mounts) of podmpi's framework label, with the image the cluster runs.
func checkSDKRuntime(t *testing.T, r sdkResult, rt string) {
	t.Helper()
	rtr := r.RuntimeTrainer
	if len(rtr.Command) < 3 || !slices.Equal(rtr.Command[:3], []string{"mpirun", "--hostfile", "/etc/mpi/hostfile"}) {
		t.Errorf("the SDK's command for %s is %q, want mpirun --hostfile /etc/mpi/hostfile ... (an MPI runtime)", rt, rtr.Command)
	}
	if rtr.Framework != rt {
		t.Errorf("the SDK reads framework %q from %s, want its trainer.kubeflow.org/framework label %q", rtr.Framework, rt, rt)
	}
}
