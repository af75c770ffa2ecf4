package mpirun

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/rsh"

	"github.com/podmpi/podmpi/mpi"

	"github.com/podmpi/podmpi/hostfile"
)

var update = flag.Bool("update", false, "rewrite testdata/env/*.env golden files")

func baseWiring(impl mpi.Implementation) Wiring {
	return Wiring{
		Impl:      impl,
		RshPath:   "/tmp/podmpi-123/podmpi-rsh",
		RshDir:    "/tmp/podmpi-123",
		Hostfile:  "/tmp/podmpi-123/hostfile",
		Slots:     2,
		Iface:     "eth0",
		MultiNIC:  true,
		IfaceCIDR: "10.250.0.0/24",
		LocalAddr: "10.250.0.10",
		Root:      true,
		Rsh:       rsh.Settings{Port: 2222, AuthDir: "/etc/mpi-ssh"},
	}
}

var goldenBase = []string{"HOME=/home/mpiuser", "PATH=/usr/bin:/bin", "PODMPI_SSH_PORT=22"}

// envMap returns the variables of env (last wins).
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func renderGolden(w Wiring, base []string) []byte {
	env, report := w.Env(base)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Wiring.Env for %s, root=%v multinic=%v, base %q\n", w.Impl, w.Root, w.MultiNIC, base)
	for _, kv := range env {
		b.WriteString(kv + "\n")
	}
	b.WriteString("# report\n")
	for _, s := range report {
		b.WriteString("# " + s.String() + "\n")
	}
	return b.Bytes()
}

func TestEnvGolden(t *testing.T) {
	for _, impl := range mpi.Implementations {
		for _, variant := range []string{"root-multinic", "user-onenic"} {
			name := string(impl) + "-" + variant
			t.Run(name, func(t *testing.T) {
				w := baseWiring(impl)
				if variant == "user-onenic" {
					w.Root, w.MultiNIC = false, false
				}
				got := renderGolden(w, goldenBase)
				path := filepath.Join("testdata", "env", name+".env")
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from golden (go test -run TestEnvGolden -update):\n--- got\n%s--- want\n%s", path, got, want)
				}
			})
		}
	}
}

