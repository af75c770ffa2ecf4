package mpirun

import (
	"slices"
	"strings"

	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/mpi"
)

// Asked is what the launcher asks the MPI to print for the diagnosis of a
// failed run, on top of what the command asks for: where each rank
// started, or how every process ended, which mpirun's own failure messages
// leave out (Open MPI 4 names the first rank that exited with a status
// without its host; Hydra prints nothing about a rank that exits with a
// status). The launcher's collector reads those lines and leaves them out
// of the job's output (postmortem.Asked).
type Asked struct {
	// Bindings: Open MPI's report of each rank's binding, one line per
	// rank, written as the rank starts by the daemon that starts it, with
	// its own host name ("[w-0:4242] MCW rank 3 is not bound ...").
	Bindings bool
	// ExitCodes: Hydra's list of every process's exit status by host,
	// printed as mpiexec ends ("[mpiexec@l] Exit codes: [w-0] 0,1280").
	ExitCodes bool
}

// envReportBindings is Open MPI 4's parameter for the binding report
// (--report-bindings); the daemons get it from mpirun.
const envReportBindings = "OMPI_MCA_hwloc_base_report_bindings"

// Option names of the same reports on the command line, without dashes.
const (
	optReportBindings = "report-bindings"
	optExitCodes      = "print-all-exitcodes"
)

// AskReports returns argv and env with what makes impl's launcher print
// those reports, and what it added. Each costs one line per rank (Open
// MPI), or one per host at the end (Hydra), nothing else: Open MPI 4 takes
// the report from mpirun's environment, Open MPI 5 (PRRTE reads it from
// the command line only) gets --report-bindings, Hydra -print-all-exitcodes,
// right after the program's name. Nothing is added when the command asks
// for the report itself (its lines are the user's: they pass), when the
// environment sets Open MPI 4's parameter either way, or when the command
// is not the MPI's launcher itself (a script that runs it: its options
// cannot be seen).
func AskReports(impl mpi.Implementation, argv, env []string) ([]string, []string, Asked) {
	if !slots.IsMPIRun(argv) {
		return argv, env, Asked{}
	}
	switch {
	case impl == mpi.OpenMPI4:
		if _, set := environ.Lookup(env, envReportBindings); set || reportsBindings(argv) {
			return argv, env, Asked{}
		}
		return argv, environ.Set(slices.Clone(env), envReportBindings, "1"), Asked{Bindings: true}
	case impl == mpi.OpenMPI5:
		if reportsBindings(argv) {
			return argv, env, Asked{}
		}
		return insertOption(argv, "--"+optReportBindings), env, Asked{Bindings: true}
	case impl.Hydra():
		if slices.ContainsFunc(slots.CommandOptions(argv), func(o slots.CommandOption) bool { return o.Name == optExitCodes }) {
			return argv, env, Asked{}
		}
		return insertOption(argv, "-"+optExitCodes), env, Asked{ExitCodes: true}
	}
	return argv, env, Asked{}
}

// reportsBindings reports whether an Open MPI command asks for the binding
// report itself: --report-bindings, --display with bind (Open MPI 5's
// spelling), a binding policy with the report qualifier (--bind-to
// core:report), or the parameter on the command line.
func reportsBindings(argv []string) bool {
	for _, o := range slots.CommandOptions(argv) {
		v := strings.ToLower(strings.Join(o.Values, " "))
		switch o.Name {
		case optReportBindings:
			return true
		case "display":
			if strings.Contains(v, "bind") {
				return true
			}
		case "bind-to":
			if strings.Contains(v, ":report") {
				return true
			}
		case "mca", "gmca", "omca", "prtemca":
			if len(o.Values) > 0 && strings.Contains(o.Values[0], "report_bindings") {
				return true
			}
		}
	}
	return false
}

// insertOption is argv with opt right after the program's name, where a
// global option goes (before the first app context).
func insertOption(argv []string, opt string) []string {
	out := make([]string, 0, len(argv)+1)
	out = append(out, argv[0], opt)
	return append(out, argv[1:]...)
}
