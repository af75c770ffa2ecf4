package rsh

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// helperEnv makes the test binary act as the rsh client (see TestMain), so
// tests can send real signals to a real process.
const helperEnv = "PODMPI_RSH_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], nil, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// fixture is a job auth dir and a worker serving it on loopback.
type fixture struct {
	key sshtest.Key
	dir string
	srv *sshtest.Server
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	srv := sshtest.Start(t, sshtest.Options{HostKey: k.Signer, Authorized: []ssh.PublicKey{k.Public()}})
	return fixture{key: k, dir: dir, srv: srv}
}

// env is the client's environment: the fixture's auth dir and no waiting
// (PODMPI_SSH_WAIT=0: a failure is reported at once), then extra pairs.
func (f fixture) env(extra ...string) func(string) (string, bool) {
	m := map[string]string{EnvAuthDir: f.dir, EnvWait: "0"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func (f fixture) port() string { return strconv.Itoa(f.srv.Port) }

type result struct {
	code           int
	stdout, stderr string
}

func runMain(t *testing.T, env func(string) (string, bool), stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := Main(ctx, args, env, stdin, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func TestExitStatusPassesThrough(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := runMain(t, f.env(), nil, "-p", f.port(), "127.0.0.1", "exit 5")
	if r.code != 5 || r.stderr != "" {
		t.Fatalf("got %+v, want exit 5 and no stderr", r)
	}
	r = runMain(t, f.env(EnvPort, f.port()), nil, "127.0.0.1", "true")
	if r.code != 0 {
		t.Fatalf("port from %s: %+v", EnvPort, r)
	}
}

func TestStdioStreams(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := runMain(t, f.env(), nil, "-p", f.port(), "127.0.0.1", "echo out; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("got %+v", r)
	}
	r = runMain(t, f.env(), strings.NewReader("line one\nline two\n"), "-p", f.port(), "127.0.0.1", "wc", "-l")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("stdin: %+v", r)
	}
	r = runMain(t, f.env(), strings.NewReader("ignored\n"), "-n", "-p", f.port(), "127.0.0.1", "wc", "-c")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
		t.Fatalf("-n: %+v", r)
	}
}

// TestRealArgvShapes runs the argv shapes of Open MPI, Hydra and Horovod
// against the loopback worker, with the daemon replaced by echo: the remote
// shell must see the joined command (leading space, quotes, ';' inside
// quotes) exactly as sshd would.
func TestRealArgvShapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.port()
	sshLog := []string{"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"openmpi", append(append([]string{"-p", p, "-i", filepath.Join(f.dir, "id_rsa")}, sshLog...),
			"127.0.0.1", " echo", "-mca", "ess", `"env"`, "-mca", "orte_hnp_uri", `"929824768.0;tcp://10.250.0.10:56557"`),
			"-mca ess env -mca orte_hnp_uri 929824768.0;tcp://10.250.0.10:56557\n"},
		{"openmpi port after host", []string{"-x", "127.0.0.1", "-p", p, " echo", "-mca", "plm", `"rsh"`}, "-mca plm rsh\n"},
		{"hydra", append(append([]string{"-x", "-p", p}, sshLog...), "127.0.0.1", `"/bin/echo"`, "--control-port", "10.250.0.10:34129", "--proxy-id", "0"),
			"--control-port 10.250.0.10:34129 --proxy-id 0\n"},
		{"horovod", []string{"-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "127.0.0.1", "-p", p, "-o", "ConnectTimeout=10", "true"}, ""},
		{"user@host", []string{"-p", p, "mpiuser@127.0.0.1", "echo", "ok"}, "ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runMain(t, f.env(), nil, tc.args...)
			if r.code != 0 || r.stdout != tc.want || r.stderr != "" {
				t.Fatalf("got %+v, want stdout %q", r, tc.want)
			}
		})
	}
}

func oneLine(t *testing.T, stderr, wantPrefix string, want ...string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("want exactly one stderr line, got %q", stderr)
	}
	if !strings.HasPrefix(stderr, wantPrefix) {
		t.Fatalf("stderr %q, want prefix %q", stderr, wantPrefix)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Fatalf("stderr %q lacks %q", stderr, w)
		}
	}
}