func TestEnvOpenMPI4(t *testing.T) {
	w := baseWiring(mpi.OpenMPI4)
	env, _ := w.Env(goldenBase)
	m := envMap(env)
	want := map[string]string{
		"OMPI_MCA_plm_rsh_agent":            "/tmp/podmpi-123/podmpi-rsh : podmpi-rsh : ssh : rsh",
		"OMPI_MCA_orte_keep_fqdn_hostnames": "1",
		"OMPI_MCA_orte_default_hostfile":    "/tmp/podmpi-123/hostfile",
		"OMPI_MCA_orte_set_default_slots":   "2",
		"OMPI_MCA_oob_tcp_if_include":       "eth0",
		"OMPI_MCA_btl_tcp_if_include":       "eth0",
		"OMPI_ALLOW_RUN_AS_ROOT":            "1",
		"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM":    "1",
		"PODMPI_SSH_PORT":                   "2222", // the launcher's flag wins over the stale 22
		"PODMPI_SSH_AUTH_DIR":               "/etc/mpi-ssh",
		"PATH":                              "/tmp/podmpi-123:/usr/bin:/bin",
		"HOME":                              "/home/mpiuser",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	for k := range m {
		if strings.HasPrefix(k, "PRTE_") || strings.HasPrefix(k, "HYDRA_") || strings.HasPrefix(k, "I_MPI_") {
			t.Errorf("Open MPI 4 env has foreign variable %s", k)
		}
	}
	if len(env) != len(m) {
		t.Errorf("env has duplicate names: %q", env)
	}
}

func TestEnvRootOnlyWhenRoot(t *testing.T) {
	for _, impl := range []mpi.Implementation{mpi.OpenMPI4, mpi.OpenMPI5} {
		w := baseWiring(impl)
		w.Root = false
		env, _ := w.Env(nil)
		for _, kv := range env {
			if strings.Contains(kv, "ALLOW_RUN_AS_ROOT") {
				t.Errorf("%s non-root env has %s", impl, kv)
			}
		}
		w.Root = true
		m := envMap(first(w.Env(nil)))
		if m["OMPI_ALLOW_RUN_AS_ROOT"] != "1" || m["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] != "1" {
			t.Errorf("%s root env lacks OMPI_ALLOW_RUN_AS_ROOT(+_CONFIRM)", impl)
		}
	}
	// Hydra needs no root switch.
	for _, impl := range []mpi.Implementation{mpi.MPICH, mpi.IntelMPI} {
		for _, kv := range first(baseWiring(impl).Env(nil)) {
			if strings.Contains(kv, "ROOT") {
				t.Errorf("%s env has %s", impl, kv)
			}
		}
	}
}

func first(env []string, _ []Setting) []string { return env }

func TestEnvOpenMPI5SetsBothNamings(t *testing.T) {
	m := envMap(first(baseWiring(mpi.OpenMPI5).Env(nil)))
	pairs := [][2]string{
		{"PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_rsh_agent"},
		{"PRTE_MCA_prte_default_hostfile", "OMPI_MCA_orte_default_hostfile"},
		{"PRTE_MCA_prte_set_default_slots", "OMPI_MCA_orte_set_default_slots"},
		{"PRTE_MCA_oob_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"},
		{"PRTE_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT"},
	}
	for _, p := range pairs {
		if m[p[0]] == "" || m[p[0]] != m[p[1]] {
			t.Errorf("%s=%q %s=%q: want both set, equal", p[0], m[p[0]], p[1], m[p[1]])
		}
	}
	if m["OMPI_MCA_btl_tcp_if_include"] != "eth0" {
		t.Errorf("OMPI_MCA_btl_tcp_if_include = %q", m["OMPI_MCA_btl_tcp_if_include"])
	}
	if _, ok := m["PRTE_MCA_btl_tcp_if_include"]; ok {
		t.Error("btl is an OMPI framework; PRTE_MCA_btl_tcp_if_include is meaningless")
	}
}

func TestEnvIfaceRules(t *testing.T) {
	// One NIC: Open MPI is left alone, Hydra still gets the interface.
	w := baseWiring(mpi.OpenMPI4)
	w.MultiNIC = false
	for _, kv := range first(w.Env(nil)) {
		if strings.Contains(kv, "if_include") {
			t.Errorf("single NIC: %s", kv)
		}
	}
	for impl, name := range map[mpi.Implementation]string{mpi.MPICH: "HYDRA_IFACE", mpi.IntelMPI: "I_MPI_HYDRA_IFACE"} {
		w := baseWiring(impl)
		w.MultiNIC = false
		if got := envMap(first(w.Env(nil)))[name]; got != "eth0" {
			t.Errorf("%s single NIC: %s=%q; want eth0 (gotcha 2: Hydra hangs without it)", impl, name, got)
		}
		w.Iface = ""
		env, rep := w.Env(nil)
		if _, ok := envMap(env)[name]; ok {
			t.Errorf("%s: %s set without an interface", impl, name)
		}
		i := slices.IndexFunc(rep, func(s Setting) bool { return s.Name == name })
		if i < 0 || !strings.Contains(rep[i].Note, "hangs") || !strings.Contains(rep[i].Note, "-localhost 10.250.0.10") {
			t.Errorf("%s without interface: report %+v lacks the hang warning", impl, rep)
		}
	}
	// Interface unknown but CIDR known: Open MPI gets the CIDR.
	w = baseWiring(mpi.OpenMPI4)
	w.Iface = ""
	if got := envMap(first(w.Env(nil)))["OMPI_MCA_oob_tcp_if_include"]; got != "10.250.0.0/24" {
		t.Errorf("CIDR fallback: %q", got)
	}
}

func TestEnvUserValueKeptAndReported(t *testing.T) {
	base := []string{
		"OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile", // Trainer v2 sets these
		"OMPI_MCA_orte_keep_fqdn_hostnames=true",
		"OMPI_MCA_orte_set_default_slots=4",
		"OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10",
		"OMPI_MCA_btl_tcp_if_exclude=docker0,lo", // conflicts with include
		"OMPI_MCA_plm_rsh_agent=",                // empty counts as unset
	}
	for _, impl := range []mpi.Implementation{mpi.OpenMPI4, mpi.OpenMPI5} {
		env, rep := baseWiring(impl).Env(base)
		m := envMap(env)
		if m["OMPI_MCA_orte_default_hostfile"] != "/etc/mpi/hostfile" || m["OMPI_MCA_orte_set_default_slots"] != "4" || m["OMPI_MCA_orte_keep_fqdn_hostnames"] != "true" {
			t.Errorf("%s: user values overridden: %v", impl, m)
		}
		if _, ok := m["OMPI_MCA_btl_tcp_if_include"]; ok {
			t.Errorf("%s: btl_tcp_if_include set although the user set btl_tcp_if_exclude (Open MPI rejects both)", impl)
		}
		if !strings.HasPrefix(m["OMPI_MCA_plm_rsh_agent"], "/tmp/podmpi-123/podmpi-rsh") {
			t.Errorf("%s: empty user agent not replaced: %q", impl, m["OMPI_MCA_plm_rsh_agent"])
		}
		if impl == mpi.OpenMPI5 {
			// The other naming is not set either: PRRTE would prefer it.
			for _, k := range []string{"PRTE_MCA_prte_default_hostfile", "PRTE_MCA_prte_set_default_slots"} {
				if v, ok := m[k]; ok {
					t.Errorf("OpenMPI5: %s=%q set although the user set its OMPI_MCA_ twin", k, v)
				}
			}
		}
		kept := map[string]Setting{}
		for _, s := range rep {
			if s.Kept {
				kept[s.Name] = s
			}
		}
		s, ok := kept["OMPI_MCA_orte_default_hostfile"]
		if !ok || s.UserValue != "/etc/mpi/hostfile" || s.Value != "/tmp/podmpi-123/hostfile" {
			t.Errorf("%s: hostfile not reported kept: %+v", impl, s)
		}
		if impl == mpi.OpenMPI5 {
			s := kept["PRTE_MCA_prte_default_hostfile"]
			if s.UserName != "OMPI_MCA_orte_default_hostfile" || s.UserValue != "/etc/mpi/hostfile" {
				t.Errorf("OpenMPI5: PRTE hostfile report %+v", s)
			}
		}
		if _, ok := kept["OMPI_MCA_btl_tcp_if_include"]; !ok {
			t.Errorf("%s: btl_tcp_if_include not reported kept", impl)
		}
		if !strings.Contains(kept["OMPI_MCA_btl_tcp_if_include"].String(), "OMPI_MCA_btl_tcp_if_exclude") {
			t.Errorf("%s: report does not name the user's variable: %s", impl, kept["OMPI_MCA_btl_tcp_if_include"])
		}
	}
	// keep_fqdn disabled by the user: kept, with a warning.
	_, rep := baseWiring(mpi.OpenMPI4).Env([]string{"OMPI_MCA_orte_keep_fqdn_hostnames=0"})
	i := slices.IndexFunc(rep, func(s Setting) bool { return s.Name == "OMPI_MCA_orte_keep_fqdn_hostnames" })
	if i < 0 || !rep[i].Kept || !strings.Contains(rep[i].Note, "strip the domain") {
		t.Errorf("keep_fqdn=0 report: %+v", rep)
	}
	// A user's ssh agent is kept and the report says podmpi-rsh is unused.
	env, rep := baseWiring(mpi.OpenMPI4).Env([]string{"OMPI_MCA_orte_rsh_agent=/usr/bin/ssh"})
	if _, ok := envMap(env)["OMPI_MCA_plm_rsh_agent"]; ok {
		t.Error("plm_rsh_agent set although the user set its synonym orte_rsh_agent")
	}
	i = slices.IndexFunc(rep, func(s Setting) bool { return s.Name == "OMPI_MCA_plm_rsh_agent" })
	if i < 0 || !rep[i].Kept || rep[i].UserName != "OMPI_MCA_orte_rsh_agent" || !strings.Contains(rep[i].Note, "podmpi-rsh") {
		t.Errorf("agent synonym report: %+v", rep[i])
	}
}

// TestEnvOverridesOfTheWiring: an MPI setting of the environment that
// takes mpirun's daemon launch away from podmpi-rsh (another rsh agent,
// Open MPI's plm other than rsh/ssh, Hydra's bootstrap other than
// ssh/rsh, another launcher program) is reported as overriding the wiring,
// so that the launcher warns at start and names it when mpirun fails; a
// value that still goes through podmpi-rsh is not.
func TestEnvOverridesOfTheWiring(t *testing.T) {
	for _, tc := range []struct {
		impl mpi.Implementation
		kv   string
		want string // the Setting's name; "" when nothing overrides
	}{
		{mpi.OpenMPI4, "OMPI_MCA_plm=isolated", "OMPI_MCA_plm"},
		{mpi.OpenMPI4, "OMPI_MCA_plm=^slurm", ""},
		{mpi.OpenMPI4, "OMPI_MCA_plm=rsh", ""},
		{mpi.OpenMPI5, "PRTE_MCA_plm=slurm", "PRTE_MCA_plm"},
		{mpi.OpenMPI5, "OMPI_MCA_plm=ssh", ""},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=/usr/bin/ssh", "OMPI_MCA_plm_rsh_agent"},
		{mpi.OpenMPI4, "OMPI_MCA_orte_rsh_agent=ssh : rsh", "OMPI_MCA_plm_rsh_agent"},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=podmpi-rsh : ssh", ""},
		{mpi.OpenMPI5, "PRTE_MCA_plm_ssh_agent=/usr/bin/ssh", "PRTE_MCA_plm_ssh_agent"},
		{mpi.MPICH, "HYDRA_LAUNCHER=slurm", "HYDRA_LAUNCHER"},
		{mpi.MPICH, "HYDRA_BOOTSTRAP=rsh", ""},
		{mpi.MPICH, "HYDRA_LAUNCHER_EXEC=/usr/bin/ssh", "HYDRA_LAUNCHER_EXEC"},
		{mpi.IntelMPI, "I_MPI_HYDRA_BOOTSTRAP=slurm", "I_MPI_HYDRA_BOOTSTRAP"},
		{mpi.IntelMPI, "I_MPI_HYDRA_BOOTSTRAP=ssh", ""},
		{mpi.MPICH, "OMPI_MCA_plm=isolated", ""}, // not this MPI's
	} {
		_, rep := baseWiring(tc.impl).Env([]string{tc.kv})
		var got []Setting
		for _, s := range rep {
			if s.Overrides {
				got = append(got, s)
			}
		}
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s %s: reported as overriding the wiring: %+v", tc.impl, tc.kv, got)
		case tc.want == "" && slices.ContainsFunc(rep, func(s Setting) bool { return s.Kept && strings.Contains(s.Note, "will not") }):
			t.Errorf("%s %s: a note says podmpi-rsh is not used: %+v", tc.impl, tc.kv, rep)
		case tc.want != "" && (len(got) == 0 || got[0].Name != tc.want || !got[0].Kept || got[0].Note == ""):
			t.Errorf("%s %s: overrides = %+v, want %s kept with a note", tc.impl, tc.kv, got, tc.want)
		}
	}
}

