package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/hostfile"
)

func main() {
	if rsh.Invoked(os.Args) {
		// Before anything opens a file: what mpirun's other children left
		// open is not ours to keep (see rsh.CloseInheritedFDs).
		_, _ = rsh.CloseInheritedFDs()
	}
	os.Exit(int(run(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr)))
}

// run is main without os.Exit, for tests. A panic anywhere in the
// launcher's own goroutine (and in the parallel phases, which hand theirs
// back to it) ends in exitcode.Internal with the panic on stderr and in the
// termination message, never Go's bare exit 2.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code exitcode.Code) {
	o := &options{stdin: stdin, stdout: stdout, stderr: stderr}
	defer func() {
		if r := recover(); r != nil {
			code = o.internalPanic(r, debug.Stack())
		}
	}()
	if len(args) > 0 && rsh.IsName(args[0]) {
		return exitcode.Code(rsh.Main(ctx, args[1:], os.LookupEnv, stdin, stdout, stderr))
	}
	root := newRootCmd(o)
	root.SetArgs(args[1:])
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return o.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "launcher: %v\nRun 'launcher --help' for usage.\n", ue.err)
		return exitcode.Usage
	}
	var f *launcher.Failure
	if errors.As(err, &f) {
		fmt.Fprintf(stderr, "launcher: %v\n", f)
		return f.Code
	}
	fmt.Fprintf(stderr, "launcher: %v\n", err)
	if o.code != exitcode.OK {
		return o.code
	}
	return exitcode.Internal
}

type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

// options are the parsed flags.
type options struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	code           exitcode.Code
	rsh            bool // running as `launcher rsh`: the termination log is not ours

	log cli.LogFlags

	workers          []string
	hostfile         string
	service          string
	template         string
	expected         int
	self             string
	defaultSlots     int
	discoveryTimeout time.Duration

	slots             string
	slotsAllowDefault bool
	webPort           int
	impl              string

	authDir      string
	sshPort      int
	sshUser      string
	insecure     bool
	probeTimeout time.Duration
	probePar     int
	probeSample  int
	skipProbe    bool

	output        string
	mpirunTimeout time.Duration
	killGrace     time.Duration
	noTreeSpawn   bool

	webAddr        string
	pushURL        string
	terminationLog string
}

