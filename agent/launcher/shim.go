package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/podmpi/podmpi/agent/execpath"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/mpirun"
	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/mpi"
)

// The launcher also answers to the names of the MPI launchers: make build
// links mpirun, mpiexec and mpiexec.hydra to it in bin/ (the images'
// /opt/podmpi/bin), so that a command that starts MPI without `launcher --`
// (the Kubeflow SDK's `mpirun --hostfile /etc/mpi/hostfile bash -c ...`, an
// entrypoint script, someone typing mpirun in the launcher pod) still gets
// every phase: the wait, the probe with its per-worker diagnosis, the
// hostfile for the MPI found, the wiring, the metrics and the termination
// message. Then it runs the real program of the same name, found on PATH
// after this binary, as `launcher --` runs the command after "--".

// ShimNames are the MPI launcher names under which the launcher binary runs
// RunShim. Only the generic names: a suffixed name (mpirun.openmpi,
// mpiexec.mpich) means the user chose one program, and orterun/prterun are
// Open MPI's own. This is the one list of them (agent/rsh owns the ssh
// client's names).
var ShimNames = []string{"mpirun", "mpiexec", "mpiexec.hydra"}

// IsShimName reports whether argv0 (without its directory) is one of
// ShimNames.
func IsShimName(argv0 string) bool {
	return slices.Contains(ShimNames, filepath.Base(argv0))
}

// EnvLauncherPID is set, to the launcher's process id, in the environment of
// the command the launcher runs: the phases are done for this job. A shim
// that sees it (Intel MPI's mpirun script calling mpiexec.hydra, a user
// script calling mpirun inside the job, `launcher -- bash -c "mpirun ..."`)
// runs the real program at once.
const EnvLauncherPID = "PODMPI_LAUNCHER_PID"

// execve replaces the process; a variable for tests.
var execve = syscall.Exec

// RunShim is the launcher started as mpirun, mpiexec or mpiexec.hydra
// (argv is os.Args; cfg comes from the PODMPI_* variables: there are no
// flags to give). It finds the real program of that name on PATH (never
// this binary) and then either
//
//   - runs it directly, replacing this process, when the launcher has
//     nothing to do: the phases already ran (EnvLauncherPID), the command
//     only asks for information (--version, --help, -info), it names its
//     hosts itself (-H, --host, -hosts), or nothing names any worker (no
//     hostfile option, no PODMPI_WORKERS/HOSTFILE/DISCOVERY_* setting, no
//     MPI default-hostfile variable, no /etc/mpi/hostfile): a local run.
//     The one setting it still gets is Open MPI's keep_fqdn_hostnames
//     (true for Open MPI 4, PRRTE's false for Open MPI 5), unless the user
//     set it (mpirun.DirectEnv): horovodrun's `mpirun -H w-0.job:1,...`
//     fails without it under Open MPI 4. Trainer's status
//     variables are removed: nothing of podmpi's serves these ranks an
//     endpoint, and Trainer's token must not reach them;
//   - or runs the job as RunJob does, with the real program as the command.
func RunShim(ctx context.Context, cfg Config, argv []string) (exitcode.Code, error) {
	if len(argv) == 0 {
		return exitcode.Usage, &Failure{Phase: PhaseMPIRun, Code: exitcode.Usage, Err: errors.New("no program name")}
	}
	name := filepath.Base(argv[0])
	self, err := executable(cfg.Executable)
	if err != nil {
		return exitcode.Internal, &Failure{Phase: PhaseMPIRun, Code: exitcode.Internal, Err: err}
	}
	path := os.Getenv("PATH")
	real := realProgram(name, path, self)
	if real == "" {
		return exitcode.MPIRunNotFound, &Failure{Phase: PhaseMPIRun, Code: exitcode.MPIRunNotFound,
			Err: fmt.Errorf("%s: no %s on PATH besides podmpi's own (PATH=%s)", name, name, path),
			Hint: "install the MPI in the image: podmpi's " + name + " runs the launcher's phases and then the real " + name +
				" it finds after its own directory on PATH"}
	}
	cmd := append([]string{name}, argv[1:]...)
	if why := directReason(cfg, cmd); why != "" {
		if cfg.Logger != nil {
			cfg.Logger.Debug("running the real program directly", "program", real, "why", why)
		}
		impl, _ := mpirun.Identify(ctx, cfg.Implementation, real)
		env, settings := mpirun.DirectEnv(impl, os.Environ())
		logDirectEnv(cfg, settings)
		// No endpoint of podmpi's serves these ranks: they get none of
		// Trainer's status variables, never its token.
		env = dropStatusEnv(env)
		err := execve(real, programArgv0(cmd, real, impl), env)
		return exitcode.MPIRunNotFound, &Failure{Phase: PhaseMPIRun, Code: exitcode.MPIRunNotFound,
			Err: fmt.Errorf("running %s: %w", real, err), Hint: "check that " + real + " is an executable the image can run"}
	}
	cfg.Command = cmd
	cfg.Program = real
	return RunJob(ctx, cfg)
}

// logDirectEnv logs what mpirun.DirectEnv decided for a program the shim
// runs at once: a setting at debug level (the shim stays quiet when the
// job works), a kept user value that breaks the job as a warning.
func logDirectEnv(cfg Config, settings []mpirun.Setting) {
	if cfg.Logger == nil {
		return
	}
	for _, s := range settings {
		switch {
		case s.Kept && s.Note != "":
			cfg.Logger.Warn(s.Note, "name", s.Name)
		case s.Kept:
			cfg.Logger.Debug("keeping the user's setting", "name", s.Name, "ours", s.Value)
		default:
			cfg.Logger.Debug("set", "name", s.Name, "value", s.Value)
		}
	}
}

