package slots

import (
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/mpi"
)

// IsMPIRun reports whether argv runs an MPI launcher directly (see
// mpi.IsLauncher): a command run through a shell ("bash -c 'mpirun ...'")
// or a wrapper (env, time) is not.
func IsMPIRun(argv []string) bool {
	return len(argv) > 0 && mpi.IsLauncher(argv[0])
}

// option kinds for the launcher option table.
const (
	optCount    = iota + 1 // sets the process count: -np N, -n N, -c N
	optIndirect            // fixes it another way: per node, app/config file
	optValue               // takes one value
	optValue2              // takes two values (MCA parameters, -genv NAME VALUE)
)

// launcherOptions lists the options of Open MPI 4/5 mpirun and Hydra mpiexec
// that take values or fix the process count, by name without leading dashes
// (both launchers accept one or two dashes for long names). Options not
// listed are taken as flags without a value.
var launcherOptions = map[string]int{
	// The process count.
	"np": optCount, "n": optCount, "c": optCount,
	// Open MPI: per node / per resource counts and app files fix it too.
	"N": optIndirect, "npernode": optIndirect, "npersocket": optIndirect, "ppr": optIndirect, "app": optIndirect,
	// Hydra: processes per node, config file.
	"ppn": optIndirect, "perhost": optIndirect, "configfile": optIndirect,
	// Open MPI options with one value.
	"am": optValue, "bind-to": optValue, "cpu-set": optValue, "cpus-per-proc": optValue, "cpus-per-rank": optValue,
	"default-hostfile": optValue, "H": optValue, "host": optValue, "hostfile": optValue, "machinefile": optValue,
	"launch-agent": optValue, "map-by": optValue, "rank-by": optValue, "max-vm-size": optValue,
	"output-filename": optValue, "path": optValue, "prefix": optValue, "rankfile": optValue, "rf": optValue,
	"report-uri": optValue, "report-pid": optValue, "server-wait-time": optValue, "stdin": optValue,
	"tmpdir": optValue, "tune": optValue, "wd": optValue, "wdir": optValue, "x": optValue, "timeout": optValue,
	"personality": optValue, "ompi-server": optValue, "preload-files": optValue, "output": optValue,
	"display": optValue, "runtime-options": optValue, "pset": optValue, "stream-buffering": optValue,
	"dvm": optValue, "dvm-uri": optValue, "cf": optValue, "cartofile": optValue, "xterm": optValue,
	"max-restarts": optValue, "debugger": optValue,
	// Hydra options with one value.
	"f": optValue, "machine": optValue, "hosts": optValue, "genvlist": optValue, "envlist": optValue,
	"launcher": optValue, "launcher-exec": optValue, "bootstrap": optValue, "bootstrap-exec": optValue,
	"bootstrap-exec-args": optValue, "iface": optValue, "rmk": optValue, "demux": optValue, "nameserver": optValue,
	"errfile-pattern": optValue, "outfile-pattern": optValue, "binding": optValue, "localhost": optValue,
	"gtool": optValue, "hostos": optValue, "branch-count": optValue, "prepend-pattern": optValue, "usize": optValue,
	"ckpointlib": optValue, "ckpoint-prefix": optValue, "ckpoint-interval": optValue,
	// Two values.
	"mca": optValue2, "gmca": optValue2, "omca": optValue2, "pmixmca": optValue2, "gpmixmca": optValue2,
	"prtemca": optValue2, "genv": optValue2, "env": optValue2,
}

// NPOption returns the option of an MPI launcher command that fixes its
// number of processes ("-np", "--n", "-c", or per-node forms such as "-N",
// "--npernode", "-ppn", "--map-by ppr:2:node", or an app/config file), or ""
// when there is none or argv is not an MPI launcher (see IsMPIRun). Options
// are read up to the program of each app context: arguments of the user's
// program ("python train.py -n 5") are not mpirun's. Contexts separated by
// ":" (MPMD) are each read.
func NPOption(argv []string) string {
	found := ""
	eachOption(argv, func(o option) bool {
		switch launcherOptions[o.name] {
		case optCount, optIndirect:
			found = argv[o.index]
			return false
		}
		if o.name == "map-by" && len(o.values) > 0 && strings.HasPrefix(strings.ToLower(o.values[0]), "ppr:") {
			found = argv[o.index]
			return false
		}
		return true
	})
	return found
}

// option is one launcher option of a command line: the index of its word,
// its name without leading dashes and "=value", and its values (attached
// after "=", or the following words), with the index of the first value's
// word (== index when attached).
type option struct {
	index      int
	name       string
	values     []string
	valueIndex int
	attached   bool
}

// eachOption calls fn for every option of an MPI launcher command (IsMPIRun)
// up to the program of each app context, in order, until fn returns false.
// Options not in launcherOptions are taken as flags without a value; a
// value missing at the end of argv is left out of values.
func eachOption(argv []string, fn func(option) bool) {
	if !IsMPIRun(argv) {
		return
	}
	inProgram := false
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a == ":" {
			inProgram = false
			continue
		}
		if inProgram {
			continue
		}
		if a == "--" {
			inProgram = true
			i++ // the program itself
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			inProgram = true
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, value, attached := strings.Cut(name, "=")
		o := option{index: i, name: name, valueIndex: i, attached: attached}
		n := 0
		switch launcherOptions[name] {
		case optCount, optIndirect, optValue:
			n = 1
		case optValue2:
			n = 2
		}
		if attached {
			o.values = append(o.values, value)
			n = max(n-1, 0)
		} else if n > 0 {
			o.valueIndex = i + 1
		}
		for k := 1; k <= n && i+k < len(argv); k++ {
			o.values = append(o.values, argv[i+k])
		}
		if !fn(o) {
			return
		}
		i += n
	}
}

// CommandHasNP reports whether an MPI launcher command already fixes its
// number of processes (see NPOption). It is false for commands that are not
// an MPI launcher.
func CommandHasNP(argv []string) bool { return NPOption(argv) != "" }

// InjectNP returns a copy of argv with "-np N" inserted right after the
// launcher word, which both Open MPI and Hydra accept. argv is returned
// unchanged (as a copy) when it is not an MPI launcher (IsMPIRun), when it
// already fixes the process count (CommandHasNP), or when np < 1; the caller
// logs why. argv itself is never modified.
func InjectNP(argv []string, np int) []string {
	out := append([]string(nil), argv...)
	if np < 1 || !IsMPIRun(argv) || CommandHasNP(argv) {
		return out
	}
	out = make([]string, 0, len(argv)+2)
	out = append(out, argv[0], "-np", strconv.Itoa(np))
	return append(out, argv[1:]...)
}