func (o *options) register(fs *pflag.FlagSet) {
	o.log.Register(fs)
	fs.StringSliceVar(&o.workers, "workers", nil, "worker names, comma-separated, each optionally name=slots (highest precedence)")
	fs.StringVar(&o.hostfile, "hostfile", "", "existing hostfile to read workers from, in any of the OpenMPI/Intel MPI/MPICH formats (default "+discovery.DefaultHostfile+" when present)")
	fs.StringVar(&o.service, "discovery.service", "", "headless Service to discover workers from: SRV _ssh._tcp.<service>, else its A records")
	fs.StringVar(&o.template, "discovery.template", "", "worker name template with {i}, e.g. tj-node-0-{i}.tj (Trainer v2) or pi-worker-{i}.pi.default.svc (mpi-operator)")
	fs.IntVar(&o.expected, "workers-expected", 0, "number of workers to wait for (with --discovery.service or --discovery.template)")
	fs.StringVar(&o.self, "self", "", "the launcher's own name as the hostfile lists it (default: this pod's hostname)")
	fs.IntVar(&o.defaultSlots, "discovery.default-slots", 1, "slots for workers whose source gives none: with --slots auto, only under --slots.allow-default")
	fs.DurationVar(&o.discoveryTimeout, "discovery.timeout", 5*time.Minute, "how long to wait for every worker name to resolve")
	fs.StringVar(&o.slots, "slots", "auto", "slots per worker: auto (ask each worker-agent's /info until --probe.timeout, else the hostfile's count; a worker with neither fails the job, exit 72) or a positive integer")
	fs.BoolVar(&o.slotsAllowDefault, "slots.allow-default", false, "with --slots auto, run a worker whose agent gives no count and whose source gives none with --discovery.default-slots (a warning) instead of failing with exit 72")
	fs.IntVar(&o.webPort, "worker.web-port", 9022, "HTTP port of the worker-agents (for /info)")
	fs.StringVar(&o.impl, "mpi.implementation", "auto", "MPI implementation: auto (from mpirun --version), openmpi, openmpi4, openmpi5, intelmpi or mpich")
	fs.StringVar(&o.authDir, "ssh.auth-dir", "", "directory with the job's id_rsa and id_rsa.pub (default: first of $HOME/.ssh, /home/mpiuser/.ssh, /root/.ssh holding id_rsa)")
	fs.IntVar(&o.sshPort, "ssh.port", 2222, "SSH port of the worker-agents")
	fs.StringVar(&o.sshUser, "ssh.user", "", "user name sent to workers (worker-agent accepts any; default $USER or mpiuser)")
	fs.BoolVar(&o.insecure, "ssh.insecure-ignore-host-key", false, "do not verify workers' host keys (INSECURE; the default pins them to id_rsa.pub)")
	fs.DurationVar(&o.probeTimeout, "probe.timeout", 2*time.Minute, "deadline, from the end of the DNS wait, for every worker-agent to give its slots and pass the SSH probe; transient failures are retried until it")
	fs.IntVar(&o.probePar, "probe.parallel", 64, "workers probed at once")
	fs.IntVar(&o.probeSample, "probe.ssh-sample", 128, "fully probe (handshake, host key, auth, MPI daemon) at most this many workers spread over the list; the rest get a DNS+TCP+SSH-banner check (0: probe every worker fully)")
	fs.BoolVar(&o.skipProbe, "probe.skip", false, "skip the SSH probe before mpirun")
	fs.StringVar(&o.output, "hostfile.output", filepath.Join(os.TempDir(), "podmpi", "hostfile"), "where to write the hostfile for mpirun")
	fs.DurationVar(&o.mpirunTimeout, "mpirun.timeout", 0, "stop mpirun after this long (0: no limit)")
	fs.DurationVar(&o.killGrace, "mpirun.kill-grace", 10*time.Second, "after forwarding SIGTERM, wait this long before SIGKILL")
	fs.BoolVar(&o.noTreeSpawn, "mpirun.no-tree-spawn", false, "make mpirun start every remote daemon itself (Open MPI plm_rsh_no_tree_spawn)")
	fs.StringVar(&o.webAddr, "web.listen-address", ":9022", "address for /metrics during init and while mpirun runs (empty: off)")
	fs.StringVar(&o.pushURL, "metrics.push-url", "", "Prometheus Pushgateway URL to push the metrics to at the end")
	fs.StringVar(&o.terminationLog, "termination-log", "/dev/termination-log", "file for the root-cause message Kubernetes shows in the pod status")
}

