package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/spf13/pflag"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
)

var update = flag.Bool("update", false, "rewrite testdata/metric-names.golden")

// agentBin is the worker-agent built once for the tests that run it.
var agentBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "worker-agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating build dir:", err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "worker-agent")
	build := exec.Command("go", "build", "-o", agentBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build worker-agent: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// --- key material in the Trainer v2 layout ---

type keys struct {
	dir     string
	signer  ssh.Signer
	pubLine []byte // id_rsa.pub content
	privPEM []byte
}

// writeKeys writes a job key into dir as Trainer v2 mounts its Secret
// (sshtest.WriteSecret: id_rsa 0640, id_rsa.pub and authorized_keys 0644).
func writeKeys(t *testing.T, dir string) keys {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	if err := sshtest.WriteSecret(dir, k, k.Public()); err != nil {
		t.Fatal(err)
	}
	return keys{dir: dir, signer: k.Signer, pubLine: ssh.MarshalAuthorizedKey(k.Public()), privPEM: k.PEM}
}

// --- running the binary ---

// agent is a worker-agent the test started (sshtest.StartAgent).
type agent = sshtest.Agent

// startAgent runs argv (the binary, possibly behind setpriv) with JSON logs
// on the listen addresses its flags give and waits until both listeners are
// bound.
func startAgent(t *testing.T, argv []string, env []string, dir string) *agent {
	t.Helper()
	args := append(argv[1:], "--log.format=json", "--log.level=info")
	cmd := exec.Command(argv[0], args...)
	cmd.Env = env
	cmd.Dir = dir
	return sshtest.StartAgent(t, cmd)
}

// baseEnv is a minimal environment: no HOME, a distinctive PATH.
func baseEnv(extra ...string) []string {
	return append([]string{"PATH=/opt/mpi/bin:/usr/bin:/bin"}, extra...)
}

func loopbackArgs(authDir string, extra ...string) []string {
	return append([]string{agentBin, "--ssh.listen-address=127.0.0.1:0", "--web.listen-address=127.0.0.1:0",
		"--ssh.auth-dir=" + authDir, "--gpu.detect=none"}, extra...)
}

// runOnce runs the binary to completion with a deadline.
func runOnce(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentBin, args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("worker-agent %v did not finish within 30s", args)
	}
	return sshtest.ExitStatus(err), o.String(), e.String()
}

func assertOneLine(t *testing.T, stderr string, wantParts ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "worker-agent: ") || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("stderr = %q, want exactly one line starting with \"worker-agent: \"", stderr)
	}
	for _, p := range wantParts {
		if !strings.Contains(lines[0], p) {
			t.Errorf("stderr line %q does not contain %q", lines[0], p)
		}
	}
}

// --- tests ---

func TestVersion(t *testing.T) {
	code, out, errOut := runOnce(t, baseEnv(), "version")
	if code != 0 || !strings.HasPrefix(out, "worker-agent ") || errOut != "" {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// --version, as cobra and kubectl users expect, prints the same line;
	// -v (verbose) beside it changes nothing.
	for _, args := range [][]string{{"--version"}, {"-v", "--version"}} {
		if c, o, e := runOnce(t, baseEnv(), args...); c != 0 || o != out || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %q as `worker-agent version` prints it", args, c, o, e, out)
		}
	}
}

