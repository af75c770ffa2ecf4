package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/execpath"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/imagecheck"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/agent/worker"
	"github.com/podmpi/podmpi/agent/worker/account"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/jobkey"
	"github.com/podmpi/podmpi/mpi"
	"github.com/podmpi/podmpi/sshd"
)

// EnvStateDir, when set, is the default of --ssh.state-dir (a shared
// writable location such as an emptyDir, for images that set it once for
// every podmpi tool).
const EnvStateDir = "PODMPI_STATE_DIR"

func main() {
	if rsh.Invoked(os.Args) {
		// Before anything opens a file: what mpirun's other children left
		// open is not ours to keep (see relay.CloseInheritedFDs).
		_, _ = relay.CloseInheritedFDs()
		rsh.TuneProcess()
	}
	os.Exit(int(run(context.Background(), os.Args, os.LookupEnv, os.Stdin, os.Stdout, os.Stderr)))
}

// run is main without os.Exit: it returns the exit code. env looks up
// environment variables (flag twins, HOME, PATH, GPU visibility).
func run(ctx context.Context, args []string, env func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) exitcode.Code {
	if len(args) > 0 && rsh.IsName(args[0]) {
		return exitcode.Code(rsh.Main(ctx, args[1:], env, stdin, stdout, stderr))
	}
	o := &options{env: env, stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCmd(o)
	if len(args) > 0 {
		args = args[1:]
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return o.code
	}
	var f *failure
	if !errors.As(err, &f) {
		// Everything cobra reports (unknown flag or command, bad value,
		// extra arguments) is a usage error.
		f = usage(err)
	}
	fmt.Fprintln(stderr, "worker-agent: "+f.Error())
	return f.code
}

// failure is a startup error: exactly one line on stderr and an exit code.
type failure struct {
	code exitcode.Code
	what string // optional prefix, e.g. "ssh keys"
	err  error
	hint string
}

func (f *failure) Error() string {
	msg := oneLine(f.err.Error())
	if f.what != "" {
		msg = f.what + ": " + msg
	}
	if f.hint != "" {
		msg += "; hint: " + oneLine(f.hint)
	}
	return msg
}

func (f *failure) Unwrap() error { return f.err }

func usage(err error) *failure {
	return &failure{code: exitcode.Usage, what: "bad flag", err: err,
		hint: "run 'worker-agent --help'; every flag also has a PODMPI_* environment variable"}
}

func usagef(format string, a ...any) *failure { return usage(fmt.Errorf(format, a...)) }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// options are the parsed flags.
type options struct {
	env            func(string) (string, bool)
	stdin          io.Reader
	stdout, stderr io.Writer
	code           exitcode.Code

	sshListen     string
	authDir       string
	stateDir      string
	shell         string
	allowPTY      bool
	loginGrace    time.Duration
	maxStartups   string
	perSource     int
	maxAuthTries  int
	maxSessions   int
	keepAlive     time.Duration
	killGrace     time.Duration
	webListen     string
	webMaxConns   int
	slots         string
	gpuDetect     string
	shutdownGrace time.Duration
	log           cli.LogFlags
	detectTimeout time.Duration
	cgroupRoot    string
	acctInterval  time.Duration
}

func (o *options) getenv(k string) string {
	v, _ := o.env(k)
	return v
}

// defaultStateDir is $PODMPI_STATE_DIR, else <tmp>/podmpi-state: writable
// with a read-only root file system (an emptyDir on /tmp) and no $HOME.
func (o *options) defaultStateDir() string {
	if d := o.getenv(EnvStateDir); d != "" {
		return d
	}
	return filepath.Join(o.tempDir(), "podmpi-state")
}

// tempDir is $TMPDIR, else /tmp.
func (o *options) tempDir() string {
	if tmp := o.getenv("TMPDIR"); tmp != "" {
		return tmp
	}
	return "/tmp"
}

func (o *options) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.sshListen, "ssh.listen-address", ":2222", "SSH listen address (host:port)")
	fs.StringVar(&o.authDir, "ssh.auth-dir", "", "directory with the job's authorized_keys, id_rsa and id_rsa.pub (default: first of $HOME/.ssh, /home/mpiuser/.ssh, /root/.ssh holding authorized_keys)")
	fs.StringVar(&o.stateDir, "ssh.state-dir", o.defaultStateDir(), "writable directory for a generated host key when the auth dir has no id_rsa; defaults to $"+EnvStateDir+", else $TMPDIR/podmpi-state (/tmp when TMPDIR is unset)")
	fs.StringVar(&o.shell, "ssh.shell", sshd.DefaultShell, "shell that runs each session command as: SHELL -c COMMAND")
	fs.BoolVar(&o.allowPTY, "ssh.allow-pty", false, "grant pseudo-terminal requests (interactive debugging; MPI never asks for one)")
	fs.DurationVar(&o.loginGrace, "ssh.login-grace-time", sshd.DefaultLoginGraceTime, "time from TCP accept to successful authentication")
	fs.StringVar(&o.maxStartups, "ssh.max-startups", sshd.FormatMaxStartups(sshd.DefaultMaxStartupsBegin, sshd.DefaultMaxStartupsRate, sshd.DefaultMaxStartups),
		"unauthenticated connections, as OpenSSH's MaxStartups BEGIN:RATE:FULL: from BEGIN on RATE percent of new ones are refused, rising to all at FULL (a single N refuses past N)")
	fs.IntVar(&o.perSource, "ssh.per-source-max-startups", sshd.DefaultPerSourceMaxStartups, "unauthenticated connections from one IP address; more are refused at once")
	fs.IntVar(&o.maxAuthTries, "ssh.max-auth-tries", sshd.DefaultMaxAuthTries, "failed authentication attempts per connection")
	fs.IntVar(&o.maxSessions, "ssh.max-sessions", sshd.DefaultMaxSessions, "open session channels per connection")
	fs.DurationVar(&o.keepAlive, "ssh.keepalive-interval", sshd.DefaultKeepAliveInterval, "interval of keepalive probes to idle clients; after 3 unanswered ones the client is dropped (0, the default, sends none, as OpenSSH)")
	fs.DurationVar(&o.killGrace, "ssh.kill-grace", sshd.DefaultKillGrace, "SIGTERM to SIGKILL delay for a session's processes when its client goes away")
	fs.StringVar(&o.webListen, "web.listen-address", ":9022", "HTTP listen address for /healthz, /readyz, /info, /events and /metrics (empty disables)")
	fs.IntVar(&o.webMaxConns, "web.max-connections", worker.DefaultWebMaxConnections, "HTTP connections open at once; at the limit the oldest idle one is closed for a new one")
	fs.StringVar(&o.slots, "slots", gpu.SlotsAuto, "MPI slots this worker offers: auto (one per GPU, else 1), gpu (one per GPU, none is an error), cpu (the cgroup CPU quota) or N")
	fs.StringVar(&o.gpuDetect, "gpu.detect", gpu.ModeAuto, "GPU detection: auto (NVML when available, else CPU-only), nvml (NVML required) or none")
	fs.DurationVar(&o.shutdownGrace, "shutdown.grace", worker.DefaultShutdownGrace, "on SIGTERM, how long running sessions get before they are killed (keep it below the pod's terminationGracePeriodSeconds, 30s by default)")
	fs.DurationVar(&o.detectTimeout, "gpu.detect-timeout", worker.DefaultDetectTimeout, "deadline of GPU detection; a hung NVML call then stops the agent")
	fs.StringVar(&o.cgroupRoot, "account.cgroup-root", account.DefaultCgroupRoot, "where the cgroup file systems are mounted: the account of the pod reads its memory cgroup (OOM kills, limit, usage) below it")
	fs.DurationVar(&o.acctInterval, "account.interval", account.DefaultInterval, "how often the account of the pod reads the memory cgroup and the processes below the agent")
	o.log.Register(fs)
}

