// Package postmortem decides what killed an MPI job after it started, from
// what the launcher can learn once mpirun has failed: every worker-agent's
// account of its pod (its /events: OOM kills with the memory limit, rank
// and session exits, GPU errors), which workers did not answer at all, what
// mpirun itself printed about the failed rank (Collector), and the records
// podmpi-rsh leaves when it cannot start a daemon.
//
// The rules, in order:
//
//  1. An OOM kill beats everything, and the SIGKILL it caused (mpirun's
//     "exited on signal 9") is the same failure, not another one.
//  2. A GPU's hardware error (a double-bit ECC error, an Xid that is not the
//     program's own) comes next.
//  3. A daemon that could not be started (podmpi-rsh's record of mpirun's
//     own launch; a record of another command, a job script's ssh, is
//     only listed) and a worker whose pod is gone (another agent answers
//     under its name, or the Kubernetes API shows it deleted, evicted or
//     failed) or, without that proof, whose agent does not answer at all
//     (unreachable: named as what it is, never as gone; its name missing
//     from DNS too, which a pod that is only not Ready also gives). Each outranks the
//     crashes and failures of rules 4 and 5 only when it did not come after
//     them (orderAgainstFailures): a worker whose agent went quiet while the
//     job was torn down after a rank crashed is not why it crashed.
//  4. A rank that crashed (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE, ...),
//     or an MPI daemon that did (its session's signal, or the status 128+N
//     of the shell that ran it).
//  5. A rank killed by SIGKILL without an OOM kill, a rank that exited with
//     a non-zero status, a daemon mpirun lost, a daemon that mpirun could
//     not start (the daemon's own account of its end, with its host,
//     outranks mpirun's generic words).
//  6. The rest (SIGTERM, SIGINT, failed sessions) is the cascade that
//     follows a failure; it is listed, never named the cause.
//
// An agent's events that name another launcher instance than this one
// (api.Event.Launcher, Input.Launcher) are left out before any rule: they
// are an earlier run's, such as the daemons and ranks an agent ended as
// this launcher first connected, which died moments before its mpirun
// started. Events that name none count.
//
// An MPI setting of mpirun's environment that takes the daemons' launch
// away from podmpi's wiring (Setup.Overrides: Open MPI's plm isolated, an
// rsh agent of the user's) is the cause when nothing but mpirun's generic
// word about its daemons, or nothing at all, explains the failure; beside
// anything else it is listed.
//
// Within a rule, the first failure in time wins: the aborts that follow it
// come later (each by the earliest time any source gives it; two findings
// closer than the clocks' disagreement may come in either order). A
// launcher stopped by SIGTERM names that as the cause unless one of rules
// 1-4 found something.
//
// A rank's host comes from what saw it run, never from a model of how the
// MPI maps ranks to hosts: the MPI's own words (Open MPI's report of each
// rank's binding, written by the daemon that starts it on its host; the
// host in a message about the rank), or the worker-agent that saw the rank
// end. Where nothing names the host, the diagnosis says so. Hydra's list of
// exit codes names the host of every process that failed but not its rank;
// when one exited with a status, the SIGKILLs beside it are Hydra's own
// cleanup of the others (MPICH's block even names such a victim when a rank
// exits without MPI_Finalize).
//
// Times come from two kinds of clock. The launcher's own: when it read
// mpirun's line (Report.Time), when podmpi-rsh wrote its record (it runs
// in the launcher's pod), when its questions saw a worker stop answering
// or answer (Worker.LostAt, Worker.AnsweredAt), a replaced agent's start
// (Worker.ReplacedAt, from the agent's uptime, not its clock), the
// launcher's account of its own pod (Input.SelfEvents), mpirun's start and
// the stop signal (Outcome). And each worker-agent's wall clock, on
// another node: the times of its events. Times on the launcher's clock are
// compared as they are; a worker-agent's time is compared with one on the
// launcher's clock only across more than clockSlack, the disagreement the
// launcher already allows when it asks for the accounts since mpirun
// started (nodes keep their clocks by NTP); closer than that, the order is
// not known. An agent's answer (its clock at Events.Now) would measure its
// offset, but only to within the request's duration, which on a busy
// agent, the case that matters here, is no better.
package postmortem

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/signals"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/mpi"
)

// Causes: the kind of a Finding, and the values of the launcher's
// root-cause metric label.
const (
	CauseOOM    = "oom"
	CauseGPU    = "gpu"
	CauseLaunch = "launch"
	CauseGone   = "gone"
	// CauseUnreachable: a worker-agent that did not answer, with no proof
	// that its pod is gone (see Worker.NameGone, Worker.ReplacedAt).
	CauseUnreachable = "unreachable"
	CauseCrash       = "crash"
	CauseKilled      = "killed"
	CauseExit        = "exit"
	CauseDaemon      = "daemon"
	CauseCascade     = "cascade"
	CauseStopped     = "stopped"
	// CauseSetting: an MPI setting of mpirun's environment that takes its
	// daemons' launch away from podmpi's wiring (Setup.Overrides), when
	// nothing more precise explains the failure.
	CauseSetting = "setting"
	CauseUnknown = "unknown"
)

// Causes lists every cause.
var Causes = []string{CauseOOM, CauseGPU, CauseLaunch, CauseGone, CauseUnreachable, CauseCrash, CauseKilled, CauseExit, CauseDaemon,
	CauseCascade, CauseStopped, CauseSetting, CauseUnknown}

// Tiers of the rules above (lower wins).
const (
	tierOOM = iota
	tierGPU
	// tierLaunchOrSilent: rule 3, a daemon podmpi-rsh could not start and a
	// worker that is gone or does not answer.
	tierLaunchOrSilent
	tierCrash
	tierFailed
	// tierLate: what rule 3 holds, moved below a crash or a failure
	// elsewhere that it did not come before (orderAgainstFailures).
	tierLate
	tierCascade
	tierInfo
)

// maxOthers bounds the other findings a Diagnosis lists.
const maxOthers = 8

