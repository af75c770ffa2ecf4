package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

var launcherBin, agentBin, relayBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "launcher-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	launcherBin = filepath.Join(dir, "launcher")
	agentBin = filepath.Join(dir, "worker-agent")
	relayBin = filepath.Join(dir, "podmpi-rsh")
	// The launcher and the relay static, as make build makes them (the
	// launcher started as worker-agent runs in images without glibc).
	for bin, pkg := range map[string]string{launcherBin: ".", agentBin: "../worker-agent", relayBin: "./podmpi-rsh"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		if bin != agentBin {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startAgent runs a real worker-agent with the job's keys, SSH on every
// address (the tests dial 127.0.0.1 and 127.0.0.2), and waits until /readyz
// answers 200.
func startAgent(t *testing.T, authDir string) (sshPort int) {
	t.Helper()
	_, sshPort = startAgentWithLog(t, authDir)
	return sshPort
}

// startAgentWithLog is startAgent, with the agent (and its log).
func startAgentWithLog(t *testing.T, authDir string) (a *sshtest.Agent, sshPort int) {
	t.Helper()
	a = sshtest.StartAgent(t, exec.Command(agentBin,
		"--ssh.listen-address", ":0", "--web.listen-address", "127.0.0.1:0",
		"--ssh.auth-dir", authDir, "--ssh.state-dir", t.TempDir(), "--slots", "2", "--gpu.detect", "none",
		"--log.format=json"))
	a.WaitReady(t, 15*time.Second)
	_, port, err := net.SplitHostPort(a.SSHAddr)
	if err != nil {
		t.Fatalf("worker-agent's SSH address %q: %v", a.SSHAddr, err)
	}
	sshPort, err = strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return a, sshPort
}

// runLauncher runs the launcher binary with a deadline and returns its exit
// code and combined output.
func runLauncher(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, launcherBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("running launcher: %v\n%s", err, out)
	return -1, ""
}

func TestRshAgainstWorkerAgent(t *testing.T) {
	dir := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	port := startAgent(t, dir)
	env := []string{cli.EnvName("ssh.auth-dir") + "=" + dir}
	code, out := runLauncher(t, env, "rsh", "-p", fmt.Sprint(port), "127.0.0.1", "exit 5")
	if code != 5 {
		t.Fatalf("launcher rsh ... 'exit 5' = %d, want 5\n%s", code, out)
	}
	// OpenMPI's argv shape: options, host, then a command string with a
	// leading space and quotes.
	code, out = runLauncher(t, env, "rsh", "-p", fmt.Sprint(port), "-o", "StrictHostKeyChecking=no", "127.0.0.1", ` echo "a;b" 'c d'`)
	if code != 0 || strings.TrimSpace(out) != "a;b c d" {
		t.Fatalf("quoted command: code %d, output %q", code, out)
	}
}

// TestRealMPIThroughLauncherOnLoopback runs real mpirun.openmpi and
// mpiexec.hydra through `launcher -- ...` against a real worker-agent.
// 127.0.0.2 is not one of this host's interface addresses, so neither MPI
// treats it as local: both start their remote daemon through podmpi-rsh.
func TestRealMPIThroughLauncherOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no real MPI")
	}
	dir := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	port := startAgent(t, dir)
	for _, tc := range []struct{ impl, prog string }{
		{"openmpi", "mpirun.openmpi"},
		{"mpich", "mpiexec.hydra"},
	} {
		t.Run(tc.impl, func(t *testing.T) {
			if _, err := exec.LookPath(tc.prog); err != nil {
				t.Skipf("%s not installed (Debian: openmpi-bin / mpich)", tc.prog)
			}
			code, out := runLauncher(t, nil,
				"--workers", "127.0.0.2=2", "--ssh.port", fmt.Sprint(port), "--ssh.auth-dir", dir,
				"--slots", "2", "--web.listen-address", "", "--termination-log", "",
				"--hostfile.output", filepath.Join(t.TempDir(), "hostfile"), "--mpirun.timeout", "45s",
				"--", tc.prog, "hostname")
			if code != 0 {
				t.Fatalf("launcher -- %s hostname: exit %d\n%s", tc.prog, code, out)
			}
			host, _ := os.Hostname()
			if n := strings.Count(out, host+"\n"); n != 2 {
				t.Fatalf("want 2 ranks printing %q (np injected from slots), got %d\n%s", host, n, out)
			}
			if !strings.Contains(out, "127.0.0.2:"+fmt.Sprint(port)+"  ok") {
				t.Fatalf("the probe table does not show the worker ok:\n%s", out)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":    {},
		"no dash":       {"mpirun", "x"},
		"bad flag":      {"--nope", "--", "true"},
		"bad slots":     {"--slots", "many", "--workers", "a", "--", "true"},
		"template no n": {"--discovery.template", "w-{i}.job", "--", "true"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out := runLauncher(t, nil, args...)
			if code != int(exitcode.Usage) {
				t.Fatalf("exit %d, want %d\n%s", code, exitcode.Usage, out)
			}
			if !strings.HasPrefix(out, "launcher: ") {
				t.Fatalf("want one clear line, got %q", out)
			}
		})
	}
	code, out := runLauncher(t, []string{"PODMPI_WORKERS_EXPECTED=lots"}, "--discovery.template", "w-{i}.job", "--", "true")
	if code != int(exitcode.Usage) || !strings.Contains(out, "PODMPI_WORKERS_EXPECTED") {
		t.Fatalf("bad env twin: exit %d\n%s", code, out)
	}
}

func TestDocListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(&app{cfg: launcher.Defaults()}, commands{})
	n := 0
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		n++
		if !bytes.Contains(doc, []byte("--"+f.Name+" ")) || !bytes.Contains(doc, []byte(cli.EnvName(f.Name))) {
			t.Errorf("doc.go does not list --%s with %s", f.Name, cli.EnvName(f.Name))
		}
	})
	if n < 20 {
		t.Fatalf("only %d flags found", n)
	}
}