func newRootCmd(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "worker-agent [flags]",
		Short: "SSH server and health endpoints for the worker pods of an MPI job",
		Long: `worker-agent runs in every worker pod of an MPI job (Kubeflow Trainer v2,
mpi-operator). It serves SSH for mpirun's remote daemons (orted, prted,
hydra_pmi_proxy) as any UID, authenticating with the job's mounted key, and
HTTP /healthz, /readyz, /info, /events and /metrics.

Every flag has a PODMPI_* environment variable twin, shown in brackets. -v is
verbose (the debug log level); --version prints the version.

It exits 0 when stopped by SIGTERM.

` + cli.ExitCodes(exitcode.Table),
		Version:       version.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.serve(cmd.Context())
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	root.SetVersionTemplate(cli.VersionTemplate)
	o.register(root.Flags())
	cli.AnnotateEnv(root.Flags())
	root.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := cli.ApplyEnv(cmd.Flags(), o.env); err != nil {
			return usage(err)
		}
		return nil
	}
	root.AddCommand(
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintln(o.stdout, cli.VersionLine(cmd.Root()))
			},
		},
		rsh.NewCommand(o.env, o.stdin, o.stdout, o.stderr, func(code int) { o.code = exitcode.Code(code) }),
	)
	return root
}

// startups is --ssh.max-startups parsed (validate checks it first).
func (o *options) startups() (begin, rate, full int) {
	begin, rate, full, _ = sshd.ParseMaxStartups(o.maxStartups)
	return begin, rate, full
}

