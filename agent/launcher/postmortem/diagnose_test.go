package postmortem

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/mpi"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

const (
	hostA = "dg-node-0-0.dg"
	hostB = "dg-node-0-1.dg"
)

func limitMem(atLimit bool, limit, usage uint64) *api.Memory {
	return &api.Memory{Cgroup: "/sys/fs/cgroup/memory/x", Version: 1, LimitBytes: limit, UsageBytes: usage, PeakBytes: limit, OOMKills: 1, AtLimit: atLimit}
}

func answered(host string, evs ...api.Event) Worker {
	return Worker{Host: host, Events: &api.Events{Hostname: host, Events: evs}}
}

func rankExit(s int, rank, pid int, sig string, code int) api.Event {
	return api.Event{Time: at(s), Kind: api.KindRankExit, Rank: rank, PID: pid, Comm: "train", Signal: sig, ExitCode: code}
}

func wantRoot(t *testing.T, d Diagnosis, cause string, contains ...string) {
	t.Helper()
	if d.Cause() != cause {
		t.Fatalf("cause = %s, want %s; summary: %s\nothers: %v", d.Cause(), cause, d.Summary(), d.Lines())
	}
	for _, c := range contains {
		if !strings.Contains(d.Summary(), c) {
			t.Errorf("summary lacks %q:\n%s", c, d.Summary())
		}
	}
	if strings.Contains(d.Summary(), "\n") {
		t.Errorf("summary spans lines: %q", d.Summary())
	}
}

func TestOOMBeatsTheSIGKILLItCaused(t *testing.T) {
	d := Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 137},
		Workers: []Worker{
			answered(hostA, rankExit(3, 0, 100, "", -1), rankExit(3, 1, 101, "", -1)),
			answered(hostB,
				api.Event{Time: at(1), Kind: api.KindOOMKill, Rank: 3, PID: 200, Comm: "train", RSSBytes: 180 << 20, Signal: "SIGKILL", ExitCode: -1,
					Memory: limitMem(true, 200<<20, 199<<20)},
				rankExit(2, 2, 201, "", -1)),
		},
		Reports: []Report{
			{Time: at(2), Kind: ReportSignal, Rank: 3, Host: "dg-node-0-1", Signal: 9, ExitCode: -1},
			{Time: at(3), Kind: ReportSignal, Rank: 2, Host: "dg-node-0-1", Signal: 15, ExitCode: -1},
		},
	})
	wantRoot(t, d, CauseOOM, "OOM: rank 3 on dg-node-0-1.dg", "memory limit of 200 MiB", "raise resources.limits.memory", "180 MiB")
	for _, l := range d.Lines() {
		if strings.Contains(l, "rank 3") {
			t.Errorf("the SIGKILL of rank 3 is listed as another failure: %s", l)
		}
	}
	if d.Root.PID != 200 || d.Root.Host != hostB {
		t.Errorf("root = %+v", *d.Root)
	}
}

func TestOOMWithoutRankTakesItFromMPIRun(t *testing.T) {
	d := Decide(Input{
		Workers: []Worker{answered(hostB, api.Event{Time: at(1), Kind: api.KindOOMKill, Rank: -1, ExitCode: -1, Memory: limitMem(true, 1<<30, 1<<30)})},
		Reports: []Report{{Time: at(2), Kind: ReportSignal, Rank: 5, Host: "dg-node-0-1", Signal: 9, ExitCode: -1}},
	})
	wantRoot(t, d, CauseOOM, "OOM: rank 5 on "+hostB, "1 GiB")
	if len(d.Others) != 0 {
		t.Errorf("others = %v; the SIGKILL is the OOM kill itself", d.Lines())
	}
}

func TestOOMNodeAndNoLimit(t *testing.T) {
	d := Decide(Input{Workers: []Worker{answered(hostA, api.Event{Time: at(1), Kind: api.KindOOMKill, Rank: 0, PID: 9, ExitCode: -1,
		Memory: limitMem(false, 8<<30, 1<<30)})}})
	wantRoot(t, d, CauseOOM, "below its memory limit of 8 GiB", "the node ran out of memory", "overcommitted", "requests are below what they use",
		"Guaranteed QoS")
	// The peak at the limit (limitMem's) is a lifetime figure: without the
	// agent's evidence of this kill at the limit, raising it is no fix.
	if s := d.Summary(); strings.Contains(s, "raise") || strings.Contains(s, "at its container's memory limit") {
		t.Errorf("a node-level OOM kill is blamed on the limit: %s", s)
	}
	d = Decide(Input{Workers: []Worker{answered(hostA, api.Event{Time: at(1), Kind: api.KindOOMKill, Rank: -1, ExitCode: -1,
		Memory: &api.Memory{Version: 2}})}})
	wantRoot(t, d, CauseOOM, "a process on "+hostA+" (rank unknown)", "no memory limit", "resources.requests.memory")
}

func TestCrashFromOpenMPIReport(t *testing.T) {
	d := Decide(Input{
		Outcome: Outcome{Program: "mpirun.openmpi", ExitCode: 139},
		Workers: []Worker{answered(hostA, rankExit(4, 1, 300, "", -1)), answered(hostB)},
		Reports: []Report{{Time: at(5), Kind: ReportSignal, Rank: 1, PID: 0, Host: "dg-node-0-0", Signal: 11, ExitCode: -1}},
	})
	wantRoot(t, d, CauseCrash, "rank 1 on "+hostA, "SIGSEGV, segmentation fault", "core dump")
	if d.Root.PID != 300 || d.Root.comm != "train" {
		t.Errorf("the agent's pid and command were not merged in: %+v", *d.Root)
	}
}

func TestCrashFromHydraMatchedByPID(t *testing.T) {
	d := Decide(Input{
		Workers: []Worker{answered(hostB, rankExit(4, 3, 5711, "", -1), rankExit(4, 2, 5710, "", -1))},
		Reports: []Report{{Time: at(5), Kind: ReportSignal, Rank: -1, PID: 5711, Host: hostB, Signal: 11, ExitCode: -1}},
	})
	wantRoot(t, d, CauseCrash, "rank 3 on "+hostB, "SIGSEGV")
}

