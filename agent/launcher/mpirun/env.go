package mpirun

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/agent/execpath"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/mpi"
)

// Wiring describes what the launcher prepared for mpirun; Env turns it into
// the environment of the user's unchanged mpirun command.
type Wiring struct {
	// Impl is the MPI to wire.
	Impl mpi.Implementation
	// RshPath is the absolute path of the rsh program (Setup's symlink
	// <RshDir>/podmpi-rsh to the launcher binary).
	RshPath string
	// RshDir is the directory holding podmpi-rsh; it is prepended to PATH.
	RshDir string
	// Hostfile is the path of the hostfile the launcher wrote ("" sets no
	// default hostfile).
	Hostfile string
	// Slots is the default slot count per host (Open MPI set_default_slots,
	// Intel I_MPI_PERHOST); 0 sets nothing.
	Slots int
	// Iface is the pod's network interface (eth0), "" when unknown. Hydra
	// (MPICH and Intel) always gets it as HYDRA_IFACE / I_MPI_HYDRA_IFACE:
	// without it Hydra's proxies call back to the launcher's bare hostname,
	// which does not resolve from other pods, and mpiexec hangs (seen with
	// MPICH 4.0.2). Open MPI gets it only when MultiNIC.
	Iface string
	// MultiNIC is true when the pod has more than one UP non-loopback IPv4
	// interface (PodInterface's multi): Open MPI's oob and btl then get
	// if_include=Iface, and Intel MPI's libfabric FI_TCP_IFACE=Iface, since
	// a docker0-like second NIC that looks the same in every pod makes Open
	// MPI and Intel MPI hang (gotcha 3).
	MultiNIC bool
	// IfaceCIDR is the pod interface's network (10.250.0.0/24). It is NOT
	// used when Iface is known: Open MPI forwards if_include to every worker,
	// and on Kubernetes each node usually has its own pod subnet (or /32
	// addresses with Calico), so the launcher's CIDR matches no interface on
	// the workers. It is used for Open MPI only when MultiNIC and Iface is "".
	IfaceCIDR string
	// LocalAddr is the launcher's pod IP. Hydra has no environment variable
	// for -localhost, so it only appears in the report when Iface is unknown.
	LocalAddr string
	// Root is true when the launcher runs as uid 0: Open MPI then needs the
	// allow-run-as-root variables.
	Root bool
	// Rsh are the launcher's own SSH settings (auth dir, port, user,
	// host-key checking), passed to podmpi-rsh in its environment variables.
	Rsh rsh.Settings
	// NoTreeSpawn sets Open MPI's plm no_tree_spawn. Off by default, keeping
	// Open MPI's own default (tree spawn beyond routed_radix=64 daemons, where
	// orteds on workers start other workers' daemons through the rsh agent;
	// that needs podmpi-rsh or ssh on the workers' PATH, see rshAgent). MPICH
	// launches flat anyway; Intel MPI's hierarchy is not touched.
	NoTreeSpawn bool
}

// Setting is one environment variable Env decided about.
type Setting struct {
	// Name is the variable.
	Name string
	// Value is what podmpi wanted to set ("" for a report-only entry).
	Value string
	// Kept is true when the user had already set this variable, or an
	// equivalent one (UserName), so podmpi left the environment unchanged.
	Kept bool
	// UserValue is the value found in the environment when Kept.
	UserValue string
	// UserName is the variable the user set when it differs from Name (an
	// alias or the other naming of the same parameter).
	UserName string
	// Note explains a consequence the user should know about (a kept value
	// that breaks the job, a variable the MPI ignores).
	Note string
	// Overrides is true when the user's value takes mpirun's daemon
	// launch away from podmpi's wiring: an rsh agent or launcher program
	// other than podmpi-rsh, a launcher (Open MPI's plm, Hydra's
	// bootstrap) other than rsh/ssh. mpirun then does not start its daemons
	// the way the probe checked them; the launcher warns at start and names
	// the setting when mpirun fails (postmortem.Override).
	Overrides bool
}