// Upper bounds of the integer flags: far above any real need, low enough
// that a typo (an extra digit or two) is caught instead of disarming the
// limit.
const (
	maxFlagStartups    = 100000
	maxFlagAuthTries   = 128 // x/crypto ends a connection after 128 auth messages anyway
	maxFlagSessions    = 10000
	maxFlagConnections = 100000
	maxAccountInterval = time.Minute
)

// validate checks the flags that cobra cannot.
func (o *options) validate() (gpu.SlotPolicy, error) {
	if err := checkAddr("--ssh.listen-address", o.sshListen); err != nil {
		return gpu.SlotPolicy{}, err
	}
	if o.webListen != "" {
		if err := checkAddr("--web.listen-address", o.webListen); err != nil {
			return gpu.SlotPolicy{}, err
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		zero bool // zero allowed
	}{
		{"--ssh.login-grace-time", o.loginGrace, false},
		{"--ssh.keepalive-interval", o.keepAlive, true},
		{"--ssh.kill-grace", o.killGrace, false},
		{"--shutdown.grace", o.shutdownGrace, false},
		{"--gpu.detect-timeout", o.detectTimeout, false},
		{"--account.interval", o.acctInterval, false},
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			return gpu.SlotPolicy{}, usagef("%s=%s: must be a positive duration such as 30s", d.name, d.v)
		}
	}
	_, _, full, err := sshd.ParseMaxStartups(o.maxStartups)
	if err != nil {
		return gpu.SlotPolicy{}, usagef("--ssh.max-startups=%w", err)
	}
	if full > maxFlagStartups {
		return gpu.SlotPolicy{}, usagef("--ssh.max-startups=%q: FULL %d is above %d", o.maxStartups, full, maxFlagStartups)
	}
	for _, n := range []struct {
		name string
		v    int
		max  int
	}{
		{"--ssh.per-source-max-startups", o.perSource, maxFlagStartups},
		{"--ssh.max-auth-tries", o.maxAuthTries, maxFlagAuthTries},
		{"--ssh.max-sessions", o.maxSessions, maxFlagSessions},
		{"--web.max-connections", o.webMaxConns, maxFlagConnections},
	} {
		if n.v < 1 || n.v > n.max {
			return gpu.SlotPolicy{}, usagef("%s=%d: must be between 1 and %d", n.name, n.v, n.max)
		}
	}
	if o.acctInterval < account.MinInterval || o.acctInterval > maxAccountInterval {
		return gpu.SlotPolicy{}, usagef("--account.interval=%s: must be between %s and %s", o.acctInterval, account.MinInterval, maxAccountInterval)
	}
	if o.cgroupRoot == "" || !filepath.IsAbs(o.cgroupRoot) {
		return gpu.SlotPolicy{}, usagef("--account.cgroup-root=%q: must be an absolute path such as %s", o.cgroupRoot, account.DefaultCgroupRoot)
	}
	if o.shell == "" || !filepath.IsAbs(o.shell) {
		return gpu.SlotPolicy{}, usagef("--ssh.shell=%q: must be an absolute path such as /bin/sh", o.shell)
	}
	switch strings.ToLower(strings.TrimSpace(o.gpuDetect)) {
	case gpu.ModeAuto, gpu.ModeNVML, gpu.ModeNone:
	default:
		return gpu.SlotPolicy{}, usagef("--gpu.detect=%q: want auto, nvml or none", o.gpuDetect)
	}
	p, err := gpu.ParseSlots(o.slots)
	if err != nil {
		return gpu.SlotPolicy{}, usage(err)
	}
	return p, nil
}

func checkAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s=%q: want host:port or :port, e.g. :2222", flag, addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		if _, lerr := net.LookupPort("tcp", port); lerr != nil || port == "" {
			return usagef("%s=%q: %q is not a port number", flag, addr, port)
		}
	}
	return nil
}

