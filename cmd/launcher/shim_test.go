package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// binDir lays out a directory the way make build does: the launcher, the
// relay binary podmpi-rsh, and every relative link `launcher names` lists
// (ssh to podmpi-rsh, the MPI launcher names to the launcher).
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{"launcher": launcherBin, rsh.Name: relayBin} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "launcher"), "names").Output()
	if err != nil {
		t.Fatalf("launcher names: %v", err)
	}
	var got, want []string
	for _, n := range rsh.Names {
		if n != rsh.Name {
			want = append(want, n+" "+rsh.Name)
		}
	}
	for _, n := range launcher.ShimNames {
		want = append(want, n+" launcher")
	}
	want = append(want, "worker-agent launcher")
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		got = append(got, l)
		n, target, _ := strings.Cut(l, " ")
		if err := os.Symlink(target, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("launcher names = %q, want %q", got, want)
	}
	return dir
}

// runAs runs the program named name from dir (argv[0] = name, as a shell
// finds it on PATH) with env and returns its exit code and output (stdout
// and stderr interleaved).
func runAs(t *testing.T, dir, name string, env []string, args ...string) (int, string) {
	t.Helper()
	var out strings.Builder
	code := runCmd(t, env, func(cmd *exec.Cmd) { cmd.Args[0], cmd.Stdout, cmd.Stderr = name, &out, &out }, filepath.Join(dir, name), args...)
	return code, out.String()
}

// runProg runs prog with args and env and returns its exit code, stdout
// and stderr.
func runProg(t *testing.T, env []string, prog string, args ...string) (int, string, string) {
	t.Helper()
	var so, se strings.Builder
	code := runCmd(t, env, func(cmd *exec.Cmd) { cmd.Stdout, cmd.Stderr = &so, &se }, prog, args...)
	return code, so.String(), se.String()
}

// runCmd runs prog with args and env, set up further by setup, for at
// most a minute, and returns its exit code.
func runCmd(t *testing.T, env []string, setup func(*exec.Cmd), prog string, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = env
	setup(cmd)
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("running %s: %v", prog, err)
	return -1
}

// TestShimRunsTheLauncherPhases: the Kubeflow SDK's command shape, `mpirun
// --hostfile <Trainer's hostfile> bash -c ...`, run as podmpi's mpirun with
// Trainer's launcher environment and only podmpi's bin dir in front of
// PATH, gets the launcher's phases (report, probe) and then the real mpirun
// with the launcher's hostfile; the same for `mpiexec.hydra -f` with a
// Trainer-format hostfile that Hydra itself rejects.
func TestShimRunsTheLauncherPhases(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no real MPI")
	}
	auth := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	port := startAgent(t, auth)
	bin := binDir(t)
	for _, tc := range []struct{ name, prog, opt string }{
		{"openmpi", "mpirun", "--hostfile"},
		{"mpich", "mpiexec.hydra", "-f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real := "mpirun.openmpi"
			if tc.name == "mpich" {
				real = "mpiexec.hydra"
			}
			if _, err := exec.LookPath(real); err != nil {
				t.Skipf("%s not installed", real)
			}
			tmp := t.TempDir()
			hf := filepath.Join(tmp, "trainer-hostfile")
			// 127.0.0.2 is not this host's address: the MPI starts its
			// daemon there through podmpi-rsh.
			if err := os.WriteFile(hf, []byte("127.0.0.2 slots=2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			term := filepath.Join(tmp, "termination-log")
			env := []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + tmp,
				// Trainer's launcher environment.
				"OMPI_MCA_orte_default_hostfile=" + hf, "OMPI_MCA_orte_keep_fqdn_hostnames=true",
				"OMPI_MCA_orte_set_default_slots=2", "OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10",
				// What a runtime would set: the launcher's flags as twins.
				"PODMPI_SSH_AUTH_DIR=" + auth, fmt.Sprintf("PODMPI_SSH_PORT=%d", port), "PODMPI_SLOTS=2",
				"PODMPI_WEB_LISTEN_ADDRESS=", "PODMPI_TERMINATION_LOG=" + term, "PODMPI_LOG_FORMAT=text",
				"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(tmp, "out", "hostfile"), "PODMPI_MPIRUN_TIMEOUT=15s"}
			code, out := runAs(t, bin, tc.prog, env, tc.opt, hf, "bash", "-c", `echo "rank-line hostfile-var=${OMPI_MCA_orte_default_hostfile:-set-by-hydra}"`)
			if code != 0 {
				t.Fatalf("%s %s %s bash -c ...: exit %d\n%s", tc.prog, tc.opt, hf, code, out)
			}
			written := filepath.Join(tmp, "out", "hostfile")
			for _, want := range []string{"== hostfile " + written, fmt.Sprintf("127.0.0.2:%d  ok", port), "== init done",
				"replacing the command's hostfile with the launcher's"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			// Open MPI hands its default-hostfile variable (the launcher's
			// hostfile) to the remote ranks; Hydra hands nothing.
			wantRank := "rank-line hostfile-var=" + written
			if tc.name == "mpich" {
				wantRank = "rank-line hostfile-var=set-by-hydra"
			}
			if n := countLines(out, wantRank); n != 2 {
				t.Errorf("%d rank lines, want 2 (-np from the slots)", n)
			}
			if n := strings.Count(out, "== init done"); n != 1 {
				t.Errorf("the phases ran %d times, want once", n)
			}
			if b, err := os.ReadFile(term); err != nil || !strings.Contains(string(b), "exit code 0") {
				t.Errorf("termination log %q (%v)", b, err)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// TestShimRunsTheRealProgramDirectly: when the launcher has nothing to do
// (information requests, phases already done, nothing names a worker), the
// real program runs as if typed, with no phase; with no real program on
// PATH, exit 68 names the cause.
func TestShimRunsTheRealProgramDirectly(t *testing.T) {
	if _, err := exec.LookPath("mpirun.openmpi"); err != nil {
		t.Skip("mpirun.openmpi not installed")
	}
	bin := binDir(t)
	tmp := t.TempDir()
	env := []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + tmp, "PODMPI_LOG_LEVEL=debug", "PODMPI_LOG_FORMAT=text",
		"PODMPI_WEB_LISTEN_ADDRESS=", "PODMPI_TERMINATION_LOG=", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}
	if _, err := os.Stat("/etc/mpi/hostfile"); err == nil {
		t.Skip("/etc/mpi/hostfile exists on this machine: the no-worker case cannot be shown")
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"version", nil, []string{"--version"}, "Open MPI"},
		{"phases done", []string{launcher.EnvLauncherPID + "=1", "PODMPI_WORKERS=never-resolves.invalid"}, []string{"-np", "1", "echo", "direct"}, "the launcher already prepared this job"},
		{"no workers named", nil, []string{"-np", "1", "echo", "direct"}, "no worker is named anywhere"},
		{"hosts on the command line", nil, []string{"-H", "localhost", "-np", "1", "echo", "direct"}, "names its hosts itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runAs(t, bin, "mpirun", append(slices.Clone(env), tc.env...), tc.args...)
			if code != 0 || !strings.Contains(out, tc.want) || strings.Contains(out, "phase start") {
				t.Fatalf("exit %d, want 0 with %q and no phase:\n%s", code, tc.want, out)
			}
			if tc.args[0] != "--version" && !strings.Contains(out, "direct\n") {
				t.Fatalf("the real mpirun did not run the command:\n%s", out)
			}
		})
	}
	// Only podmpi's own mpirun on PATH: nothing to run.
	code, out := runAs(t, bin, "mpirun", []string{"PATH=" + bin, "PODMPI_WORKERS=a", "PODMPI_TERMINATION_LOG="}, "-np", "1", "true")
	if code != int(exitcode.MPIRunNotFound) || !strings.Contains(out, "no mpirun on PATH besides podmpi's own") {
		t.Fatalf("exit %d, want 68 naming the cause:\n%s", code, out)
	}
}

// TestLauncherDashDashWithBinFirst: `launcher -- mpirun ...` keeps working
// with podmpi's bin dir first on PATH: its mpirun resolves to the real one,
// and nothing runs the phases twice.
func TestLauncherDashDashWithBinFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no real MPI")
	}
	if _, err := exec.LookPath("mpirun.openmpi"); err != nil {
		t.Skip("mpirun.openmpi not installed")
	}
	auth := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	port := startAgent(t, auth)
	bin := binDir(t)
	tmp := t.TempDir()
	code, out := runAs(t, bin, "launcher", []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + tmp},
		"--workers", "127.0.0.2=2", "--ssh.port", fmt.Sprint(port), "--ssh.auth-dir", auth, "--slots", "2",
		"--web.listen-address", "", "--termination-log", "", "--log.format", "text",
		"--hostfile.output", filepath.Join(tmp, "hostfile"), "--mpirun.timeout", "45s", "--", "mpirun", "echo", "rank-line")
	if code != 0 || countLines(out, "rank-line") != 2 || strings.Count(out, "== init done") != 1 {
		t.Fatalf("exit %d, want 0, 2 ranks, one init:\n%s", code, out)
	}
}