// String formats s for logs: "NAME=value (set)" or "NAME kept user value".
func (s Setting) String() string {
	switch {
	case s.Kept && s.UserName != "" && s.UserName != s.Name:
		return fmt.Sprintf("%s not set: user set %s=%s", s.Name, s.UserName, s.UserValue)
	case s.Kept:
		return fmt.Sprintf("%s kept user value %s (podmpi would set %s)", s.Name, s.UserValue, s.Value)
	case s.Value == "":
		return s.Name + ": " + s.Note
	}
	return s.Name + "=" + s.Value
}

// param is one of the flavour's launch parameters (package mpi) with the
// value podmpi wants for it and the note to add when the user's own value
// is kept instead.
type param struct {
	mpi.Param
	value string
	// keptNote is added when the user's value is kept.
	keptNote func(userName, userValue string) string
	// overrides reports whether the user's value, kept, takes the
	// daemons' launch away from podmpi-rsh (Setting.Overrides).
	overrides func(userValue string) bool
}

// rshAgent is the Open MPI rsh/ssh agent list. Open MPI tries the
// ':'-separated entries in order and uses the first one found. mpirun (on
// the launcher) finds the absolute RshPath. The same value is forwarded to
// every orted/prted with -mca, and a daemon that cannot find any entry dies
// at start-up, even without tree spawn (measured with ORTE 4.1.4: "The value
// of the MCA parameter plm_rsh_agent was set to a path that could not be
// found", then a crash); the private RshPath never exists on a worker. The
// fallbacks "podmpi-rsh" (found when the worker image puts it on PATH) and
// "ssh : rsh" (Open MPI's own default) keep the daemons alive and make tree
// spawn work wherever the workers can reach each other.
func (w Wiring) rshAgent() string {
	return w.RshPath + " : " + rsh.Name + " : ssh : rsh"
}

// bootstrapExec is the Hydra launcher program: RshPath, or for a flavour
// that hands it to its proxies on the workers (BootstrapExecByName) its
// name alone, when Env puts RshDir, which holds it, first on PATH.
func (w Wiring) bootstrapExec(f mpi.Flavour) string {
	if f.BootstrapExecByName && w.RshDir != "" && filepath.Dir(w.RshPath) == filepath.Clean(w.RshDir) {
		return filepath.Base(w.RshPath)
	}
	return w.RshPath
}

func keepFQDNNote(name, v string) string {
	if b, ok := mcaBool(v); ok && !b {
		return name + "=" + v + " makes Open MPI strip the domain from hostfile names (job-node-0-1.job becomes job-node-0-1), which does not resolve on Kubernetes; unset it"
	}
	return ""
}

// shortNodeNamesNote explains a user's PRRTE keep_fqdn_hostnames=true
// (mpi.ShortNodeNames), which podmpi keeps.
func shortNodeNamesNote(name, v string) string {
	if b, ok := mcaBool(v); !ok || !b {
		return ""
	}
	return name + "=" + v + " makes PRRTE compare hostfile names whole: the launcher's own entry (<pod>.<subdomain>, Trainer's runLauncherAsNode) " +
		"would read as another host and get a daemon over ssh, so the launcher writes that entry as this pod's host name; unset it unless you need it"
}

// mcaBool reads an MCA boolean value as Open MPI does (1, true, yes, on
// and their opposites, case-insensitively).
func mcaBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "y", "t", "on":
		return true, true
	case "0", "false", "no", "n", "f", "off":
		return false, true
	}
	return false, false
}