// serve is the default command: everything between flag parsing and exit.
func (o *options) serve(ctx context.Context) error {
	policy, err := o.validate()
	if err != nil {
		return err
	}
	base, err := o.log.NewLogger(o.stderr, o.getenv)
	if err != nil {
		return usage(err)
	}
	// Until both addresses are bound the log is held back: a failed
	// startup prints only its one-line error (with --log.level=debug the
	// held log is printed before it).
	held := &heldLog{}
	defer held.release(base.Enabled(context.Background(), slog.LevelDebug))
	heldLogger := slog.New(held.handler(base.Handler()))
	log := heldLogger.With("component", "worker-agent")

	// Catch SIGTERM before anything listens, so the shutdown is graceful
	// from the first accepted connection on.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	uid, gid := os.Getuid(), os.Getgid()
	var username string
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		username = u.Username
	}
	vi := version.Get()
	log.Info("starting worker-agent", "version", vi.Version, "commit", vi.Commit, "go", vi.GoVersion,
		"uid", uid, "gid", gid, "user", username)

	authDir, err := jobkey.Find(o.authDir, o.getenv("HOME"), jobkey.AuthorizedKeys)
	if err != nil {
		return keyFailure(err)
	}
	if abs, err := filepath.Abs(authDir); err == nil {
		authDir = abs
	}
	detector, err := gpu.New(o.gpuDetect, o.env)
	if err != nil {
		return &failure{code: exitcode.Config, what: "gpu detection", err: err}
	}

	sessionEnv, cleanupRsh, err := o.sessionEnv(authDir, log)
	if err != nil {
		return &failure{code: exitcode.Config, what: "session environment", err: err,
			hint: "the agent needs a writable temp dir (TMPDIR, an emptyDir under readOnlyRootFilesystem)"}
	}
	defer cleanupRsh()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	hostname, _ := os.Hostname()
	acct, err := account.New(account.Config{
		CgroupRoot: o.cgroupRoot,
		Interval:   o.acctInterval,
		Hostname:   hostname,
		Logger:     heldLogger.With("component", "account"),
		Registry:   reg,
	})
	if err != nil {
		return &failure{code: exitcode.Internal, err: err, hint: "please report this with the log"}
	}
	var gpuEvents gpu.EventWatcher
	if !strings.EqualFold(strings.TrimSpace(o.gpuDetect), gpu.ModeNone) {
		gpuEvents = gpu.NewNVMLEventWatcher()
	}
	begin, rate, full := o.startups()
	keepAlive := o.keepAlive
	if keepAlive == 0 {
		keepAlive = -1 // sshd: negative disables
	}
	srv, err := sshd.New(sshd.Config{
		ListenAddress:        o.sshListen,
		AuthDir:              authDir,
		StateDir:             o.stateDir,
		Shell:                o.shell,
		Env:                  sessionEnv,
		AllowPTY:             o.allowPTY,
		LoginGraceTime:       o.loginGrace,
		MaxStartupsBegin:     begin,
		MaxStartupsRate:      rate,
		MaxStartups:          full,
		PerSourceMaxStartups: o.perSource,
		MaxAuthTries:         o.maxAuthTries,
		MaxSessions:          o.maxSessions,
		KeepAliveInterval:    keepAlive,
		KillGrace:            o.killGrace,
		ShutdownGrace:        o.shutdownGrace,
		Logger:               heldLogger.With("component", "sshd"),
		Metrics:              sshd.NewMetrics(reg),
		OnSessionStart: func(e sshd.SessionStart) {
			acct.SessionStarted(account.SessionStart{Session: e.Session, PID: e.PID, Launcher: e.Launcher})
		},
		OnSessionExit: func(e sshd.SessionExit) {
			acct.SessionExited(account.SessionExit{Session: e.Session, Command: e.Command, PID: e.PID,
				ExitCode: e.ExitCode, Signal: e.Signal, CoreDumped: e.CoreDumped, Aborted: e.Aborted, Replaced: e.Replaced,
				Launcher: e.Launcher})
		},
		OnLauncherReplaced: func(r sshd.LauncherReplaced) { acct.LauncherReplaced(r.Old, r.New, r.Commands) },
	})
	if err != nil {
		return keyFailure(err)
	}

	w, err := worker.New(worker.Config{
		SSH:               srv,
		SSHAddress:        o.sshListen,
		WebAddress:        o.webListen,
		WebMaxConnections: o.webMaxConns,
		AuthDir:           authDir,
		Detector:          detector,
		Slots:             policy,
		CPUs:              gpu.NewCgroupCPUQuota(),
		DetectTimeout:     o.detectTimeout,
		ShutdownGrace:     o.shutdownGrace,
		Hostname:          hostname,
		UID:               uid,
		GID:               gid,
		User:              username,
		Path:              environ.Get(sessionEnv, "PATH"),
		Version:           vi,
		Registry:          reg,
		Logger:            log,
		Account:           acct,
		GPUEvents:         gpuEvents,
		Launchers:         func() []api.LauncherSessions { return launcherSessions(srv.LauncherSessions()) },
		Listening: func() {
			held.release(true)
			if os.Geteuid() == 0 {
				log.Warn("running as root: every SSH session runs as root; run as a non-root UID (runAsNonRoot, e.g. 1000) where you can")
			}
		},
	})
	if err != nil {
		return &failure{code: exitcode.Internal, err: err, hint: "please report this with the log"}
	}

	err = w.Run(ctx)
	var le *worker.ListenError
	var de *worker.DetectError
	switch {
	case err == nil:
		log.Info("worker-agent stopped")
		return nil
	case errors.As(err, &le):
		return &failure{code: exitcode.Listen, err: le, hint: le.Hint()}
	case errors.As(err, &de):
		return &failure{code: exitcode.Config, err: de, hint: de.Hint()}
	}
	return &failure{code: exitcode.Internal, err: err, hint: "please report this with the log"}
}