// Worker is what one worker-agent said, or why it said nothing.
type Worker struct {
	Host string
	// Events is its answer; nil when it gave none. With Err set, it is
	// what it said before it stopped answering. Its times are on the
	// agent's clock.
	Events *api.Events
	// Err says why it does not answer (connection refused, timeout, ...);
	// nil when it answered.
	Err error
	// NoAccount is true when it answered that it keeps no account (an
	// older worker-agent): it is there, it just cannot say.
	NoAccount bool
	// LostAt is when the launcher first saw it stop answering while mpirun
	// ran, on the launcher's clock: its silence began at that time at the
	// latest. Zero when it never did.
	LostAt time.Time
	// AnsweredAt is when it last answered, on the launcher's clock: it was
	// there then. Zero when it never did.
	AnsweredAt time.Time
	// ReplacedAt is when the worker-agent now answering under its name
	// started, after mpirun did (the launcher's clock, less the agent's
	// uptime): the pod that ran the job's daemon was gone by then. Zero when
	// not seen. Events, when set, are what the first agent said.
	ReplacedAt time.Time
	// NameGone is true when its name no longer existed when last asked
	// (an authoritative "no such name" from DNS) and nothing answered at
	// the address it had: a deleted pod's name leaves the job's headless
	// Service, but so does a pod that is only not Ready (without
	// publishNotReadyAddresses), so it is named, never proof.
	NameGone bool
	// APIGone is how the Kubernetes API shows its pod gone since mpirun
	// started ("its pod tj-node-0-1-x no longer exists (deleted)"), "" when
	// it does not or cannot be asked.
	APIGone string
	// Kube is what the API says of its pod now, when it is not simply
	// running and ready ("pod tj-node-0-1-x is Running but not Ready").
	Kube string
}

// Outcome is how mpirun ended.
type Outcome struct {
	// Program is mpirun's name (argv[0]).
	Program string
	// ExitCode is mpirun's status (128+N after signal N).
	ExitCode int
	// Stopped is true when the launcher was told to stop (SIGTERM or
	// SIGINT) and stopped mpirun.
	Stopped bool
	// StopSignal names that signal, when known; StoppedAt is when it came
	// (the launcher's clock).
	StopSignal string
	StoppedAt  time.Time
	// TimedOut is true when --mpirun.timeout stopped it.
	TimedOut bool
	// LaunchStopped is true when the launcher stopped mpirun because a
	// daemon could not be started and mpirun did not exit on its own.
	LaunchStopped bool
	// WebPort is the worker-agents' HTTP port, for the messages.
	WebPort int
	// Started is when mpirun started, on the launcher's clock; zero when
	// unknown.
	Started time.Time
}

// Input is everything Decide weighs.
type Input struct {
	Outcome  Outcome
	Workers  []Worker
	Reports  []Report
	Launches []rsh.FailureRecord
	// Placed is the hosts each rank was reported starting on, by rank, in
	// the MPI's own words (Collector.Placed).
	Placed map[int][]string
	// Self is the launcher's own hostfile entry when it runs ranks too
	// (Trainer's runLauncherAsNode, mpi-operator's runLauncherAsWorker);
	// "" when it runs none. SelfEvents is the launcher's own account of its
	// pod then (the same as a worker-agent's /events, on the launcher's
	// clock); nil without one.
	Self       string
	SelfEvents *api.Events
	// Setup is what the launcher knows of how it started mpirun.
	Setup Setup
	// Launcher is this launcher's instance (launcherid.Instance.ID) as it
	// declares itself to the worker-agents, "" when it declares none.
	// Agent events that name another instance (api.Event.Launcher) are
	// left out: they are what an earlier launcher's run left, such as the
	// daemons and ranks an agent ended as this launcher connected,
	// moments before its mpirun started (within the clocks' allowance).
	// Events that name no instance (a client that declared none, older
	// agents) count.
	Launcher string
}

// Setup is what the launcher knows of how it started mpirun, besides its
// outcome.
type Setup struct {
	// Overrides are the MPI settings of mpirun's environment that take its
	// daemons' launch away from podmpi's wiring (mpirun.Setting.Overrides).
	Overrides []Override
}

// Override is one MPI setting of the environment that overrides podmpi's
// wiring: "OMPI_MCA_plm" = "isolated" makes mpirun start no daemon on
// another host.
type Override struct {
	Name, Value string
	// Effect says what it does to the launch, for the diagnosis.
	Effect string
}

// Finding is one failure found.
type Finding struct {
	Cause string
	// Time is when it happened, the earliest any source saw it, on that
	// source's clock (see the package comment).
	Time time.Time
	// Host is the worker as the hostfile names it ("" when unknown).
	Host string
	// Rank is -1 when unknown; PID 0.
	Rank int
	PID  int
	// Signal that ended the process ("SIGSEGV"), or "".
	Signal     string
	CoreDumped bool
	ExitCode   int // -1 when unknown or a signal
	Memory     *api.Memory
	// Sentence says what happened, with host, rank and the number that
	// matters; Hint the fix.
	Sentence string
	Hint     string

	tier   int
	self   bool // Host is the launcher's own pod
	listed bool // an entry of Hydra's list of exit codes (no rank, no PID)
	hydra  bool // Hydra's words
	// unplaced says why the host of a rank mpirun named without one is
	// not known.
	unplaced string
	source   string // "agent", "mpirun", "rsh", "launcher"
	comm     string // the process's command name, when the agent saw it
	rss      uint64 // its resident memory when last seen
	phase    string // a podmpi-rsh record's phase
	cause    string // ... and its cause
	port     int    // the port a gone worker did not answer on
	daemon   string // the command of a session that ended (orted, ...)
	report   string // the kind of mpirun's message (Report.Kind)

	// launcherAt is when a source on the launcher's clock saw it (mpirun's
	// line, a podmpi-rsh record, the launcher's questions, its own
	// account), agentAt when a worker-agent did, on that agent's clock;
	// zero when none did. For a silent worker launcherAt is when its
	// silence had begun at the latest, and answered when its agent last
	// answered (the launcher's clock): it was not silent then.
	launcherAt, agentAt time.Time
	answered            time.Time
}

// Diagnosis is the decision.
type Diagnosis struct {
	// Root is the root cause; nil when nothing explains the failure.
	Root *Finding
	// Others are the other findings, rules first, then time; at most
	// maxOthers (Omitted counts the rest).
	Others  []Finding
	Omitted int
	// Answered and Silent count the workers that gave an account and
	// those that did not answer.
	Answered, Silent int
	// Ignored counts, by host, the events left out as another launcher
	// instance's (Input.Launcher); nil when none were.
	Ignored map[string]int
}

// Cause is the root cause's kind, CauseUnknown without one.
func (d Diagnosis) Cause() string {
	if d.Root == nil {
		return CauseUnknown
	}
	return d.Root.Cause
}

