package launcher

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/mpi"
)

// shimLayout is podmpi's bin dir (launcher, mpirun -> launcher) in front of
// a dir with a real mpirun script; it returns the launcher, both dirs and
// the real mpirun.
func shimLayout(t *testing.T) (self, bin, usr, real string) {
	t.Helper()
	bin, usr = t.TempDir(), t.TempDir()
	self = filepath.Join(bin, "launcher")
	real = filepath.Join(usr, "mpirun")
	for _, p := range []string{self, real} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho \"$0 $*\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range ShimNames {
		if err := os.Symlink("launcher", filepath.Join(bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	return self, bin, usr, real
}

func TestShimNames(t *testing.T) {
	for argv0, want := range map[string]bool{
		"mpirun": true, "/opt/podmpi/bin/mpiexec": true, "mpiexec.hydra": true,
		"mpirun.openmpi": false, "mpiexec.mpich": false, "orterun": false, "launcher": false, "": false,
	} {
		if IsShimName(argv0) != want {
			t.Errorf("IsShimName(%q) = %v", argv0, !want)
		}
	}
	for _, n := range ShimNames {
		if !mpi.IsLauncher(n) {
			t.Errorf("%s is a shim name but not an MPI launcher name to package mpi", n)
		}
	}
}

// TestProgramSkipsThisBinary: with podmpi's bin dir first on PATH, the
// command's mpirun is the real one after it, never the launcher itself;
// with only the launcher on PATH it is an error naming the cause.
func TestProgramSkipsThisBinary(t *testing.T) {
	self, bin, usr, real := shimLayout(t)
	t.Setenv("PATH", bin+":"+usr+":/usr/bin:/bin")
	l, _ := New(Config{Executable: self, Command: []string{"mpirun", "x"}})
	if got, err := l.program("mpirun"); err != nil || got != real {
		t.Fatalf("program(mpirun) = %q, %v; want %q", got, err, real)
	}
	if got := realProgram("mpirun", bin+":"+usr, self); got != real {
		t.Fatalf("realProgram = %q", got)
	}
	if got, err := l.program("sh"); err != nil || got == "" {
		t.Fatalf("program(sh) = %q, %v", got, err)
	}
	if got, err := l.program("/abs/mpirun"); err != nil || got != "" {
		t.Fatalf("program(/abs/mpirun) = %q, %v; want it left to mpirun.Run", got, err)
	}
	l.cfg.Program = "/resolved/mpirun"
	if got, _ := l.program("mpirun"); got != "/resolved/mpirun" {
		t.Fatalf("Config.Program not used: %q", got)
	}
	t.Setenv("PATH", bin)
	l, _ = New(Config{Executable: self, Command: []string{"mpirun"}})
	if got, err := l.program("mpirun"); err == nil || !strings.Contains(err.Error(), "besides podmpi's own") {
		t.Fatalf("only the shim on PATH: %q, %v", got, err)
	}
}

// TestImplementationWithoutAnMPI: an image whose only mpirun is podmpi's
// own (a bring-your-own image without an MPI) fails the mpi phase with exit
// 68 saying so, whatever the command's first word; the launcher never runs
// its own mpirun to ask its version (that ran the launcher again, whose exit
// 68 and JSON log line became the message).
func TestImplementationWithoutAnMPI(t *testing.T) {
	self, bin, _, _ := shimLayout(t)
	t.Setenv("PATH", bin)
	for _, cmd := range [][]string{{"mpirun", "x"}, {"bash", "-c", "mpirun x"}} {
		l, err := New(Config{Executable: self, Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = l.implementation(context.Background())
		var f *Failure
		if !errors.As(err, &f) || f.Code != exitcode.MPIRunNotFound || f.Phase != PhaseMPI ||
			!strings.Contains(f.Error(), "no MPI in this image") || !strings.Contains(f.Error(), "no mpirun on PATH besides podmpi's own") {
			t.Errorf("command %q with only podmpi's mpirun on PATH: %v; want the mpi phase's exit 68 saying the image has no MPI", cmd, err)
		}
	}
}

func TestProgramArgv0(t *testing.T) {
	argv := []string{"mpiexec.hydra", "-np", "2", "x"}
	for _, impl := range []mpi.Implementation{mpi.MPICH, mpi.IntelMPI, ""} {
		if got := programArgv0(argv, "/usr/bin/mpiexec.hydra", impl); got[0] != "/usr/bin/mpiexec.hydra" || argv[0] != "mpiexec.hydra" {
			t.Errorf("%q: argv %q (input %q)", impl, got, argv)
		}
	}
	for _, tc := range []struct {
		argv []string
		impl mpi.Implementation
	}{
		{[]string{"mpirun", "x"}, mpi.OpenMPI4}, // Open MPI: an absolute argv[0] means --prefix
		{[]string{"mpirun", "x"}, mpi.OpenMPI5},
		{[]string{"/opt/mpi/bin/mpiexec", "x"}, mpi.MPICH}, // as given
		{[]string{"bash", "-c", "mpiexec x"}, mpi.MPICH},   // not an MPI launcher
		{[]string{"mpiexec.hydra"}, mpi.MPICH},             // prog "" below
	} {
		prog := "/usr/bin/" + filepath.Base(tc.argv[0])
		if tc.argv[0] == "mpiexec.hydra" {
			prog = ""
		}
		if got := programArgv0(tc.argv, prog, tc.impl); !slices.Equal(got, tc.argv) {
			t.Errorf("programArgv0(%q, %q, %v) = %q, want unchanged", tc.argv, prog, tc.impl, got)
		}
	}
}

// TestDirectReason: when the shim runs the real program at once.
func TestDirectReason(t *testing.T) {
	if _, err := os.Stat(discovery.DefaultHostfile); err == nil {
		t.Skip(discovery.DefaultHostfile + " exists on this machine")
	}
	for _, v := range []string{EnvLauncherPID, "OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
		"OMPI_MCA_prte_default_hostfile", "HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE", "I_MPI_HYDRA_HOSTFILE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		cmd  string
		env  [2]string
		want string // "" runs the job
	}{
		{"sdk command", Config{}, "mpirun --hostfile /etc/mpi/hostfile bash -c x", [2]string{}, ""},
		{"version", Config{}, "mpirun --version", [2]string{}, "information"},
		{"marker", Config{}, "mpirun --hostfile /h ./a", [2]string{EnvLauncherPID, "42"}, "already prepared"},
		{"hosts", Config{}, "mpirun -H a,b ./a", [2]string{}, "names its hosts"},
		{"hosts and hostfile", Config{}, "mpirun -H a --hostfile h ./a", [2]string{}, ""},
		{"nothing named", Config{}, "mpirun -np 2 ./a", [2]string{}, "no worker is named anywhere"},
		{"env twin", Config{Discovery: discovery.Spec{Template: "w-{i}.j"}}, "mpirun ./a", [2]string{}, ""},
		{"operator variable", Config{}, "mpirun ./a", [2]string{"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			got := directReason(tc.cfg, strings.Fields(tc.cmd))
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("directReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSpecFromCommandAndEnvironment: with no discovery setting, the
// workers come from the command's hostfile, else an MPI default-hostfile
// variable; a discovery setting wins over both.
func TestSpecFromCommandAndEnvironment(t *testing.T) {
	t.Setenv("HYDRA_HOST_FILE", "/from/env")
	c := Config{Command: strings.Fields("mpiexec.hydra -f /from/cmd -np 2 x")}
	if s, err := c.spec(); err != nil || s.Hostfile != "/from/cmd" {
		t.Fatalf("spec = %+v, %v; want the command's hostfile", s, err)
	}
	c.Command = strings.Fields("mpiexec.hydra -np 2 x")
	if s, err := c.spec(); err != nil || s.Hostfile != "/from/env" {
		t.Fatalf("spec = %+v, %v; want HYDRA_HOST_FILE's", s, err)
	}
	c.Discovery.Workers = []string{"a"}
	if s, err := c.spec(); err != nil || s.Hostfile != "" {
		t.Fatalf("spec = %+v, %v; want --workers alone", s, err)
	}
}

// TestCommandHostfileReplaced: the hostfile option naming the file read is
// replaced by the launcher's, logged; another one is kept with a warning.
func TestCommandHostfileReplaced(t *testing.T) {
	var logs bytes.Buffer
	l, _ := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := &Prepared{Spec: discovery.Spec{Hostfile: "/etc/mpi/hostfile"}, Plan: discovery.Plan{Source: discovery.SourceHostfile},
		Impl: mpi.MPICH, Hostfile: "/tmp/podmpi/hostfile"}
	got := l.commandHostfile(strings.Fields("mpiexec -f /etc/mpi/hostfile -machinefile /other x"), p)
	if want := strings.Fields("mpiexec -f /tmp/podmpi/hostfile -machinefile /other x"); !slices.Equal(got, want) {
		t.Fatalf("argv %q, want %q", got, want)
	}
	for _, want := range []string{`msg="replacing the command's hostfile`, "option=-f", "format=MPICH", `level=WARN msg="the command names a hostfile the launcher did not read`, "hostfile=/other"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	p.Plan.Source = discovery.SourceWorkersFlag
	if got := l.commandHostfile(strings.Fields("mpirun --hostfile /etc/mpi/hostfile x"), p); got[2] != "/etc/mpi/hostfile" {
		t.Fatalf("replaced a hostfile the launcher did not read: %q", got)
	}
}

// TestRunMarksTheCommandsEnvironment: the command gets
// PODMPI_LAUNCHER_PID, so a shim inside the job runs the real program.
func TestRunMarksTheCommandsEnvironment(t *testing.T) {
	f := newFixture(t, true, "/usr/bin:/bin")
	cfg := baseConfig(f, "127.0.0.1=1")
	cfg.SkipProbe = true
	cfg.Slots = 1
	cfg.HostfilePath = filepath.Join(t.TempDir(), "hostfile")
	cfg.TempDir = t.TempDir()
	cfg.Executable = "/bin/true"
	cfg.Command = []string{"sh", "-c", `echo "marker=$` + EnvLauncherPID + `"`}
	var out bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &out
	l, _ := New(cfg)
	if code, err := l.Run(context.Background()); code != exitcode.OK {
		t.Fatalf("code %d, %v\n%s", code, err, out.String())
	}
	if want := "marker=" + strconv.Itoa(os.Getpid()); !strings.Contains(out.String(), want) {
		t.Fatalf("command saw %q, want %q", out.String(), want)
	}
}

// TestRunShimFindsNoRealProgram: RunShim with only itself on PATH fails with
// exit 68 before any phase.
func TestRunShimFindsNoRealProgram(t *testing.T) {
	self, bin, _, _ := shimLayout(t)
	t.Setenv("PATH", bin)
	code, err := RunShim(context.Background(), Config{Executable: self}, []string{"mpirun", "-np", "2", "x"})
	var f *Failure
	if code != exitcode.MPIRunNotFound || !errors.As(err, &f) || !strings.Contains(f.Error(), "no mpirun on PATH besides podmpi's own") {
		t.Fatalf("RunShim = %d, %v", code, err)
	}
}

// TestRunShimDirect: the real program replaces the process, with the
// argv[0] the MPI needs.
func TestRunShimDirect(t *testing.T) {
	self, bin, usr, real := shimLayout(t)
	t.Setenv("PATH", bin+":"+usr)
	t.Setenv(EnvLauncherPID, "1")
	var gotPath string
	var gotArgv []string
	defer func(e func(string, []string, []string) error) { execve = e }(execve)
	execve = func(path string, argv, _ []string) error {
		gotPath, gotArgv = path, argv
		return errors.New("exec refused by the test")
	}
	code, err := RunShim(context.Background(), Config{Executable: self}, []string{filepath.Join(bin, "mpirun"), "-np", "2", "x"})
	if code != exitcode.MPIRunNotFound || err == nil || gotPath != real || !slices.Equal(gotArgv, []string{real, "-np", "2", "x"}) {
		t.Fatalf("RunShim = %d, %v; exec %q %q", code, err, gotPath, gotArgv)
	}
}

// TestRunShimDirectArgv0: the shim that runs the real mpirun at once gives
// it the argv[0] `launcher --` would: the name as typed for Open MPI (an
// absolute one would mean --prefix), whether its file name says so or not,
// and the absolute path for Hydra.
func TestRunShimDirectArgv0(t *testing.T) {
	for _, tc := range []struct {
		name    string
		beside  []string // daemons installed beside the real mpirun
		version string   // what it prints for --version
		spec    string   // --mpi.implementation
		want    string   // argv[0]; "" is the real program's path
	}{
		{name: "open mpi by its daemon", beside: []string{"orted"}, want: "mpirun"},
		{name: "open mpi 5 by its daemon", beside: []string{"prted"}, want: "mpirun"},
		{name: "open mpi by --version", version: "mpirun (Open MPI) 4.1.4", want: "mpirun"},
		{name: "open mpi as configured", spec: "openmpi", want: "mpirun"},
		{name: "mpich by its daemon", beside: []string{"hydra_pmi_proxy"}},
		{name: "intel by its daemons", beside: []string{"hydra_bstrap_proxy", "hydra_pmi_proxy"}},
		{name: "both", beside: []string{"orted", "hydra_pmi_proxy"}},
		{name: "nothing says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			self, bin, usr, real := shimLayout(t)
			script := "#!/bin/sh\necho \"$0 $*\"\n"
			if tc.version != "" {
				script = "#!/bin/sh\necho '" + tc.version + "'\n"
			}
			if err := os.WriteFile(real, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, d := range tc.beside {
				if err := os.WriteFile(filepath.Join(usr, d), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", bin+":"+usr)
			t.Setenv(EnvLauncherPID, "1")
			var gotArgv []string
			defer func(e func(string, []string, []string) error) { execve = e }(execve)
			execve = func(_ string, argv, _ []string) error {
				gotArgv = argv
				return errors.New("exec refused by the test")
			}
			_, _ = RunShim(context.Background(), Config{Executable: self, Implementation: tc.spec}, []string{"mpirun", "-np", "2", "x"})
			want := tc.want
			if want == "" {
				want = real
			}
			if len(gotArgv) == 0 || gotArgv[0] != want {
				t.Fatalf("argv %q, want argv[0] %q", gotArgv, want)
			}
		})
	}
}

// TestRunShimDirectKeepsFQDN: horovodrun's `mpirun -H w-0.job:1,...`
// runs the real Open MPI at once (it names its hosts), and still gets
// keep_fqdn_hostnames, without which Open MPI 4 strips the subdomain and
// starts its daemon on a name that does not resolve in a pod. A value the
// user set is kept; a Hydra gets nothing.
func TestRunShimDirectKeepsFQDN(t *testing.T) {
	trainerVars := []string{"KUBEFLOW_TRAINER_SERVER_URL=https://trainer.kubeflow-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status",
		"KUBEFLOW_TRAINER_SERVER_TOKEN=/var/run/secrets/kubeflow/trainer/token", "KUBEFLOW_TRAINER_SERVER_CA_CERT=/var/run/secrets/kubeflow/trainer/ca.crt"}
	for _, tc := range []struct {
		name   string
		beside string   // the daemon installed beside the real mpirun
		user   []string // the user's own variables
		want   []string // variables the real program must see
		absent []string // variables it must not see
	}{
		{name: "open mpi 4", beside: "orted", want: []string{"OMPI_MCA_orte_keep_fqdn_hostnames=1"}},
		{name: "open mpi 5", beside: "prted",
			want: []string{"PRTE_MCA_prte_keep_fqdn_hostnames=false"}, absent: []string{"OMPI_MCA_orte_keep_fqdn_hostnames=1"}},
		{name: "user's value kept", beside: "orted", user: []string{"OMPI_MCA_orte_keep_fqdn_hostnames=0"},
			want: []string{"OMPI_MCA_orte_keep_fqdn_hostnames=0"}, absent: []string{"OMPI_MCA_orte_keep_fqdn_hostnames=1"}},
		{name: "mpich", beside: "hydra_pmi_proxy", absent: []string{"OMPI_MCA_orte_keep_fqdn_hostnames=1"}},
		// Trainer's status variables name its token: a program the shim
		// runs at once serves the ranks no endpoint of podmpi's, so they
		// get none of them, rather than Trainer's token (Hydra passes
		// mpiexec's whole environment to every rank).
		{name: "trainer's token", beside: "hydra_pmi_proxy", user: trainerVars,
			absent: trainerVars},
	} {
		t.Run(tc.name, func(t *testing.T) {
			self, bin, usr, real := shimLayout(t)
			if err := os.WriteFile(filepath.Join(usr, tc.beside), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", bin+":"+usr)
			for _, v := range []string{EnvLauncherPID, "OMPI_MCA_orte_keep_fqdn_hostnames", "PRTE_MCA_prte_keep_fqdn_hostnames", "OMPI_MCA_prte_keep_fqdn_hostnames"} {
				t.Setenv(v, "")
				os.Unsetenv(v)
			}
			for _, kv := range tc.user {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			var gotPath string
			var gotEnv []string
			defer func(e func(string, []string, []string) error) { execve = e }(execve)
			execve = func(path string, _, env []string) error {
				gotPath, gotEnv = path, env
				return errors.New("exec refused by the test")
			}
			argv := []string{"mpirun", "--allow-run-as-root", "--tag-output", "-np", "2", "-H", "hv-node-0-0.hv:1,hv-node-0-1.hv:1",
				"-mca", "plm_rsh_args", "-p 2222", "python3", "train.py"}
			_, _ = RunShim(context.Background(), Config{Executable: self}, argv)
			if gotPath != real {
				t.Fatalf("exec %q, want the real mpirun %q at once", gotPath, real)
			}
			for _, kv := range tc.want {
				if !slices.Contains(gotEnv, kv) {
					t.Errorf("the real mpirun's environment lacks %s", kv)
				}
			}
			for _, kv := range tc.absent {
				if slices.Contains(gotEnv, kv) {
					t.Errorf("the real mpirun's environment has %s", kv)
				}
			}
		})
	}
}
