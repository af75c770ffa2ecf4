package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/push"

	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/mpirun"
	"github.com/podmpi/podmpi/agent/launcher/postmortem"
	"github.com/podmpi/podmpi/agent/launcher/share"
	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
)

// Run runs every phase and then the user's command. It returns the exit
// code the process should end with: mpirun's own, or one of the launcher's
// documented codes. The error, when not nil, is the root cause to report.
func (l *Launcher) Run(ctx context.Context) (exitcode.Code, error) {
	if len(l.cfg.Command) == 0 {
		return exitcode.Usage, &Failure{Phase: "run", Code: exitcode.Usage, Err: errors.New("no command given"),
			Hint: "usage: launcher [flags] -- mpirun [mpirun flags] program"}
	}
	if l.cfg.ShareConnections {
		l.pool = share.NewPool(l.log)
		defer l.pool.Close()
	}
	defer l.declareInstance()()
	p, err := l.Prepare(ctx, true)
	if err != nil {
		return codeOf(err), err
	}
	return l.exec(ctx, p)
}

// exec wires the environment and runs the command under supervision.
func (l *Launcher) exec(ctx context.Context, p *Prepared) (exitcode.Code, error) {
	cfg := l.cfg
	self := cfg.Executable
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return exitcode.Internal, &Failure{Phase: PhaseMPIRun, Code: exitcode.Internal, Err: fmt.Errorf("locating this binary: %w", err)}
		}
		self = exe
	}
	rshPath, rshDir, cleanup, err := rsh.Setup(self, cfg.TempDir)
	if err != nil {
		return exitcode.Config, &Failure{Phase: PhaseMPIRun, Code: exitcode.Config, Err: err,
			Hint: "the launcher needs a writable temp dir (TMPDIR, an emptyDir under readOnlyRootFilesystem)"}
	}
	defer cleanup()

	w := mpirun.Wiring{
		Impl:     p.Impl,
		RshPath:  rshPath,
		RshDir:   rshDir,
		Hostfile: p.Hostfile,
		Slots:    firstSlots(p),
		Root:     os.Getuid() == 0,
		Rsh: rsh.Settings{
			AuthDir: cfg.AuthDir, Port: cfg.SSHPort, User: cfg.SSHUser, Insecure: cfg.InsecureIgnoreHostKey, Wait: &cfg.SSHWait,
			Launcher: l.instance,
		},
		NoTreeSpawn: cfg.NoTreeSpawn,
	}
	// token is the sharing socket's run token: it goes into mpirun's
	// environment apart from w.Rsh, whose settings are logged.
	token := ""
	if l.pool != nil {
		srv, err := share.Serve(filepath.Join(rshDir, share.SocketName), l.pool, l.log)
		if err != nil {
			l.log.Warn("not sharing the launcher's SSH connections: every podmpi-rsh connects on its own", "err", err)
		} else {
			defer srv.Close()
			w.Rsh.Socket, token = srv.Path(), srv.Token()
			l.log.Info("sharing the launcher's SSH connections with podmpi-rsh", "socket", srv.Path(), "connections", l.pool.Len())
		}
	}
	restoreRuntime := func() {}
	if cfg.TuneRuntime {
		before, changed, restore := rsh.TuneServer()
		if changed {
			l.log.Debug("serving sessions with one processor while mpirun runs (GOMAXPROCS sets it)", "was", before)
		}
		restoreRuntime = restore
	}
	// What happens after mpirun starts is watched (watch.go).
	pm := l.newWatch(ctx, p, rshDir)
	w.Rsh.FailureDir = pm.failDir
	if name, cidr, addr, multi, err := mpirun.PodInterface(); err == nil {
		w.Iface, w.IfaceCIDR, w.LocalAddr, w.MultiNIC = name, cidr, addr, multi
		if multi {
			l.log.Info("several network interfaces; pinning MPI traffic to the pod interface", "iface", name, "cidr", cidr)
		}
	} else {
		l.log.Warn("could not determine the pod interface", "err", err)
	}
	base := os.Environ()
	if p.Plan.Source == discovery.SourceHostfile {
		var dropped []string
		base, dropped = mpirun.DropHostfileVarsNaming(base, p.Spec.Hostfile)
		for _, name := range dropped {
			l.log.Info("replacing the operator's default hostfile with the launcher's (same hosts, slots checked against the worker-agents)",
				"name", name, "read", p.Spec.Hostfile, "written", p.Hostfile)
		}
	}
	env, settings := w.Env(base)
	if token != "" {
		env = environ.Set(env, relay.EnvToken, token)
	}
	for _, s := range settings {
		switch {
		case s.Overrides:
			l.log.Warn("an MPI setting of the environment overrides podmpi's wiring: mpirun will not start its daemons through podmpi-rsh "+
				"as the probe checked them; unset it unless you mean it", "name", orName(s.UserName, s.Name), "value", s.UserValue, "effect", s.Note)
			pm.setup.Overrides = appendOverride(pm.setup.Overrides, postmortem.Override{Name: orName(s.UserName, s.Name), Value: s.UserValue,
				Effect: s.Note})
		case s.Kept:
			l.log.Info("keeping the user's setting", "name", s.Name, "ours", s.Value, "note", s.Note)
		case s.Note != "":
			l.log.Warn(s.Note, "name", s.Name)
		default:
			l.log.Debug("set", "name", s.Name, "value", s.Value)
		}
	}
	// Open MPI 4's mpirun dies of SIGSEGV (exit 139, nothing printed) in a
	// UID without a passwd entry when HOME is unset; horovodrun and others
	// fail when they cannot write there (HOME=/ under a read-only root).
	env, home, old, err := environ.EnsureHome(env, filepath.Join(rshDir, mpirun.HomeDirName))
	if err != nil {
		return exitcode.Config, &Failure{Phase: PhaseMPIRun, Code: exitcode.Config, Err: err,
			Hint: "the launcher needs a writable temp dir (TMPDIR, an emptyDir under readOnlyRootFilesystem)"}
	}
	if home != "" {
		l.log.Info("HOME is unset or not writable (a UID without a passwd entry, a read-only root?); giving mpirun and what it starts a private one",
			"old", old, "HOME", home)
	}

	// The phases are done: an mpirun/mpiexec of the launcher's started
	// inside the job runs the real program at once (see RunShim).
	env = environ.Set(env, EnvLauncherPID, strconv.Itoa(os.Getpid()))
	// What mpirun starts reports to the TrainJob's status through the
	// launcher (status.go).
	env, stopStatus := l.statusEndpoint(env, rshDir)
	defer stopStatus()

	argv := l.commandHostfile(cfg.Command, p)
	total := 0
	for _, h := range p.Hosts {
		total += h.Slots
	}
	if !slots.CommandHasNP(argv) {
		injected := slots.InjectNP(argv, total)
		if len(injected) != len(argv) {
			l.log.Info("the command sets no -np; using the sum of slots", "np", total)
		}
		argv = injected
	}
	// Where each rank started, or how every process ended, in the MPI's own
	// words: what a failed run's diagnosis names the rank's host from.
	argv, env, asked := mpirun.AskReports(p.Impl, argv, env)
	pm.collector.Expect(p.Impl, postmortem.Asked{Bindings: asked.Bindings, ExitCodes: asked.ExitCodes})
	if asked.Bindings || asked.ExitCodes {
		l.log.Info("asking the MPI to report where each rank starts or how each process ends, for the diagnosis of a failure; "+
			"those lines are left out of its output", "bindings", asked.Bindings, "exit_codes", asked.ExitCodes)
	}

	init := time.Since(l.start)
	l.m.InitDuration.Set(init.Seconds())
	l.setStatusSlots(total)
	l.report("== init done in %s; running: %s\n", init.Round(time.Millisecond), strings.Join(argv, " "))
	l.log.Info("running", "argv0", argv[0], "args", len(argv)-1, "init_seconds", round(init))
	l.event(kube.Normal, "Initialized", fmt.Sprintf("init done in %s: %d hosts, %d slots, MPI %s %s; running %s",
		init.Round(time.Millisecond), len(p.Hosts), total, p.Impl, p.Version, argv[0]))

	// Orphans of mpirun (a rank's own children, a daemon that double-forked)
	// are reparented to us: reap them, even when not PID 1.
	reap := false
	if os.Getpid() != 1 {
		if err := mpirun.SetSubreaper(); err == nil {
			reap = true
		} else {
			l.log.Debug("not a child subreaper", "err", err)
		}
	}
	prog, err := l.program(argv[0])
	if err != nil {
		return exitcode.MPIRunNotFound, &Failure{Phase: PhaseMPIRun, Code: exitcode.MPIRunNotFound, Err: err,
			Hint: "install the MPI in the launcher image: podmpi's own " + argv[0] + " runs the real one it finds after it on PATH"}
	}
	argv = programArgv0(argv, prog, p.Impl)
	var res mpirun.RunResult
	runErr := l.phase(PhaseMPIRun, func() error {
		var err error
		pm.start()
		defer pm.stop()
		res, err = mpirun.Run(pm.runCtx, mpirun.RunOptions{
			Argv:      argv,
			Path:      prog,
			Env:       env,
			Timeout:   cfg.MPIRunTimeout,
			KillGrace: cfg.KillGrace,
			Stdin:     cfg.Stdin,
			Stdout:    pm.stdout,
			Stderr:    pm.stderr,
			Logger:    l.log,
			Reap:      reap,
		})
		if err == nil && res.ExitCode != 0 {
			return fmt.Errorf("exit code %d", res.ExitCode)
		}
		return err
	})
	// What follows (a failure's diagnosis) gets every processor again.
	restoreRuntime()
	l.m.MPIRunExitCode.Set(float64(res.ExitCode))
	var diag *postmortem.Diagnosis
	if !res.NotFound && (res.ExitCode != 0 || res.TimedOut || res.Canceled) {
		diag = pm.diagnose(res, argv[0])
	}
	switch {
	case res.NotFound:
		return exitcode.MPIRunNotFound, &Failure{Phase: PhaseMPIRun, Code: exitcode.MPIRunNotFound, Err: runErr,
			Hint: "install the MPI in the launcher image or put " + argv[0] + " on PATH"}
	case pm.stoppedForLaunch():
		return exitcode.LaunchFailed, &Failure{Phase: PhaseMPIRun, Code: exitcode.LaunchFailed, Diagnosis: diag,
			Err: fmt.Errorf("podmpi-rsh could not start an MPI daemon and %s did not exit within --diagnosis.launch-grace=%s; the launcher stopped it",
				argv[0], cfg.LaunchGrace),
			Hint: "the root cause above names the worker, its port and the phase that failed; fix that worker (is worker-agent running and reachable on its SSH port?)"}
	case pm.stoppedForGone():
		return exitcode.WorkerGone, &Failure{Phase: PhaseMPIRun, Code: exitcode.WorkerGone, Diagnosis: diag,
			Err: fmt.Errorf("a worker's pod was gone while %s ran, and %s did not exit within --diagnosis.launch-grace=%s; the launcher stopped it",
				argv[0], argv[0], cfg.LaunchGrace),
			Hint: "the root cause above names the worker: kubectl get events and kubectl describe pod for it (deleted? evicted? node lost?); an MPI job cannot go on without its ranks, so run it again"}
	case res.TimedOut:
		if diag != nil && diag.Root == nil {
			diag = nil // a hang leaves no trace in the accounts: the timeout says it all
		}
		return exitcode.MPIRunTimeout, &Failure{Phase: PhaseMPIRun, Code: exitcode.MPIRunTimeout, Diagnosis: diag,
			Err:  fmt.Errorf("%s ran longer than --mpirun.timeout=%s and was stopped", argv[0], cfg.MPIRunTimeout),
			Hint: "raise --mpirun.timeout, or look for a rank that hangs (a worker that cannot call back, a second NIC)"}
	case runErr != nil && res.ExitCode == 0:
		return exitcode.Internal, &Failure{Phase: PhaseMPIRun, Code: exitcode.Internal, Err: runErr}
	case res.ExitCode != 0:
		return exitcode.Code(res.ExitCode), &Failure{Phase: PhaseMPIRun, Code: exitcode.Code(res.ExitCode), Diagnosis: diag,
			Err:  fmt.Errorf("%s exited with %d", argv[0], res.ExitCode),
			Hint: "the MPI job itself failed after it started: the root cause first in this message, and mpirun's output, name the rank or daemon; the probe passed for every worker, so SSH and PATH were fine"}
	}
	return exitcode.OK, nil
}