// Summary is the diagnosis as one line: the root cause and its fix.
func (d Diagnosis) Summary() string {
	if d.Root == nil {
		return fmt.Sprintf("root cause unknown: no worker-agent reported an OOM kill, a crashed rank or a GPU error (%d answered, %d did not); "+
			"hint: read mpirun's output above for the first rank that failed", d.Answered, d.Silent)
	}
	s := "root cause: " + d.Root.Sentence
	if d.Root.Cause == CauseCascade {
		// The last resort (Decide): a rank that ended, nothing says why.
		s = "root cause unknown: " + d.Root.Sentence
	}
	if d.Root.Hint != "" {
		s += "; hint: " + d.Root.Hint
	}
	return s
}

// Lines are the other findings, one line each.
func (d Diagnosis) Lines() []string {
	var out []string
	for _, f := range d.Others {
		out = append(out, "also: "+f.Sentence)
	}
	if d.Omitted > 0 {
		out = append(out, fmt.Sprintf("also: %d more (see the launcher's log)", d.Omitted))
	}
	return out
}

// Decide weighs in and returns the diagnosis.
func Decide(in Input) Diagnosis {
	hosts := make([]string, 0, len(in.Workers)+1)
	for _, w := range in.Workers {
		hosts = append(hosts, w.Host)
	}
	var fs []Finding
	var d Diagnosis
	account := func(host string, self bool, ev api.Events) {
		got, ignored := fromEvents(host, self, ev, in.Launcher)
		fs = append(fs, got...)
		if ignored > 0 {
			if d.Ignored == nil {
				d.Ignored = make(map[string]int)
			}
			d.Ignored[host] += ignored
		}
	}
	if in.Self != "" {
		hosts = append(hosts, in.Self)
		if in.SelfEvents != nil {
			account(in.Self, true, *in.SelfEvents)
		}
	}
	for _, w := range in.Workers {
		if w.Events != nil {
			account(w.Host, false, *w.Events)
		}
		switch {
		case !w.ReplacedAt.IsZero() || w.APIGone != "":
			d.Silent++
			fs = append(fs, silentWorker(w, in.Outcome.WebPort))
		case w.Err == nil && (w.Events != nil || w.NoAccount):
			d.Answered++
		default:
			d.Silent++
			fs = append(fs, silentWorker(w, in.Outcome.WebPort))
		}
	}
	for _, r := range in.Launches {
		fs = append(fs, launch(r, hosts))
	}
	for _, r := range in.Reports {
		if f, ok := fromReport(r, hosts, in.Self, in.Outcome.Program); ok {
			fs = append(fs, f)
		}
	}
	fs = placeRanks(fs, in.Outcome.Started, in.Placed, hosts, in.Self, in.Outcome.Program)
	fs = merge(fs)
	fs = hydraCleanup(fs)
	fs = foldLaunches(fs)
	fs = daemonsAtStart(fs, in.Outcome.Program)
	fs = orderAgainstFailures(fs)
	if o := in.Outcome; o.Stopped {
		for i := range fs {
			f := &fs[i]
			late := f.Time.IsZero() || !o.StoppedAt.IsZero() && !f.Time.Before(o.StoppedAt)
			if (f.silent() || f.Cause == CauseLaunch) && late {
				f.Cause, f.tier = CauseCascade, tierCascade
				f.Sentence += " (after the launcher was told to stop: its pod is likely being deleted too)"
			}
		}
	}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		switch {
		case a.tier != b.tier:
			return a.tier - b.tier
		case a.Time.IsZero() != b.Time.IsZero():
			if a.Time.IsZero() {
				return 1 // a time nobody knows comes after the known ones
			}
			return -1
		}
		return a.Time.Compare(b.Time)
	})
	var rest []Finding
	for i := range fs {
		switch {
		case fs[i].tier == tierInfo:
		case d.Root == nil && fs[i].tier < tierCascade:
			d.Root = &fs[i]
		default:
			rest = append(rest, fs[i])
		}
	}
	// Stopped from outside: only a real failure before it is the cause.
	if in.Outcome.Stopped && (d.Root == nil || d.Root.tier > tierCrash) {
		if d.Root != nil {
			rest = append([]Finding{*d.Root}, rest...)
		}
		sig := in.Outcome.StopSignal
		if sig == "" {
			sig = "SIGTERM or SIGINT"
		}
		d.Root = &Finding{Cause: CauseStopped, Rank: -1, ExitCode: -1, source: "launcher",
			Sentence: fmt.Sprintf("the launcher received %s and stopped %s: the pod is being deleted (the job was deleted, suspended or "+
				"preempted, or restarted after a failure elsewhere in it)", sig, orMPIRun(in.Outcome.Program)),
			Hint: "kubectl get events --sort-by=.lastTimestamp in the job's namespace says who deleted the pod; no worker-agent reported an OOM kill, a crash or a GPU error before it"}
	}
	if f, ok := overridden(in.Setup.Overrides, in.Outcome.Program); ok {
		// A setting that took the launch away from podmpi's wiring explains
		// a run that failed without a word of any rank, or with mpirun's
		// generic word about its daemons; beside anything else, it is
		// context.
		switch {
		case in.Outcome.Stopped:
			rest = append(rest, f)
		case d.Root == nil || d.Root.source == "mpirun" && d.Root.Cause == CauseDaemon:
			if d.Root != nil {
				rest = append([]Finding{*d.Root}, rest...)
			}
			d.Root = &f
		default:
			rest = append(rest, f)
		}
	}
	if d.Root == nil {
		// Nothing but the first rank an agent saw end, whose status nobody
		// saw: not necessarily the first to end (one that ended within
		// moments of its start is gone before its agent looks).
		for i := range fs {
			if fs[i].tier == tierInfo && fs[i].Rank >= 0 {
				f := fs[i]
				f.Sentence = "the first rank a worker-agent saw end was " + f.Sentence
				f.Hint = orMPIRun(in.Outcome.Program) + " exited with " + strconv.Itoa(in.Outcome.ExitCode) +
					" and printed no rank's failure, and a rank that ends within moments of its start is gone before its agent looks: " +
					"this rank may have been ended by another's failure; read the ranks' last output above (a Python exception, an MPI error)"
				d.Root = &f
				break
			}
		}
	}
	if len(rest) > maxOthers {
		d.Omitted = len(rest) - maxOthers
		rest = rest[:maxOthers]
	}
	d.Others = rest
	return d
}

func orMPIRun(p string) string {
	if p == "" {
		return "mpirun"
	}
	return p
}