// params gives every launch parameter of w.Impl its value; a parameter
// whose value is "" is not set (an interface include list with one NIC, tree
// spawn left on, the allow-root switches when not root). path is the PATH
// mpirun runs with: a program the user names instead of podmpi-rsh is
// looked up there, as the MPI does.
func (w Wiring) params(path string) []param {
	f := w.Impl.Flavour()
	ifaceInclude := w.Iface
	if ifaceInclude == "" {
		ifaceInclude = w.IfaceCIDR
	}
	var ps []param
	for _, p := range f.Params {
		q := param{Param: p}
		switch p.Role {
		case mpi.RshAgent:
			q.value = w.rshAgent()
			q.overrides = func(v string) bool { return !w.isClient(firstAgent(v), path) }
			q.keptNote = func(_, v string) string {
				if w.isClient(firstAgent(v), path) {
					return ""
				}
				return f.Program + " will not start its daemons through podmpi-rsh but through " + firstAgent(v) + w.foundAs(firstAgent(v), path)
			}
		case mpi.Bootstrap:
			q.value = "ssh"
			q.overrides = func(v string) bool { return !viaRsh(v) }
			q.keptNote = func(n, v string) string {
				if !viaRsh(v) {
					return f.Program + " will not start its proxies through podmpi-rsh (" + n + "=" + v + " is not ssh or rsh)"
				}
				return ""
			}
		case mpi.BootstrapExec:
			q.value = w.bootstrapExec(f)
			q.overrides = func(v string) bool { return !w.isClient(v, path) }
			q.keptNote = func(_, v string) string {
				if w.isClient(v, path) {
					return ""
				}
				return f.Program + " will not start its proxies through podmpi-rsh but through " + v + w.foundAs(v, path)
			}
		case mpi.KeepFQDN:
			q.value, q.keptNote = "1", keepFQDNNote
		case mpi.ShortNodeNames:
			q.value, q.keptNote = "false", shortNodeNamesNote
		case mpi.DefaultHostfile:
			q.value = w.Hostfile
		case mpi.DefaultSlots:
			if w.Slots > 0 {
				q.value = strconv.Itoa(w.Slots)
			}
		case mpi.Iface:
			q.value = w.Iface
		case mpi.IfaceInclude:
			if w.MultiNIC {
				q.value = ifaceInclude
			}
		case mpi.FabricIface:
			if w.MultiNIC {
				q.value = w.Iface
			}
		case mpi.NoSingleCopy:
			q.value = "none"
		case mpi.ShmByName:
			q.value = "n"
		case mpi.NoTreeSpawn:
			if w.NoTreeSpawn {
				q.value = "1"
			}
		case mpi.AllowRoot:
			if w.Root {
				q.value = "1"
			}
		}
		ps = append(ps, q)
	}
	return ps
}

// Env returns the environment for the user's mpirun: base with podmpi's
// settings for w.Impl added, and the report of every decision.
//
// A variable the user already set (non-empty in base) is never overridden:
// the report lists it with Kept and the user's value. This covers aliases and
// other spellings too: with Open MPI 5, a user's OMPI_MCA_orte_default_hostfile
// stops podmpi from setting PRTE_MCA_prte_default_hostfile as well, since
// PRRTE would otherwise prefer podmpi's value to the user's. Variables with an
// empty value count as unset.
//
// The exceptions are PATH, which always gets RshDir prepended, and the
// variables of Rsh (PODMPI_SSH_PORT, PODMPI_SSH_AUTH_DIR, ...), which carry
// the launcher's own settings to podmpi-rsh and so replace older values.
//
// Report-only entries (Value "") flag environment that has no effect:
// mpi-operator's misspelled HYDRA_LAUNCH_EXTRA_ARGS under MPICH, and a Hydra
// launch without a known interface.
func (w Wiring) Env(base []string) (env []string, report []Setting) {
	e := newEnvEdit(base)
	path := e.user["PATH"]
	if w.RshDir != "" {
		path = rsh.PrependPath(w.RshDir, path)
	}
	report = e.params(w.params(path))

	for _, ig := range w.Impl.Flavour().Ignored {
		if v, ok := e.user[ig.Name]; ok {
			note := ig.Why
			if _, set := e.user[ig.Use]; !set {
				note += "; use " + ig.Use
			}
			report = append(report, Setting{Name: ig.Name, Kept: true, UserValue: v, Note: note})
		}
	}
	for _, c := range w.Impl.Flavour().LaunchChoices {
		for _, n := range c.Names {
			if v, ok := e.user[n]; ok && !c.Selects(v) {
				report = append(report, Setting{Name: n, Kept: true, UserValue: v, Overrides: true,
					Note: w.Impl.Flavour().Program + " will start its daemons with another launcher than " + strings.Join(c.Via, " or ") +
						": none through podmpi-rsh, and no rank on another host"})
			}
		}
	}
	if w.Iface == "" {
		for _, p := range w.Impl.Flavour().Params {
			if p.Role == mpi.Iface && e.user[p.Names[0]] == "" {
				report = append(report, Setting{Name: p.Names[0], Note: hydraNoIfaceNote(p.Names[0], w.LocalAddr)})
			}
		}
	}

	for _, kv := range w.Rsh.Env() {
		e.set(kv[0], kv[1])
		report = append(report, Setting{Name: kv[0], Value: kv[1]})
	}
	if w.RshDir != "" {
		e.set("PATH", path)
		report = append(report, Setting{Name: "PATH", Value: path})
	}
	return e.apply(base), report
}

