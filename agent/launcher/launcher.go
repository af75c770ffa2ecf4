// Package launcher is the launcher pod's job: discover the workers, wait
// until every name resolves, decide slots, write the hostfile, probe SSH to
// every worker, then run the user's unchanged mpirun command wired for its
// MPI, with this binary as mpirun's ssh program.
//
// Every phase is timed and recorded in Metrics; every failure ends in a
// distinct exit code (agent/exitcode) and a root-cause paragraph written to
// the Kubernetes termination message file.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/imagecheck"
	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/mpirun"
	"github.com/podmpi/podmpi/agent/launcher/postmortem"
	"github.com/podmpi/podmpi/agent/launcher/probe"
	"github.com/podmpi/podmpi/agent/launcher/share"
	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/layout"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/hostfile"
	"github.com/podmpi/podmpi/mpi"
)

// Failure is a launcher failure: which phase, the exit code, and the
// root-cause paragraph for the termination log.
type Failure struct {
	Phase string
	Code  exitcode.Code
	Err   error
	Hint  string
	// Diagnosis is what killed the job after mpirun started, when the
	// launcher could tell (package postmortem); it goes first in the
	// termination message.
	Diagnosis *postmortem.Diagnosis
	// Kube is what Kubernetes says of each worker the failure is about,
	// when the launcher may ask it.
	Kube []KubeNote
	// Phases is, for a failed probe, the phase each worker that failed
	// it failed in, in the order Err lists them: the Event's reason is
	// made of them (probeReason), never of Err's text.
	Phases []sshclient.Phase
}

// KubeNote is what Kubernetes says of one worker's pod: "tj-node-0-2.tj:
// pod tj-node-0-2-x is Pending, not scheduled: ...", and the fix.
type KubeNote struct {
	Host, Pod, Why, Hint string
}

func (n KubeNote) String() string {
	s := n.Host + ": pod " + n.Pod + " " + n.Why
	if n.Hint != "" {
		s += " (" + n.Hint + ")"
	}
	return s
}

func (f *Failure) Error() string {
	s := fmt.Sprintf("%s: %v", f.Phase, f.Err)
	if len(f.Kube) > 0 {
		notes := make([]string, len(f.Kube))
		for i, n := range f.Kube {
			notes[i] = n.String()
		}
		s += "\nKubernetes says: " + strings.Join(notes, "; ")
	}
	if f.Hint != "" {
		s += "\nhint: " + f.Hint
	}
	return s
}

// Summary is the failure in one line: the phase, the first thing that
// failed (and how many more did), what Kubernetes says of it, and the fix.
// It is the termination message's first line and the failure Event's
// message.
func (f *Failure) Summary() string {
	lines := strings.Split(strings.TrimSpace(fmt.Sprint(f.Err)), "\n")
	s := f.Phase + ": " + strings.TrimSpace(lines[0])
	hint := f.Hint
	if rest := lines[1:]; strings.HasSuffix(s, ":") && len(rest) > 0 {
		// A list follows ("2 of 3 workers failed the SSH probe:"): its
		// first entry, which carries its own hint, and a count of the rest.
		first := strings.TrimSpace(rest[0])
		if cause, h, ok := strings.Cut(first, "; hint: "); ok && hint == "" {
			first, hint = cause, h
		}
		s += " " + first
		if more := countEntries(rest[1:]); more > 0 {
			s += fmt.Sprintf(" (and %d more)", more)
		}
	}
	if len(f.Kube) > 0 {
		// The first worker's word, and its fix when the failure has none:
		// the others usually say the same.
		n := f.Kube[0]
		s += "; Kubernetes says: " + n.Host + ": pod " + n.Pod + " " + n.Why
		if len(f.Kube) > 1 {
			s += fmt.Sprintf(" (and %d more)", len(f.Kube)-1)
		}
		if hint == "" {
			hint = n.Hint
		}
	}
	if hint != "" {
		s += "; hint: " + hint
	}
	return s
}

// countEntries counts the lines of a list that start an entry (not a
// continuation or a hint).
func countEntries(lines []string) int {
	n := 0
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "hint:") && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			n++
		}
	}
	return n
}