// overridden is the finding of the MPI settings that override podmpi's
// wiring, ok false without one.
func overridden(overrides []Override, program string) (Finding, bool) {
	if len(overrides) == 0 {
		return Finding{}, false
	}
	var names, effects []string
	for _, o := range overrides {
		names = append(names, o.Name+"="+o.Value)
		if o.Effect != "" && !slices.Contains(effects, o.Effect) {
			effects = append(effects, o.Effect)
		}
	}
	f := Finding{Cause: CauseSetting, tier: tierFailed, Rank: -1, ExitCode: -1, source: "launcher",
		Sentence: fmt.Sprintf("the environment of %s sets %s, which overrides podmpi's wiring", orMPIRun(program), strings.Join(names, ", ")),
		Hint: "unset it in the image or the pod spec, so that mpirun starts its daemons through podmpi-rsh as the probe checked; " +
			"if you set it on purpose, mpirun's output above says what it could not do"}
	if len(effects) > 0 {
		f.Sentence += ": " + strings.Join(effects, "; ")
	}
	return f, true
}

// fromEvents turns a pod's account into findings: a worker-agent's, or
// the launcher's own (self) when it runs ranks. Events of another launcher
// instance than launcher (Input.Launcher; "" leaves none out) are left
// out, and counted.
func fromEvents(host string, self bool, ev api.Events, launcher string) (out []Finding, ignored int) {
	for _, e := range ev.Events {
		if launcher != "" && e.Launcher != "" && e.Launcher != launcher {
			ignored++
			continue
		}
		f := Finding{Time: e.Time, Host: host, self: self, Rank: e.Rank, PID: e.PID, Signal: e.Signal, CoreDumped: e.CoreDumped,
			ExitCode: e.ExitCode, Memory: e.Memory, source: "agent", comm: e.Comm, rss: e.RSSBytes}
		if self {
			f.launcherAt = e.Time // the launcher keeps this account itself
		} else {
			f.agentAt = e.Time
		}
		switch e.Kind {
		case api.KindOOMKill:
			f.Cause, f.tier = CauseOOM, tierOOM
			if f.Memory == nil {
				m := ev.Memory
				f.Memory = &m
			}
			f.Sentence, f.Hint = oomText(f.where(), f.Rank, f.PID, f.comm, f.rss, *f.Memory)
		case api.KindGPUXid, api.KindGPUECC:
			f.Cause, f.tier = CauseGPU, tierGPU
			f.Sentence = e.Message + " on " + f.where()
			switch {
			case e.Kind == api.KindGPUECC:
				f.Hint = "the GPU's memory failed: cordon the node (kubectl cordon), let the driver retire the page or reset the GPU, and rerun elsewhere"
			case e.GPU != nil && gpu.XidFromProgram(e.GPU.Xid):
				f.tier = tierCrash
				f.Hint = "this Xid usually comes from the program's own GPU code (an illegal memory access): run the failing rank under compute-sanitizer"
			default:
				f.Hint = "a GPU or driver fault: check the node (nvidia-smi -q, the kernel log), cordon it and rerun elsewhere"
			}
		case api.KindRankExit:
			f = rankEnd(f)
		case api.KindSessionExit:
			f = sessionEnd(f, e)
		default:
			continue
		}
		out = append(out, f)
	}
	return out, ignored
}

// rankEnd classifies a rank's end by its signal or status.
func rankEnd(f Finding) Finding {
	who := rankOn(f.Rank, f.PID, f.where())
	if f.comm != "" {
		who += " (" + f.comm + ")"
	}
	sig := signals.Parse(f.Signal)
	shellSig := syscall.Signal(0)
	if sig == 0 && isShell(f.comm) {
		shellSig = shellSignal(f.ExitCode)
	}
	switch {
	case shellSig != 0:
		f.Sentence = fmt.Sprintf("%s exited with status %d: its child died of %s", who, f.ExitCode, signals.Describe(shellSig))
		f = classifySignal(f, shellSig)
	case sig != 0:
		f.Sentence = who + " died of " + signals.Describe(sig)
		if f.CoreDumped {
			f.Sentence += ", core dumped"
		}
		f = classifySignal(f, sig)
	case f.ExitCode == 128+int(syscall.SIGPIPE):
		// 141 is what a shell or a runtime reports for SIGPIPE: whatever
		// read its output went away first (its daemon's session ended).
		f.Cause, f.tier = CauseCascade, tierCascade
		f.Sentence = fmt.Sprintf("%s exited with status %d (a broken pipe: what read its output, its daemon's session, was gone first)", who, f.ExitCode)
	case f.ExitCode > 0:
		f.Cause, f.tier = CauseExit, tierFailed
		f.Sentence = fmt.Sprintf("%s exited with status %d", who, f.ExitCode)
		f.Hint = "the program itself failed: read that rank's last output above (a Python exception, an MPI error)"
	default:
		f.Cause, f.tier = CauseCascade, tierInfo
		f.Sentence = who + " (its status was not seen)"
	}
	return f
}

// classifySignal sets f's cause, tier and hint for a death by sig: a crash,
// a SIGKILL (killed), or the cascade of another failure (SIGTERM, SIGINT,
// SIGHUP, SIGPIPE: something else ended first).
func classifySignal(f Finding, sig syscall.Signal) Finding {
	switch {
	case isCrash(sig):
		f.Cause, f.tier, f.Hint = CauseCrash, tierCrash, crashHint(sig)
	case sig == syscall.SIGKILL:
		f.Cause, f.tier, f.Hint = CauseKilled, tierFailed, killHint
	default:
		f.Cause, f.tier = CauseCascade, tierCascade
	}
	return f
}