// TestCLIConventions: --help and -h list every exit code of agent/exitcode's
// table; the ssh client answers --help and -h (OpenSSH's command line has
// neither); -v is verbose: the agent logs at the debug level, whatever
// --log.level says.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	code, help, _ := runOnce(t, baseEnv(), "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, e := range exitcode.Table {
		re := regexp.MustCompile(`(?m)^  ` + strconv.Itoa(int(e.Code)) + ` +` + regexp.QuoteMeta(e.Name) + `\b`)
		if !re.MatchString(help) {
			t.Errorf("--help does not list exit code %d (%s)", e.Code, e.Name)
		}
	}
	if c, h, _ := runOnce(t, baseEnv(), "-h"); c != 0 || h != help {
		t.Errorf("-h: exit %d, and its output differs from --help's", c)
	}
	if !strings.Contains(help, "-v, --verbose") {
		t.Errorf("--help does not show -v as --verbose's shorthand:\n%s", help)
	}
	for _, args := range [][]string{{"rsh", "--help"}, {"rsh", "-h"}} {
		if c, o, e := runOnce(t, baseEnv(), args...); c != 0 || !strings.HasPrefix(o, "usage: podmpi-rsh ") || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the client's usage and exit 0", args, c, o, e)
		}
	}

	keys := writeKeys(t, t.TempDir())
	for _, verbose := range []bool{false, true} {
		args := loopbackArgs(keys.dir)
		if verbose {
			args = append(args, "-v")
		}
		a := startAgent(t, args, baseEnv(), t.TempDir())
		a.WaitReady(t, 20*time.Second)
		// Linking podmpi-rsh for the sessions is logged at the debug level.
		if got := strings.Contains(a.Log(), `"level":"DEBUG"`); got != verbose {
			t.Errorf("-v %t: debug records in the log: %t, want %t:\n%s", verbose, got, verbose, a.Log())
		}
		a.Stop(t, 20*time.Second)
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	keys := writeKeys(t, t.TempDir())
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"unknown flag", nil, []string{"--ssh.listen-adress=:2222"}, []string{"unknown flag: --ssh.listen-adress", "hint: run 'worker-agent --help'"}},
		{"bad duration", nil, []string{"--shutdown.grace=soon"}, []string{"--shutdown.grace"}},
		{"negative duration", nil, []string{"--ssh.kill-grace=-1s"}, []string{"--ssh.kill-grace=-1s: must be a positive duration"}},
		{"bad slots", nil, []string{"--slots=many"}, []string{`invalid --slots value "many"`}},
		{"bad gpu mode", nil, []string{"--gpu.detect=cuda"}, []string{`--gpu.detect="cuda": want auto, nvml or none`}},
		{"bad address", nil, []string{"--ssh.listen-address=2222"}, []string{`--ssh.listen-address="2222": want host:port`}},
		{"bad port", nil, []string{"--web.listen-address=:http2x"}, []string{`"http2x" is not a port number`}},
		{"zero max sessions", nil, []string{"--ssh.max-sessions=0"}, []string{"--ssh.max-sessions=0: must be between 1 and 10000"}},
		{"max startups begin above full", nil, []string{"--ssh.max-startups=50:30:10"}, []string{"--ssh.max-startups=", "BEGIN 50 is above FULL 10"}},
		{"max startups rate above 100", nil, []string{"--ssh.max-startups=10:150:100"}, []string{"RATE is a percentage"}},
		{"max startups two fields", nil, []string{"--ssh.max-startups=10:30"}, []string{"want N or BEGIN:RATE:FULL"}},
		{"max startups huge", nil, []string{"--ssh.max-startups=1000000"}, []string{"FULL 1000000 is above 100000"}},
		{"zero per-source startups", nil, []string{"--ssh.per-source-max-startups=0"}, []string{"--ssh.per-source-max-startups=0: must be between 1 and 100000"}},
		{"negative web connections", nil, []string{"--web.max-connections=-1"}, []string{"--web.max-connections=-1: must be between 1 and 100000"}},
		{"huge web connections", nil, []string{"--web.max-connections=1000000"}, []string{"--web.max-connections=1000000: must be between 1 and 100000"}},
		{"too many auth tries", nil, []string{"--ssh.max-auth-tries=500"}, []string{"--ssh.max-auth-tries=500: must be between 1 and 128"}},
		{"relative shell", nil, []string{"--ssh.shell=sh"}, []string{`--ssh.shell="sh": must be an absolute path`}},
		{"account interval too short", nil, []string{"--account.interval=1ms"}, []string{"--account.interval=1ms: must be between 50ms and 1m0s"}},
		{"account interval zero", []string{"PODMPI_ACCOUNT_INTERVAL=0s"}, nil, []string{"--account.interval=0s: must be a positive duration"}},
		{"relative cgroup root", nil, []string{"--account.cgroup-root=sys/fs/cgroup"}, []string{`--account.cgroup-root="sys/fs/cgroup": must be an absolute path`}},
		{"bad log level", nil, []string{"--log.level=loud"}, []string{`--log.level "loud"`}},
		{"extra argument", nil, []string{"serve"}, []string{`unknown command "serve"`}},
		{"bad env twin", []string{"PODMPI_SSH_MAX_SESSIONS=lots"}, nil, []string{"PODMPI_SSH_MAX_SESSIONS (twin of --ssh.max-sessions) is not a valid int"}},
		{"bad env twin max startups", []string{"PODMPI_SSH_MAX_STARTUPS=lots"}, nil, []string{"--ssh.max-startups=", "want N or BEGIN:RATE:FULL"}},
		{"bad env twin slots", []string{"PODMPI_SLOTS=-3"}, nil, []string{`invalid --slots value "-3"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--ssh.auth-dir=" + keys.dir, "--ssh.listen-address=127.0.0.1:0", "--web.listen-address=127.0.0.1:0"}, tc.args...)
			code, out, errOut := runOnce(t, baseEnv(tc.env...), args...)
			if code != 64 {
				t.Fatalf("exit %d, want 64; stdout %q stderr %q", code, out, errOut)
			}
			assertOneLine(t, errOut, append([]string{"worker-agent: bad flag: "}, tc.want...)...)
		})
	}
}

func TestHelpListsEnvTwins(t *testing.T) {
	t.Parallel()
	code, out, _ := runOnce(t, baseEnv(), "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, name := range flagNames(t) {
		if !strings.Contains(out, "[$"+cli.EnvName(name)+"]") {
			t.Errorf("--help does not show $%s for --%s", cli.EnvName(name), name)
		}
	}
}

func TestKeyProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) (file string)
		want  []string
	}{
		{"malformed private key", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "id_rsa")
			mustWrite(t, p, "-----BEGIN EC PRIVATE KEY-----\nbm90IGEga2V5\n-----END EC PRIVATE KEY-----\n", 0o640)
			return p
		}, []string{"parse private key", "hint: "}},
		{"malformed authorized_keys", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "authorized_keys")
			mustWrite(t, p, "ecdsa-sha2-nistp521 not-base64!!\n", 0o644)
			return p
		}, []string{"no usable public key", "line 1"}},
		{"missing authorized_keys", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "authorized_keys")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, []string{"no such file", "hint: "}},
		{"world-writable key", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "id_rsa")
			if err := os.Chmod(p, 0o666); err != nil {
				t.Fatal(err)
			}
			return p
		}, []string{"world-writable", "hint: "}},
		{"mismatched pair", func(t *testing.T, dir string) string {
			other := writeKeys(t, t.TempDir())
			p := filepath.Join(dir, "id_rsa.pub")
			mustWrite(t, p, string(other.pubLine), 0o644)
			return p
		}, []string{"id_rsa and id_rsa.pub must come from the same Secret"}},
		{"auth dir missing", func(t *testing.T, dir string) string {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			return dir
		}, []string{"find auth dir"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "ssh")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeKeys(t, dir)
			file := tc.setup(t, dir)
			code, _, errOut := runOnce(t, baseEnv(), loopbackArgs(dir)[1:]...)
			if code != 65 {
				t.Fatalf("exit %d, want 65; stderr %q", code, errOut)
			}
			assertOneLine(t, errOut, append([]string{"worker-agent: ssh keys: ", file}, tc.want...)...)
		})
	}
}

func TestBusyPort(t *testing.T) {
	t.Parallel()
	keys := writeKeys(t, t.TempDir())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	addr := busy.Addr().String()
	for _, tc := range []struct {
		name, flag, hint string
	}{
		{"ssh", "--ssh.listen-address=" + addr, "--ssh.listen-address"},
		{"http", "--web.listen-address=" + addr, "--web.listen-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runOnce(t, baseEnv(), loopbackArgs(keys.dir, tc.flag)[1:]...)
			if code != 70 {
				t.Fatalf("exit %d, want 70; stderr %q", code, errOut)
			}
			assertOneLine(t, errOut, "worker-agent: listen "+tc.name+" on "+addr+": address already in use", "hint: ", tc.hint)
		})
	}
}

func TestNvmlWithoutCgo(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "worker-agent-nocgo")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	keys := writeKeys(t, t.TempDir())
	cmd := exec.Command(bin, "--ssh.auth-dir="+keys.dir, "--ssh.listen-address=127.0.0.1:0", "--web.listen-address=127.0.0.1:0", "--gpu.detect=nvml")
	cmd.Env = baseEnv()
	var e bytes.Buffer
	cmd.Stderr = &e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if c := sshtest.ExitStatus(err); c != 65 {
			t.Fatalf("no-cgo binary with --gpu.detect=nvml: exit %d, want 65; stderr %q", c, e.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("no-cgo binary did not exit within 30s")
	}
	assertOneLine(t, e.String(), "worker-agent: gpu detection: ", "CGO_ENABLED=0")

	// And the no-cgo binary serves, CPU-only, in auto mode.
	a := startAgent(t, []string{bin, "--ssh.auth-dir=" + keys.dir, "--ssh.listen-address=127.0.0.1:0", "--web.listen-address=127.0.0.1:0"}, baseEnv(), t.TempDir())
	a.WaitReady(t, 20*time.Second)
	_, body := a.Get("/info")
	if !strings.Contains(body, "built without cgo") {
		t.Fatalf("/info of the no-cgo binary does not give the no-cgo reason:\n%s", body)
	}
}

// TestSIGTERMDuringSession starts a session whose processes ignore SIGTERM,
// sends the agent SIGTERM, and checks /readyz turns 503 at once, the
// session is ended within --shutdown.grace, and the agent exits 0.
func TestSIGTERMDuringSession(t *testing.T) {
	t.Parallel()
	keys := writeKeys(t, t.TempDir())
	const grace = 2 * time.Second
	a := startAgent(t, loopbackArgs(keys.dir, "--shutdown.grace="+grace.String()), baseEnv(), t.TempDir())
	a.WaitReady(t, 20*time.Second)

	client := dial(t, a.SSHAddr, keys.signer, keys.signer.PublicKey())
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	sess.Stdout = &out
	if err := sess.Start(`trap "" TERM; echo started; sleep 60`); err != nil {
		t.Fatal(err)
	}
	sessDone := make(chan error, 1)
	go func() { sessDone <- sess.Wait() }()
	waitUntil(t, "session output", func() bool { return strings.Contains(out.String(), "started") })

	start := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "/readyz 503 shutting down", func() bool {
		code, body := a.Get("/readyz")
		return code == 503 && strings.Contains(body, "shutting down")
	})
	select {
	case <-sessDone:
		t.Fatal("the TERM-ignoring session ended before the grace period")
	default:
	}
	code := a.Wait(t, grace+5*time.Second)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, a.Log())
	}
	if took > grace+3*time.Second {
		t.Errorf("shutdown took %s, want within the %s grace (plus slack)", took, grace)
	}
	select {
	case err := <-sessDone:
		var ee *ssh.ExitError
		var em *ssh.ExitMissingError
		if err == nil || !(errors.As(err, &ee) || errors.As(err, &em) || errors.Is(err, io.EOF)) {
			t.Errorf("session end = %v, want it killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("session still open after the agent exited")
	}
}

func TestRshSubcommandAndName(t *testing.T) {
	t.Parallel()
	keys := writeKeys(t, t.TempDir())
	a := startAgent(t, loopbackArgs(keys.dir), baseEnv(), t.TempDir())
	a.WaitReady(t, 20*time.Second)
	host, port, _ := net.SplitHostPort(a.SSHAddr)

	link := filepath.Join(t.TempDir(), "podmpi-rsh")
	if err := os.Symlink(agentBin, link); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{agentBin, "rsh", "-p", port, host, "echo via-rsh; exit 5"},
		{link, "-p", port, host, "echo via-rsh; exit 5"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = baseEnv("PODMPI_SSH_AUTH_DIR=" + keys.dir)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		cancel()
		if c := sshtest.ExitStatus(err); c != 5 || o.String() != "via-rsh\n" {
			t.Errorf("%s: exit %d stdout %q stderr %q, want exit 5 and via-rsh", filepath.Base(argv[0]), c, o.String(), e.String())
		}
	}
}

// TestMetrics drives a session and an auth failure, scrapes /metrics,
// checks it with promtool when installed, and compares the metric names
// with testdata/metric-names.golden (-update rewrites it).
func TestMetrics(t *testing.T) {
	t.Parallel()
	keys := writeKeys(t, t.TempDir())
	a := startAgent(t, loopbackArgs(keys.dir, "--slots=3"), baseEnv(), t.TempDir())
	a.WaitReady(t, 20*time.Second)

	client := dial(t, a.SSHAddr, keys.signer, keys.signer.PublicKey())
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var ee *ssh.ExitError
	if err := sess.Run("exit 3"); !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Fatalf("session: %v, want exit status 3", err)
	}
	client.Close()
	stranger := writeKeys(t, t.TempDir())
	if c, err := dialErr(a.SSHAddr, stranger.signer, keys.signer.PublicKey()); err == nil {
		c.Close()
		t.Fatal("a key not in authorized_keys was accepted")
	}

	var body string
	waitUntil(t, "session metrics", func() bool {
		_, body = a.Get("/metrics")
		return strings.Contains(body, `podmpi_worker_ssh_session_exits_total{code="other"} 1`) &&
			strings.Contains(body, `podmpi_worker_ssh_auth_failures_total{reason="unknown_key"} 1`)
	})
	for _, want := range []string{"podmpi_worker_slots 3", "podmpi_worker_gpus 0", "podmpi_worker_ready 1",
		"podmpi_worker_ssh_session_duration_seconds_count 1", `podmpi_worker_build_info{commit=`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if promtool, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed (apt install prometheus); skipping promtool check metrics")
	} else {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}

	names := metricNames(body)
	golden := filepath.Join("testdata", "metric-names.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(names), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestMetrics -update ./cmd/worker-agent/ to create it)", err)
	}
	if names != string(want) {
		t.Errorf("metric names differ from %s (run with -update after checking the change):\ngot:\n%s\nwant:\n%s", golden, names, want)
	}
}

// metricNames returns "name type" for every # TYPE line, sorted.
func metricNames(exposition string) string {
	var out []string
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out = append(out, f[2]+" "+f[3])
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n") + "\n"
}

// TestDocListsEveryFlag checks that doc.go names every flag and its
// environment twin.
func TestDocListsEveryFlag(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range flagNames(t) {
		line := regexp.MustCompile(`(?m)^//\s+--` + regexp.QuoteMeta(name) + `\s+` + regexp.QuoteMeta(cli.EnvName(name)) + `\s`)
		if !line.Match(doc) {
			t.Errorf("doc.go does not list --%s with %s on one line", name, cli.EnvName(name))
		}
	}
}

// TestDocDefaultsMatchFlags checks that the default doc.go gives each
// duration and count flag is the flag's own.
func TestDocDefaultsMatchFlags(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(&options{env: func(string) (string, bool) { return "", false }})
	checked := 0
	root.Flags().VisitAll(func(f *pflag.Flag) {
		kind := f.Value.Type()
		if kind != "duration" && kind != "int" {
			return
		}
		// The flag's entry: its line and the indented lines under it.
		entry := regexp.MustCompile(`(?m)^//\s+--` + regexp.QuoteMeta(f.Name) + `\s.*(?:\n//\s{20,}.*)*`).Find(doc)
		m := regexp.MustCompile(`default ([0-9][0-9a-z.]*)`).FindSubmatch(entry)
		if m == nil {
			t.Errorf("doc.go gives no default for --%s (%s)", f.Name, f.DefValue)
			return
		}
		checked++
		got := string(m[1])
		if kind == "duration" {
			d, err := time.ParseDuration(got)
			if got == "0" {
				d, err = 0, nil
			}
			if want, _ := time.ParseDuration(f.DefValue); err != nil || d != want {
				t.Errorf("doc.go: --%s default %s, the flag's is %s", f.Name, got, f.DefValue)
			}
		} else if got != f.DefValue {
			t.Errorf("doc.go: --%s default %s, the flag's is %s", f.Name, got, f.DefValue)
		}
	})
	if checked < 8 {
		t.Fatalf("only %d defaults checked", checked)
	}
}

func flagNames(t *testing.T) []string {
	t.Helper()
	root := newRootCmd(&options{env: func(string) (string, bool) { return "", false }})
	var names []string
	root.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			names = append(names, f.Name)
		}
	})
	if len(names) < 17 {
		t.Fatalf("only %d flags found: %v", len(names), names)
	}
	return names
}

