// Package mpi is podmpi's one table of the MPI implementations it launches:
// for each flavour, the hostfile syntax its launcher reads, the daemons it
// starts on the workers over SSH, and the environment variables through
// which podmpi wires it (rsh program, hostfile, slots, interface, tree spawn,
// run as root), together with how to tell the flavour from `mpirun --version`
// and from a program's name.
//
// Every package that behaves differently per MPI reads this table instead
// of switching on the flavour itself: the launcher's hostfile and probe, the
// environment wiring of agent/launcher/mpirun, and worker-agent's /info
// (which daemons its sessions can start). It is a leaf, like hostfile, so
// that worker-agent can use it without linking launcher code.
//
// The variable names come from the MPIs' own sources: Open MPI 4's ORTE
// (plm_rsh_*, orte_*), Open MPI 5's PRRTE (plm_ssh_*, prte_*; Open MPI 5
// translates only some OMPI_MCA_ names, differently between versions, so
// both spellings are set), MPICH's Hydra (HYDRA_*) and Intel MPI's Hydra
// (I_MPI_HYDRA_*, from Intel's reference) with libfabric under it (FI_*).
package mpi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/podmpi/podmpi/hostfile"
)

// Implementation is an MPI launch stack whose environment podmpi knows how
// to wire. Open MPI is split by major version because Open MPI 5 replaced
// ORTE with PRRTE, which renamed most launch parameters.
type Implementation string

// The supported implementations.
const (
	// OpenMPI4 is Open MPI up to 4.x (ORTE runtime; orted daemons;
	// OMPI_MCA_plm_rsh_* / OMPI_MCA_orte_* names).
	OpenMPI4 Implementation = "openmpi4"
	// OpenMPI5 is Open MPI 5.x and later (PRRTE runtime; prted daemons;
	// PRTE_MCA_plm_ssh_* / PRTE_MCA_prte_* names).
	OpenMPI5 Implementation = "openmpi5"
	// MPICH is MPICH (and derivatives such as MVAPICH) with the Hydra process
	// manager (hydra_pmi_proxy on the workers; HYDRA_* names).
	MPICH Implementation = "mpich"
	// IntelMPI is Intel MPI Library 2019 and later (its own Hydra;
	// hydra_bstrap_proxy and hydra_pmi_proxy on the workers; I_MPI_HYDRA_*
	// names).
	IntelMPI Implementation = "intelmpi"
)

// Role is what a launch parameter does; the launcher computes each role's
// value once and sets it under the flavour's names.
type Role int