// sessionEnd classifies the end of an SSH session's command (an MPI
// daemon's, mostly) that failed. The worker-agent runs every session's
// command through its shell (sh -c), so a status 128+N is the shell's word
// that the command died of signal N: a daemon that crashed (orted dying of
// SIGSEGV as it reads the node's topology leaves "exited with status
// 139"). A crash is the daemon's own failure, with its host; anything else
// is the cascade of another failure unless mpirun could not start its
// daemons (daemonsAtStart).
func sessionEnd(f Finding, e api.Event) Finding {
	f.Cause, f.tier = CauseCascade, tierCascade
	f.Sentence = e.Message + " on " + f.where()
	f.daemon = e.Command
	sig, byShell := signals.Parse(e.Signal), false
	if sig == 0 {
		sig, byShell = shellSignal(e.ExitCode), true
	}
	if !isCrash(sig) {
		return f
	}
	f.Cause, f.tier, f.Signal = CauseCrash, tierCrash, signals.Name(sig)
	f.Sentence = fmt.Sprintf("the command %s of ssh session %s on %s died of %s", e.Command, e.Session, f.where(), signals.Describe(sig))
	if mpi.IsDaemon(e.Command) {
		f.Sentence = fmt.Sprintf("the MPI daemon %s on %s died of %s", e.Command, f.where(), signals.Describe(sig))
	}
	if f.CoreDumped {
		f.Sentence += ", core dumped"
	}
	if byShell {
		f.Sentence += fmt.Sprintf(" (its ssh session %s exited with status %d)", e.Session, e.ExitCode)
	}
	f.Hint = "the command itself crashed on that worker: its core dump and the worker's log say where"
	if mpi.IsDaemon(e.Command) {
		f.Hint = "the MPI daemon itself crashed on that worker, not the network: its core dump and the worker's log say where (the daemon's " +
			"own error, if it printed one, is in mpirun's output above)"
	}
	return f
}

// shellSignal is the signal N a shell's exit status 128+N reports its
// child died of, 0 for any other status.
func shellSignal(code int) syscall.Signal {
	if code > 128 && code < 128+65 {
		return syscall.Signal(code - 128)
	}
	return 0
}

// isShell reports whether comm is a shell, whose exit status 128+N says
// that its child died of signal N.
func isShell(comm string) bool {
	switch comm {
	case "sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox":
		return true
	}
	return false
}

const killHint = "SIGKILL without an OOM kill in its pod's cgroup: the node's OOM killer, a liveness probe, or someone's kill; " +
	"kubectl get events and kubectl describe pod for the worker"

// oomText is the sentence and hint of an OOM kill.
func oomText(host string, rank, pid int, comm string, rss uint64, m api.Memory) (string, string) {
	who := rankOn(rank, pid, host)
	if rank < 0 && pid == 0 {
		who = "a process on " + host + " (rank unknown)"
	} else if comm != "" && rank < 0 {
		who += " (" + comm + ")"
	}
	sentence := api.OOMSentence(who, m)
	var hint string
	switch {
	case m.LimitBytes == 0:
		hint = "set resources.requests.memory and resources.limits.memory of the worker pods (equal, for Guaranteed QoS) so the scheduler reserves the memory; " +
			"kubectl describe node shows what else uses it"
	case m.AtLimit:
		hint = fmt.Sprintf("raise resources.limits.memory of the worker pods above %s, or lower the per-rank batch size or the ranks per pod (slots)",
			api.FormatBytes(m.LimitBytes))
	default:
		hint = "the node is overcommitted (its pods' memory requests are below what they use), not the limit too low: kubectl describe node and kubectl get events; " +
			"give the worker pods memory requests equal to their limits (Guaranteed QoS)"
	}
	if rss > 0 {
		hint += fmt.Sprintf("; the process used %s when last seen", api.FormatBytes(rss))
	}
	return sentence, hint
}

func rankOn(rank, pid int, host string) string {
	switch {
	case rank >= 0:
		return fmt.Sprintf("rank %d on %s", rank, host)
	case pid > 0:
		return fmt.Sprintf("process %d on %s", pid, host)
	}
	return "a rank on " + host
}

// silentWorker is a worker that did not answer, or that another pod
// answers for: gone when there is proof (another agent under its name, the
// Kubernetes API), unreachable otherwise (its name missing from DNS
// included).
func silentWorker(w Worker, port int) Finding {
	f := Finding{Cause: CauseGone, tier: tierLaunchOrSilent, Host: w.Host, Rank: -1, ExitCode: -1, Time: w.LostAt, source: "launcher", port: port,
		launcherAt: earliest(w.LostAt, w.ReplacedAt)}
	if w.ReplacedAt.IsZero() {
		f.answered = w.AnsweredAt // else the one answering is the new agent
	}
	why := "no answer"
	if w.Err != nil {
		why = w.Err.Error()
	}
	since := ""
	if !w.LostAt.IsZero() {
		since = ", since " + w.LostAt.UTC().Format(time.TimeOnly) + " UTC"
	}
	switch {
	case w.APIGone != "":
		f.Sentence = fmt.Sprintf("worker %s is gone: %s, as the Kubernetes API shows it%s", w.Host, w.APIGone, since)
	case !w.ReplacedAt.IsZero():
		if f.Time.IsZero() || w.ReplacedAt.Before(f.Time) {
			f.Time = w.ReplacedAt
		}
		f.Sentence = fmt.Sprintf("worker %s is gone: its pod was replaced while the job ran (the worker-agent answering on port %d now started at %s UTC, after mpirun)",
			w.Host, port, w.ReplacedAt.UTC().Format(time.TimeOnly))
	default:
		// A name missing from DNS is no proof either: a headless Service
		// without publishNotReadyAddresses leaves out a pod that is only
		// not Ready (why then says that nothing answered at the address
		// the name had).
		f.Cause = CauseUnreachable
		f.Sentence = fmt.Sprintf("worker %s did not answer: its worker-agent on port %d (%s)%s; its pod may have been deleted or restarted, or the network to it is cut",
			w.Host, port, why, since)
		if w.NameGone {
			f.Sentence = fmt.Sprintf("worker %s did not answer and its name is missing from DNS (%s)%s: its pod was deleted, or is not Ready and cut off",
				w.Host, why, since)
		}
		if w.Kube != "" {
			f.Sentence += "; Kubernetes says: " + w.Kube
		}
		f.Hint = "kubectl get pod -o wide and kubectl describe pod for that worker: deleted, evicted, restarted (Last State), or node NotReady? " +
			"If it runs and is Ready, check what cuts it off from the launcher (NetworkPolicy, the node's network)"
		return f
	}
	f.Hint = "the pod was deleted, evicted or preempted, or its node was lost: kubectl get events --sort-by=.lastTimestamp, and " +
		"kubectl describe pod for that worker (Evicted? OOMKilled? node NotReady?)"
	return f
}

// silent reports whether f is a worker-agent that gave no answer (gone or
// unreachable).
func (f Finding) silent() bool { return f.Cause == CauseGone || f.Cause == CauseUnreachable }