// TestShimSettingsFromEnvironment: the shim has no flags; the PODMPI_*
// twins fill the Config, and a bad twin is exit 64 naming it.
func TestShimSettingsFromEnvironment(t *testing.T) {
	t.Setenv("PODMPI_SSH_PORT", "2300")
	t.Setenv("PODMPI_SSH_WAIT", "30s")
	t.Setenv("PODMPI_DISCOVERY_TIMEOUT", "7m")
	var got launcher.Config
	var gotArgv []string
	a := &app{cfg: launcher.Defaults(), stdout: &strings.Builder{}, stderr: &strings.Builder{}}
	code := a.shim(context.Background(), []string{"/opt/podmpi/bin/mpiexec.hydra", "-f", "h", "x"},
		func(_ context.Context, cfg launcher.Config, argv []string) (exitcode.Code, error) {
			got, gotArgv = cfg, argv
			return 0, nil
		})
	if code != 0 || got.SSHPort != 2300 || got.SSHWait != 30*time.Second || got.DiscoveryTimeout != 7*time.Minute || got.Report == nil {
		t.Fatalf("code %d, cfg %+v", code, got)
	}
	if !slices.Equal(gotArgv, []string{"/opt/podmpi/bin/mpiexec.hydra", "-f", "h", "x"}) {
		t.Fatalf("argv %q", gotArgv)
	}
	t.Setenv("PODMPI_PROBE_PARALLEL", "0")
	var errb strings.Builder
	a = &app{cfg: launcher.Defaults(), stdout: &strings.Builder{}, stderr: &errb}
	code = a.shim(context.Background(), []string{"mpirun"}, func(context.Context, launcher.Config, []string) (exitcode.Code, error) {
		t.Fatal("ran with a bad setting")
		return 0, nil
	})
	if code != exitcode.Usage || !strings.Contains(errb.String(), "PODMPI_PROBE_PARALLEL") || !strings.HasPrefix(errb.String(), "podmpi mpirun: ") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// countLines counts the lines of out that are exactly line.
func countLines(out, line string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if l == line {
			n++
		}
	}
	return n
}
