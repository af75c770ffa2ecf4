package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/layout"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
	"github.com/podmpi/podmpi/agent/version"
)

func main() {
	if rsh.Invoked(os.Args) {
		// Before anything opens a file: what mpirun's other children left
		// open is not ours to keep (see relay.CloseInheritedFDs).
		_, _ = relay.CloseInheritedFDs()
		rsh.TuneProcess()
	}
	tuneRuntime = true
	os.Exit(int(run(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr)))
}

// tuneRuntime is set by main, not by the tests that call run in their own
// process: see launcher.Config.TuneRuntime.
var tuneRuntime bool

// app is one run of the command line: the settings every subcommand shares
// (bound to the flags), the streams, and the exit code.
type app struct {
	cfg    launcher.Config
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	code   exitcode.Code
	rsh    bool // running as `launcher rsh`: the termination log is not ours
	json   bool // the logs are JSON: no free text on stderr
}

// run is main without os.Exit, for tests. A panic anywhere in the
// launcher's own goroutine (and in the parallel phases, which hand theirs
// back to it) ends in exitcode.Internal with the panic on stderr and in the
// termination message, never Go's bare exit 2.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code exitcode.Code) {
	a := &app{cfg: launcher.Defaults(), stdin: stdin, stdout: stdout, stderr: stderr}
	defer func() {
		if r := recover(); r != nil {
			code = a.internalPanic(r, debug.Stack())
		}
	}()
	if len(args) > 0 && rsh.IsName(args[0]) {
		return exitcode.Code(rsh.Main(ctx, args[1:], os.LookupEnv, stdin, stdout, stderr))
	}
	if len(args) > 0 && filepath.Base(args[0]) == layout.WorkerAgent {
		return workerAgent(args, stderr)
	}
	if len(args) > 0 && launcher.IsShimName(args[0]) {
		return a.shim(ctx, args, launcher.RunShim)
	}
	root := newRootCmd(a, commands{})
	if len(args) > 0 {
		args = args[1:]
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var ue *launcher.UsageError
	var f *launcher.Failure
	switch {
	case err == nil:
		return a.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "launcher: %v\nRun 'launcher --help' for usage.\n", ue.Err)
		return exitcode.Usage
	case errors.As(err, &f):
		if a.code == exitcode.OK {
			a.code = f.Code
		}
		a.fail("launcher", a.code, err)
		return a.code
	}
	if a.code == exitcode.OK {
		a.code = exitcode.Internal
	}
	a.fail("launcher", a.code, err)
	return a.code
}

// runFunc is one of the launcher's commands (agent/launcher RunJob, Probe,
// PrintHostfile, DiscoverHosts) over the parsed Config.
type runFunc func(ctx context.Context, cfg launcher.Config) (exitcode.Code, error)

// commands are the functions the subcommands run; a nil field runs the
// launcher's own. Tests set them to see the Config the flags produce.
type commands struct {
	job, probe, hostfile, discoverHosts runFunc
}

func (c commands) withDefaults(a *app) commands {
	if c.job == nil {
		c.job = launcher.RunJob
	}
	if c.probe == nil {
		c.probe = func(ctx context.Context, cfg launcher.Config) (exitcode.Code, error) {
			return launcher.Probe(ctx, cfg, a.stdout)
		}
	}
	if c.hostfile == nil {
		c.hostfile = func(ctx context.Context, cfg launcher.Config) (exitcode.Code, error) {
			return launcher.PrintHostfile(ctx, cfg, a.stdout)
		}
	}
	if c.discoverHosts == nil {
		c.discoverHosts = func(ctx context.Context, cfg launcher.Config) (exitcode.Code, error) {
			return launcher.DiscoverHosts(ctx, cfg, a.stdout)
		}
	}
	return c
}