// sessionEnv is the base environment of SSH sessions: the agent's own, so
// the PATH and LD_LIBRARY_PATH of the image reach orted, plus what a worker
// needs to act as an rsh client itself. Open MPI hands its plm_rsh_agent
// ("... : podmpi-rsh : ssh : rsh") to every orted, which fails at start when
// none of those is on PATH, and tree spawn (past 64 nodes) makes orted ssh
// to other workers. So podmpi-rsh is put on the sessions' PATH unless the
// image already has it there (rsh.OnPath), and PODMPI_SSH_AUTH_DIR and
// PODMPI_SSH_PORT point at the agent's own settings unless already set.
func (o *options) sessionEnv(authDir string, log *slog.Logger) ([]string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("locating this binary: %w", err)
	}
	env, dir, cleanup, err := rsh.OnPath(os.Environ(), self)
	if err != nil {
		return nil, nil, err
	}
	if dir != "" {
		log.Debug("podmpi-rsh linked for sessions", "dir", dir)
	}
	if environ.Get(env, rsh.EnvAuthDir) == "" {
		env = environ.Set(env, rsh.EnvAuthDir, authDir)
	}
	if environ.Get(env, rsh.EnvPort) == "" {
		if _, port, err := net.SplitHostPort(o.sshListen); err == nil && port != "" {
			env = environ.Set(env, rsh.EnvPort, port)
		}
	}
	// An image whose MPI lives where the pod spec's PATH (which replaces
	// the image's) does not look: its daemons are found there.
	path, added := imagecheck.ExtendPath(environ.Get(env, "PATH"), o.getenv, mpi.AllDaemons(), nil)
	switch {
	case len(added) > 0:
		env = environ.Set(env, "PATH", path)
		log.Info("no MPI daemon on PATH (a pod spec's PATH replaces the image's); adding the folders where the image has one for SSH sessions",
			"added", strings.Join(added, ":"), "PATH", path)
	case !slices.ContainsFunc(mpi.AllDaemons(), func(d string) bool { return execpath.Look(d, path) != "" }):
		log.Warn("no MPI daemon ("+strings.Join(mpi.AllDaemons(), ", ")+") on the SSH sessions' PATH: mpirun can start none here unless it names one by its absolute path (Open MPI's --prefix, Intel MPI); install the MPI in the image, or put its bin folder on the container's PATH",
			"PATH", path)
	}
	// Sessions whose HOME is unusable (unset, or / under a read-only
	// root) get a private one: clients the ranks run write there.
	env, home, old, err := environ.EnsureHome(env, filepath.Join(o.tempDir(), "podmpi-home-"+strconv.Itoa(os.Getuid())))
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if home != "" {
		log.Info("HOME is unset or not writable (a UID without a passwd entry, a read-only root?); giving SSH sessions a private one", "old", old, "HOME", home)
	}
	return env, cleanup, nil
}

// launcherSessions is what the SSH server tells of the launcher instances
// that started sessions, as /events carries it.
func launcherSessions(ls []sshd.LauncherSessions) []api.LauncherSessions {
	out := make([]api.LauncherSessions, 0, len(ls))
	for _, l := range ls {
		out = append(out, api.LauncherSessions{Launcher: api.LauncherOf(l.Instance), Sessions: l.Sessions, Daemons: l.Daemons, Open: l.Open})
	}
	return out
}

// keyFailure turns an auth dir or host key problem into a Config failure
// naming the file and the fix.
func keyFailure(err error) *failure {
	var ae *jobkey.Error
	if errors.As(err, &ae) {
		return &failure{code: exitcode.Config, what: "ssh keys",
			err: fmt.Errorf("%s %s: %w", ae.Op, ae.Path, ae.Err), hint: ae.Hint}
	}
	return &failure{code: exitcode.Config, what: "ssh server", err: err,
		hint: "check --ssh.auth-dir and that --ssh.state-dir is writable by this uid"}
}