func TestCrashSeenByTheAgentWithCore(t *testing.T) {
	d := Decide(Input{Workers: []Worker{answered(hostA, rankExit(4, 0, 1, "SIGBUS", -1))}})
	wantRoot(t, d, CauseCrash, "SIGBUS", "/dev/shm")
	d = Decide(Input{Workers: []Worker{answered(hostA, api.Event{Time: at(1), Kind: api.KindRankExit, Rank: 0, PID: 1, Signal: "SIGABRT", CoreDumped: true, ExitCode: -1})}})
	wantRoot(t, d, CauseCrash, "SIGABRT", "core dumped", "NCCL")
}

func TestFirstCrashBeatsTheAbortsThatFollow(t *testing.T) {
	d := Decide(Input{
		Workers: []Worker{answered(hostA), answered(hostB)},
		Reports: []Report{
			{Time: at(9), Kind: ReportSignal, Rank: 2, Host: hostB, Signal: 6, ExitCode: -1},
			{Time: at(5), Kind: ReportSignal, Rank: 0, Host: hostA, Signal: 11, ExitCode: -1},
			{Time: at(9), Kind: ReportSignal, Rank: 1, Host: hostA, Signal: 15, ExitCode: -1},
		},
	})
	wantRoot(t, d, CauseCrash, "rank 0 on "+hostA, "SIGSEGV")
	if len(d.Others) != 2 || !strings.Contains(d.Others[0].Sentence, "SIGABRT") {
		t.Errorf("others = %v; want the abort, then the SIGTERM", d.Lines())
	}
}

func TestGoneWorker(t *testing.T) {
	d := Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 1, WebPort: 9022},
		Workers: []Worker{
			answered(hostA, api.Event{Time: at(3), Kind: api.KindSessionExit, Rank: -1, ExitCode: 1, Message: "ssh session c1/s1 (orted) exited with status 1"}),
			{Host: hostB, Err: errors.New("dial tcp 10.0.0.3:9022: connect: connection refused"), LostAt: at(2)},
		},
		Reports: []Report{{Time: at(3), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}},
	})
	// A refused connection is no proof that the pod is gone: the worker
	// is named for what was seen.
	wantRoot(t, d, CauseUnreachable, "worker "+hostB+" did not answer", "port 9022", "connection refused", "05:06:09 UTC",
		"may have been deleted or restarted, or the network to it is cut", "kubectl describe pod", "NetworkPolicy")
	if d.Silent != 1 || d.Answered != 1 {
		t.Errorf("answered %d, silent %d", d.Answered, d.Silent)
	}
	// Its name gone from DNS is named, and still no proof: a pod that is
	// only not Ready leaves a headless Service without
	// publishNotReadyAddresses too.
	d = Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 1, WebPort: 9022},
		Workers: []Worker{answered(hostA), {Host: hostB, Err: &net.DNSError{Err: "no such host", Name: hostB, IsNotFound: true}, LostAt: at(2), NameGone: true}},
		Reports: []Report{{Time: at(3), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}},
	})
	wantRoot(t, d, CauseUnreachable, "worker "+hostB+" did not answer and its name is missing from DNS", "no such host",
		"deleted, or is not Ready and cut off", "kubectl describe pod", "05:06:09 UTC")
	// The Kubernetes API's word is proof: the pod was deleted.
	d = Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 1, WebPort: 9022},
		Workers: []Worker{answered(hostA), {Host: hostB, Err: &net.DNSError{Err: "no such host", Name: hostB, IsNotFound: true}, LostAt: at(2), NameGone: true,
			APIGone: "its pod dg-node-0-1-x no longer exists (deleted)"}},
		Reports: []Report{{Time: at(3), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}},
	})
	wantRoot(t, d, CauseGone, "worker "+hostB+" is gone: its pod dg-node-0-1-x no longer exists (deleted), as the Kubernetes API shows it", "kubectl get events", "05:06:09 UTC")
}

// TestReplacedWorker: another pod answers under the worker's name; what
// the first agent said (a session that ended as mpirun lost the daemon) is
// the cascade, the replaced pod the root cause.
func TestReplacedWorker(t *testing.T) {
	first := answered(hostB, api.Event{Time: at(4), Kind: api.KindSessionExit, Rank: -1, ExitCode: -1, Signal: "SIGTERM", Message: "ssh session c1/s1 (orted) ended by SIGTERM"})
	first.ReplacedAt = at(2)
	d := Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 205, WebPort: 9022},
		Workers: []Worker{answered(hostA), first},
		Reports: []Report{{Time: at(3), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}},
	})
	wantRoot(t, d, CauseGone, "worker "+hostB+" is gone: its pod was replaced while the job ran", "port 9022", "started at 05:06:09 UTC", "kubectl get events")
	if d.Silent != 1 || d.Answered != 1 {
		t.Errorf("answered %d, silent %d", d.Answered, d.Silent)
	}
}

func TestNoAccountIsNotGone(t *testing.T) {
	d := Decide(Input{Workers: []Worker{{Host: hostA, NoAccount: true}}})
	if d.Root != nil || d.Silent != 0 || d.Answered != 1 {
		t.Fatalf("diagnosis = %+v", d)
	}
	if !strings.Contains(d.Summary(), "root cause unknown") {
		t.Errorf("summary = %s", d.Summary())
	}
}