func TestFailuresExit255WithOneLine(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := sshtest.NewTrainerKey(t) // same type as the job key: the server presents it, and it is refused
	wrongHost := sshtest.Start(t, sshtest.Options{HostKey: other.Signer, Authorized: []ssh.PublicKey{f.key.Public()}})
	wrongClient := sshtest.Start(t, sshtest.Options{HostKey: f.key.Signer, Authorized: []ssh.PublicKey{other.Public()}})
	openssh := sshtest.Start(t, sshtest.Options{HostKey: f.key.Signer, Authorized: []ssh.PublicKey{f.key.Public()}, OpenSSHSignalNames: true})
	free := strconv.Itoa(sshtest.FreePort(t))

	for _, tc := range []struct {
		name   string
		env    func(string) (string, bool)
		args   []string
		prefix string
		want   []string
	}{
		{"refused", f.env(), []string{"-p", free, "127.0.0.1", "true"}, "podmpi-rsh: 127.0.0.1:" + free + ": tcp-refused: ", []string{"; hint: nothing listens"}},
		{"host key pinned despite StrictHostKeyChecking=no", f.env(),
			[]string{"-o", "StrictHostKeyChecking=no", "-p", strconv.Itoa(wrongHost.Port), "127.0.0.1", "true"},
			"podmpi-rsh: 127.0.0.1:" + strconv.Itoa(wrongHost.Port) + ": host-key: ", []string{ssh.FingerprintSHA256(other.Public()), ssh.FingerprintSHA256(f.key.Public())}},
		{"auth", f.env(), []string{"-p", strconv.Itoa(wrongClient.Port), "127.0.0.1", "true"},
			"podmpi-rsh: 127.0.0.1:" + strconv.Itoa(wrongClient.Port) + ": auth: ", []string{"authorized_keys does not hold this job's key"}},
		{"usage", f.env(), []string{"-L", "1:h:2", "127.0.0.1", "true"}, "podmpi-rsh: usage: option -L (local port forwarding) is refused", nil},
		{"bad wait env", f.env(EnvWait, "soon"), []string{"-p", f.port(), "127.0.0.1", "true"}, "podmpi-rsh: 127.0.0.1:" + f.port() + ": config: PODMPI_SSH_WAIT: ", nil},
		{"no command", f.env(), []string{"-p", f.port(), "127.0.0.1"}, "podmpi-rsh: 127.0.0.1:" + f.port() + ": config: no remote command", nil},
		{"no auth dir", f.env(EnvAuthDir, filepath.Join(t.TempDir(), "absent")), []string{"-p", f.port(), "127.0.0.1", "true"},
			"podmpi-rsh: 127.0.0.1:" + f.port() + ": config: find auth dir ", []string{"hint: mount the job's SSH Secret"}},
		{"bad port env", f.env(EnvPort, "http"), []string{"127.0.0.1", "true"}, "podmpi-rsh: 127.0.0.1:2222: config: PODMPI_SSH_PORT is not a port number", nil},
		{"bad insecure env", f.env(EnvInsecure, "sure"), []string{"-p", f.port(), "127.0.0.1", "true"}, "podmpi-rsh: 127.0.0.1:" + f.port() + ": config: PODMPI_SSH_INSECURE_IGNORE_HOST_KEY is not a boolean", nil},
		{"missing -i file", f.env(), []string{"-i", "/nonexistent/key", "-p", f.port(), "127.0.0.1", "true"}, "podmpi-rsh: 127.0.0.1:" + f.port() + ": config: check mode /nonexistent/key", nil},
		{"killed by signal", f.env(), []string{"-p", f.port(), "127.0.0.1", "kill -TERM $$"}, "podmpi-rsh: 127.0.0.1:" + f.port() + ": remote command killed by signal 15 (SIGTERM)", nil},
		{"killed by a signal RFC 4254 does not name", f.env(), []string{"-p", f.port(), "127.0.0.1", "kill -BUS $$"}, "podmpi-rsh: 127.0.0.1:" + f.port() + ": remote command killed by signal 7 (SIGBUS)", nil},
		{"killed by a signal the server does not name", f.env(), []string{"-p", strconv.Itoa(openssh.Port), "127.0.0.1", "kill -BUS $$"}, "podmpi-rsh: 127.0.0.1:" + strconv.Itoa(openssh.Port) + ": remote command killed by a signal the server did not name (\"SIG@openssh.com\"); exit status 128", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runMain(t, tc.env, nil, tc.args...)
			wantCode := map[string]int{"killed by signal": 128 + int(syscall.SIGTERM), "killed by a signal RFC 4254 does not name": 128 + int(syscall.SIGBUS),
				"killed by a signal the server does not name": 128}[tc.name]
			if wantCode == 0 {
				wantCode = 255
			}
			if r.code != wantCode || r.stdout != "" {
				t.Fatalf("got %+v, want exit %d", r, wantCode)
			}
			oneLine(t, r.stderr, tc.prefix, tc.want...)
		})
	}
}

func TestInsecureIgnoreHostKeyWarns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := sshtest.NewKey(t)
	srv := sshtest.Start(t, sshtest.Options{HostKey: other.Signer, Authorized: []ssh.PublicKey{f.key.Public()}})
	env := f.env(EnvInsecure, "true")
	r := runMain(t, env, nil, "-p", strconv.Itoa(srv.Port), "127.0.0.1", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "warning: PODMPI_SSH_INSECURE_IGNORE_HOST_KEY=true") {
		t.Fatalf("got %+v", r)
	}
	r = runMain(t, env, nil, "-q", "-p", strconv.Itoa(srv.Port), "127.0.0.1", "true")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("-q: %+v", r)
	}
}