// Roles of launch parameters.
const (
	// RshAgent is Open MPI's list of rsh/ssh programs (plm_rsh_agent).
	RshAgent Role = iota + 1
	// Bootstrap is Hydra's launcher kind; podmpi sets "ssh".
	Bootstrap
	// BootstrapExec is Hydra's launcher program (the rsh program's path).
	BootstrapExec
	// KeepFQDN keeps the domain of hostfile names (Open MPI 4 strips it by
	// default and starts its daemons on the short name, which does not
	// resolve on Kubernetes).
	KeepFQDN
	// ShortNodeNames is Open MPI 5's (PRRTE's) keep_fqdn_hostnames, which
	// podmpi sets to false, PRRTE's own default and the value Kubeflow
	// Trainer v2.4 sets: PRRTE then names each node by its first label,
	// takes the launcher's own hostfile entry (<pod>.<subdomain>) for the
	// node it runs on and starts that entry's ranks itself, and still
	// starts the other daemons over ssh on the hostfile's full names (seen
	// with PRRTE 3.0 of Open MPI 5.0.7: podmpi-rsh gets <pod>.<subdomain>).
	// With true it compares whole names, takes that entry for another
	// host and starts a daemon on the launcher's own pod over ssh, where
	// no worker-agent listens.
	ShortNodeNames
	// DefaultHostfile is the hostfile mpirun reads when the command names
	// none.
	DefaultHostfile
	// DefaultSlots is the slot count per host when the hostfile gives none
	// (Intel MPI: processes per host).
	DefaultSlots
	// Iface is Hydra's callback interface, set whenever the pod interface is
	// known: without it the proxies call back to the launcher's bare
	// hostname, which other pods cannot resolve, and mpiexec hangs.
	Iface
	// IfaceInclude pins Open MPI's TCP traffic to the pod interface, set only
	// when the pod has several interfaces (a docker0-like second NIC that
	// looks the same in every pod makes Open MPI hang).
	IfaceInclude
	// FabricIface pins libfabric's TCP provider, through which Intel MPI's
	// ranks talk between pods, to the pod interface; set only when the pod
	// has several interfaces and the interface's name is known (libfabric
	// takes a name, no network). With a docker0-like second NIC that looks
	// the same in every pod, each rank otherwise publishes that address
	// (172.17.0.1 in every pod) and MPI_Init hangs: seen with Intel MPI
	// 2021.19 over Debian's libfabric 1.17.
	FabricIface
	// NoTreeSpawn makes mpirun start every remote daemon itself.
	NoTreeSpawn
	// NoSingleCopy turns off Open MPI's single-copy shared memory (CMA,
	// process_vm_readv), which needs ptrace rights over the peer rank: a
	// container without CAP_SYS_PTRACE on a node with Yama's ptrace_scope
	// 1 (Ubuntu's default) has none, and ranks on one pod then fail on
	// their first large message. podmpi's images set it in their ENV; the
	// launcher sets it for images that do not. Open MPI forwards it to the
	// ranks on every node.
	NoSingleCopy
	// ShmByName makes UCX (MPICH's ch4:ucx) map a peer rank's shared
	// memory segment by its name under /dev/shm instead of through the
	// peer's /proc/<pid>/fd, which needs ptrace read access; Hydra passes
	// the launcher's environment to every rank.
	ShmByName
	// AllowRoot lets Open MPI run as uid 0.
	AllowRoot
)

// Param is one logical launch parameter of a flavour.
type Param struct {
	Role Role
	// Names are every name podmpi sets (for Open MPI 5 both the PRTE_MCA_
	// and the OMPI_MCA_ spelling).
	Names []string
	// Aliases mean the same or conflict (deprecated synonyms, the exclude
	// twin of an include list). A user value in any of Names or Aliases
	// keeps podmpi from setting any of Names.
	Aliases []string
}

// LaunchChoice is a variable podmpi leaves unset that chooses how mpirun
// starts its daemons (Open MPI's plm framework: rsh or ssh by default,
// slurm, tm, lsf, isolated...). A value that does not select one of Via
// takes the launch away from the rsh program, and so from podmpi-rsh.
type LaunchChoice struct {
	// Names are its spellings.
	Names []string
	// Via are the components that start the daemons through the rsh
	// program.
	Via []string
}

// Selects reports whether value, an MCA component list ("rsh",
// "slurm,rsh", or the exclusion "^slurm,tm"), leaves one of c.Via
// selectable.
func (c LaunchChoice) Selects(value string) bool {
	list, exclude := strings.CutPrefix(strings.TrimSpace(value), "^")
	named := false
	for _, comp := range strings.Split(list, ",") {
		if contains(c.Via, strings.TrimSpace(comp)) {
			named = true
		}
	}
	return named != exclude
}

// Ignored is a variable operators set that the flavour does not read.
type Ignored struct {
	Name string // what is set, e.g. HYDRA_LAUNCH_EXTRA_ARGS
	Use  string // what the MPI reads instead
	Why  string
}