func TestLaunchFailure(t *testing.T) {
	d := Decide(Input{
		Outcome:  Outcome{Program: "mpiexec.hydra", LaunchStopped: true, ExitCode: 143},
		Workers:  []Worker{answered(hostA), {Host: hostB, Err: errors.New("connection refused")}},
		Launches: []rsh.FailureRecord{{Time: at(1), Host: hostB, Port: 2222, Phase: "tcp-refused", Cause: "dial tcp 10.0.0.3:2222: connect: connection refused", Hint: "nothing listens on port 2222", Daemon: "hydra_pmi_proxy", Launch: true}},
	})
	wantRoot(t, d, CauseLaunch, "podmpi-rsh could not start hydra_pmi_proxy on "+hostB+":2222: tcp-refused",
		"its worker-agent does not answer on port 0 either", "hint: nothing listens")
	if len(d.Others) != 0 || d.Silent != 1 {
		t.Errorf("others = %v, silent %d; want the silent agent folded into the launch failure", d.Lines(), d.Silent)
	}
}

// TestScriptSSHIsContext: the failure directory is in the environment of
// the whole command, so a job script's own ssh (git over ssh, a check of a
// worker) that fails leaves a record too. It happened first, but it is not
// mpirun's daemon launch: rank 1's SIGSEGV is the root cause, the record a
// line of context.
func TestScriptSSHIsContext(t *testing.T) {
	d := Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 139},
		Workers: []Worker{answered(hostA, rankExit(8, 1, 300, "SIGSEGV", -1)), answered(hostB)},
		Launches: []rsh.FailureRecord{{Time: at(1), Host: "git.example.com", Port: 22, Phase: "tcp-refused",
			Cause: "dial tcp 10.1.1.1:22: connect: connection refused", Hint: "nothing listens on port 22", Daemon: "git-upload-pack"}},
	})
	wantRoot(t, d, CauseCrash, "rank 1 on "+hostA, "SIGSEGV")
	if len(d.Others) != 1 || d.Others[0].Cause != CauseCascade ||
		!strings.Contains(d.Others[0].Sentence, "podmpi-rsh could not run git-upload-pack on git.example.com:22 (not an MPI daemon") {
		t.Errorf("others = %v; want the script's ssh as one line of context", d.Lines())
	}
	// Alone, it is still not the cause.
	d = Decide(Input{Workers: []Worker{answered(hostA)}, Launches: []rsh.FailureRecord{{Time: at(1), Host: hostA, Port: 2222,
		Phase: "tcp-refused", Cause: "refused", Daemon: "hostname"}}})
	if d.Root != nil || len(d.Others) != 1 {
		t.Errorf("root %+v, others %v; want no root cause and the record listed", d.Root, d.Lines())
	}
}

// TestSessionLostOnAGoneWorker: a worker deleted mid-job (the API says so)
// drops podmpi-rsh's session (a remote-command record) and its agent is
// silent: it is gone.
func TestSessionLostOnAGoneWorker(t *testing.T) {
	d := Decide(Input{
		Outcome: Outcome{WebPort: 9022},
		Workers: []Worker{answered(hostA), {Host: hostB, Err: errors.New("lookup: no such host"), NameGone: true, APIGone: "its pod dg-node-0-1-x no longer exists (deleted)"}},
		Launches: []rsh.FailureRecord{{Time: at(4), Host: hostB, Port: 2222, Phase: "remote-command", Daemon: "orted", Launch: true,
			Cause: "wait: remote command exited without exit status or exit signal", Hint: "the session ended without an exit status"}},
		Reports: []Report{{Time: at(5), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}},
	})
	wantRoot(t, d, CauseGone, "worker "+hostB+" is gone", "podmpi-rsh: remote-command: wait: remote command exited without exit status", "kubectl get events")
	for _, f := range d.Others {
		if f.Cause == CauseLaunch {
			t.Errorf("the lost session is listed on its own: %s", f.Sentence)
		}
	}
	// The same record on a worker that still answers stays what it is.
	d = Decide(Input{Workers: []Worker{answered(hostB)}, Launches: []rsh.FailureRecord{{Time: at(4), Host: hostB, Port: 2222,
		Phase: "remote-command", Daemon: "orted", Launch: true, Cause: "x"}}})
	wantRoot(t, d, CauseLaunch, "podmpi-rsh could not run orted on "+hostB+":2222")
}

func TestGPUErrorBeatsTheAbort(t *testing.T) {
	d := Decide(Input{
		Workers: []Worker{answered(hostA,
			api.Event{Time: at(1), Kind: api.KindGPUECC, Rank: -1, ExitCode: -1, Message: "GPU 2 (GPU-x) reported a double-bit ECC error", GPU: &api.GPUEvent{Index: 2}},
			rankExit(2, 4, 44, "SIGABRT", -1))},
	})
	wantRoot(t, d, CauseGPU, "GPU 2 (GPU-x) reported a double-bit ECC error on "+hostA, "cordon")
	d = Decide(Input{Workers: []Worker{answered(hostA,
		api.Event{Time: at(1), Kind: api.KindGPUXid, Rank: -1, ExitCode: -1, Message: "GPU 0 (GPU-x) reported Xid 31", GPU: &api.GPUEvent{Xid: 31}},
		rankExit(2, 4, 44, "SIGABRT", -1))}})
	wantRoot(t, d, CauseGPU, "Xid 31", "compute-sanitizer")
}

func TestStopped(t *testing.T) {
	stopped := Outcome{Program: "mpirun", ExitCode: 143, Stopped: true, StopSignal: "SIGTERM", StoppedAt: at(10)}
	d := Decide(Input{Outcome: stopped, Workers: []Worker{answered(hostA, rankExit(11, 0, 1, "SIGTERM", -1)), {Host: hostB, Err: errors.New("refused")}}})
	wantRoot(t, d, CauseStopped, "received SIGTERM", "kubectl get events")
	for _, f := range d.Others {
		if f.silent() {
			t.Errorf("a worker that went away with the stop is named gone: %s", f.Sentence)
		}
	}
	// A real failure before the stop stays the cause.
	d = Decide(Input{Outcome: stopped, Workers: []Worker{answered(hostA, rankExit(5, 0, 1, "SIGSEGV", -1))}})
	wantRoot(t, d, CauseCrash, "SIGSEGV")
	// A worker lost before the stop too.
	d = Decide(Input{Outcome: stopped, Workers: []Worker{{Host: hostB, Err: errors.New("i/o timeout"), LostAt: at(3)}}})
	wantRoot(t, d, CauseUnreachable, hostB)
}