// TestConnectionAttempts: a worker that starts listening late is reached
// within -o ConnectionAttempts; without retries the same start fails.
func TestConnectionAttempts(t *testing.T) {
	t.Parallel()
	k := sshtest.NewKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	port := sshtest.FreePort(t)
	env := func(n string) (string, bool) {
		switch n {
		case EnvAuthDir:
			return dir, true
		case EnvWait:
			return "0", true // OpenSSH's way: ConnectionAttempts only
		}
		return "", false
	}
	var out, errb bytes.Buffer
	r := &runner{env: env, stdout: &out, stderr: &errb, grace: time.Second, retryDelay: 50 * time.Millisecond}
	if code := r.run(context.Background(), []string{"-p", strconv.Itoa(port), "127.0.0.1", "true"}); code != 255 {
		t.Fatalf("no retries: exit %d", code)
	}
	errb.Reset()
	go func() {
		time.Sleep(300 * time.Millisecond)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("port taken meanwhile: %v", err)
			return
		}
		srv := sshtest.Serve(ln, sshtest.Options{HostKey: k.Signer, Authorized: []ssh.PublicKey{k.Public()}})
		t.Cleanup(srv.Close)
	}()
	code := r.run(context.Background(), []string{"-v", "-o", "ConnectionAttempts=100", "-p", strconv.Itoa(port), "127.0.0.1", "echo up"})
	if code != 0 || out.String() != "up\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "attempt 1: 127.0.0.1:"+strconv.Itoa(port)+": tcp-refused") {
		t.Fatalf("-v did not report the retries: %q", errb.String())
	}
}

// lineWaiter is a writer that reports when a line has been written.
type lineWaiter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newLineWaiter(want string) *lineWaiter {
	return &lineWaiter{want: want, seen: make(chan struct{})}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, _ := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, nil
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

const trapScript = `trap 'echo got-term; exit 7' TERM; echo ready; sleep 30 & wait`

// TestSignalGrace: a remote command that ignores the forwarded signal is cut
// off after the grace period, and the client exits 128+signal.
func TestSignalGrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sigs := make(chan os.Signal, 1)
	out := newLineWaiter("ready\n")
	var errb bytes.Buffer
	r := &runner{env: f.env(), stdout: out, stderr: &errb, sigs: sigs, grace: 300 * time.Millisecond}
	done := make(chan int, 1)
	go func() {
		done <- r.run(context.Background(), []string{"-p", f.port(), "127.0.0.1", "trap '' INT; echo ready; sleep 30"})
	}()
	<-out.seen
	start := time.Now()
	sigs <- syscall.SIGINT
	select {
	case code := <-done:
		if code != 128+int(syscall.SIGINT) {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Fatalf("gave up after %v, before the grace period", d)
		}
		oneLine(t, errb.String(), "podmpi-rsh: 127.0.0.1:"+f.port()+": remote command still running", "SIGINT")
	case <-time.After(10 * time.Second):
		t.Fatal("client did not give up")
	}
}

// helper starts the test binary as the rsh client.
func helper(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{helperEnv + "=1"}, env...)
	return cmd
}

// TestRealSIGTERMReachesRemote sends a real SIGTERM to a real client
// process; the remote shell's trap must run and its status come back.
func TestRealSIGTERMReachesRemote(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cmd := helper(t, []string{EnvAuthDir + "=" + f.dir}, "-p", f.port(), "127.0.0.1", trapScript)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rd := bufio.NewReader(stdout)
	lineCh := make(chan string, 1)
	go func() { l, _ := rd.ReadString('\n'); lineCh <- l }()
	select {
	case l := <-lineCh:
		if l != "ready\n" {
			t.Fatalf("first line %q, stderr %q", l, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("remote command never started")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	err = cmd.Wait()
	if cmd.ProcessState.ExitCode() != 7 || string(rest) != "got-term\n" {
		t.Fatalf("exit %v, rest of stdout %q, stderr %q", err, rest, errb.String())
	}
}

// TestArbitraryUIDWithoutPasswdOrHome runs the client as a UID with no
// passwd entry, GID 0, no $HOME and no $USER, like OpenShift's
// restricted-v2 SCC, with the Secret's files at the kubelet's 0644.
func TestArbitraryUIDWithoutPasswdOrHome(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to switch to an arbitrary UID")
	}
	const uid = 1000680000
	f := newFixture(t)
	base, err := os.MkdirTemp("", "podmpi-rsh-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(base, 0o755))
	auth := filepath.Join(base, "ssh")
	must(os.Mkdir(auth, 0o755))
	for _, n := range []string{"id_rsa", "id_rsa.pub"} {
		data, err := os.ReadFile(filepath.Join(f.dir, n))
		must(err)
		must(os.WriteFile(filepath.Join(auth, n), data, 0o644))
	}
	self, err := os.ReadFile(os.Args[0])
	must(err)
	bin := filepath.Join(base, "rsh.test")
	must(os.WriteFile(bin, self, 0o755))

	cmd := exec.Command(bin, "-p", f.port(), "127.0.0.1", "exit 5")
	cmd.Env = []string{helperEnv + "=1", EnvAuthDir + "=" + auth}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 0}}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 5 {
		t.Fatalf("exit %v, stderr %q", err, errb.String())
	}
}