// newRootCmd is `launcher [flags] -- <command...>` with its subcommands.
func newRootCmd(a *app, cmds commands) *cobra.Command {
	cmds = cmds.withDefaults(a)
	root := &cobra.Command{
		Use:   "launcher [flags] -- <command...>",
		Short: "Discover MPI workers, check them, and run mpirun with podmpi as its ssh program",
		Long: `launcher runs in the launcher pod of an MPI job (Kubeflow Trainer v2, mpi-operator).
It waits until every worker resolves, writes the hostfile, probes SSH to every
worker and names the cause of each failure, then runs the command after "--"
(usually mpirun ...) wired for its MPI, with itself as mpirun's ssh program.

Every flag has a PODMPI_* environment variable twin, shown in brackets. -v is
verbose (the debug log level); --version prints the version.

Once mpirun runs, the launcher exits with mpirun's own exit code; ended by
signal N before that, with 128+N.

` + cli.ExitCodes(exitcode.Table),
		Version:       version.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return &launcher.UsageError{Err: errors.New(`give the command after "--", e.g. launcher -- mpirun -np 4 ./app`)}
			}
			a.cfg.Command = args
			return a.runCommand(cmd, cmds.job)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &launcher.UsageError{Err: err} })
	root.SetVersionTemplate(cli.VersionTemplate)
	a.cfg.Bind(root.PersistentFlags())
	cli.AnnotateEnv(root.PersistentFlags())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		switch cmd.Name() {
		case "rsh":
			a.rsh = true
			return nil // it reads only its own arguments and variables
		case "version", "names", "install":
			return nil
		}
		return a.prepare(cmd)
	}
	root.AddCommand(
		rsh.NewCommand(os.LookupEnv, a.stdin, a.stdout, a.stderr, func(code int) { a.code = exitcode.Code(code) }),
		newJobCmd(a, "probe", "Discover and probe every worker over SSH, print the diagnosis, run nothing", cmds.probe),
		newJobCmd(a, "hostfile", "Print the hostfile the launcher would write (waits for DNS, asks worker-agents for slots)", cmds.hostfile),
		newJobCmd(a, "discover-hosts", "Print host:slots for every worker that resolves now (Horovod --host-discovery-script)", cmds.discoverHosts),
		newInstallCmd(a),
		&cobra.Command{
			Use:    "names",
			Short:  "Print every link make build lays out next to the binaries, one \"name target\" per line",
			Args:   cobra.NoArgs,
			Hidden: true,
			Run: func(*cobra.Command, []string) {
				for _, l := range links() {
					fmt.Fprintln(a.stdout, l[0], l[1])
				}
			},
		},
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintln(a.stdout, cli.VersionLine(cmd.Root()))
			},
		},
	)
	return root
}

// links are the symlinks make build lays out in bin/ (the images'
// /opt/podmpi/bin), each {name, target}: the client names other than the
// relay binary's own (rsh.Name, cmd/launcher/podmpi-rsh) link to it, the
// MPI launcher names and worker-agent (which checks the image, then runs
// the real one in libexec/: see image.go) to the launcher. The launcher
// binary answers to all of them too (a launcher copied alone still works
// as ssh and mpirun).
func links() [][2]string {
	var out [][2]string
	for _, n := range rsh.Names {
		if n != rsh.Name {
			out = append(out, [2]string{n, rsh.Name})
		}
	}
	for _, n := range append(slices.Clone(launcher.ShimNames), layout.WorkerAgent) {
		out = append(out, [2]string{n, layout.Launcher})
	}
	return out
}

// newJobCmd is a subcommand that takes no arguments and runs runF over the
// shared flags.
func newJobCmd(a *app, use, short string, runF runFunc) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runCommand(cmd, runF)
		},
	}
}

// prepare applies the environment twins, checks every flag, and wires the
// logger, the streams and the crash output into the Config.
func (a *app) prepare(cmd *cobra.Command) error {
	if err := cli.ApplyEnv(cmd.Flags(), os.LookupEnv); err != nil {
		return &launcher.UsageError{Err: err}
	}
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	if err := a.wire(cmd.Name() == "launcher"); err != nil {
		return err
	}
	return a.checkImage()
}