func newRootCmd(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "launcher [flags] -- <command...>",
		Short: "Discover MPI workers, check them, and run mpirun with podmpi as its ssh program",
		Long: `launcher runs in the launcher pod of an MPI job (Kubeflow Trainer v2, mpi-operator).
It waits until every worker resolves, writes the hostfile, probes SSH to every
worker and names the cause of each failure, then runs the command after "--"
(usually mpirun ...) wired for its MPI, with itself as mpirun's ssh program.

Exit codes: mpirun's own, or 64 usage, 65 config, 66 discovery timeout,
67 probe failed, 68 command not found, 69 mpirun timeout, 71 internal,
72 slots unknown, 128+N killed by signal N. See docs/troubleshooting.md.`,
		Version:       version.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return usageError{errors.New(`give the command after "--", e.g. launcher -- mpirun -np 4 ./app`)}
			}
			return o.runJob(cmd.Context(), args)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	o.register(root.PersistentFlags())
	cli.AnnotateEnv(root.PersistentFlags())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := cli.ApplyEnv(cmd.Flags(), os.LookupEnv); err != nil {
			return usageError{err}
		}
		switch cmd.Name() {
		case "rsh", "version":
			return nil // they read none of the job's flags
		}
		if err := o.validate(); err != nil {
			return err
		}
		o.crashOutput()
		return nil
	}
	root.AddCommand(
		&cobra.Command{
			Use:                "rsh [ssh options] [user@]host command...",
			Short:              "ssh-compatible client mpirun uses to start remote daemons (job key, pinned host key)",
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				o.rsh = true
				o.code = exitcode.Code(rsh.Main(cmd.Context(), args, os.LookupEnv, o.stdin, o.stdout, o.stderr))
				return nil
			},
		},
		&cobra.Command{
			Use:   "probe",
			Short: "Discover and probe every worker over SSH, print the diagnosis, run nothing",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.runProbe(cmd.Context())
			},
		},
		&cobra.Command{
			Use:   "hostfile",
			Short: "Print the hostfile the launcher would write (waits for DNS, asks worker-agents for slots)",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.runHostfile(cmd.Context())
			},
		},
		&cobra.Command{
			Use:   "discover-hosts",
			Short: "Print host:slots for every worker that resolves now (Horovod --host-discovery-script)",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.runDiscoverHosts(cmd.Context())
			},
		},
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintln(o.stdout, "launcher", version.Get())
			},
		},
	)
	return root
}

func (o *options) logger() (*slog.Logger, error) {
	lg, err := o.log.NewLogger(o.stderr, cli.Getenv)
	if err != nil {
		return nil, usageError{err}
	}
	return lg.With("component", "launcher"), nil
}

func (o *options) spec() (discovery.Spec, error) {
	hf := o.hostfile
	if hf == "" && len(o.workers) == 0 && o.service == "" && o.template == "" {
		present, err := discovery.PresentHostfile(discovery.DefaultHostfile)
		if err != nil {
			return discovery.Spec{}, &launcher.Failure{Phase: launcher.PhaseDiscovery, Code: exitcode.Config, Err: err,
				Hint: "the mounted hostfile cannot be read; check the ConfigMap volume at /etc/mpi"}
		}
		hf = present
	}
	self := o.self
	if self == "" {
		self, _ = os.Hostname()
	}
	if o.template != "" && o.expected == 0 {
		return discovery.Spec{}, usageError{errors.New("--discovery.template needs --workers-expected N")}
	}
	// With --slots auto, hosts the source gives no count for keep 0 so that
	// slots.Decide can tell a hostfile's count from the default.
	ds := 0
	if o.slots != "auto" {
		ds = o.defaultSlots
	}
	return discovery.Spec{
		Workers:      o.workers,
		Hostfile:     hf,
		Service:      o.service,
		Template:     o.template,
		Expected:     o.expected,
		DefaultSlots: ds,
		Self:         self,
	}, nil
}

func (o *options) newLauncher(lg *slog.Logger, command []string, report io.Writer) (*launcher.Launcher, error) {
	spec, err := o.spec()
	if err != nil {
		return nil, err
	}
	return launcher.New(launcher.Config{
		Discovery:             spec,
		DiscoveryTimeout:      o.discoveryTimeout,
		SlotsMode:             o.slots,
		SlotsAllowDefault:     o.slotsAllowDefault,
		DefaultSlots:          o.defaultSlots,
		WorkerWebPort:         o.webPort,
		Implementation:        o.impl,
		AuthDir:               o.authDir,
		SSHPort:               o.sshPort,
		SSHUser:               o.sshUser,
		InsecureIgnoreHostKey: o.insecure,
		ProbeTimeout:          o.probeTimeout,
		ProbeParallel:         o.probePar,
		ProbeSSHSample:        o.probeSample,
		SkipProbe:             o.skipProbe,
		HostfilePath:          o.output,
		NoTreeSpawn:           o.noTreeSpawn,
		MPIRunTimeout:         o.mpirunTimeout,
		KillGrace:             o.killGrace,
		Command:               command,
		Logger:                lg,
		Report:                report,
		Stdin:                 o.stdin,
		Stdout:                o.stdout,
		Stderr:                o.stderr,
	})
}