func TestNonZeroExitAndFirstToEnd(t *testing.T) {
	d := Decide(Input{
		Workers: []Worker{answered(hostA, rankExit(2, 3, 30, "", -1))},
		Reports: []Report{{Time: at(3), Kind: ReportExit, Rank: 3, ExitCode: 3}},
	})
	wantRoot(t, d, CauseExit, "rank 3 on "+hostA+" (train) exited with status 3", "Python exception")
	// mpirun names no rank's failure (a script that runs MPICH's Hydra,
	// which prints nothing of an exit status without its list): the first
	// rank an agent saw end, for what it is.
	d = Decide(Input{Outcome: Outcome{Program: "mpiexec", ExitCode: 3},
		Workers: []Worker{answered(hostA, rankExit(5, 0, 10, "", -1)), answered(hostB, rankExit(2, 1, 11, "", -1))}})
	wantRoot(t, d, CauseCascade, "the first rank a worker-agent saw end was rank 1 on "+hostB, "mpiexec exited with 3",
		"may have been ended by another's failure")
	// Not a root cause, and not said as one.
	if !strings.HasPrefix(d.Summary(), "root cause unknown: the first rank") {
		t.Errorf("the last resort is said as a root cause: %s", d.Summary())
	}
	d = Decide(Input{Workers: []Worker{answered(hostA)}})
	if d.Root != nil {
		t.Fatalf("root = %+v from nothing", d.Root)
	}
}

// TestRankOnTheLauncherPod: with runLauncherAsNode the launcher's pod runs
// ranks too. A rank that exits non-zero there, which Open MPI names
// without its host, is placed by the launcher's own account of its pod;
// a rank that crashes there is named on the launcher's pod, by the name
// Open MPI prints (its host name) or by the account alone.
func TestRankOnTheLauncherPod(t *testing.T) {
	const self = "dg-launcher-0-0.dg"
	own := &api.Events{Hostname: self, Events: []api.Event{rankExit(3, 4, 77, "", -1)}}
	d := Decide(Input{
		Outcome:    Outcome{Program: "mpirun", ExitCode: 3},
		Workers:    []Worker{answered(hostA, rankExit(5, 0, 10, "SIGTERM", -1)), answered(hostB)},
		Reports:    []Report{{Time: at(4), Kind: ReportExit, Rank: 4, ExitCode: 3}},
		Self:       self,
		SelfEvents: own,
	})
	wantRoot(t, d, CauseExit, "rank 4 on "+self+" (the launcher's own pod) (train) exited with status 3")
	if d.Root.Host != self || d.Answered != 2 {
		t.Errorf("root host %q, answered %d", d.Root.Host, d.Answered)
	}
	// Open MPI names the launcher's node by its host name.
	d = Decide(Input{
		Workers: []Worker{answered(hostA), answered(hostB)},
		Reports: []Report{{Time: at(4), Kind: ReportSignal, Rank: 5, Host: "dg-launcher-0-0", Signal: 11, ExitCode: -1}},
		Self:    self,
	})
	wantRoot(t, d, CauseCrash, "rank 5 on "+self+" (the launcher's own pod) died of signal 11 (SIGSEGV")
	// Its own account alone.
	d = Decide(Input{Workers: []Worker{answered(hostA)}, Self: self,
		SelfEvents: &api.Events{Events: []api.Event{rankExit(2, 5, 78, "SIGBUS", -1)}}})
	wantRoot(t, d, CauseCrash, "rank 5 on "+self+" (the launcher's own pod) (train) died of signal 7 (SIGBUS")
	// A rank two hosts saw end in this run is another world's: not placed.
	twice := Input{Workers: []Worker{answered(hostA, rankExit(1, 1, 5, "", -1)), answered(hostB, rankExit(3, 1, 6, "", -1))},
		Reports: []Report{{Time: at(4), Kind: ReportExit, Rank: 1, ExitCode: 2}}}
	wantRoot(t, Decide(twice), CauseExit, "rank 1 on an unknown host (the accounts of "+hostA+" and "+hostB+" each saw a rank 1 end) exited with status 2")
	// One of them saw it end before mpirun started: an earlier run's.
	twice.Outcome.Started = at(2)
	wantRoot(t, Decide(twice), CauseExit, "rank 1 on "+hostB+" (train) exited with status 2")
}

func TestOthersAreBounded(t *testing.T) {
	var evs []api.Event
	for i := range 20 {
		evs = append(evs, rankExit(10+i, i+1, 100+i, "SIGTERM", -1))
	}
	evs = append(evs, rankExit(1, 0, 99, "SIGSEGV", -1))
	d := Decide(Input{Workers: []Worker{answered(hostA, evs...)}})
	wantRoot(t, d, CauseCrash, "rank 0")
	if len(d.Others) != maxOthers || d.Omitted != 20-maxOthers {
		t.Fatalf("others %d, omitted %d", len(d.Others), d.Omitted)
	}
	if last := d.Lines()[len(d.Lines())-1]; last != "also: "+strconv.Itoa(20-maxOthers)+" more (see the launcher's log)" {
		t.Errorf("last line %q", last)
	}
}

