package slots

import (
	"path/filepath"
	"slices"
)

// What else the launcher reads from an MPI launcher command (both for
// `launcher -- mpirun ...` and for the mpirun/mpiexec names the launcher
// answers to): the hostfile it names, whether it names its hosts itself,
// and whether it only asks for information. The option grammar is
// launcherOptions, the table NPOption reads.

// hostfileOptions name a hostfile: Open MPI --hostfile, --machinefile,
// --default-hostfile; Hydra (MPICH, Intel MPI) -f, -hostfile, -machinefile.
var hostfileOptions = []string{"hostfile", "machinefile", "default-hostfile", "f"}

// hostsOptions name the hosts on the command line: Open MPI -H/--host,
// Hydra -hosts.
var hostsOptions = []string{"H", "host", "hosts"}

// infoOptions ask the launcher for information and start nothing.
var infoOptions = []string{"version", "V", "help", "h", "info"}

// HostfileArg is one hostfile option of a command.
type HostfileArg struct {
	// Option is the option as written ("--hostfile", "-f", "--hostfile=x").
	Option string
	// Value is the hostfile's path.
	Value string
	// index is the word holding Value.
	index    int
	attached bool
	prefix   string // Option up to and including "=" when attached
}

// HostfileArgs returns the hostfile options of an MPI launcher command, in
// order (none when argv is not one: IsMPIRun).
func HostfileArgs(argv []string) []HostfileArg {
	var out []HostfileArg
	eachOption(argv, func(o option) bool {
		if slices.Contains(hostfileOptions, o.name) && len(o.values) == 1 && o.values[0] != "" {
			a := HostfileArg{Option: argv[o.index], Value: o.values[0], index: o.valueIndex, attached: o.attached}
			if o.attached {
				a.prefix = argv[o.index][:len(argv[o.index])-len(o.values[0])]
			}
			out = append(out, a)
		}
		return true
	})
	return out
}

// CommandHostfile is the first hostfile an MPI launcher command names, ""
// when none.
func CommandHostfile(argv []string) string {
	if h := HostfileArgs(argv); len(h) > 0 {
		return h[0].Value
	}
	return ""
}

// NamesHosts reports whether an MPI launcher command names its hosts on the
// command line (-H, --host, -hosts).
func NamesHosts(argv []string) bool {
	return hasOption(argv, hostsOptions)
}

// InfoOnly reports whether an MPI launcher command asks only for
// information (--version, -V, --help, -h, -info): nothing is started.
func InfoOnly(argv []string) bool {
	return hasOption(argv, infoOptions)
}

func hasOption(argv []string, names []string) bool {
	found := false
	eachOption(argv, func(o option) bool {
		found = slices.Contains(names, o.name)
		return !found
	})
	return found
}

// ReplaceHostfile returns a copy of argv in which every hostfile option
// naming from (compared after filepath.Clean) names to instead, and the
// options it replaced. argv itself is never modified.
func ReplaceHostfile(argv []string, from, to string) (out []string, replaced []string) {
	out = slices.Clone(argv)
	if from == "" {
		return out, nil
	}
	want := filepath.Clean(from)
	for _, a := range HostfileArgs(argv) {
		if filepath.Clean(a.Value) != want {
			continue
		}
		if a.attached {
			out[a.index] = a.prefix + to
		} else {
			out[a.index] = to
		}
		replaced = append(replaced, a.Option)
	}
	return out, replaced
}

// CommandOption is one option of an MPI launcher command: its name
// without leading dashes and "=value", and its values.
type CommandOption struct {
	Name   string
	Values []string
}

// CommandOptions returns the options of an MPI launcher command in order,
// up to the program of each app context (none when argv is not one:
// IsMPIRun).
func CommandOptions(argv []string) []CommandOption {
	var out []CommandOption
	eachOption(argv, func(o option) bool {
		out = append(out, CommandOption{Name: o.name, Values: o.values})
		return true
	})
	return out
}