// signalContext cancels on SIGINT/SIGTERM for the phases before mpirun
// (mpirun.Run forwards signals to mpirun itself once it runs).
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
}

// serveMetrics exposes /metrics while the launcher runs.
func serveMetrics(addr string, l *launcher.Launcher, lg *slog.Logger) func() {
	if addr == "" {
		return func() {}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		lg.Warn("metrics endpoint disabled: cannot listen", "address", addr, "err", err)
		return func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(l.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

func (o *options) runJob(ctx context.Context, command []string) error {
	lg, err := o.logger()
	if err != nil {
		return err
	}
	injectTestPanic()
	l, err := o.newLauncher(lg, command, o.stderr)
	if err != nil {
		return err
	}
	stop := serveMetrics(o.webAddr, l, lg)
	defer stop()
	// SIGINT/SIGTERM before mpirun cancels the phases (exit 128+N with a
	// termination message); once mpirun runs, mpirun.Run also receives them
	// and forwards them to mpirun, which tears down its remote daemons.
	ctx, cancel := signalContext(ctx)
	defer cancel()
	code, runErr := l.Run(ctx)
	l.WriteTerminationLog(o.terminationLog, launcher.TerminationMessage(code, runErr))
	if err := l.Push(context.Background(), o.pushURL, "podmpi_launcher"); err != nil {
		lg.Warn("metrics push failed", "err", err)
	}
	o.code = code
	if runErr != nil {
		var f *launcher.Failure
		if errors.As(runErr, &f) && f.Phase == launcher.PhaseMPIRun && f.Code != exitcode.MPIRunNotFound && f.Code != exitcode.MPIRunTimeout && f.Code != exitcode.Internal {
			// mpirun's own failure: its output said why; one line from us.
			fmt.Fprintf(o.stderr, "launcher: %s exited with %d\n", command[0], code)
			return nil
		}
		return runErr
	}
	return nil
}

func (o *options) runProbe(ctx context.Context) error {
	lg, err := o.logger()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext(ctx)
	defer cancel()
	l, err := o.newLauncher(lg, nil, o.stdout)
	if err != nil {
		return err
	}
	_, err = l.Prepare(ctx, true)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.stdout, "all workers passed the probe")
	return nil
}

func (o *options) runHostfile(ctx context.Context) error {
	lg, err := o.logger()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext(ctx)
	defer cancel()
	l, err := o.newLauncher(lg, nil, nil)
	if err != nil {
		return err
	}
	p, err := l.Prepare(ctx, false)
	if err != nil {
		return err
	}
	return hostfile.Render(o.stdout, p.Impl.HostfileFormat(), p.Hosts)
}

func (o *options) runDiscoverHosts(ctx context.Context) error {
	lg, err := o.logger()
	if err != nil {
		return err
	}
	spec, err := o.spec()
	if err != nil {
		return err
	}
	if spec.DefaultSlots == 0 {
		spec.DefaultSlots = o.defaultSlots
	}
	plan, err := discovery.Resolve(spec)
	if err != nil {
		return &launcher.Failure{Phase: launcher.PhaseDiscovery, Code: exitcode.Config, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	found, missing, err := discovery.DiscoverNow(ctx, spec, plan, nil)
	if err != nil {
		return &launcher.Failure{Phase: launcher.PhaseDiscovery, Code: exitcode.DiscoveryTimeout, Err: err}
	}
	if len(missing) > 0 {
		lg.Info("not resolvable yet; left out", "hosts", strings.Join(missing, ","))
	}
	for _, r := range found {
		fmt.Fprintf(o.stdout, "%s:%d\n", r.Host.Name, max(r.Host.Slots, 1))
	}
	return nil
}