// checkImage runs before the launcher's phases: the podmpi tree it runs
// from is whole (exit 75 naming it, in the termination message too), and
// the image's MPI is found even where the pod spec's PATH does not name it.
func (a *app) checkImage() error {
	if err := launcherTreeCheck(); err != nil {
		f := &launcher.Failure{Phase: "image", Code: exitcode.ImageUnsupported, Err: err}
		writeTermination(a.cfg.TerminationLog, launcher.TerminationMessage(f.Code, f))
		return f
	}
	extendPath(a)
	return nil
}

// wire builds the logger and hands it, the streams and the crash output to
// the Config; report gives the human report (hostfile, probe table) on
// stderr. With JSON logs there is no report: the launcher's records say the
// same, and free text would break the JSON stream.
func (a *app) wire(report bool) error {
	lg, err := a.cfg.Log.NewLogger(a.stderr, cli.Getenv)
	if err != nil {
		return &launcher.UsageError{Err: err}
	}
	a.cfg.Logger = lg.With("component", "launcher")
	a.json = a.cfg.Log.JSON(cli.Getenv)
	a.cfg.Stdin, a.cfg.Stdout, a.cfg.Stderr = a.stdin, a.stdout, a.stderr
	a.cfg.TuneRuntime = tuneRuntime
	if report && !a.json {
		a.cfg.Report = a.stderr
	}
	a.crashOutput()
	return nil
}

// fail says how the run ended, once: a "<name>: <error>" line, or with JSON
// logs one ERROR record (a failed phase has already logged its error and
// hint as a record of its own, so only the exit code is added then).
func (a *app) fail(name string, code exitcode.Code, err error) {
	if !a.json || a.cfg.Logger == nil {
		fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
		return
	}
	var f *launcher.Failure
	if errors.As(err, &f) {
		a.cfg.Logger.Error(name+" exiting", "code", int(code), "phase", f.Phase)
		return
	}
	a.cfg.Logger.Error(name+" exiting", "code", int(code), "error", err.Error())
}

// runCommand runs runF with SIGINT/SIGTERM cancelling the phases before
// mpirun (exit 128+N with a termination message); once mpirun runs, it
// receives them too and forwards them to mpirun, which tears down its
// remote daemons.
func (a *app) runCommand(cmd *cobra.Command, runF runFunc) error {
	injectTestPanic()
	ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	code, err := runF(ctx, a.cfg)
	a.code = code
	return err
}

// shimFunc is launcher.RunShim; tests replace it to see the Config.
type shimFunc func(ctx context.Context, cfg launcher.Config, argv []string) (exitcode.Code, error)

// shim is the launcher started as mpirun, mpiexec or mpiexec.hydra: there
// are no flags to parse (every argument is the MPI launcher's), so the
// settings come from the flags' PODMPI_* twins and defaults, checked as the
// command line checks them. Errors are reported as the command line reports
// them, prefixed with the name it was started as.
func (a *app) shim(ctx context.Context, args []string, run shimFunc) exitcode.Code {
	name := filepath.Base(args[0])
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	a.cfg.Bind(fs)
	cli.AnnotateEnv(fs)
	usage := func(err error) exitcode.Code {
		fmt.Fprintf(a.stderr, "podmpi %s: %v\n(%s is podmpi's launcher: its settings are the PODMPI_* variables of docs/configuration.md)\n", name, err, name)
		return exitcode.Usage
	}
	if err := cli.ApplyEnv(fs, os.LookupEnv); err != nil {
		return usage(err)
	}
	if err := a.cfg.Validate(); err != nil {
		return usage(err)
	}
	if err := a.wire(true); err != nil {
		return usage(err)
	}
	if err := a.checkImage(); err != nil {
		a.fail("podmpi "+name, exitcode.ImageUnsupported, err)
		return exitcode.ImageUnsupported
	}
	injectTestPanic()
	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	code, err := run(ctx, a.cfg, args)
	if err != nil {
		a.fail("podmpi "+name, code, err)
	}
	return code
}