// Flavour is one row of the table.
type Flavour struct {
	Impl Implementation
	// Title names the flavour for people, e.g. "Open MPI 4 (ORTE)".
	Title string
	// Program is the launcher command as its documentation writes it, for
	// messages ("mpirun", "mpiexec").
	Program string
	// Hostfile is the syntax its launcher reads.
	Hostfile hostfile.Format
	// Daemons are the programs mpirun starts on each worker through the rsh
	// program; a worker is ready for this MPI when ANY of them is on the
	// PATH of its SSH sessions.
	Daemons []string
	// Params are the launch parameters podmpi sets, in the order they are
	// added to the environment.
	Params []Param
	// Ignored lists variables of this flavour's world that have no effect.
	Ignored []Ignored
	// LaunchChoices are the variables that choose how its mpirun starts
	// its daemons, which podmpi leaves unset (Hydra's choice is a Param,
	// Bootstrap, which podmpi sets).
	LaunchChoices []LaunchChoice
	// SelfByHostname: the launcher's own hostfile entry (runLauncherAsNode,
	// runLauncherAsWorker) must be written as its host name, because the
	// launcher starts processes on its own host without the rsh program
	// only for entries equal to gethostname(), one of its addresses or
	// localhost (Hydra's MPL_host_is_local compares strings; so does
	// PRRTE, with the domain stripped unless keep_fqdn_hostnames is true,
	// which a user may set: see ShortNodeNames); an entry such as
	// tj-launcher-0-0.tj would go through podmpi-rsh to a pod where no
	// worker-agent listens. Open MPI 4 resolves names and needs no help.
	SelfByHostname bool
	// BootstrapExecByName: the launcher program hands its bootstrap program
	// (BootstrapExec) down to the proxies it starts on the workers, and
	// they run it too: Intel MPI's hierarchical launch passes it as
	// hydra_bstrap_proxy's --launcher-exec, and a proxy on a worker execs
	// it (execvp) to start other workers' proxies. The launcher's private
	// path to podmpi-rsh exists in the launcher pod only ("execvp error on
	// file ... No such file or directory" on the worker), so the program is
	// given by name: the launcher's PATH finds its private one first, a
	// worker session's PATH podmpi's client there.
	BootstrapExecByName bool
}

