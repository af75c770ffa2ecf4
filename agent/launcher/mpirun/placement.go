package mpirun

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/hostfile"
	"github.com/podmpi/podmpi/mpi"
)

// placementOptions are the options of Open MPI's mpirun that leave where
// its default mapping puts each rank as it is: the process count, the
// environment, binding within a node (not which node), output, paths, the
// hostfile (when it is the launcher's, see RankHosts) and MCA parameters
// other than mapping ones (mappingParam). Any other option, a --map-by,
// --rank-by, --rankfile, -H, --npernode or one this list does not know,
// makes the placement unknown: naming a wrong host is worse than naming
// none.
var placementOptions = []string{
	"np", "n", "c",
	"x", "mca", "gmca", "omca", "prtemca",
	"allow-run-as-root", "oversubscribe", "nooversubscribe", "bind-to", "report-bindings",
	"tag-output", "timestamp-output", "output-filename", "merge-stderr-to-stdout", "output", "xml",
	"q", "quiet", "v", "verbose", "display-map", "display-devel-map", "display-allocation", "show-progress",
	"report-pid", "report-uri", "wd", "wdir", "path", "prefix", "noprefix", "stdin", "timeout", "tmpdir",
	"enable-recovery", "launch-agent",
	"hostfile", "machinefile", "default-hostfile",
}

// mappingParam reports whether an Open MPI/PRRTE parameter (its name
// without the OMPI_MCA_ or PRTE_MCA_ prefix) can move a rank to another
// node: the mapper's and allocator's own (rmaps_*, ras_*), a rankfile, a
// default hostfile, or a parameter file that may set any of them.
func mappingParam(name string) bool {
	return strings.HasPrefix(name, "rmaps") || strings.HasPrefix(name, "ras") || strings.Contains(name, "rankfile") ||
		strings.Contains(name, "hostfile") || strings.Contains(name, "param_file")
}

// RankHosts is the host of each rank (indexed by rank) where Open MPI's
// mpirun puts it by default: the hostfile's hosts in their order, each
// filled up to its slots before the next (Open MPI 4's ORTE and 5's PRRTE
// map by slot across nodes, whatever they map and bind to within one). It
// names the host of a rank mpirun reports without one (Open MPI 4's "The
// first process to do so was: Process name: [[x,1],6] Exit code: 7" names
// no node), when no worker-agent saw that rank end (a rank that lives a
// few milliseconds, such as `sh -c 'exit 7'`, is gone before the agent
// looks).
//
// It is nil when the placement is not known for sure: another MPI (Hydra
// names the host in its own message), a command that is not mpirun itself
// (a script that runs it), several app contexts, a hostfile other than
// hostfile (the launcher's) on the command line or in the environment, an
// option not in placementOptions, a mapping parameter on the command line
// or in env, or more ranks than slots (the mapping wraps). Open MPI's
// parameter files (~/.openmpi/mca-params.conf and the system's) are not
// read: a mapping policy set there alone would be missed.
func RankHosts(impl mpi.Implementation, argv, env []string, hostfilePath string, hosts []hostfile.Host) []string {
	if !impl.OpenMPI() || hostfilePath == "" || len(hosts) == 0 || slices.Contains(argv, ":") {
		return nil
	}
	same := func(p string) bool { return filepath.Clean(p) == filepath.Clean(hostfilePath) }
	np, named := 0, false
	for _, o := range slots.CommandOptions(argv) {
		if !slices.Contains(placementOptions, o.Name) {
			return nil
		}
		switch o.Name {
		case "np", "n", "c":
			if len(o.Values) != 1 {
				return nil
			}
			n, err := strconv.Atoi(o.Values[0])
			if err != nil || n < 1 {
				return nil
			}
			np = n
		case "hostfile", "machinefile", "default-hostfile":
			if len(o.Values) != 1 || !same(o.Values[0]) {
				return nil
			}
			named = true
		case "mca", "gmca", "omca", "prtemca":
			if len(o.Values) != 2 || mappingParam(o.Values[0]) {
				return nil
			}
		}
	}
	if np == 0 {
		return nil // not mpirun itself, or its count is unknown
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		for _, prefix := range []string{"OMPI_MCA_", "PRTE_MCA_"} {
			name, ok := strings.CutPrefix(k, prefix)
			if !ok || v == "" || !mappingParam(name) {
				continue
			}
			if !strings.Contains(name, "default_hostfile") || !same(v) {
				return nil
			}
			named = true
		}
	}
	if !named {
		return nil // mpirun reads no hostfile of the launcher's
	}
	var out []string
	for _, h := range hosts {
		if h.Slots < 1 {
			return nil
		}
		for range h.Slots {
			if len(out) == np {
				return out
			}
			out = append(out, h.Name)
		}
	}
	if len(out) < np {
		return nil // oversubscribed: the mapping wraps around
	}
	return out
}