func TestEnvMPICH(t *testing.T) {
	w := baseWiring(mpi.MPICH)
	env, rep := w.Env([]string{"HYDRA_LAUNCH_EXTRA_ARGS=-o ConnectionAttempts=10", "HYDRA_HOST_FILE=/etc/mpi/hostfile"})
	m := envMap(env)
	want := map[string]string{
		"HYDRA_LAUNCHER":          "ssh",
		"HYDRA_LAUNCHER_EXEC":     "/tmp/podmpi-123/podmpi-rsh",
		"HYDRA_HOST_FILE":         "/etc/mpi/hostfile", // kept
		"HYDRA_IFACE":             "eth0",
		"HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10", // untouched
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	if _, ok := m["HYDRA_LAUNCHER_EXTRA_ARGS"]; ok {
		t.Error("HYDRA_LAUNCHER_EXTRA_ARGS set")
	}
	i := slices.IndexFunc(rep, func(s Setting) bool { return s.Name == "HYDRA_LAUNCH_EXTRA_ARGS" })
	if i < 0 || !strings.Contains(rep[i].Note, "MPICH ignores") || !strings.Contains(rep[i].Note, "HYDRA_LAUNCHER_EXTRA_ARGS") {
		t.Errorf("misspelled HYDRA_LAUNCH_EXTRA_ARGS not reported: %+v", rep)
	}
	for k := range m {
		if strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PRTE_") || strings.HasPrefix(k, "I_MPI_") {
			t.Errorf("MPICH env has foreign variable %s", k)
		}
	}
}