// launch is a daemon podmpi-rsh could not start. A record of any other
// command (a job script's own ssh: the failure directory is in the whole
// command's environment) is context, listed and never the cause: mpirun
// does not wait for it, and whatever ran it reports its failure.
func launch(r rsh.FailureRecord, hosts []string) Finding {
	host := matchHost(r.Host, hosts)
	where := net.JoinHostPort(host, strconv.Itoa(r.Port))
	if !r.Launch {
		prog := r.Daemon
		if prog == "" {
			prog = "a command"
		}
		return Finding{Cause: CauseCascade, tier: tierCascade, Time: r.Time, launcherAt: r.Time, Host: host, Rank: -1, ExitCode: -1, source: "rsh",
			phase: r.Phase, cause: r.Cause,
			Sentence: fmt.Sprintf("podmpi-rsh could not run %s on %s (not an MPI daemon: a command of the job's own, context only): %s: %s",
				prog, where, r.Phase, r.Cause),
			Hint: r.Hint}
	}
	daemon := r.Daemon
	if daemon == "" {
		daemon = "the MPI daemon"
	}
	verb := "start"
	if r.Phase == "remote-command" {
		verb = "run"
	}
	f := Finding{Cause: CauseLaunch, tier: tierLaunchOrSilent, Time: r.Time, launcherAt: r.Time, Host: host, Rank: -1, ExitCode: -1, source: "rsh",
		phase: r.Phase, cause: r.Cause,
		Sentence: fmt.Sprintf("podmpi-rsh could not %s %s on %s: %s: %s", verb, daemon, where, r.Phase, r.Cause),
		Hint:     r.Hint}
	return f
}

// foldLaunches joins what podmpi-rsh and a silent worker-agent say about
// the same host into one finding: a daemon that never started (a connect,
// handshake, key or auth phase) is the cause, and the silent agent says
// more about it; a session lost mid-run (remote-command) on a host whose
// agent is silent too is that host being gone.
func foldLaunches(fs []Finding) []Finding {
	drop := make([]bool, len(fs))
	for i := range fs {
		if !fs[i].silent() {
			continue
		}
		for j := range fs {
			l := &fs[j]
			if drop[j] || l.Cause != CauseLaunch || l.Host != fs[i].Host {
				continue
			}
			if l.phase == "remote-command" {
				fs[i].Time = earliest(fs[i].Time, l.Time)
				fs[i].launcherAt = earliest(fs[i].launcherAt, l.launcherAt)
				fs[i].Sentence += "; podmpi-rsh: " + l.phase + ": " + l.cause
				drop[j] = true
			} else if !drop[i] {
				l.Sentence += fmt.Sprintf("; its worker-agent does not answer on port %d either", fs[i].port)
				drop[i] = true
			}
		}
	}
	return undropped(fs, drop)
}

// undropped is fs without the findings drop marks, in place.
func undropped(fs []Finding, drop []bool) []Finding {
	out := fs[:0]
	for i, f := range fs {
		if !drop[i] {
			out = append(out, f)
		}
	}
	return out
}

// daemonsAtStart gives mpirun's generic "could not start its MPI daemons"
// (Open MPI's list of five usual suspects, a NetworkPolicy among them) the
// daemon's own account when a worker-agent has one: an MPI daemon's
// session that failed by then on that host (any host, when mpirun names
// none) is that failure, with its host and status, and takes mpirun's line
// in. A daemon that crashed (a signal) already outranks it as a crash; one
// that exited with a status (a library it cannot load, a setting it
// refuses) is named here instead of the network.
func daemonsAtStart(fs []Finding, program string) []Finding {
	drop := make([]bool, len(fs))
	for i := range fs {
		m := &fs[i]
		if m.source != "mpirun" || m.report != ReportDaemonFailed {
			continue
		}
		for j := range fs {
			e := &fs[j]
			later := !e.agentAt.IsZero() && e.agentAt.After(m.launcherAt.Add(clockSlack))
			if e.source != "agent" || !mpi.IsDaemon(e.daemon) || m.Host != "" && e.Host != m.Host || later {
				continue // not a daemon, another host's, or after mpirun's word (beyond the clocks' slack)
			}
			switch {
			case e.Cause == CauseCrash:
			case e.Cause == CauseCascade && e.ExitCode > 0 && shellSignal(e.ExitCode) == 0:
				e.Cause, e.tier = CauseDaemon, tierFailed
				e.Sentence = fmt.Sprintf("the MPI daemon %s on %s exited with status %d as it started", e.daemon, e.where(), e.ExitCode)
				e.Hint = "the MPI daemon failed on that worker, not the network: its own error is in mpirun's output above; " +
					"compare that worker's image, PATH and environment with the others'"
			default:
				continue
			}
			e.Sentence += "; " + orMPIRun(program) + " could not start its MPI daemons"
			e.launcherAt = earliest(e.launcherAt, m.launcherAt)
			drop[i] = true
		}
	}
	return undropped(fs, drop)
}

// clockSlack is how far a worker-agent's clock may be from the
// launcher's: two times on the two clocks closer than that are in no known
// order (see the package comment). It is the allowance the launcher makes
// when it asks for the accounts since mpirun started.
const clockSlack = 2 * time.Second

// earliest is the earlier of two times; a zero time is unknown.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// orderAgainstFailures moves what rule 3 holds (a daemon podmpi-rsh could
// not start, a worker that is gone or does not answer) below a crash or a
// failure of rules 4 and 5 that it did not come before (tierLate):
//
//   - A failure a worker's own agent recorded came before that worker went
//     quiet, whatever the clocks say: the agent was there to record it.
//   - A worker that does not answer, with no proof that its pod is gone,
//     outranks a failure only when its silence is known to have begun
//     before it: at the latest when the launcher's questions first went
//     unanswered, its daemon's session was lost, or mpirun lost its daemon
//     there. Silence is what the aftermath of a failure looks like too:
//     ranks spinning in MPI after a peer died starve the agent of CPU, a
//     pod that is being torn down answers late or not at all.
//   - A worker whose pod is gone for sure, and a daemon that could not be
//     started, are evidence about the thing itself: each outranks a
//     failure unless it is known to have come after it (the worker still
//     answered after the failure; the launch failed after it). A pod is not
//     deleted because a rank elsewhere crashed.
//
// mpirun's own word about its daemon on the silent worker (it lost it,
// or could not start it) is that silence seen from another side, not a
// failure elsewhere: it dates the silence.
func orderAgainstFailures(fs []Finding) []Finding {
	for i := range fs {
		if !fs[i].silent() {
			continue
		}
		for _, m := range fs {
			if m.aboutDaemonOn(fs[i].Host) {
				fs[i].launcherAt = earliest(fs[i].launcherAt, m.launcherAt)
				fs[i].Time = earliest(fs[i].Time, m.launcherAt)
			}
		}
	}
	for i := range fs {
		s := &fs[i]
		if s.tier != tierLaunchOrSilent {
			continue
		}
		for _, c := range fs {
			if c.tier != tierCrash && c.tier != tierFailed || s.silent() && c.aboutDaemonOn(s.Host) {
				continue
			}
			var late bool
			switch {
			case s.silent() && c.source == "agent" && c.Host == s.Host:
				late = true
			case s.Cause == CauseUnreachable:
				late = !beforeFailure(s.launcherAt, c)
			case s.silent():
				late = afterFailure(s.answered, c)
			default:
				late = afterFailure(s.launcherAt, c)
			}
			if late {
				s.tier = tierLate
				break
			}
		}
	}
	return fs
}