// directReason says why the shim runs the real program at once, "" when
// the launcher runs the job.
func directReason(cfg Config, cmd []string) string {
	switch {
	case os.Getenv(EnvLauncherPID) != "":
		return "the launcher already prepared this job (" + EnvLauncherPID + " is set)"
	case slots.InfoOnly(cmd):
		return "the command only asks for information"
	case slots.NamesHosts(cmd) && slots.CommandHostfile(cmd) == "":
		return "the command names its hosts itself (-H, --host, -hosts)"
	}
	if hasSource(cfg.Discovery) || slots.CommandHostfile(cmd) != "" || envHostfile(os.LookupEnv) != "" {
		return ""
	}
	if present, err := discovery.PresentHostfile(discovery.DefaultHostfile); present != "" || err != nil {
		return "" // an unreadable one is the discovery phase's to report
	}
	return "no worker is named anywhere: no hostfile option, no PODMPI_WORKERS, PODMPI_HOSTFILE or PODMPI_DISCOVERY_* setting, no MPI default-hostfile variable and no " + discovery.DefaultHostfile
}

// executable is self, or this process's executable when self is "".
func executable(self string) (string, error) {
	if self != "" {
		return self, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locating this binary: %w", err)
	}
	return exe, nil
}

// realProgram finds name on path, skipping every match that is this binary
// (self, through whatever symlink): the real mpirun after podmpi's bin
// directory, never the shim itself. "" when there is none.
func realProgram(name, path, self string) string {
	return execpath.LookFunc(name, path, func(p string) bool { return execpath.SameFile(p, self) })
}

// program is the file a command whose argv[0] is argv0 runs: Config.Program
// when set; else argv0 looked up on PATH, skipping this binary, so that
// `launcher -- mpirun ...` with podmpi's bin directory first on PATH runs
// the real mpirun and nothing runs the phases twice. It returns "" for an
// argv0 with a slash and for one not found at all (mpirun.Run then looks it
// up itself and reports it), and an error when the only match is this
// binary.
func (l *Launcher) program(argv0 string) (string, error) {
	if l.cfg.Program != "" && len(l.cfg.Command) > 0 && argv0 == l.cfg.Command[0] {
		return l.cfg.Program, nil
	}
	if argv0 == "" || filepath.Base(argv0) != argv0 {
		return "", nil
	}
	path := os.Getenv("PATH")
	first := execpath.Look(argv0, path)
	if first == "" {
		return "", nil
	}
	self, err := executable(l.cfg.Executable)
	if err != nil || !execpath.SameFile(first, self) {
		return first, nil
	}
	if real := realProgram(argv0, path, self); real != "" {
		return real, nil
	}
	return "", fmt.Errorf("%s: no %s on PATH besides podmpi's own (PATH=%s)", argv0, argv0, path)
}

// commandHostfile returns argv with every hostfile option that names the
// hostfile the launcher read replaced by the one it wrote: the same hosts,
// slots checked against the worker-agents, in the format of the MPI found
// (Hydra rejects Trainer's `host slots=N` file). Each replacement is logged.
// A hostfile option naming another file is kept, with a warning: mpirun
// then runs on hosts the launcher did not check.
func (l *Launcher) commandHostfile(argv []string, p *Prepared) []string {
	out := argv
	if p.Plan.Source == discovery.SourceHostfile && p.Hostfile != "" {
		var replaced []string
		out, replaced = slots.ReplaceHostfile(argv, p.Spec.Hostfile, p.Hostfile)
		for _, opt := range replaced {
			l.log.Info("replacing the command's hostfile with the launcher's (same hosts, slots checked against the worker-agents, in the format of the MPI found)",
				"option", opt, "read", p.Spec.Hostfile, "written", p.Hostfile, "format", p.Impl.HostfileFormat().String())
		}
	}
	for _, a := range slots.HostfileArgs(out) {
		if a.Value != p.Hostfile {
			l.log.Warn("the command names a hostfile the launcher did not read: mpirun takes its hosts from it, the launcher checked the workers of its own discovery",
				"option", a.Option, "hostfile", a.Value, "source", string(p.Plan.Source))
		}
	}
	return out
}

// programArgv0 is argv with the argv[0] the real MPI launcher prog of MPI
// impl needs when the command names it without a directory; both ways of
// starting the MPI (`launcher --` with the MPI it detected, the shim that
// runs it at once with what mpirun.Identify says) decide here. Hydra
// (MPICH, Intel MPI) finds its proxies next to itself, and for a bare
// argv[0] it looks itself up on PATH, where podmpi's directory comes
// first: it gets its absolute path, as if PATH held only the real one.
// Open MPI takes an absolute argv[0] for --prefix (the remote PATH and
// LD_LIBRARY_PATH set from the launcher's install), so it keeps the name as
// typed. An MPI nobody could name gets the absolute path too: Hydra fails
// without it, Open MPI merely gets that prefix (Intel MPI's mpirun is a
// script: its argv[0] does not matter).
func programArgv0(argv []string, prog string, impl mpi.Implementation) []string {
	if impl.OpenMPI() || prog == "" || len(argv) == 0 || filepath.Base(argv[0]) != argv[0] || !mpi.IsLauncher(argv[0]) {
		return argv
	}
	out := slices.Clone(argv)
	out[0] = prog
	return out
}