func (f *Failure) Unwrap() error { return f.Err }

// Prepared is the outcome of the phases before mpirun: the hosts with their
// slots, the implementation, and where the hostfile went.
type Prepared struct {
	Spec     discovery.Spec // the discovery settings, defaults applied
	Plan     discovery.Plan
	Hosts    []hostfile.Host
	Impl     mpi.Implementation
	Version  string
	Hostfile string
	Results  []probe.Result
	// Addrs are the addresses each host name resolved to in dns-wait.
	Addrs map[string][]string
}

// Launcher runs the phases.
type Launcher struct {
	cfg   Config
	log   *slog.Logger
	m     *Metrics
	start time.Time
	kv    kubeView // the Kubernetes API, when the pod may use it (kube.go)
	// pool holds the probe's connections for mpirun's sessions when the
	// launcher shares its connections (Run sets it; run.go serves it).
	pool *share.Pool
	// instance is this launcher process as it declares itself to the
	// worker-agents on every connection it and its mpirun's podmpi-rsh
	// make (launcherid), so that a worker ends what an older, lost
	// instance of the job's launcher left running there. Only Run sets
	// it (instance.go): `launcher probe` and `launcher hostfile`, run by
	// hand next to a running job, declare nothing.
	instance launcherid.Instance
	// status reports to the TrainJob's status when Trainer gives the
	// variables (status.go); nil otherwise.
	status *statusView
}

// New fills the zero settings of cfg from Defaults() and the missing
// dependencies (a discarding logger, fresh metrics, the process's streams).
// Settings are checked by Config.Validate, which the command line runs.
func New(cfg Config) (*Launcher, error) {
	d := Defaults()
	setDefault(&cfg.DiscoveryTimeout, d.DiscoveryTimeout)
	setDefault(&cfg.DefaultSlots, d.DefaultSlots)
	setDefault(&cfg.WorkerWebPort, d.WorkerWebPort)
	setDefault(&cfg.Implementation, d.Implementation)
	setDefault(&cfg.SSHPort, d.SSHPort)
	setDefault(&cfg.ProbeTimeout, d.ProbeTimeout)
	setDefault(&cfg.ProbeParallel, d.ProbeParallel)
	setDefault(&cfg.HostfilePath, d.HostfilePath)
	setDefault(&cfg.KillGrace, d.KillGrace)
	setDefault(&cfg.DiagnosisTimeout, d.DiagnosisTimeout)
	setDefault(&cfg.LaunchGrace, d.LaunchGrace)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	return &Launcher{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, start: time.Now()}, nil
}

// setDefault sets *v to d when *v is the zero value.
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Metrics returns the launcher's metrics.
func (l *Launcher) Metrics() *Metrics { return l.m }

// phase times fn and records its start, duration and success. A failed
// phase is an ERROR record with what failed, its exit code and hint.
func (l *Launcher) phase(name string, fn func() error) error {
	t0 := time.Now()
	l.m.PhaseStart.WithLabelValues(name).Set(float64(t0.UnixNano()) / 1e9)
	l.log.Info("phase start", "phase", name)
	l.reportStatus(name)
	err := fn()
	d := time.Since(t0)
	l.m.PhaseDuration.WithLabelValues(name).Set(d.Seconds())
	if err == nil {
		l.m.PhaseSuccess.WithLabelValues(name).Set(1)
		l.log.Info("phase done", "phase", name, "seconds", round(d), "ok", true)
		l.reportStatus("")
		return nil
	}
	l.m.PhaseSuccess.WithLabelValues(name).Set(0)
	attrs := []any{"phase", name, "seconds", round(d), "ok", false}
	var f *Failure
	if errors.As(err, &f) && f.Err != nil {
		attrs = append(attrs, "error", f.Err.Error(), "code", int(f.Code))
		if f.Hint != "" {
			attrs = append(attrs, "hint", f.Hint)
		}
	} else {
		attrs = append(attrs, "error", err.Error())
	}
	l.log.Error("phase failed", attrs...)
	return err
}

