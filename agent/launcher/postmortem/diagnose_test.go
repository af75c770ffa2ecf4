package postmortem

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/worker/api"
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
	wantRoot(t, d, CauseGone, "worker "+hostB+" is gone", "port 9022", "connection refused", "kubectl get events", "05:06:09 UTC")
	if d.Silent != 1 || d.Answered != 1 {
		t.Errorf("answered %d, silent %d", d.Answered, d.Silent)
	}
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
		Launches: []rsh.FailureRecord{{Time: at(1), Host: hostB, Port: 2222, Phase: "tcp-refused", Cause: "dial tcp 10.0.0.3:2222: connect: connection refused", Hint: "nothing listens on port 2222", Daemon: "hydra_pmi_proxy"}},
	})
	wantRoot(t, d, CauseLaunch, "podmpi-rsh could not start hydra_pmi_proxy on "+hostB+":2222: tcp-refused",
		"its worker-agent does not answer on port 0 either", "hint: nothing listens")
	if len(d.Others) != 0 || d.Silent != 1 {
		t.Errorf("others = %v, silent %d; want the silent agent folded into the launch failure", d.Lines(), d.Silent)
	}
}

// TestSessionLostOnAGoneWorker: a worker killed mid-job drops podmpi-rsh's
// session (a remote-command record) and its agent is silent: it is gone.
func TestSessionLostOnAGoneWorker(t *testing.T) {
	d := Decide(Input{
		Outcome: Outcome{WebPort: 9022},
		Workers: []Worker{answered(hostA), {Host: hostB, Err: errors.New("connect: connection refused")}},
		Launches: []rsh.FailureRecord{{Time: at(4), Host: hostB, Port: 2222, Phase: "remote-command", Daemon: "orted",
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
		Phase: "remote-command", Daemon: "orted", Cause: "x"}}})
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
		if f.Cause == CauseGone {
			t.Errorf("a worker that went away with the stop is named gone: %s", f.Sentence)
		}
	}
	// A real failure before the stop stays the cause.
	d = Decide(Input{Outcome: stopped, Workers: []Worker{answered(hostA, rankExit(5, 0, 1, "SIGSEGV", -1))}})
	wantRoot(t, d, CauseCrash, "SIGSEGV")
	// A worker lost before the stop too.
	d = Decide(Input{Outcome: stopped, Workers: []Worker{{Host: hostB, Err: errors.New("i/o timeout"), LostAt: at(3)}}})
	wantRoot(t, d, CauseGone, hostB)
}

func TestNonZeroExitAndFirstToEnd(t *testing.T) {
	d := Decide(Input{
		Workers: []Worker{answered(hostA, rankExit(2, 3, 30, "", -1))},
		Reports: []Report{{Time: at(3), Kind: ReportExit, Rank: 3, ExitCode: 3}},
	})
	wantRoot(t, d, CauseExit, "rank 3 on ", "exited with status 3", "Python exception")
	// MPICH says nothing about a rank's exit status: the first rank to end.
	d = Decide(Input{Outcome: Outcome{Program: "mpiexec", ExitCode: 3},
		Workers: []Worker{answered(hostA, rankExit(5, 0, 10, "", -1)), answered(hostB, rankExit(2, 1, 11, "", -1))}})
	wantRoot(t, d, CauseCascade, "the first rank to end was rank 1 on "+hostB, "mpiexec exited with 3")
	d = Decide(Input{Workers: []Worker{answered(hostA)}})
	if d.Root != nil {
		t.Fatalf("root = %+v from nothing", d.Root)
	}
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
	if d.Silent != 1 || len(d.Others) != 1 || d.Others[0].Cause != CauseGone {
		t.Errorf("silent %d, others %v; want the worker also named gone", d.Silent, d.Lines())
	}
}

func TestCrashBeforeTheWorkerWentQuiet(t *testing.T) {
	w := answered(hostB, rankExit(1, 0, 9, "SIGBUS", -1))
	w.Err, w.LostAt = errors.New("refused"), at(5)
	d := Decide(Input{Workers: []Worker{w, answered(hostA, rankExit(6, 1, 10, "SIGABRT", -1))}})
	wantRoot(t, d, CauseCrash, "rank 0 on "+hostB, "SIGBUS")
	// Without its own last words, a lost worker beats the crashes elsewhere.
	w = Worker{Host: hostB, Err: errors.New("refused"), LostAt: at(5)}
	d = Decide(Input{Workers: []Worker{w, answered(hostA, rankExit(6, 1, 10, "SIGABRT", -1))}})
	wantRoot(t, d, CauseGone, hostB)
}