// DirectEnv is the environment of the real MPI launcher program of impl
// when the mpirun shim runs it at once, without the launcher's phases (the
// command names its hosts itself, as horovodrun's `mpirun -H
// w-0.job:1,...` does; the phases already ran; a local run): base with
// only the settings that concern how the program treats the host names it
// is given, which none of those cases makes moot. That is Open MPI's
// keep_fqdn_hostnames: without it Open MPI 4 strips the subdomain from
// `-H tj-node-0-1.tj` and starts its daemon on tj-node-0-1, a name that
// does not resolve in a pod (Trainer and mpi-operator set it in the
// launcher pod; docker-compose and hand-written pods do not); Open MPI 5
// gets PRRTE's false (mpi.ShortNodeNames), with which it still starts its
// daemons on the full names given. A value the user set is kept and
// reported, as Env keeps it.
func DirectEnv(impl mpi.Implementation, base []string) (env []string, report []Setting) {
	var ps []param
	for _, p := range (Wiring{Impl: impl}).params("") {
		if p.Role == mpi.KeepFQDN || p.Role == mpi.ShortNodeNames {
			ps = append(ps, p)
		}
	}
	e := newEnvEdit(base)
	report = e.params(ps)
	return e.apply(base), report
}

// envEdit is an environment being changed: the values the user set
// (non-empty ones; the last of a name wins, as in exec) and podmpi's
// settings in the order they were made.
type envEdit struct {
	user     map[string]string
	override map[string]string
	add      []string
}

func newEnvEdit(base []string) *envEdit {
	e := &envEdit{user: make(map[string]string, len(base)), override: map[string]string{}}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" {
			e.user[k] = v
		}
	}
	return e
}

// set makes k=v one of podmpi's settings, replacing an earlier one.
func (e *envEdit) set(k, v string) {
	if _, ok := e.override[k]; !ok {
		e.add = append(e.add, k)
	}
	e.override[k] = v
}

// params sets every parameter of ps that has a value, under each of its
// names, unless the user set it under any name or alias; it reports each
// decision, with the parameter's note on a kept value.
func (e *envEdit) params(ps []param) (report []Setting) {
	for _, p := range ps {
		if p.value == "" {
			continue
		}
		userName, userValue := "", ""
		for _, n := range append(append([]string(nil), p.Names...), p.Aliases...) {
			if v, ok := e.user[n]; ok {
				userName, userValue = n, v
				break
			}
		}
		for _, n := range p.Names {
			s := Setting{Name: n, Value: p.value}
			if userName != "" {
				s.Kept = true
				if v, ok := e.user[n]; ok {
					s.UserValue = v
				} else {
					s.UserName, s.UserValue = userName, userValue
				}
				if p.keptNote != nil {
					s.Note = p.keptNote(userName, userValue)
				}
				s.Overrides = p.overrides != nil && p.overrides(userValue)
			} else {
				e.set(n, p.value)
			}
			report = append(report, s)
		}
	}
	return report
}

// apply is base with podmpi's settings: each replaces the first entry of
// its name (later duplicates are dropped) or is appended, in order.
func (e *envEdit) apply(base []string) []string {
	env := make([]string, 0, len(base)+len(e.add))
	done := map[string]bool{}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := e.override[k]; ok {
			if !done[k] {
				env = append(env, k+"="+v)
				done[k] = true
			}
			continue
		}
		env = append(env, kv)
	}
	for _, k := range e.add {
		if !done[k] {
			env = append(env, k+"="+e.override[k])
			done[k] = true
		}
	}
	return env
}