// SIGTERM while the launcher waits for DNS ends it with 143 and a
// termination message, not a silent kill.
func TestSIGTERMDuringDiscovery(t *testing.T) {
	term := filepath.Join(t.TempDir(), "termination-log")
	cmd := exec.Command(launcherBin, "--workers", "tj-node-0-1.podmpi-test.invalid", "--discovery.timeout", "1m",
		"--mpi.implementation", "openmpi4", "--web.listen-address", "", "--termination-log", term, "--", "mpirun", "true")
	var out sshtest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The launcher is in the DNS wait once it says so.
	sshtest.Eventually(t, 10*time.Second, "the DNS wait to start", func() bool {
		return strings.Contains(out.String(), "phase="+launcher.PhaseDNSWait)
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Fatalf("want exit 143, got %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("launcher did not stop within 10s of SIGTERM\n%s", out.String())
	}
	if b, err := os.ReadFile(term); err != nil || !strings.Contains(string(b), "exit code 143") {
		t.Fatalf("termination log %q (%v)", b, err)
	}
}

// TestJSONLogOfAFailingLauncher: with JSON logs (as inside Kubernetes) a
// launcher whose probe fails writes only JSON lines on stderr, each with
// unique keys, one of them an ERROR record naming the worker and the
// phase; the human report and the final error are records too.
func TestJSONLogOfAFailingLauncher(t *testing.T) {
	auth := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	closed := freePort(t) // nothing listens there
	code, out := runLauncher(t, []string{"KUBERNETES_SERVICE_HOST=10.96.0.1"},
		"--workers", "127.0.0.1", "--slots", "1", "--ssh.auth-dir", auth, "--ssh.port", fmt.Sprint(closed),
		"--probe.timeout", "1s", "--web.listen-address", "", "--termination-log", "",
		"--mpi.implementation", "openmpi4", "--", "mpirun", "true")
	if code != int(exitcode.ProbeFailed) {
		t.Fatalf("exit %d, want %d\n%s", code, exitcode.ProbeFailed, out)
	}
	var worker, exiting bool
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if err := sshtest.UniqueJSONKeys(line); err != nil {
			t.Errorf("line %d is not JSON with unique keys (%v): %s", i+1, err, line)
			continue
		}
		var rec map[string]any
		_ = json.Unmarshal([]byte(line), &rec)
		if rec["level"] == "ERROR" && rec["host"] == "127.0.0.1" && rec["phase"] == "tcp-refused" {
			worker = true
		}
		if rec["level"] == "ERROR" && rec["msg"] == "launcher exiting" && rec["code"] == float64(exitcode.ProbeFailed) {
			exiting = true
		}
	}
	if !worker || !exiting {
		t.Errorf("no ERROR record naming the worker (%v) or the exit (%v):\n%s", worker, exiting, out)
	}
}

// runBin runs a binary with a deadline and returns its exit code, stdout
// and stderr apart.
func runBin(t *testing.T, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("running %s %q: %v", bin, args, err)
	return -1, "", ""
}

// checkExitCodeList fails unless help lists every code of agent/exitcode's
// table, each at the start of its own line with its name.
func checkExitCodeList(t *testing.T, what, help string) {
	t.Helper()
	for _, e := range exitcode.Table {
		re := regexp.MustCompile(`(?m)^  ` + strconv.Itoa(int(e.Code)) + ` +` + regexp.QuoteMeta(e.Name) + `\b`)
		if !re.MatchString(help) {
			t.Errorf("%s does not list exit code %d (%s)", what, e.Code, e.Name)
		}
	}
}

// TestCLIConventions: the launcher's command line answers as cobra and
// kubectl users expect. --help and -h work on every command, the ssh
// client's included (launcher rsh and make build's podmpi-rsh, which
// OpenSSH's command line has neither); --version prints what `launcher
// version` prints; -v is verbose (the debug log level) and never the
// version; --help lists every exit code of agent/exitcode's table.
func TestCLIConventions(t *testing.T) {
	bin := binDir(t)
	for _, args := range [][]string{{"rsh", "--help"}, {"rsh", "-h"}, {"rsh", "-q", "--help"}} {
		code, out, errOut := runBin(t, []string{"PODMPI_RSH_SOCKET="}, launcherBin, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: podmpi-rsh ") || errOut != "" {
			t.Errorf("launcher %q: exit %d, stdout %q, stderr %q; want the client's usage on stdout and exit 0", args, code, out, errOut)
		}
	}
	// make build's relay, where no launcher shares: it runs the full
	// client next to it, which prints the usage.
	for _, arg := range []string{"--help", "-h"} {
		code, out, errOut := runBin(t, []string{"PODMPI_RSH_SOCKET="}, filepath.Join(bin, rsh.Name), arg)
		if code != 0 || !strings.HasPrefix(out, "usage: podmpi-rsh ") {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q", rsh.Name, arg, code, out, errOut)
		}
	}
	// A --help after the command is the remote command's, not the client's.
	if o, err := rsh.ParseArgs([]string{"w-0", "mpirun", "--help"}); err != nil || o.Help || o.Command != "mpirun --help" {
		t.Errorf("ParseArgs(w-0 mpirun --help) = %+v, %v; want the command \"mpirun --help\"", o, err)
	}

	code, help, _ := runBin(t, nil, launcherBin, "--help")
	if code != 0 {
		t.Fatalf("launcher --help: exit %d", code)
	}
	checkExitCodeList(t, "launcher --help", help)
	if code, h, _ := runBin(t, nil, launcherBin, "-h"); code != 0 || h != help {
		t.Errorf("launcher -h: exit %d, and its output differs from --help's", code)
	}
	if !strings.Contains(help, "-v, --verbose") || strings.Contains(help, "-v, --version") {
		t.Errorf("launcher --help: want -v as --verbose's shorthand, not --version's:\n%s", help)
	}

	_, want, _ := runBin(t, nil, launcherBin, "version")
	if !strings.HasPrefix(want, "launcher ") {
		t.Fatalf("launcher version printed %q", want)
	}
	if code, out, _ := runBin(t, nil, launcherBin, "--version"); code != 0 || out != want {
		t.Errorf("launcher --version: exit %d, %q; want %q as `launcher version` prints it", code, out, want)
	}
	// -v alone is not a request for the version: the launcher wants its
	// command, as without it.
	if code, out, errOut := runBin(t, nil, launcherBin, "-v"); code != int(exitcode.Usage) || strings.Contains(out+errOut, want) {
		t.Errorf("launcher -v: exit %d, stdout %q, stderr %q; want exit %d asking for the command", code, out, errOut, exitcode.Usage)
	}

	// -v and its twin give the debug level over --log.level (the twin
	// last: parse sets it for the rest of the test).
	if cfg, _, _, _ := parse(t, nil, "--workers", "a", "probe"); cfg.Logger == nil || cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		t.Errorf("without -v the logger logs at the debug level")
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{nil, []string{"-v", "--log.level", "warn", "--workers", "a", "probe"}},
		{nil, []string{"--verbose", "--workers", "a", "probe"}},
		{map[string]string{"PODMPI_VERBOSE": "true"}, []string{"--workers", "a", "probe"}},
	} {
		cfg, which, code, out := parse(t, tc.env, tc.args...)
		if code != exitcode.OK || which != "probe" {
			t.Fatalf("%q: exit %d, ran %q: %s", tc.args, code, which, out)
		}
		if cfg.Logger == nil || !cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
			t.Errorf("%q (env %v): the logger does not log at the debug level", tc.args, tc.env)
		}
	}
}