// aboutDaemonOn reports whether f is mpirun's word about its daemon on
// host: it lost it, or could not start it there.
func (f Finding) aboutDaemonOn(host string) bool {
	return f.source == "mpirun" && f.Cause == CauseDaemon && f.Host != "" && f.Host == host
}

// beforeFailure reports whether t, on the launcher's clock, is known to
// come before the failure f: before the launcher read mpirun's word of it
// (mpirun prints a rank's end within moments), or, when only a
// worker-agent saw it, before its time by more than clockSlack.
func beforeFailure(t time.Time, f Finding) bool {
	switch {
	case t.IsZero():
		return false
	case !f.launcherAt.IsZero():
		return t.Before(f.launcherAt)
	case !f.agentAt.IsZero():
		return t.Add(clockSlack).Before(f.agentAt)
	}
	return false
}

// afterFailure reports whether t, on the launcher's clock, is known to
// come after the failure f: after the launcher learned of it, or after a
// worker-agent's time of it by more than clockSlack.
func afterFailure(t time.Time, f Finding) bool {
	switch {
	case t.IsZero():
		return false
	case !f.launcherAt.IsZero():
		return t.After(f.launcherAt)
	case !f.agentAt.IsZero():
		return t.After(f.agentAt.Add(clockSlack))
	}
	return false
}

// fromReport turns one of mpirun's messages into a finding; self is the
// launcher's own entry in hosts ("" when it runs no ranks).
func fromReport(r Report, hosts []string, self, program string) (Finding, bool) {
	host := matchHost(r.Host, hosts)
	f := Finding{Time: r.Time, launcherAt: r.Time, Host: host, self: host != "" && host == self, Rank: r.Rank, PID: r.PID, ExitCode: r.ExitCode,
		CoreDumped: r.CoreDumped, source: "mpirun", hydra: r.Hydra, listed: r.Listed}
	switch r.Kind {
	case ReportSignal:
		f.Signal = signals.Name(syscall.Signal(r.Signal))
		f.ExitCode = -1
		if !r.Hydra && (r.PID == 0 || r.Rank >= 0) {
			f.PID = 0 // Open MPI prints PID 0, or its daemon's
		}
		return rankEnd(f), true
	case ReportExit:
		if r.ExitCode <= 0 {
			return f, false
		}
		return rankEnd(f), true
	case ReportDaemonLost:
		f.Cause, f.tier, f.report = CauseDaemon, tierFailed, r.Kind
		f.Sentence = fmt.Sprintf("%s lost contact with its MPI daemon on %s", orMPIRun(program), f.where())
		f.Hint = "the daemon died or the network between the pods broke: read that worker's log and kubectl get events"
		return f, true
	case ReportDaemonFailed:
		f.Cause, f.tier, f.report = CauseDaemon, tierFailed, r.Kind
		f.Sentence = orMPIRun(program) + " could not start its MPI daemons: " + r.Line
		f.Hint = "read podmpi-rsh's lines above; a daemon that cannot call back to the launcher points at a NetworkPolicy or a second network interface"
		return f, true
	}
	return f, false
}

// where names the finding's host in its sentence: the launcher's own pod
// says so, since it runs no worker-agent.
func (f Finding) where() string {
	switch {
	case f.Host == "" && f.unplaced != "":
		return "an unknown host (" + f.unplaced + ")"
	case f.Host == "":
		return "an unknown host"
	case f.self:
		return f.Host + " (the launcher's own pod)"
	}
	return f.Host
}

// placeRanks gives a rank mpirun named without its host (Open MPI's
// "Process name: [[j,1],R] Exit code: C") its host from evidence: the
// MPI's report of where rank R started (placed: one host, from this run's
// output), else the host whose account saw rank R end, when exactly one
// did (ranks are numbered across the job, so that is where it ran, the
// launcher's own pod included). When several accounts did, one of them an
// earlier run's (the accounts are asked from a little before mpirun
// started, for clocks that do not quite agree), the hosts that saw it end
// only before started are left out. A rank that ended within moments is
// gone before its agent looks: without the MPI's report too, its host
// stays unknown, and the finding says why.
func placeRanks(fs []Finding, started time.Time, placed map[int][]string, all []string, self, program string) []Finding {
	for i := range fs {
		f := &fs[i]
		if f.source != "mpirun" || f.Host != "" || f.Rank < 0 {
			continue
		}
		if hs := placed[f.Rank]; len(hs) == 1 {
			f.Host = matchHost(hs[0], all)
			f.self = f.Host == self
			*f = rankEnd(*f)
			continue
		}
		type seen struct {
			at     *Finding
			inThis bool // seen at or after started
		}
		var hosts []string
		byHost := map[string]*seen{}
		for j := range fs {
			g := &fs[j]
			if g.source != "agent" || g.Rank != f.Rank || g.Host == "" {
				continue
			}
			s, ok := byHost[g.Host]
			if !ok {
				s = &seen{at: g}
				byHost[g.Host] = s
				hosts = append(hosts, g.Host)
			}
			s.inThis = s.inThis || started.IsZero() || !g.Time.Before(started)
		}
		if len(hosts) > 1 {
			hosts = slices.DeleteFunc(hosts, func(h string) bool { return !byHost[h].inThis })
		}
		switch {
		case len(hosts) == 1:
			at := byHost[hosts[0]].at
			f.Host, f.self = at.Host, at.self
		case len(placed[f.Rank]) > 1:
			f.unplaced = "the MPI reported it starting on " + strings.Join(placed[f.Rank], " and ")
		case len(hosts) > 1:
			f.unplaced = "the accounts of " + strings.Join(hosts, " and ") + " each saw a rank " + strconv.Itoa(f.Rank) + " end"
		default:
			f.unplaced = orMPIRun(program) + " named none, and neither a report of where the rank started nor a worker-agent's account places it"
		}
		*f = rankEnd(*f)
	}
	return fs
}