// TestEnvIntelReference checks the Intel MPI wiring against the names of the
// Intel MPI Developer Reference ("Hydra Environment Variables") and the
// variables mpi-operator sets for Intel MPI; test/e2e's TestIntelMPI runs
// it with the real Intel MPI.
func TestEnvIntelReference(t *testing.T) {
	w := baseWiring(mpi.IntelMPI)
	env, rep := w.Env([]string{"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS=-o ConnectionAttempts=10", "K_MPI_JOB_ROLE=launcher"})
	m := envMap(env)
	want := map[string]string{
		"I_MPI_HYDRA_BOOTSTRAP":                 "ssh",
		"I_MPI_HYDRA_BOOTSTRAP_EXEC":            "podmpi-rsh", // by name: see below
		"I_MPI_HYDRA_HOST_FILE":                 "/tmp/podmpi-123/hostfile",
		"I_MPI_PERHOST":                         "2",
		"I_MPI_HYDRA_IFACE":                     "eth0",
		"FI_TCP_IFACE":                          "eth0",                     // several NICs: libfabric's TCP provider on the pod's
		"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10", // mpi-operator's, untouched
		"PATH":                                  "/tmp/podmpi-123:" + rsh.DefaultPath,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	for k := range m {
		if strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PRTE_") || strings.HasPrefix(k, "HYDRA_") {
			t.Errorf("Intel env has foreign variable %s", k)
		}
	}
	for _, s := range rep {
		if s.Kept {
			t.Errorf("unexpected kept %+v", s)
		}
	}
	// Intel reads "host:N" hostfiles, as mpi-operator writes them.
	var b bytes.Buffer
	if err := hostfile.Render(&b, mpi.IntelMPI.HostfileFormat(), []hostfile.Host{{Name: "pi-worker-0.pi.default.svc", Slots: 2}}); err != nil {
		t.Fatal(err)
	}
	if b.String() != "pi-worker-0.pi.default.svc:2\n" {
		t.Errorf("Intel hostfile = %q", b.String())
	}
	// Intel's hierarchical launch hands the bootstrap program to the
	// proxies on the workers (--launcher-exec), where the launcher's
	// private directory does not exist: it goes by name, which PATH finds
	// in that directory first on the launcher and on the workers' PATH
	// there (the image's /opt/podmpi/bin, or worker-agent's own).
	if !strings.HasPrefix(m["PATH"], w.RshDir+":") || filepath.Join(w.RshDir, m["I_MPI_HYDRA_BOOTSTRAP_EXEC"]) != w.RshPath {
		t.Errorf("I_MPI_HYDRA_BOOTSTRAP_EXEC=%q is not found as %s first on PATH=%q", m["I_MPI_HYDRA_BOOTSTRAP_EXEC"], w.RshPath, m["PATH"])
	}
	// MPICH's Hydra launches flat: the path, as ever.
	if v := envMap(first(baseWiring(mpi.MPICH).Env(nil)))["HYDRA_LAUNCHER_EXEC"]; v != w.RshPath {
		t.Errorf("MPICH HYDRA_LAUNCHER_EXEC=%q, want %q", v, w.RshPath)
	}
	// One NIC: libfabric picks it by itself. An unknown interface: a CIDR
	// is no value for FI_TCP_IFACE, which takes a name only.
	for _, w := range []Wiring{{Impl: mpi.IntelMPI, Iface: "eth0"}, {Impl: mpi.IntelMPI, MultiNIC: true, IfaceCIDR: "10.250.0.0/24"}} {
		if v, ok := envMap(first(w.Env(nil)))["FI_TCP_IFACE"]; ok {
			t.Errorf("multinic=%v iface=%q: FI_TCP_IFACE=%q set", w.MultiNIC, w.Iface, v)
		}
	}
	// A user's FI_TCP_IFACE wins.
	if v := envMap(first(w.Env([]string{"FI_TCP_IFACE=ib0"})))["FI_TCP_IFACE"]; v != "ib0" {
		t.Errorf("user FI_TCP_IFACE overridden: %q", v)
	}
	// A user's I_MPI_PERHOST wins.
	env, rep = w.Env([]string{"I_MPI_PERHOST=allcores"})
	if envMap(env)["I_MPI_PERHOST"] != "allcores" {
		t.Error("user I_MPI_PERHOST overridden")
	}
	if i := slices.IndexFunc(rep, func(s Setting) bool { return s.Name == "I_MPI_PERHOST" }); i < 0 || !rep[i].Kept || rep[i].UserValue != "allcores" {
		t.Errorf("I_MPI_PERHOST not reported kept: %+v", rep)
	}
}

