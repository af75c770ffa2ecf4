//go:build linux

package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// Become a child subreaper, as the agent is PID 1 in a pod: orphaned
	// session processes are re-parented to the test binary, so the tests
	// also prove that the server reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
	}
	code := m.Run()
	if code == 0 && os.Getenv(fipsChildEnv) == "" {
		if err := leakCheck(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "LEAK CHECK FAILED:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakCheck fails when goroutines of this package, gliderlabs or x/crypto/ssh
// or child processes (alive or zombie) remain after all tests.
func leakCheck(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		g := leakedGoroutines()
		kids := childProcesses()
		if len(g) == 0 && len(kids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d leaked goroutines, child processes %v:\n%s", len(g), kids, strings.Join(g, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "leakedGoroutines") || strings.Contains(g, "testing.(*M).Run") {
			continue
		}
		if strings.Contains(g, "podmpi/sshd.") || strings.Contains(g, "gliderlabs/ssh") || strings.Contains(g, "x/crypto/ssh.") {
			out = append(out, g)
		}
	}
	return out
}

// childProcesses lists processes whose parent is this process.
func childProcesses() []string {
	ents, _ := os.ReadDir("/proc")
	me := os.Getpid()
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, comm, ok := procStat(pid)
		if ok && ppid == me {
			out = append(out, fmt.Sprintf("%d(%s,%s)", pid, comm, state))
		}
	}
	return out
}

// procStat reads ppid, state and comm of pid from /proc.
func procStat(pid int) (ppid int, state, comm string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", "", false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return 0, "", "", false
	}
	f := strings.Fields(s[j+1:])
	if len(f) < 2 {
		return 0, "", "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0], s[i+1 : j], true
}

// keyPair is the job's SSH material in the Trainer v2 layout.
type keyPair struct {
	dir    string
	signer ssh.Signer
	pub    ssh.PublicKey
	keyPEM []byte
}

// newP521 is a job key (P-521, SEC1 PEM) that is not written anywhere.
func newP521(t testing.TB) (ssh.Signer, []byte) {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	return k.Signer, k.PEM
}

// writeTrainerLayout writes a job key as Trainer v2 mounts its Secret
// (sshtest.WriteSecret).
func writeTrainerLayout(t testing.TB) keyPair {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	return keyPair{dir: sshtest.WriteAuthDir(t, k), signer: k.Signer, pub: k.Public(), keyPEM: k.PEM}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = sshtest.Buffer

type testServer struct {
	*Server
	keys     keyPair
	addr     string
	port     int
	logs     *syncBuffer
	serveErr chan error
}

// startServer runs a real server on 127.0.0.1:0 with the Trainer layout;
// mod adjusts the config. Shutdown runs at cleanup.
func startServer(t testing.TB, mod func(*Config)) *testServer {
	t.Helper()
	keys := writeTrainerLayout(t)
	logs := &syncBuffer{}
	cfg := Config{
		ListenAddress: "127.0.0.1:0",
		AuthDir:       keys.dir,
		StateDir:      filepath.Join(t.TempDir(), "state"),
		Logger:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KillGrace:     500 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	return startServerCfg(t, keys, cfg, logs)
}

func startServerCfg(t testing.TB, keys keyPair, cfg Config, logs *syncBuffer) *testServer {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, keys: keys, addr: addr.String(), port: addr.(*net.TCPAddr).Port, logs: logs, serveErr: make(chan error, 1)}
	go func() { ts.serveErr <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case err := <-ts.serveErr:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after Shutdown")
		}
		if t.Failed() && logs != nil {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return ts
}

func clientConfig(signer ssh.Signer, hostKey ssh.PublicKey) *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:            "mpiuser",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey),
		Timeout:         10 * time.Second,
	}
}

func (ts *testServer) dial(t testing.TB) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", ts.addr, clientConfig(ts.keys.signer, ts.keys.pub))
	if err != nil {
		t.Fatalf("dial %s: %v\nserver log:\n%s", ts.addr, err, ts.logs.String())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type result struct {
	stdout, stderr string
	code           int
	signal         string
	err            error
}

// run executes cmd in a new session, with stdin when not nil, bounded by 30s.
func run(t testing.TB, c *ssh.Client, cmd string, stdin io.Reader) result {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr, sess.Stdin = &out, &errb, stdin
	done := make(chan error, 1)
	go func() { done <- sess.Run(cmd) }()
	var r result
	select {
	case r.err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("command %q did not finish within 30s", cmd)
	}
	r.stdout, r.stderr = out.String(), errb.String()
	var ee *ssh.ExitError
	switch {
	case r.err == nil:
	case errors.As(r.err, &ee):
		r.code, r.signal = ee.ExitStatus(), ee.Signal()
		r.err = nil
	}
	return r
}

func slogText(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