func TestMatchHost(t *testing.T) {
	hosts := []string{"w-0.job", "w-1.job"}
	for in, want := range map[string]string{"w-1": "w-1.job", "W-0.JOB": "w-0.job", "w-1.job.ns.svc.cluster.local": "w-1.job", "x": "x", "": ""} {
		if got := matchHost(in, hosts); got != want {
			t.Errorf("matchHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLastWordsOfAWorkerThatWentQuiet(t *testing.T) {
	w := answered(hostB, api.Event{Time: at(1), Kind: api.KindOOMKill, Rank: 2, PID: 7, ExitCode: -1, Memory: limitMem(true, 64<<20, 64<<20)})
	w.Err, w.LostAt = errors.New("i/o timeout"), at(4)
	d := Decide(Input{Workers: []Worker{w}})
	wantRoot(t, d, CauseOOM, "rank 2 on "+hostB, "64 MiB")
	if d.Silent != 1 || len(d.Others) != 1 || d.Others[0].Cause != CauseUnreachable {
		t.Errorf("silent %d, others %v; want the worker also named as not answering", d.Silent, d.Lines())
	}
}

func TestCrashBeforeTheWorkerWentQuiet(t *testing.T) {
	w := answered(hostB, rankExit(1, 0, 9, "SIGBUS", -1))
	w.Err, w.LostAt = errors.New("refused"), at(5)
	d := Decide(Input{Workers: []Worker{w, answered(hostA, rankExit(6, 1, 10, "SIGABRT", -1))}})
	wantRoot(t, d, CauseCrash, "rank 0 on "+hostB, "SIGBUS")
	// Without its own last words, a worker that stopped answering before
	// the crashes elsewhere (the aborts that follow a lost daemon) beats
	// them: seen at 5 on the launcher's clock, the abort at 9 on A's.
	w = Worker{Host: hostB, Err: errors.New("refused"), LostAt: at(5)}
	d = Decide(Input{Workers: []Worker{w, answered(hostA, rankExit(9, 1, 10, "SIGABRT", -1))}})
	wantRoot(t, d, CauseUnreachable, hostB)
}

// TestSilenceOutranksAFailureOnlyWhenItBeganBefore: a worker that does not
// answer is rule 3, but a crash or a failure elsewhere that it is not known
// to have come before outranks it: a worker-agent starved or torn down
// after a rank crashed is the aftermath, not the cause. Proof that a pod
// is gone, and a daemon that could not start, still outrank a failure
// unless they are known to have come after it.
func TestSilenceOutranksAFailureOnlyWhenItBeganBefore(t *testing.T) {
	busy := errors.New("GET http://dg-node-0-1.dg:9022/events: 503 Service Unavailable")
	segv := func(s int) Report {
		return Report{Time: at(s), Kind: ReportSignal, Rank: 1, Host: "dg-node-0-0", Signal: 11, ExitCode: -1}
	}
	launch := func(s int) rsh.FailureRecord {
		return rsh.FailureRecord{Time: at(s), Host: hostB, Port: 2222, Phase: "remote-command", Daemon: "orted", Launch: true, Cause: "session lost"}
	}
	for _, tc := range []struct {
		name     string
		workers  []Worker
		reports  []Report
		launches []rsh.FailureRecord
		cause    string
		want     string
	}{
		{"the issue: rank 1 SIGSEGV at 1, B silent only from 10",
			[]Worker{answered(hostA, rankExit(1, 1, 300, "SIGSEGV", -1)), {Host: hostB, Err: busy, LostAt: at(10), AnsweredAt: at(6)}},
			[]Report{segv(1)}, nil, CauseCrash, "rank 1 on " + hostA},
		{"mpirun's word alone, no last answer known",
			[]Worker{answered(hostA), {Host: hostB, Err: busy, LostAt: at(10)}}, []Report{segv(1)}, nil, CauseCrash, "rank 1 on " + hostA},
		{"silent only at the final questions (no time at all)",
			[]Worker{answered(hostA), {Host: hostB, Err: busy}}, []Report{segv(1)}, nil, CauseCrash, "rank 1 on " + hostA},
		{"a non-zero exit before the silence",
			[]Worker{answered(hostA), {Host: hostB, Err: busy, LostAt: at(10)}},
			[]Report{{Time: at(1), Kind: ReportExit, Rank: 6, ExitCode: 7}}, nil, CauseExit, "rank 6"},
		{"silence seen before the crash",
			[]Worker{answered(hostA), {Host: hostB, Err: busy, LostAt: at(1)}}, []Report{segv(3)}, nil, CauseUnreachable, "worker " + hostB},
		{"dated by mpirun losing its daemon there",
			[]Worker{answered(hostA), {Host: hostB, Err: busy, LostAt: at(7)}},
			[]Report{{Time: at(1), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}, segv(2)}, nil, CauseUnreachable, "worker " + hostB},
		{"the crash on A's clock only, within the clocks' slack: order unknown",
			[]Worker{answered(hostA, rankExit(4, 1, 300, "SIGSEGV", -1)), {Host: hostB, Err: busy, LostAt: at(3)}}, nil, nil, CauseCrash, "rank 1 on " + hostA},
		{"the crash on A's clock only, beyond the slack",
			[]Worker{answered(hostA, rankExit(9, 1, 300, "SIGSEGV", -1)), {Host: hostB, Err: busy, LostAt: at(3)}}, nil, nil, CauseUnreachable, "worker " + hostB},
		{"gone for sure, order unknown: proof outranks",
			[]Worker{answered(hostA), {Host: hostB, Err: errors.New("no such host"), APIGone: "its pod was deleted", LostAt: at(10)}},
			[]Report{segv(1)}, nil, CauseGone, "worker " + hostB + " is gone"},
		{"gone, but it answered after the crash",
			[]Worker{answered(hostA), {Host: hostB, Err: errors.New("no such host"), APIGone: "its pod was deleted", LostAt: at(10), AnsweredAt: at(5)}},
			[]Report{segv(1)}, nil, CauseCrash, "rank 1 on " + hostA},
		{"its name missing from DNS after the crash is no proof",
			[]Worker{answered(hostA), {Host: hostB, Err: errors.New("no such host"), NameGone: true, LostAt: at(10)}},
			[]Report{segv(1)}, nil, CauseCrash, "rank 1 on " + hostA},
		{"a daemon's session lost after the crash",
			[]Worker{answered(hostA), answered(hostB)}, []Report{segv(1)}, []rsh.FailureRecord{launch(3)}, CauseCrash, "rank 1 on " + hostA},
		{"a daemon's session lost before the crash",
			[]Worker{answered(hostA), answered(hostB)}, []Report{segv(3)}, []rsh.FailureRecord{launch(1)}, CauseLaunch, "could not run orted on " + hostB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Input{Outcome: Outcome{Program: "mpirun", ExitCode: 139, WebPort: 9022}, Workers: tc.workers, Reports: tc.reports,
				Launches: tc.launches})
			wantRoot(t, d, tc.cause, tc.want)
			if tc.cause != CauseUnreachable && tc.cause != CauseGone && tc.cause != CauseLaunch {
				listed := false
				for _, f := range d.Others {
					listed = listed || f.Host == hostB
				}
				if !listed {
					t.Errorf("what happened on %s is not listed: %v", hostB, d.Lines())
				}
			}
		})
	}
}

// TestBrokenPipeIsAConsequence: a rank that died of a broken pipe (signal
// 13, or status 141 as a shell reports it) after its daemon's session was
// dropped is the consequence; what dropped it is the cause.
func TestBrokenPipeIsAConsequence(t *testing.T) {
	sh := func(s, rank, pid, code int) api.Event {
		e := rankExit(s, rank, pid, "", code)
		e.Comm = "sh"
		return e
	}
	lostB := Worker{Host: hostB, Err: errors.New("i/o timeout"), LostAt: at(1)}
	d := Decide(Input{
		Outcome: Outcome{Program: "mpirun", ExitCode: 1, WebPort: 9022},
		Workers: []Worker{answered(hostA, sh(3, 2, 40, 141), rankExit(4, 3, 41, "SIGPIPE", -1)), lostB},
		Reports: []Report{{Time: at(2), Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1", ExitCode: -1}},
	})
	wantRoot(t, d, CauseUnreachable, "worker "+hostB+" did not answer")
	for _, l := range d.Lines() {
		if strings.Contains(l, "rank 2") && !strings.Contains(l, "broken pipe") {
			t.Errorf("status 141 not read as a broken pipe: %s", l)
		}
	}
	// Alone, a broken pipe is still not the program's own failure.
	d = Decide(Input{Workers: []Worker{answered(hostA, sh(3, 2, 40, 141))}})
	if d.Cause() == CauseExit || strings.Contains(d.Summary(), "the program itself failed") {
		t.Errorf("a broken pipe blamed on the program: %s", d.Summary())
	}
}

// TestShellReportsItsChildsSignal: a shell rank's status 128+N is its
// child's death by signal N (sh -c 'train' whose train segfaulted exits
// 139): a crash, not the program's exit status.
func TestShellReportsItsChildsSignal(t *testing.T) {
	e := rankExit(3, 1, 40, "", 139)
	e.Comm = "bash"
	d := Decide(Input{Workers: []Worker{answered(hostA, e)}})
	wantRoot(t, d, CauseCrash, "rank 1 on "+hostA, "status 139", "SIGSEGV", "core dump")
	// The same status from a program that is not a shell is its own.
	d = Decide(Input{Workers: []Worker{answered(hostA, rankExit(3, 1, 40, "", 139))}})
	wantRoot(t, d, CauseExit, "exited with status 139")
}

// The 4 worker pods of 2 slots of TestDiagnosisNamesTheHost.
var dhHosts = []string{"dh-node-0-0.dh", "dh-node-0-1.dh", "dh-node-0-2.dh", "dh-node-0-3.dh"}

func dhAnswered(evs map[string][]api.Event) []Worker {
	var ws []Worker
	for _, h := range dhHosts {
		ws = append(ws, answered(h, evs[h]...))
	}
	return ws
}

// TestEveryRankExits7NamesTheHost (issue 10): every rank runs `exit 7`;
// Open MPI 4 names the first one without its host ("Process name:
// [[18970,1],4] Exit code: 7", real output in testdata), and each lived
// too briefly for its agent to see it. Without a report of where the rank
// started, the host is unknown and the diagnosis says why; an agent that
// saw it end places it.
func TestEveryRankExits7NamesTheHost(t *testing.T) {
	reports := reportsOf(t, "ompi4-every-rank-exit7.txt", at(3))
	in := Input{Outcome: Outcome{Program: "mpirun.openmpi", ExitCode: 7}, Workers: dhAnswered(nil), Reports: reports}
	wantRoot(t, Decide(in), CauseExit, "rank 4 on an unknown host (mpirun.openmpi named none, and neither a report of where the rank started "+
		"nor a worker-agent's account places it) exited with status 7")

	in.Workers = dhAnswered(map[string][]api.Event{dhHosts[3]: {rankExit(2, 4, 90, "", -1)}})
	wantRoot(t, Decide(in), CauseExit, "rank 4 on dh-node-0-3.dh (train) exited with status 7")
}

// TestHostFromTheMPIsReportOfWhereRanksStarted (issue 36): Trainer's
// runLauncherAsNode hostfile (xp-node-0-0, xp-node-0-1, then the
// launcher's own entry, 1 slot each); rank 1 exited with status 5 at once.
// Open MPI 4 put mpirun's own node first (rank 0 on the launcher's pod,
// rank 1 on xp-node-0-0), not the hostfile's order, which a model of the
// mapping took for granted (and named xp-node-0-1). The daemons' reports of
// each rank's binding, real output in testdata, say where each rank
// started; so do Open MPI 5's (PRRTE 3.0) in its own words.
func TestHostFromTheMPIsReportOfWhereRanksStarted(t *testing.T) {
	for _, tc := range []struct {
		file, program, self, want string
	}{
		{"ompi4.1-launcher-as-node-rank1-exit5.txt", "mpirun.openmpi", "xp-launcher-0-0.xp", "rank 1 on xp-node-0-0.xp exited with status 5"},
		{"ompi4.1-tag-output-rank1-exit5.txt", "mpirun.openmpi", "xp-launcher-0-0.xp", "rank 1 on xp-node-0-0.xp exited with status 5"},
		{"ompi5.0-launcher-as-node-rank1-exit5.txt", "mpirun", "x5-launcher-0-0.x5", "rank 1 on x5-node-0-0.x5 exited with status 5"},
	} {
		job := strings.SplitN(tc.self, ".", 2)[1]
		reports, placed := collectedOf(t, tc.file, "", at(3))
		in := Input{Outcome: Outcome{Program: tc.program, ExitCode: 5}, Self: tc.self, Reports: reports, Placed: placed,
			Workers: []Worker{answered(job[:2] + "-node-0-0." + job), answered(job[:2] + "-node-0-1." + job)}}
		wantRoot(t, Decide(in), CauseExit, tc.want)
		// The same rank on the launcher's own pod: its report names it.
		in.Reports = append(in.Reports[:len(in.Reports):len(in.Reports)], Report{Time: at(4), Kind: ReportExit, Rank: 0, ExitCode: 3})
		for i := range in.Reports {
			if in.Reports[i].Kind == ReportExit && in.Reports[i].Rank == 1 {
				in.Reports[i].Rank = 0
			}
		}
		wantRoot(t, Decide(in), CauseExit, "rank 0 on "+tc.self+" (the launcher's own pod) exited with status")
	}
	// Two reports that disagree place nothing.
	in := Input{Placed: map[int][]string{2: {hostA, hostB}}, Reports: []Report{{Time: at(2), Kind: ReportExit, Rank: 2, ExitCode: 1}},
		Workers: []Worker{answered(hostA), answered(hostB)}}
	wantRoot(t, Decide(in), CauseExit, "rank 2 on an unknown host (the MPI reported it starting on "+hostA+" and "+hostB+")")
}

// TestHydraNamesTheHostOfAFastExit (issue 36): MPICH's Hydra prints no
// word of a rank that exits with a status; its list of exit codes
// (-print-all-exitcodes, which the launcher asks for) names the host of
// every process that failed, the launcher's own pod included (real output
// of MPICH 4.0 in testdata).
func TestHydraNamesTheHostOfAFastExit(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"mpich4.0-launcher-as-node-rank1-exit5.txt", "a rank on xp-node-0-1.xp exited with status 5"},
		{"mpich4.0-launcher-as-node-rank2-exit5.txt", "a rank on xp-launcher-0-0.xp (the launcher's own pod) exited with status 5"},
	} {
		in := Input{Outcome: Outcome{Program: "/usr/bin/mpiexec.hydra", ExitCode: 5}, Self: "xp-launcher-0-0.xp",
			Reports: reportsOfMPI(t, tc.file, mpi.MPICH, at(3)), Workers: []Worker{answered("xp-node-0-0.xp"), answered("xp-node-0-1.xp")}}
		wantRoot(t, Decide(in), CauseExit, tc.want)
	}
}

// TestHydraCodesReadRight (issue 36): MPICH's "EXIT CODE: 9" is the wait
// status of a process SIGKILL ended, never exit(9) (MPICH 3.2 and later
// print the block for signals only), and a SIGKILL beside a process that
// exited with a status is Hydra's cleanup: MPICH 4.0's block named a rank
// Hydra killed after rank 1 called exit(5) without MPI_Finalize, and Intel
// MPI printed a block for each rank it killed (real output in testdata).
func TestHydraCodesReadRight(t *testing.T) {
	for _, tc := range []struct {
		file   string
		impl   mpi.Implementation
		cause  string
		want   string
		others []string
	}{
		{"mpich4.0-mpi-rank1-exit5-cleanup.txt", mpi.MPICH, CauseExit, "a rank on vm exited with status 5",
			[]string{"process 20041 on vm died of signal 9 (SIGKILL, killed) (Hydra kills the other processes when one fails)"}},
		{"intelmpi2021.19-mpi-rank1-exit5.txt", mpi.IntelMPI, CauseExit, "a rank on vm exited with status 5",
			[]string{"rank 0 on vm died of signal 9 (SIGKILL, killed) (Hydra kills", "rank 2 on vm died of signal 9"}},
		{"mpich4.0-rank1-sigkill.txt", mpi.MPICH, CauseKilled, "process 780 on xp-node-0-1.xp died of signal 9 (SIGKILL, killed)", nil},
		{"mpich4.0-rank1-sigsegv.txt", mpi.MPICH, CauseCrash, "process 861 on xp-node-0-1.xp died of signal 11 (SIGSEGV", nil},
	} {
		in := Input{Outcome: Outcome{Program: "mpiexec.hydra", ExitCode: 9}, Reports: reportsOfMPI(t, tc.file, tc.impl, at(3)),
			Workers: []Worker{answered("xp-node-0-0.xp"), answered("xp-node-0-1.xp")}}
		d := Decide(in)
		wantRoot(t, d, tc.cause, tc.want)
		lines := strings.Join(d.Lines(), "\n")
		for _, o := range tc.others {
			if !strings.Contains(lines, o) {
				t.Errorf("%s: the others lack %q:\n%s", tc.file, o, lines)
			}
		}
		if strings.Contains(lines, "exited with status 9") || strings.Count(d.Summary()+lines, "SIGSEGV") > 1 {
			t.Errorf("%s: a wait status read as an exit status, or one process named twice:\n%s\n%s", tc.file, d.Summary(), lines)
		}
	}
}

// orted's session as the worker-agent of dh-node-0-2 recorded it in
// TestDiagnosisNamesTheHost: its shell reports the SIGSEGV as status 139.
func ortedSession(s, code int) api.Event {
	return api.Event{Time: at(s), Kind: api.KindSessionExit, Rank: -1, PID: 7003, ExitCode: code, Session: "c1/s3", Command: "orted",
		Message: "ssh session c1/s3 (orted) exited with status " + strconv.Itoa(code)}
}

// TestDaemonThatFailsAtStart (issue 12): orted died of SIGSEGV on one
// worker right after launch, and mpirun printed its generic "ORTE was
// unable to reliably start one or more daemons" (real output in
// testdata). The daemon's own end, with its signal and host, is the root
// cause, not the network; so is a daemon that exited with a status as it
// started.
func TestDaemonThatFailsAtStart(t *testing.T) {
	reports := reportsOf(t, "ompi4-orted-sigsegv-at-start.txt", at(2))
	in := Input{Outcome: Outcome{Program: "mpirun.openmpi", ExitCode: 139}, Reports: reports,
		Workers: dhAnswered(map[string][]api.Event{dhHosts[2]: {ortedSession(1, 139)}})}
	d := Decide(in)
	wantRoot(t, d, CauseCrash, "the MPI daemon orted on dh-node-0-2.dh died of signal 11 (SIGSEGV, segmentation fault)",
		"(its ssh session c1/s3 exited with status 139)", "mpirun.openmpi could not start its MPI daemons", "not the network")
	if strings.Contains(d.Summary(), "NetworkPolicy") || len(d.Others) != 0 {
		t.Errorf("mpirun's generic words are still named: %s %v", d.Summary(), d.Lines())
	}
	// A daemon that exits with a status of its own as it starts.
	in.Workers = dhAnswered(map[string][]api.Event{dhHosts[1]: {ortedSession(1, 127)}})
	wantRoot(t, Decide(in), CauseDaemon, "the MPI daemon orted on dh-node-0-1.dh exited with status 127 as it started",
		"mpirun.openmpi could not start its MPI daemons", "compare that worker's image")
	// Without the daemon's account, mpirun's words stand.
	in.Workers = dhAnswered(nil)
	wantRoot(t, Decide(in), CauseDaemon, "could not start its MPI daemons", "NetworkPolicy")
	// A session that ended with status 1 while mpirun tore the job down
	// after a rank's failure is the cascade, as before.
	in = Input{Workers: dhAnswered(map[string][]api.Event{dhHosts[1]: {ortedSession(3, 1)}}),
		Placed: map[int][]string{0: {"dh-node-0-0"}}, Reports: []Report{{Time: at(2), Kind: ReportExit, Rank: 0, ExitCode: 3}}}
	wantRoot(t, Decide(in), CauseExit, "rank 0 on dh-node-0-0.dh")
}

// TestSettingThatOverridesTheWiring (issue 12): OMPI_MCA_plm=isolated in
// the environment made mpirun refuse every remote host ("No nodes are
// available for this job", real output in testdata, no rank's word): the
// diagnosis names the setting rather than "root cause unknown"; beside a
// real failure it is context.
func TestSettingThatOverridesTheWiring(t *testing.T) {
	plm := Override{Name: "OMPI_MCA_plm", Value: "isolated", Effect: "mpirun will start its daemons with another launcher than rsh"}
	in := Input{Outcome: Outcome{Program: "mpirun.openmpi", ExitCode: 1}, Workers: dhAnswered(nil),
		Reports: reportsOf(t, "ompi4-plm-isolated.txt", at(1)), Setup: Setup{Overrides: []Override{plm}}}
	wantRoot(t, Decide(in), CauseSetting, "the environment of mpirun.openmpi sets OMPI_MCA_plm=isolated, which overrides podmpi's wiring",
		"another launcher than rsh", "hint: unset it")
	// mpirun's generic word about its daemons: the setting explains it.
	in.Reports = reportsOf(t, "ompi4-orted-sigsegv-at-start.txt", at(1))
	d := Decide(in)
	wantRoot(t, d, CauseSetting, "OMPI_MCA_plm=isolated")
	if len(d.Others) == 0 || d.Others[0].Cause != CauseDaemon {
		t.Errorf("mpirun's own words are not listed: %v", d.Lines())
	}
	// A rank that crashed is the cause; the setting is listed.
	in.Reports = []Report{{Time: at(2), Kind: ReportSignal, Rank: 1, Host: "dh-node-0-0", Signal: 11, ExitCode: -1}}
	d = Decide(in)
	wantRoot(t, d, CauseCrash, "rank 1 on dh-node-0-0.dh")
	if l := d.Lines(); len(l) != 1 || !strings.Contains(l[0], "OMPI_MCA_plm=isolated") {
		t.Errorf("the setting is not listed: %v", l)
	}
}

// TestAnotherLaunchersEventsIgnored: a new launcher instance connected,
// which ended the older one's daemons and ranks on hostB (one of its
// ranks killed by SIGKILL), then started mpirun, whose rank 0 on hostA
// exited 1 at once. Both ends fall within the clocks' allowance before
// mpirun's start, the old rank's first: the root cause is this run's rank,
// and the old one is not listed. The same SIGKILL without the instance
// (an older agent, a client that declared none) still counts, and wins.
func TestAnotherLaunchersEventsIgnored(t *testing.T) {
	const this, older = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
	started := at(10)
	killed := api.Event{Time: started.Add(-1500 * time.Millisecond), Kind: api.KindRankExit, Rank: 1, PID: 400, Comm: "train",
		Signal: "SIGKILL", ExitCode: -1, Launcher: older}
	failed := api.Event{Time: started.Add(-500 * time.Millisecond), Kind: api.KindRankExit, Rank: 0, PID: 500, Comm: "train",
		ExitCode: 1, Launcher: this}
	in := Input{
		Outcome:  Outcome{Program: "mpirun", ExitCode: 1, Started: started},
		Workers:  []Worker{answered(hostA, failed), answered(hostB, killed)},
		Launcher: this,
	}
	d := Decide(in)
	wantRoot(t, d, CauseExit, "rank 0 on "+hostA, "exited with status 1")
	if len(d.Others) != 0 || d.Ignored[hostB] != 1 || len(d.Ignored) != 1 {
		t.Errorf("others %v, ignored %v; want the older instance's rank left out, counted on %s", d.Lines(), d.Ignored, hostB)
	}

	killed.Launcher = ""
	in.Workers[1] = answered(hostB, killed)
	d = Decide(in)
	wantRoot(t, d, CauseKilled, "rank 1 on "+hostB, "SIGKILL")
	if len(d.Others) != 1 || d.Ignored != nil {
		t.Errorf("others %v, ignored %v; want rank 0's exit listed, nothing left out", d.Lines(), d.Ignored)
	}
}