func TestEnvNoTreeSpawnAndZeroes(t *testing.T) {
	w := baseWiring(mpi.OpenMPI5)
	w.NoTreeSpawn = true
	m := envMap(first(w.Env(nil)))
	if m["PRTE_MCA_plm_ssh_no_tree_spawn"] != "1" || m["OMPI_MCA_plm_rsh_no_tree_spawn"] != "1" {
		t.Errorf("no tree spawn: %v", m)
	}
	w = Wiring{Impl: mpi.OpenMPI4, RshPath: "/r/podmpi-rsh"}
	m = envMap(first(w.Env([]string{"PATH=/bin"})))
	for _, k := range []string{"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_orte_set_default_slots", "PODMPI_SSH_PORT", "PODMPI_SSH_AUTH_DIR"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s set from a zero field", k)
		}
	}
	if m["PATH"] != "/bin" {
		t.Errorf("PATH changed without RshDir: %q", m["PATH"])
	}
}

func TestDropHostfileVarsNaming(t *testing.T) {
	env := []string{
		"OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile",
		"I_MPI_HYDRA_HOST_FILE=/etc/mpi//hostfile",
		"HYDRA_HOST_FILE=/other/hostfile",
		"PATH=/usr/bin",
	}
	out, dropped := DropHostfileVarsNaming(env, "/etc/mpi/hostfile")
	if len(dropped) != 2 || dropped[0] != "OMPI_MCA_orte_default_hostfile" || dropped[1] != "I_MPI_HYDRA_HOST_FILE" {
		t.Fatalf("dropped %v", dropped)
	}
	if len(out) != 2 || out[0] != "HYDRA_HOST_FILE=/other/hostfile" || out[1] != "PATH=/usr/bin" {
		t.Fatalf("kept %v", out)
	}
	if out, dropped := DropHostfileVarsNaming(env, ""); len(out) != 4 || dropped != nil {
		t.Fatalf("empty path must drop nothing: %v %v", out, dropped)
	}
}