// orName is name, or def when it is "".
func orName(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// appendOverride adds o unless it is there already: Open MPI 5's rsh
// agent is reported under both its names, each kept for the user's one.
func appendOverride(list []postmortem.Override, o postmortem.Override) []postmortem.Override {
	if slices.Contains(list, o) {
		return list
	}
	return append(list, o)
}

func firstSlots(p *Prepared) int {
	for _, h := range p.Hosts {
		if h.Slots > 0 {
			return h.Slots
		}
	}
	return 1
}

// codeOf maps an error from Prepare to an exit code.
func codeOf(err error) exitcode.Code {
	var f *Failure
	if errors.As(err, &f) {
		return f.Code
	}
	if errors.Is(err, context.Canceled) {
		return exitcode.Code(128 + 15) // stopped by SIGTERM/SIGINT before mpirun ran
	}
	return exitcode.Internal
}

// TerminationMessage is the root-cause paragraph for the termination log:
// at most 4 KiB (the kubelet's limit), phase first.
func TerminationMessage(code exitcode.Code, err error) string {
	var b strings.Builder
	var f *Failure
	diagnosed := errors.As(err, &f) && f.Diagnosis != nil
	if diagnosed {
		b.WriteString(f.Diagnosis.Summary() + "\n")
	}
	var pf *Failure
	switch {
	case err == nil:
		fmt.Fprintf(&b, "podmpi launcher: job finished, exit code %d\n", code)
	case !diagnosed && errors.As(err, &pf) && strings.Contains(pf.Error(), "\n"):
		// The first line is the whole failure in one sentence (the Event's
		// message too); the details follow.
		fmt.Fprintf(&b, "podmpi launcher failed (exit code %d): %s\n%v\n", code, pf.Summary(), err)
	default:
		fmt.Fprintf(&b, "podmpi launcher failed (exit code %d): %v\n", code, err)
	}
	if diagnosed {
		for _, line := range f.Diagnosis.Lines() {
			b.WriteString(line + "\n")
		}
	}
	s := b.String()
	if len(s) > 4000 {
		s = s[:4000] + "\n[truncated]\n"
	}
	return s
}

// WriteTerminationLog writes msg to path; "" or an unwritable path is
// skipped silently except for a debug log (outside Kubernetes there is no
// /dev/termination-log).
func (l *Launcher) WriteTerminationLog(path, msg string) {
	if path == "" {
		return
	}
	if err := os.WriteFile(path, []byte(msg), 0o644); err != nil {
		l.log.Debug("termination log not written", "path", path, "err", err)
	}
}

// PushJob is the Pushgateway job label of every launcher's push.
const PushJob = "podmpi_launcher"

// pushTimeout bounds the push at the end of a run.
const pushTimeout = 10 * time.Second

// Push sends the launcher's metrics (not the Go runtime's) to the
// Pushgateway at Config.PushURL with PUT, grouped by PushGrouping, so that
// each launcher replaces only its own earlier push. ok is whether the job
// succeeded: with Config.PushDeleteOnSuccess the group is then deleted
// instead, and only failed jobs stay on the gateway.
func (l *Launcher) Push(ctx context.Context, ok bool) error {
	url := l.cfg.PushURL
	if url == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	p := push.New(url, PushJob).Gatherer(l.m.Registry)
	for _, g := range l.PushGrouping() {
		p = p.Grouping(g[0], g[1])
	}
	if ok && l.cfg.PushDeleteOnSuccess {
		if err := p.Delete(); err != nil {
			return fmt.Errorf("deleting the job's metrics from %s: %w", url, err)
		}
		return nil
	}
	if err := p.PushContext(ctx); err != nil {
		return fmt.Errorf("pushing metrics to %s: %w", url, err)
	}
	return nil
}

// PushGrouping is the grouping key of the launcher's push, as label pairs:
// namespace, job_name and pod, so that two jobs, and two launcher pods of
// one job, never overwrite each other, and the pushed series carry the
// namespace and pod labels a scrape would add. Each comes from its flag
// (--metrics.namespace, --metrics.job-name, --metrics.pod; the examples set
// their environment twins from the downward API), else from what the pod
// knows: the namespace of its service account token, its host name, and the
// job name in the host name the operators give the launcher
// (<job>-launcher-<i>-<j> under Trainer v2 and JobSet, <job>-launcher under
// mpi-operator). A value that cannot be found is left out.
func (l *Launcher) PushGrouping() [][2]string {
	host, _ := os.Hostname()
	ns := l.cfg.MetricsNamespace
	if ns == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	pod := l.cfg.MetricsPod
	if pod == "" {
		pod = host
	}
	job := l.cfg.MetricsJobName
	if job == "" {
		job = jobOfLauncher(pod)
	}
	var out [][2]string
	for _, kv := range [][2]string{{"namespace", ns}, {"job_name", job}, {"pod", pod}} {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}

// serviceAccountNamespace is where a pod with a mounted service account
// token finds its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// launcherName matches the launcher pod's host name under Trainer v2
// (JobSet: <job>-launcher-<job index>-<pod index>) and mpi-operator
// (<job>-launcher).
var launcherName = regexp.MustCompile(`^(.+)-launcher(?:-[0-9]+-[0-9]+)?$`)

// jobOfLauncher is the job name in a launcher pod's name, or "" when the
// name does not follow the operators' pattern.
func jobOfLauncher(pod string) string {
	if m := launcherName.FindStringSubmatch(pod); m != nil {
		return m[1]
	}
	return ""
}