func round(d time.Duration) float64 { return float64(d.Round(time.Millisecond)) / float64(time.Second) }

func (l *Launcher) report(format string, args ...any) {
	if l.cfg.Report != nil {
		fmt.Fprintf(l.cfg.Report, format, args...)
	}
}

// EventDNSNotAnswering is the reason of the Warning Event the dns-wait
// records when the DNS server answers none of its lookups.
const EventDNSNotAnswering = "DNSNotAnswering"

// Prepare runs every phase before mpirun. probeWorkers=false skips the SSH
// probe (used by `launcher hostfile`).
func (l *Launcher) Prepare(ctx context.Context, probeWorkers bool) (*Prepared, error) {
	p := &Prepared{}
	cfg := l.cfg

	// discovery: the static part (flags, hostfile, template).
	err := l.phase(PhaseDiscovery, func() error {
		spec, err := cfg.spec()
		if err != nil {
			return err
		}
		p.Spec = spec
		plan, err := discovery.Resolve(spec)
		if err != nil {
			return &Failure{Phase: PhaseDiscovery, Code: exitcode.Config, Err: err,
				Hint: "give the workers with --workers, --hostfile, --discovery.service or --discovery.template"}
		}
		p.Plan = plan
		expected := len(plan.Hosts)
		if expected == 0 {
			expected = p.Spec.Expected
		}
		l.m.WorkersExpected.Set(float64(expected))
		l.log.Info("discovery plan", "source", string(plan.Source), "hosts", len(plan.Hosts), "expected", expected, "selfIndex", plan.SelfIndex)
		for _, ign := range plan.Ignored {
			l.log.Warn("discovery source ignored: a higher-precedence source is set", "ignored", string(ign), "used", string(plan.Source))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	// mpi: which MPI the command runs decides the hostfile format, the
	// daemons probed and the wiring. It runs before the DNS wait so that an
	// image without the MPI fails at once rather than after the workers.
	var impl mpi.Implementation
	err = l.phase(PhaseMPI, func() error {
		var err error
		impl, p.Version, err = l.implementation(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	p.Impl = impl

	// From here until the probe ends the launcher waits for its workers:
	// what Kubernetes says of a worker that is not coming is warned about
	// and added to the waits' progress and failures (kube.go). A Service
	// names them only once they resolve.
	l.setWaiting(true, workerNames(p.Plan.Hosts, p.Plan.SelfIndex))
	defer l.setWaiting(false, nil)

	// dns-wait: every name, and the launcher's own, resolves.
	var resolved []discovery.Resolved
	err = l.phase(PhaseDNSWait, func() error {
		r, err := discovery.Wait(ctx, p.Spec, p.Plan, discovery.WaitOptions{
			Resolver: cfg.Resolver,
			Timeout:  cfg.DiscoveryTimeout,
			Explain:  l.explain,
			Logger:   l.log,
			// A DNS server that answers nothing is raised where users look
			// within seconds, not only by the deadline's exit 66.
			Warn: func(msg string) { l.event(kube.Warning, EventDNSNotAnswering, msg) },
			Progress: func(pr discovery.Progress) {
				l.m.WorkersResolved.Set(float64(pr.Resolved)) // Wait logs the progress itself
			},
		})
		if err != nil {
			var te *discovery.TimeoutError
			if errors.As(err, &te) {
				l.m.WorkersResolved.Set(float64(te.Resolved))
				// The error lists the missing names and the likely causes.
				return &Failure{Phase: PhaseDNSWait, Code: exitcode.DiscoveryTimeout, Err: err, Kube: l.kubeNotes(te.Missing)}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &Failure{Phase: PhaseDNSWait, Code: exitcode.DiscoveryTimeout, Err: err}
		}
		resolved = r
		l.m.WorkersResolved.Set(float64(len(r)))
		return nil
	})
	if err != nil {
		return nil, err
	}
	hosts := make([]hostfile.Host, len(resolved))
	p.Addrs = make(map[string][]string, len(resolved))
	for i, r := range resolved {
		hosts[i] = r.Host
		p.Addrs[r.Host.Name] = r.Addrs
	}
	l.setWaiting(true, workerNames(hosts, p.Plan.SelfIndex))

	// slots. From here on, workers have until readyBy to answer for their
	// slots and pass the probe.
	readyBy := time.Now().Add(cfg.ProbeTimeout)
	err = l.phase(PhaseSlots, func() error {
		self := ""
		if p.Plan.SelfIndex >= 0 && p.Plan.SelfIndex < len(hosts) {
			self = hosts[p.Plan.SelfIndex].Name
		}
		addrs := make(map[string][]string, len(resolved))
		for _, r := range resolved {
			addrs[r.Host.Name] = r.Addrs
		}
		out, decisions, err := slots.Decide(ctx, hosts, addrs, slots.Options{
			Fixed:        cfg.Slots,
			WebPort:      cfg.WorkerWebPort,
			DefaultSlots: max(cfg.DefaultSlots, 1),
			AllowDefault: cfg.SlotsAllowDefault,
			Deadline:     cfg.ProbeTimeout,
			Parallel:     cfg.ProbeParallel,
			Sample:       cfg.ProbeSSHSample,
			Self:         self,
			Explain:      l.explain,
			Logger:       l.log,
		})
		var ue *slots.UnknownError
		switch {
		case errors.As(err, &ue):
			return &Failure{Phase: PhaseSlots, Code: exitcode.SlotsUnknown, Err: err, Kube: l.kubeNotes(ue.Names()), Hint: fmt.Sprintf(
				"start worker-agent on those pods (it serves /info on --worker.web-port %d) and let the launcher reach that port; "+
					"raise --probe.timeout (%s) if they start late; or give their counts (--workers name=N, slots=N in the hostfile, --slots N), "+
					"or pass --slots.allow-default to run them with --discovery.default-slots (%d)",
				cfg.WorkerWebPort, cfg.ProbeTimeout, max(cfg.DefaultSlots, 1))}
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return &Failure{Phase: PhaseSlots, Code: exitcode.Config, Err: err, Hint: "--slots takes auto or a positive integer"}
		}
		hosts = out
		mismatch := 0
		for _, d := range decisions {
			if d.Mismatch {
				mismatch++
			}
		}
		l.m.SlotMismatch.Set(float64(mismatch))
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.Hosts = hosts

	// hostfile.
	var written []hostfile.Host
	err = l.phase(PhaseHostfile, func() error {
		if err := os.MkdirAll(filepath.Dir(cfg.HostfilePath), 0o755); err != nil {
			return &Failure{Phase: PhaseHostfile, Code: exitcode.Config, Err: err,
				Hint: "choose a writable --hostfile.output (an emptyDir or /tmp under readOnlyRootFilesystem)"}
		}
		written = l.hostsToWrite(impl, hosts, p.Plan.SelfIndex)
		if err := hostfile.WriteFile(cfg.HostfilePath, impl.HostfileFormat(), written, 0o644); err != nil {
			return &Failure{Phase: PhaseHostfile, Code: exitcode.Config, Err: err,
				Hint: "choose a writable --hostfile.output (an emptyDir or /tmp under readOnlyRootFilesystem)"}
		}
		p.Hostfile = cfg.HostfilePath
		l.log.Info("hostfile written", "path", p.Hostfile, "format", impl.HostfileFormat().String(),
			"hosts", len(written), "slots", hostfile.TotalSlots(written))
		return nil
	})
	if err != nil {
		return nil, err
	}
	var hf strings.Builder
	_ = hostfile.Render(&hf, impl.HostfileFormat(), written)
	l.report("== hostfile %s (%s, %d hosts, %d slots)\n%s", p.Hostfile, impl.HostfileFormat(), len(written), hostfile.TotalSlots(written), hf.String())

	if !probeWorkers || cfg.SkipProbe {
		return p, nil
	}

	// probe: every worker but ourselves.
	err = l.phase(PhaseProbe, func() error {
		client, err := sshclient.LoadJobConfig(cfg.AuthDir, os.Getenv("HOME"), "")
		if err != nil {
			return &Failure{Phase: PhaseProbe, Code: exitcode.Config, Err: err}
		}
		// The login name podmpi-rsh will send (--ssh.user, else $USER, else
		// mpiuser), so that mpirun's sessions may share these connections.
		client.User = cfg.SSHUser
		if client.User == "" {
			client.User = os.Getenv("USER")
		}
		client.Launcher = l.instance
		if cfg.InsecureIgnoreHostKey {
			l.log.Warn("host keys are NOT verified (--ssh.insecure-ignore-host-key): anyone who can answer on a worker's address gets the job's commands")
			client.InsecureIgnoreHostKey = true
		}
		var targets []probe.Target
		for _, h := range workerNames(hosts, p.Plan.SelfIndex) {
			targets = append(targets, probe.Target{Host: h, Port: cfg.SSHPort})
		}
		// What the slots phase left of the deadline; every worker still
		// gets one real attempt (probe.Run's floor) when that is little.
		left := max(time.Until(readyBy), time.Millisecond)
		var keep func(probe.Target, *ssh.Client) bool
		if l.pool != nil {
			keep = func(t probe.Target, c *ssh.Client) bool { return l.pool.Add(t.Host, t.Port, client, c) }
		}
		results := probe.Run(ctx, targets, probe.Options{
			Keep:      keep,
			Explain:   l.explainRefused,
			Note:      l.explain,
			Client:    client,
			Daemons:   impl.Daemons(),
			Parallel:  cfg.ProbeParallel,
			SSHSample: cfg.ProbeSSHSample,
			Deadline:  left,
			Logger:    l.log,
		})
		p.Results = results
		ok := 0
		var failed []probe.Result
		for _, r := range results {
			if r.OK {
				ok++
				l.m.ProbeLatency.Observe(r.Latency.Seconds())
			} else {
				failed = append(failed, r)
			}
		}
		l.m.WorkersReach.Set(float64(ok))
		l.setStatusProbed(len(results))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, r := range results {
			if r.OK {
				l.log.Debug("worker passed the SSH probe", "host", r.Target.Host, "port", r.Target.Port,
					"check", r.Check, "latency_seconds", r.Latency.Seconds(), "attempts", r.Attempts, "daemon", r.DaemonPath)
			}
		}
		for _, r := range failed {
			f := r.Failure
			l.m.ProbeFailures.WithLabelValues(string(f.Phase)).Inc()
			l.log.Error("worker failed the SSH probe", "host", f.Host, "port", f.Port, "phase", string(f.Phase),
				"cause", f.CauseText(), "hint", f.Hint, "attempts", r.Attempts)
		}
		l.log.Info("probe done", "workers", len(results), "ok", ok, "failed", len(failed))
		if l.cfg.Report != nil {
			l.report("== probe (%d/%d workers reachable)\n", ok, len(results))
			probe.WriteReport(l.cfg.Report, results)
		}
		if len(failed) > 0 {
			// The workers of the phase most of them failed in come first:
			// the first one named (the Event's message), its hint and the
			// Event's reason tell the same story.
			phases := make([]sshclient.Phase, len(failed))
			for i, r := range failed {
				phases[i] = r.Failure.Phase
			}
			reason := probeReason(phases)
			var lead, rest []probe.Result
			for _, r := range failed {
				if suffix, _ := probeReasonOf(r.Failure.Phase); suffix == reason {
					lead = append(lead, r)
				} else {
					rest = append(rest, r)
				}
			}
			failed = append(lead, rest...)
			var b strings.Builder
			var late []hostfile.Host
			var hosts []string
			for i, r := range failed {
				fmt.Fprintf(&b, "%v\n", r.Failure)
				if r.Failure.Phase != sshclient.PhaseNotWorkerAgent {
					late = append(late, hostfile.Host{Name: r.Target.Host})
				}
				hosts = append(hosts, r.Target.Host)
				phases[i] = r.Failure.Phase
			}
			return &Failure{Phase: PhaseProbe, Code: exitcode.ProbeFailed, Phases: phases,
				Err: fmt.Errorf("%d of %d workers failed the SSH probe%s:\n%s", len(failed), len(results), phaseCounts(phases),
					strings.TrimSpace(b.String())),
				Kube: l.kubeNotes(hosts), Hint: siblingHint(p.Spec.Self, late)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// phaseCounts says how many workers failed in each phase, most first
// (" (63 tcp-refused, 1 auth)"), "" when they all failed in one.
func phaseCounts(phases []sshclient.Phase) string {
	counts := map[sshclient.Phase]int{}
	var order []sshclient.Phase
	for _, p := range phases {
		if counts[p] == 0 {
			order = append(order, p)
		}
		counts[p]++
	}
	if len(order) < 2 {
		return ""
	}
	slices.SortStableFunc(order, func(a, b sshclient.Phase) int { return counts[b] - counts[a] })
	parts := make([]string, len(order))
	for i, p := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[p], p)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// workerNames are the names of hosts but the launcher's own entry, at
// index self (-1: none).
func workerNames(hosts []hostfile.Host, self int) []string {
	names := make([]string, 0, len(hosts))
	for i, h := range hosts {
		if i != self {
			names = append(names, h.Name)
		}
	}
	return names
}

// siblingHint is the hint for workers that never became reachable when
// their names look like other pods of the launcher's own replicated job
// (JobSet's <jobset>-<job>-<index>-<pod> naming): they may be further
// launcher pods, which never run a worker-agent. A name is no proof (the
// launcher may well be pod 0 of its workers' own group), so this is only
// a hint; a peer that answers as a launcher is named by the probe itself.
func siblingHint(self string, late []hostfile.Host) string {
	sib := discovery.Siblings(self, late, -1)
	if len(sib) == 0 {
		return ""
	}
	return fmt.Sprintf("%s named like other pods of this launcher's own replicated job; if they are launcher pods too (the job starts several), "+
		"none of them runs a worker-agent: Trainer sizes the launcher's replicated job from the runtime's mlPolicy.numNodes, so set it to 1 in "+
		"the ClusterTrainingRuntime and give the node count in the TrainJob (trainer.numNodes); with JobSet directly, give the launcher job "+
		"replicas: 1 and parallelism: 1", plural(len(sib), "worker is", "workers are"))
}

// plural is "1 worker is" or "3 workers are".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// implementation resolves --mpi.implementation with mpirun.Resolve: an
// explicit flavour is taken as is; "openmpi" and "auto" run `--version` only
// on an MPI launcher program (the command's own when it is one, else mpirun
// from PATH), never on the user's program.
func (l *Launcher) implementation(ctx context.Context) (mpi.Implementation, string, error) {
	argv0 := ""
	if len(l.cfg.Command) > 0 {
		argv0 = l.cfg.Command[0]
	}
	// --version runs on the real MPI launcher, never on podmpi's own
	// mpirun name (l.program skips this binary).
	prog := mpirun.DetectProgram(argv0)
	p, perr := l.program(prog)
	if p != "" {
		prog = p
	}
	if perr != nil {
		if _, auto, _ := mpi.ParseImplementation(l.cfg.Implementation); auto {
			// Only podmpi's own mpirun is on PATH: running it to ask its
			// version would run the launcher again.
			return "", "", &Failure{Phase: PhaseMPI, Code: exitcode.MPIRunNotFound, Err: fmt.Errorf("no MPI in this image: %w%s", perr, imageNote()),
				Hint: "run the launcher on an image with an MPI (Open MPI, MPICH, Intel MPI) whose mpirun is on the container's PATH after /opt/podmpi/bin, or in one of the folders podmpi looks in"}
		}
	}
	impl, ver, err := mpirun.Resolve(ctx, l.cfg.Implementation, prog)
	switch {
	case errors.Is(err, mpi.ErrUnknownImplementation):
		return "", "", &Failure{Phase: PhaseMPI, Code: exitcode.Usage, Err: err}
	case err != nil:
		return "", "", &Failure{Phase: PhaseMPI, Code: exitcode.MPIRunNotFound, Err: err,
			Hint: "install an MPI in the launcher image, or set --mpi.implementation to openmpi, openmpi5, intelmpi or mpich"}
	}
	l.log.Info("mpi implementation", "implementation", string(impl), "version", ver)
	return impl, ver, nil
}

// hostsToWrite is hosts as the hostfile for impl lists them: the launcher's
// own entry becomes its host name where the MPI starts local processes only
// for such an entry (mpi.Flavour.SelfByHostname).
func (l *Launcher) hostsToWrite(impl mpi.Implementation, hosts []hostfile.Host, self int) []hostfile.Host {
	if self < 0 || self >= len(hosts) || !impl.Flavour().SelfByHostname {
		return hosts
	}
	name, err := os.Hostname()
	if err != nil || hostfile.ValidateName(name) != nil {
		l.log.Warn("this pod's host name is unusable; the launcher's own hostfile entry stays as listed", "entry", hosts[self].Name, "err", err)
		return hosts
	}
	out := slices.Clone(hosts)
	out[self].Name = name
	l.log.Info("the launcher's own hostfile entry is written as its host name, so that the MPI starts its ranks here without ssh",
		"entry", hosts[self].Name, "written", name)
	return out
}

// explainRefused is the probe's Explain: after a refused SSH connect, ask
// the host's HTTP port what runs there. Nothing answering means the pod may
// still be starting (nil: keep waiting); anything else answering means
// waiting will not help, and says why.
func (l *Launcher) explainRefused(ctx context.Context, t probe.Target) *sshclient.Failure {
	addr := net.JoinHostPort(t.Host, strconv.Itoa(l.cfg.WorkerWebPort))
	info, answered, err := slots.Identify(ctx, addr, slots.Options{})
	if !answered {
		return nil
	}
	f := &sshclient.Failure{Host: t.Host, Port: t.Port, Phase: sshclient.PhaseNotWorkerAgent}
	var nw *api.NotWorkerError
	switch {
	case errors.As(err, &nw) && nw.Role == api.RoleLauncher:
		f.Cause = fmt.Errorf("connection refused; %s serves a launcher's /info on port %d: it is another launcher pod", t.Host, l.cfg.WorkerWebPort)
		f.Hint = "the job starts several launcher pods: Trainer sizes the launcher's replicated job from the runtime's mlPolicy.numNodes; set it to 1 in the ClusterTrainingRuntime"
	case errors.As(err, &nw):
		f.Cause = fmt.Errorf("connection refused; port %d answers /info as a %q", l.cfg.WorkerWebPort, nw.Role)
		f.Hint = "this host runs something other than worker-agent; check the pod's command (worker-agent) and the hostfile"
	case err == nil || errors.Is(err, api.ErrNotDecided):
		_, port, _ := net.SplitHostPort(info.SSHAddress)
		if port == "" || port == strconv.Itoa(t.Port) {
			return nil // worker-agent says it listens there: restarting or shutting down
		}
		f.Cause = fmt.Errorf("connection refused; worker-agent runs there (its /info answers) but listens for SSH on %q", info.SSHAddress)
		f.Hint = fmt.Sprintf("the launcher dials port %d: make --ssh.port (PODMPI_SSH_PORT) and the workers' --ssh.listen-address agree", t.Port)
	default:
		f.Cause = fmt.Errorf("connection refused; port %d answers, but not with a worker-agent /info (%v)", l.cfg.WorkerWebPort, err)
		f.Hint = fmt.Sprintf("this pod runs something other than worker-agent on port %d: check the worker container's command (worker-agent), or --worker.web-port", l.cfg.WorkerWebPort)
	}
	return f
}

// imageNote is what the image lacks besides an MPI for podmpi's
// worker-agent, as the worker's own check says it ("; ..." with the facts:
// a musl image, a glibc older than 2.28), "" when the image could run it or
// no tree of podmpi's is found to check with.
func imageNote() string {
	root, err := layout.RunningRoot()
	if err != nil {
		return ""
	}
	var problem *imagecheck.Problem
	if _, err := imagecheck.Worker("/", layout.RealWorkerAgent(root), os.Getenv); errors.As(err, &problem) {
		return "; this image could not run podmpi's worker-agent either: " + problem.Error()
	}
	return ""
}