// TestEnvSshOnPathIsPodmpis: a user's rsh agent or launcher program named
// ssh is podmpi's own client when the ssh mpirun finds first on PATH is
// (the images put /opt/podmpi/bin first, where ssh links to podmpi-rsh):
// it does not take the launch away from podmpi's wiring. An ssh found
// elsewhere first, or none at all, does, and the note says where it is.
func TestEnvSshOnPathIsPodmpis(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "opt", "podmpi", "bin") // the images' /opt/podmpi/bin
	other := filepath.Join(root, "usr", "bin")         // an OpenSSH client
	private := filepath.Join(root, "tmp", "podmpi-1")  // Setup's directory
	for _, d := range []string{bin, other, private} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(bin, rsh.Name), filepath.Join(other, "ssh")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(rsh.Name, filepath.Join(bin, "ssh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(bin, rsh.Name), filepath.Join(private, rsh.Name)); err != nil {
		t.Fatal(err)
	}
	wiring := func(impl mpi.Implementation) Wiring {
		w := baseWiring(impl)
		w.RshPath, w.RshDir = filepath.Join(private, rsh.Name), private
		return w
	}
	podmpiFirst := "PATH=" + bin + ":" + other
	sshFirst := "PATH=" + other + ":" + bin
	for _, tc := range []struct {
		impl      mpi.Implementation
		kv, path  string
		overrides bool
	}{
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=ssh", podmpiFirst, false},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=ssh : rsh", podmpiFirst, false},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=" + filepath.Join(bin, "ssh"), sshFirst, false},
		{mpi.OpenMPI5, "PRTE_MCA_plm_ssh_agent=ssh", podmpiFirst, false},
		{mpi.OpenMPI5, "OMPI_MCA_plm_rsh_agent=ssh", podmpiFirst, false},
		{mpi.MPICH, "HYDRA_LAUNCHER_EXEC=ssh", podmpiFirst, false},
		{mpi.IntelMPI, "I_MPI_HYDRA_BOOTSTRAP_EXEC=ssh", podmpiFirst, false},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=ssh", sshFirst, true},
		{mpi.OpenMPI5, "PRTE_MCA_plm_ssh_agent=ssh", sshFirst, true},
		{mpi.MPICH, "HYDRA_LAUNCHER_EXEC=ssh", sshFirst, true},
		{mpi.IntelMPI, "I_MPI_HYDRA_BOOTSTRAP_EXEC=ssh", sshFirst, true},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=" + filepath.Join(other, "ssh"), podmpiFirst, true},
		{mpi.OpenMPI4, "OMPI_MCA_plm_rsh_agent=ssh", "PATH=" + root, true}, // no ssh at all
	} {
		_, rep := wiring(tc.impl).Env([]string{tc.path, tc.kv})
		i := slices.IndexFunc(rep, func(s Setting) bool { return s.Kept && s.Overrides })
		switch {
		case !tc.overrides && i >= 0:
			t.Errorf("%s %s with %s: reported as overriding the wiring: %+v", tc.impl, tc.kv, tc.path, rep[i])
		case !tc.overrides && slices.ContainsFunc(rep, func(s Setting) bool { return s.Kept && strings.Contains(s.Note, "will not") }):
			t.Errorf("%s %s with %s: a note says podmpi-rsh is not used: %+v", tc.impl, tc.kv, tc.path, rep)
		case tc.overrides && i < 0:
			t.Errorf("%s %s with %s: not reported as overriding the wiring: %+v", tc.impl, tc.kv, tc.path, rep)
		case tc.overrides && strings.HasSuffix(tc.kv, "=ssh") && !strings.Contains(rep[i].Note, "on PATH"):
			t.Errorf("%s %s with %s: the note does not say where ssh is: %q", tc.impl, tc.kv, tc.path, rep[i].Note)
		}
	}
}