// --- ssh helpers ---

func dial(t *testing.T, addr string, signer ssh.Signer, hostKey ssh.PublicKey) *ssh.Client {
	t.Helper()
	c, err := dialErr(addr, signer, hostKey)
	if err != nil {
		t.Fatalf("ssh dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dialErr(addr string, signer ssh.Signer, hostKey ssh.PublicKey) (*ssh.Client, error) {
	return ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:            "mpiuser",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey),
		Timeout:         10 * time.Second,
	})
}

// lockedBuffer collects a process's output while tests read it.
type lockedBuffer = sshtest.Buffer

func waitUntil(t *testing.T, what string, f func() bool) {
	t.Helper()
	sshtest.Eventually(t, 15*time.Second, what, f)
}

func mustWrite(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestSessionsInAnImageWithoutPodmpi: the pod spec's PATH names no MPI
// (it replaces the image's) and HOME is not writable (HOME=/ under a
// read-only root; here a file): the agent adds the folder where the image
// has its MPI (a venv's bin/) to its sessions' PATH and gives them a
// private HOME, and says both; with no MPI anywhere it warns once.
func TestSessionsInAnImageWithoutPodmpi(t *testing.T) {
	t.Parallel()
	keys := writeKeys(t, t.TempDir())
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys") // the system's folders, without an MPI
	venv := filepath.Join(dir, "venv")
	for _, d := range []string{sys, filepath.Join(venv, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"mkdir", "cat"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skip(err)
		}
		mustWrite(t, filepath.Join(sys, tool), "#!/bin/sh\nexec "+p+" \"$@\"\n", 0o755)
	}
	mustWrite(t, filepath.Join(venv, "bin", "orted"), "#!/bin/sh\n", 0o755)
	notHome := filepath.Join(dir, "not-a-folder")
	mustWrite(t, notHome, "", 0o644)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}

	a := startAgent(t, loopbackArgs(keys.dir), []string{"PATH=" + sys, "HOME=" + notHome, "VIRTUAL_ENV=" + venv, "TMPDIR=" + tmp}, dir)
	a.WaitReady(t, 20*time.Second)
	c := dial(t, a.SSHAddr, keys.signer, keys.signer.PublicKey())
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.CombinedOutput(`echo "HOME=$HOME"; command -v orted; mkdir -p "$HOME/.horovod" && echo wrote`)
	if err != nil {
		t.Fatalf("session: %v\n%s", err, out)
	}
	// The private HOME, unless this uid has a passwd home it can write
	// (root's /root when the test runs as root), which sshd prefers.
	home := filepath.Join(tmp, "podmpi-home-"+strconv.Itoa(os.Getuid()))
	if u, err := user.Current(); err == nil && environ.Usable(u.HomeDir) {
		home = u.HomeDir
	}
	if want := "HOME=" + home + "\n" + venv + "/bin/orted\nwrote\n"; string(out) != want {
		t.Errorf("session printed %q, want %q", out, want)
	}
	log := a.Log()
	for _, want := range []string{`"msg":"HOME is unset or not writable`, `"old":"` + notHome + `"`,
		`"msg":"no MPI daemon on PATH (a pod spec's PATH replaces the image's); adding the folders`, `"added":"` + venv + `/bin"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}

	b := startAgent(t, loopbackArgs(keys.dir), []string{"PATH=" + sys, "HOME=" + dir, "TMPDIR=" + tmp}, dir)
	b.WaitReady(t, 20*time.Second)
	if log := b.Log(); !strings.Contains(log, `"level":"WARN","msg":"no MPI daemon (orted, prted, hydra_pmi_proxy, hydra_bstrap_proxy) on the SSH sessions' PATH`) ||
		strings.Contains(log, "HOME is unset") {
		t.Errorf("agent without an MPI: log %s", log)
	}
}