// firstAgent is the program of the first entry of an rsh agent list
// ("ssh -x : rsh" gives "ssh"), the one Open MPI tries first.
func firstAgent(list string) string {
	first, _, _ := strings.Cut(list, ":")
	if f := strings.Fields(first); len(f) > 0 {
		return f[0]
	}
	return ""
}

// isRsh reports whether prog is podmpi-rsh (by name or path).
func isRsh(prog string) bool { return filepath.Base(strings.TrimSpace(prog)) == rsh.Name }

// isClient reports whether prog, an rsh agent or launcher program the
// user set, is podmpi's own client as the MPI runs it: podmpi-rsh by
// name, or a program that is one of podmpi's binaries once found (a bare
// name on path, the PATH mpirun gets) and its links followed. The images
// put /opt/podmpi/bin first on PATH, where ssh links to podmpi-rsh: a
// user's plm_rsh_agent=ssh starts the daemons through podmpi all the same.
func (w Wiring) isClient(prog, path string) bool {
	if isRsh(prog) {
		return true
	}
	p := lookProgram(prog, path)
	return p != "" && w.RshPath != "" && rsh.IsClient(p, w.RshPath)
}

// foundAs is ", found at P on PATH" for a bare program name the MPI finds
// at P on path, ", not found on PATH" for one it does not find, and ""
// for a path.
func (w Wiring) foundAs(prog, path string) string {
	prog = strings.TrimSpace(prog)
	if prog == "" || strings.Contains(prog, "/") {
		return ""
	}
	if p := lookProgram(prog, path); p != "" {
		return " (found at " + p + " on PATH)"
	}
	return " (not found on PATH)"
}

// lookProgram is the file the MPI runs for prog: prog itself when it is
// an absolute path, a bare name looked up on path, "" otherwise or when
// nothing is found.
func lookProgram(prog, path string) string {
	prog = strings.TrimSpace(prog)
	switch {
	case filepath.IsAbs(prog):
		return prog
	case prog != "" && !strings.Contains(prog, "/"):
		return execpath.Look(prog, path)
	}
	return ""
}

// viaRsh reports whether a Hydra launcher kind starts its proxies with
// the launcher program podmpi sets (HYDRA_LAUNCHER_EXEC): ssh and rsh do.
func viaRsh(kind string) bool {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case "ssh", "rsh":
		return true
	}
	return false
}

func hydraNoIfaceNote(name, addr string) string {
	n := "pod interface unknown, " + name + " not set: Hydra proxies will call back to this pod's bare hostname, which other pods usually cannot resolve, and mpiexec then hangs; pass the interface (e.g. eth0)"
	if addr != "" {
		n += " or add -localhost " + addr + " to the mpiexec command"
	}
	return n
}

// HostfileVars are every variable through which an MPI reads its default
// hostfile, in any implementation's spelling.
var HostfileVars = []string{
	"OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile", "OMPI_MCA_prte_default_hostfile",
	"HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE", "I_MPI_HYDRA_HOSTFILE",
}

// DropHostfileVarsNaming returns env without the default-hostfile variables
// whose value is path (compared after filepath.Clean), and their names.
// Trainer v2 and mpi-operator set these to the hostfile they mount; when the
// launcher read that very file and wrote its own from it (same hosts, slots
// checked against the worker-agents), the operator's setting is replaced
// rather than kept as a user choice would be.
func DropHostfileVarsNaming(env []string, path string) ([]string, []string) {
	if path == "" {
		return env, nil
	}
	want := filepath.Clean(path)
	var out []string
	var dropped []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(HostfileVars, k) && v != "" && filepath.Clean(v) == want {
			dropped = append(dropped, k)
			continue
		}
		out = append(out, kv)
	}
	return out, dropped
}

// HomeDirName is the directory the launcher gives mpirun as HOME, inside
// its private directory (Setup's rshDir), when its own HOME is unusable
// (environ.EnsureHome).
const HomeDirName = "home"