// The variables the operators set in the launcher for Open MPI, as the
// launcher sees them after dropping the default-hostfile variables that
// name the hostfile it read (DropHostfileVarsNaming).
var (
	// mpiOperatorEnv is mpi-operator v0.8.2's (v2beta1 MPIJob).
	mpiOperatorEnv = []string{
		"OMPI_MCA_orte_keep_fqdn_hostnames=true",
		"OMPI_MCA_orte_set_default_slots=2",
		"OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10",
	}
	// trainerORTEEnv is Trainer v2's before v2.4: the ORTE four.
	trainerORTEEnv = mpiOperatorEnv
	// trainerPRTEEnv are the four PRTE values Trainer v2.4 adds.
	trainerPRTEEnv = []string{
		"PRTE_MCA_prte_keep_fqdn_hostnames=false",
		"PRTE_MCA_prte_set_default_slots=2",
		"PRTE_MCA_plm_ssh_args=-o ConnectionAttempts=10",
	}
)

// TestEnvOpenMPI5TrainerValues: under Open MPI 5 (PRRTE) podmpi sets
// PRRTE's keep_fqdn_hostnames to false (never 1: with true and the
// launcher's own entry in the hostfile, PRRTE starts a daemon on the
// launcher's own pod over ssh), keeps Trainer v2.4's PRTE values and
// mpi-operator's, and replaces only the hostfile (dropped before Env when
// it names the file the launcher read).
func TestEnvOpenMPI5TrainerValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		base []string
		// keep is PRTE_MCA_prte_keep_fqdn_hostnames in the result; kept
		// says the user's value stands.
		keep string
		kept bool
		note string // in the keep_fqdn setting's note
	}{
		{name: "no operator values", keep: "false"},
		{name: "mpi-operator v0.8.2", base: mpiOperatorEnv, keep: "false"},
		{name: "trainer before v2.4", base: trainerORTEEnv, keep: "false"},
		{name: "trainer v2.4", base: append(slices.Clone(trainerORTEEnv), trainerPRTEEnv...), keep: "false", kept: true},
		{name: "user forces true", base: []string{"PRTE_MCA_prte_keep_fqdn_hostnames=true"}, keep: "true", kept: true,
			note: "writes that entry as this pod's host name"},
		{name: "user forces true, OMPI_ spelling", base: []string{"OMPI_MCA_prte_keep_fqdn_hostnames=1"}, kept: true,
			note: "writes that entry as this pod's host name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, rep := baseWiring(mpi.OpenMPI5).Env(tc.base)
			m := envMap(env)
			if m["PRTE_MCA_prte_keep_fqdn_hostnames"] != tc.keep {
				t.Errorf("PRTE_MCA_prte_keep_fqdn_hostnames=%q, want %q", m["PRTE_MCA_prte_keep_fqdn_hostnames"], tc.keep)
			}
			i := slices.IndexFunc(rep, func(s Setting) bool { return s.Name == "PRTE_MCA_prte_keep_fqdn_hostnames" })
			if i < 0 || rep[i].Kept != tc.kept || rep[i].Value != "false" || !strings.Contains(rep[i].Note, tc.note) || (tc.note == "" && rep[i].Note != "") {
				t.Errorf("keep_fqdn report %+v, want kept=%v note %q", rep, tc.kept, tc.note)
			}
			if v, ok := m["OMPI_MCA_orte_keep_fqdn_hostnames"]; ok && !slices.Contains(tc.base, "OMPI_MCA_orte_keep_fqdn_hostnames="+v) {
				t.Errorf("podmpi set OMPI_MCA_orte_keep_fqdn_hostnames=%s, which Open MPI 5 does not read", v)
			}
			// The hostfile is the launcher's, under both names; the
			// operators' slots, ssh arguments and ORTE values stand.
			for _, k := range []string{"PRTE_MCA_prte_default_hostfile", "OMPI_MCA_orte_default_hostfile"} {
				if m[k] != "/tmp/podmpi-123/hostfile" {
					t.Errorf("%s=%q, want the launcher's hostfile", k, m[k])
				}
			}
			for _, kv := range tc.base {
				k, v, _ := strings.Cut(kv, "=")
				if m[k] != v {
					t.Errorf("the operator's %s changed to %q", kv, m[k])
				}
			}
			for _, kv := range env {
				if strings.HasPrefix(kv, "PRTE_MCA_plm_ssh_args=") && !slices.Contains(tc.base, kv) {
					t.Errorf("podmpi set %s", kv)
				}
			}
		})
	}
}