// table lists every flavour; Implementations keeps its order.
var table = []Flavour{
	{
		Impl: OpenMPI4, Title: "Open MPI 4 (ORTE)", Program: "mpirun", Hostfile: hostfile.OpenMPI,
		Daemons: []string{"orted"},
		Params: []Param{
			{RshAgent, []string{"OMPI_MCA_plm_rsh_agent"}, []string{"OMPI_MCA_orte_rsh_agent", "OMPI_MCA_pls_rsh_agent"}},
			{KeepFQDN, []string{"OMPI_MCA_orte_keep_fqdn_hostnames"}, nil},
			{DefaultHostfile, []string{"OMPI_MCA_orte_default_hostfile"}, nil},
			{DefaultSlots, []string{"OMPI_MCA_orte_set_default_slots"}, nil},
			{IfaceInclude, []string{"OMPI_MCA_oob_tcp_if_include"}, []string{"OMPI_MCA_oob_tcp_if_exclude"}},
			{IfaceInclude, []string{"OMPI_MCA_btl_tcp_if_include"}, []string{"OMPI_MCA_btl_tcp_if_exclude"}},
			{NoTreeSpawn, []string{"OMPI_MCA_plm_rsh_no_tree_spawn"}, nil},
			{NoSingleCopy, []string{"OMPI_MCA_btl_vader_single_copy_mechanism"}, nil},
			{AllowRoot, []string{"OMPI_ALLOW_RUN_AS_ROOT"}, nil},
			{AllowRoot, []string{"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}, nil},
		},
		LaunchChoices: []LaunchChoice{{Names: []string{"OMPI_MCA_plm"}, Via: []string{"rsh"}}},
	},
	{
		Impl: OpenMPI5, Title: "Open MPI 5 (PRRTE)", Program: "mpirun", Hostfile: hostfile.OpenMPI,
		Daemons:        []string{"prted"},
		SelfByHostname: true,
		Params: []Param{
			{RshAgent, []string{"PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_rsh_agent"}, []string{"OMPI_MCA_plm_ssh_agent", "PRTE_MCA_plm_rsh_agent", "OMPI_MCA_orte_rsh_agent"}},
			// Not OMPI_MCA_orte_keep_fqdn_hostnames, which Trainer and
			// mpi-operator set for Open MPI 4: Open MPI 5 does not read it.
			{ShortNodeNames, []string{"PRTE_MCA_prte_keep_fqdn_hostnames"}, []string{"OMPI_MCA_prte_keep_fqdn_hostnames"}},
			{DefaultHostfile, []string{"PRTE_MCA_prte_default_hostfile", "OMPI_MCA_orte_default_hostfile"}, []string{"OMPI_MCA_prte_default_hostfile"}},
			{DefaultSlots, []string{"PRTE_MCA_prte_set_default_slots", "OMPI_MCA_orte_set_default_slots"}, []string{"OMPI_MCA_prte_set_default_slots"}},
			{IfaceInclude, []string{"PRTE_MCA_oob_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"}, []string{"PRTE_MCA_oob_tcp_if_exclude", "OMPI_MCA_oob_tcp_if_exclude"}},
			// btl is a framework of the MPI library, not of PRRTE: OMPI_MCA_ only.
			{IfaceInclude, []string{"OMPI_MCA_btl_tcp_if_include"}, []string{"OMPI_MCA_btl_tcp_if_exclude"}},
			{NoTreeSpawn, []string{"PRTE_MCA_plm_ssh_no_tree_spawn", "OMPI_MCA_plm_rsh_no_tree_spawn"}, nil},
			// Open MPI 5 renamed the vader BTL sm and keeps vader's names as synonyms.
			{NoSingleCopy, []string{"OMPI_MCA_btl_sm_single_copy_mechanism"}, []string{"OMPI_MCA_btl_vader_single_copy_mechanism"}},
			{AllowRoot, []string{"OMPI_ALLOW_RUN_AS_ROOT", "PRTE_ALLOW_RUN_AS_ROOT"}, nil},
			{AllowRoot, []string{"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM"}, nil},
		},
		LaunchChoices: []LaunchChoice{{Names: []string{"PRTE_MCA_plm", "OMPI_MCA_plm"}, Via: []string{"ssh", "rsh"}}},
	},
	{
		Impl: MPICH, Title: "MPICH (Hydra)", Program: "mpiexec", Hostfile: hostfile.MPICH,
		Daemons:        []string{"hydra_pmi_proxy"},
		SelfByHostname: true,
		Params: []Param{
			{Bootstrap, []string{"HYDRA_LAUNCHER"}, []string{"HYDRA_BOOTSTRAP"}},
			{BootstrapExec, []string{"HYDRA_LAUNCHER_EXEC"}, []string{"HYDRA_BOOTSTRAP_EXEC"}},
			{DefaultHostfile, []string{"HYDRA_HOST_FILE"}, nil},
			{Iface, []string{"HYDRA_IFACE"}, nil},
			{ShmByName, []string{"UCX_POSIX_USE_PROC_LINK"}, nil},
		},
		Ignored: []Ignored{{
			Name: "HYDRA_LAUNCH_EXTRA_ARGS", Use: "HYDRA_LAUNCHER_EXTRA_ARGS",
			Why: "MPICH ignores HYDRA_LAUNCH_EXTRA_ARGS (renamed HYDRA_LAUNCHER_EXTRA_ARGS in 2011; mpi-operator still sets the old name), so these arguments have no effect",
		}},
	},
	{
		Impl: IntelMPI, Title: "Intel MPI (Hydra)", Program: "mpirun", Hostfile: hostfile.IntelMPI,
		// hydra_bstrap_proxy is what Intel MPI 2019+ starts over ssh; it
		// starts hydra_pmi_proxy from its own directory, so finding either
		// means the Intel MPI runtime is installed on the worker.
		Daemons:             []string{"hydra_bstrap_proxy", "hydra_pmi_proxy"},
		SelfByHostname:      true,
		BootstrapExecByName: true,
		Params: []Param{
			{Bootstrap, []string{"I_MPI_HYDRA_BOOTSTRAP"}, nil},
			{BootstrapExec, []string{"I_MPI_HYDRA_BOOTSTRAP_EXEC"}, nil},
			{DefaultHostfile, []string{"I_MPI_HYDRA_HOST_FILE"}, []string{"I_MPI_HYDRA_HOSTFILE"}},
			{DefaultSlots, []string{"I_MPI_PERHOST"}, nil},
			{Iface, []string{"I_MPI_HYDRA_IFACE"}, nil},
			{FabricIface, []string{"FI_TCP_IFACE"}, nil},
		},
	},
}

// Implementations lists every supported Implementation.
var Implementations = func() []Implementation {
	out := make([]Implementation, len(table))
	for i, f := range table {
		out[i] = f.Impl
	}
	return out
}()

// Lookup returns i's row of the table; ok is false for an unknown i.
func Lookup(i Implementation) (f Flavour, ok bool) {
	for _, f := range table {
		if f.Impl == i {
			return f, true
		}
	}
	return Flavour{}, false
}

// Flavour returns i's row of the table (the zero Flavour for an unknown i).
func (i Implementation) Flavour() Flavour {
	f, _ := Lookup(i)
	return f
}

// Valid reports whether i is one of the supported implementations.
func (i Implementation) Valid() bool {
	_, ok := Lookup(i)
	return ok
}

// OpenMPI reports whether i is one of the Open MPI implementations.
func (i Implementation) OpenMPI() bool { return i == OpenMPI4 || i == OpenMPI5 }

// Hydra reports whether i launches through a Hydra process manager (MPICH or
// Intel MPI).
func (i Implementation) Hydra() bool { return i == MPICH || i == IntelMPI }

// String returns the value accepted by ParseImplementation.
func (i Implementation) String() string { return string(i) }

// HostfileFormat returns the hostfile syntax i reads (OpenMPI's for an
// unknown i).
func (i Implementation) HostfileFormat() hostfile.Format {
	if f, ok := Lookup(i); ok {
		return f.Hostfile
	}
	return hostfile.OpenMPI
}

// Daemons returns the programs mpirun starts on each worker (see
// Flavour.Daemons); nil for an unknown i.
func (i Implementation) Daemons() []string { return i.Flavour().Daemons }

// AllDaemons lists the daemons of every flavour once each, in table order:
// what a worker-agent looks for on its sessions' PATH.
func AllDaemons() []string {
	var out []string
	for _, f := range table {
		for _, d := range f.Daemons {
			if !contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ErrUnknownImplementation is returned by ParseImplementation for a name it
// does not know.
var ErrUnknownImplementation = errors.New("unknown MPI implementation")

// ParseImplementation parses the value of --mpi.implementation,
// case-insensitively. It returns auto=true when detection should decide or
// refine the result:
//
//   - "auto" or "": ("", true): detect everything.
//   - "openmpi" (also "ompi", "open-mpi", and mpi-operator's "OpenMPI"):
//     (OpenMPI4, true): Open MPI for sure; detection only picks the major
//     version, and OpenMPI4 stands when it cannot.
//   - "openmpi4", "openmpi5", "mpich" (also "hydra"), "intelmpi" (also
//     "intel", "impi", "intel-mpi", mpi-operator's "Intel"): that value,
//     false.
func ParseImplementation(s string) (Implementation, bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return "", true, nil
	case "openmpi", "open-mpi", "ompi":
		return OpenMPI4, true, nil
	case "openmpi4", "ompi4", "open-mpi4", "openmpi-4":
		return OpenMPI4, false, nil
	case "openmpi5", "ompi5", "open-mpi5", "openmpi-5":
		return OpenMPI5, false, nil
	case "mpich", "hydra":
		return MPICH, false, nil
	case "intelmpi", "intel", "impi", "intel-mpi":
		return IntelMPI, false, nil
	}
	return "", false, fmt.Errorf("%w %q for --mpi.implementation: want auto, openmpi, openmpi4, openmpi5, mpich or intelmpi",
		ErrUnknownImplementation, s)
}