// hydraCleanup names Hydra's SIGKILLs for the cleanup they are when one of
// its processes exited with a status (its list of exit codes says so):
// Hydra then kills the others with SIGKILL (MPICH when a rank exits
// without MPI_Finalize, Intel MPI when any rank fails), and its block
// names one of those it saw end (MPICH: "EXIT CODE: 9", the first process
// a signal ended). The process that exited is the failure.
func hydraCleanup(fs []Finding) []Finding {
	if !slices.ContainsFunc(fs, func(f Finding) bool { return f.hydra && f.Cause == CauseExit }) {
		return fs
	}
	for i := range fs {
		if f := &fs[i]; f.hydra && f.Cause == CauseKilled {
			f.Cause, f.tier, f.Hint = CauseCascade, tierCascade, ""
			f.Sentence += " (Hydra kills the other processes when one fails)"
		}
	}
	return fs
}

// matchHost maps a node name as MPI printed it (short or full) to the
// hostfile's name.
func matchHost(name string, hosts []string) string {
	if name == "" {
		return ""
	}
	for _, h := range hosts {
		if strings.EqualFold(h, name) {
			return h
		}
	}
	short, _, _ := strings.Cut(name, ".")
	for _, h := range hosts {
		if hs, _, _ := strings.Cut(h, "."); strings.EqualFold(hs, short) {
			return h
		}
	}
	return name
}

// merge folds findings about the same process into one: mpirun's report
// of a rank and the agent's event for it, and the SIGKILL an OOM kill
// caused (the OOM kill takes the rank from it when it had none).
func merge(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		merged := false
		for i := range out {
			if sameProcess(out[i], f) {
				out[i] = combine(out[i], f)
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, f)
		}
	}
	// An OOM kill without a rank on a host where mpirun reports a rank
	// killed by SIGKILL: that is its victim.
	for i := range out {
		if out[i].Cause != CauseOOM || out[i].Rank >= 0 {
			continue
		}
		for j := range out {
			if out[j].Host == out[i].Host && out[j].Cause == CauseKilled && out[j].Rank >= 0 {
				out[i].Rank, out[i].PID = out[j].Rank, max(out[i].PID, out[j].PID)
				out[i].Sentence, out[i].Hint = oomText(out[i].where(), out[i].Rank, out[i].PID, out[i].comm, out[i].rss, *out[i].Memory)
				out[j].tier = tierInfo // the same failure
				break
			}
		}
	}
	return slices.DeleteFunc(out, func(f Finding) bool { return f.tier == tierInfo && f.Cause == CauseKilled })
}

func sameProcess(a, b Finding) bool {
	if a.Host == "" || a.Host != b.Host || a.silent() || b.silent() || a.Cause == CauseLaunch || b.Cause == CauseLaunch ||
		a.Cause == CauseGPU || b.Cause == CauseGPU || a.Cause == CauseDaemon || b.Cause == CauseDaemon {
		return false
	}
	if a.source == "agent" && b.source == "agent" && (a.Cause == CauseCascade || b.Cause == CauseCascade) && (a.Rank < 0 || b.Rank < 0) {
		return false
	}
	switch {
	case a.PID > 0 && b.PID > 0:
		return a.PID == b.PID
	case a.Rank >= 0 && b.Rank >= 0:
		return a.Rank == b.Rank
	case a.listed != b.listed && (a.source == "agent" || b.source == "agent"):
		// Hydra's list names a process by its host and status alone.
		return a.Cause == b.Cause && a.ExitCode == b.ExitCode && a.Signal == b.Signal
	}
	return false
}

// combine keeps the stronger of two findings about one process, with the
// facts either one had.
func combine(a, b Finding) Finding {
	keep, other := a, b
	if b.tier < a.tier || (b.tier == a.tier && b.source == "agent" && a.source != "agent") {
		keep, other = b, a
	}
	if keep.Rank < 0 && other.Rank >= 0 {
		keep.Rank = other.Rank
	}
	if keep.PID == 0 {
		keep.PID = other.PID
	}
	keep.CoreDumped = keep.CoreDumped || other.CoreDumped
	keep.hydra = keep.hydra || other.hydra
	if keep.comm == "" {
		keep.comm, keep.rss = other.comm, max(keep.rss, other.rss)
	}
	if keep.Signal == "" && other.Signal != "" && keep.Cause != CauseOOM {
		keep.Signal = other.Signal
	}
	keep.Time = earliest(keep.Time, other.Time)
	keep.launcherAt = earliest(keep.launcherAt, other.launcherAt)
	keep.agentAt = earliest(keep.agentAt, other.agentAt)
	switch keep.Cause {
	case CauseOOM:
		keep.Sentence, keep.Hint = oomText(keep.where(), keep.Rank, keep.PID, keep.comm, keep.rss, *keep.Memory)
	case CauseCrash, CauseKilled, CauseExit, CauseCascade:
		if keep.source == "mpirun" || keep.tier == tierInfo {
			keep = rankEnd(keep)
		}
	}
	return keep
}

// crash signals: the process itself failed.
func isCrash(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGABRT, syscall.SIGILL, syscall.SIGFPE, syscall.SIGSYS, syscall.SIGTRAP:
		return true
	}
	return false
}

func crashHint(sig syscall.Signal) string {
	const core = "look at its core dump (ulimit -c unlimited in the image, and the node's kernel.core_pattern) and its last output above"
	switch sig {
	case syscall.SIGBUS:
		return "a bus error is most often /dev/shm too small for NCCL or MPI shared memory (mount an emptyDir with medium: Memory at /dev/shm), " +
			"or a memory-mapped file that was truncated; " + core
	case syscall.SIGABRT:
		return "the program or a library aborted (a failed assertion, a CUDA or NCCL error, an uncaught C++ exception): " + core
	case syscall.SIGILL:
		return "the binary uses CPU instructions this node lacks (built for another CPU), or jumped into data: " + core
	case syscall.SIGFPE:
		return "an arithmetic fault (an integer division by zero): " + core
	}
	return "a crash in the program or a library it loads (CUDA, NCCL, a Python extension): " + core
}