// TestEnvContainerDefaults: the settings a pod without ptrace rights needs
// for shared memory between ranks, which podmpi's images set in their ENV
// and a user's image lacks, are set when unset and kept when set.
func TestEnvContainerDefaults(t *testing.T) {
	for impl, kv := range map[mpi.Implementation]string{
		mpi.OpenMPI4: "OMPI_MCA_btl_vader_single_copy_mechanism=none",
		mpi.OpenMPI5: "OMPI_MCA_btl_sm_single_copy_mechanism=none",
		mpi.MPICH:    "UCX_POSIX_USE_PROC_LINK=n",
	} {
		k, v, _ := strings.Cut(kv, "=")
		if got := envMap(first(baseWiring(impl).Env(goldenBase)))[k]; got != v {
			t.Errorf("%s: %s=%q, want %q", impl, k, got, v)
		}
		if got := envMap(first(baseWiring(impl).Env([]string{k + "=cma"})))[k]; got != "cma" {
			t.Errorf("%s: the user's %s=cma became %q", impl, k, got)
		}
	}
	// Open MPI 5 reads the old vader name as a synonym: a user's value
	// under it stops podmpi's.
	m := envMap(first(baseWiring(mpi.OpenMPI5).Env([]string{"OMPI_MCA_btl_vader_single_copy_mechanism=cma"})))
	if _, ok := m["OMPI_MCA_btl_sm_single_copy_mechanism"]; ok {
		t.Error("OMPI_MCA_btl_sm_single_copy_mechanism set although the user set its vader synonym")
	}
	for _, kv := range first(baseWiring(mpi.IntelMPI).Env(goldenBase)) {
		if strings.HasPrefix(kv, "UCX_") || strings.Contains(kv, "single_copy") {
			t.Errorf("Intel MPI env has %s", kv)
		}
	}
}
