package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// quickJob is a `launcher hostfile` run that needs nothing but loopback: an
// IP literal resolves at once, --slots 1 asks no agent, the implementation
// is given. Flags under test are appended.
func quickJob(t *testing.T, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"launcher", "--workers", "127.0.0.1", "--slots", "1", "--mpi.implementation", "openmpi4",
		"--web.listen-address", "", "--termination-log", filepath.Join(dir, "termination-log"),
		"--hostfile.output", filepath.Join(dir, "hostfile"), "--discovery.timeout", "20s"}
	args = append(args, extra...)
	return append(args, "hostfile")
}

// Every out-of-range flag is a usage error (exit 64) naming the flag, its
// environment twin and the valid range, before anything starts; the edges
// of each range are accepted.
func TestFlagRanges(t *testing.T) {
	cases := []struct {
		flag, value string
		ok          bool
		want        string
	}{
		{"worker.web-port", "70000", false, "1..65535"},
		{"worker.web-port", "0", false, "1..65535"},
		{"worker.web-port", "65535", true, ""},
		{"ssh.port", "-1", false, "1..65535"},
		{"ssh.port", "65536", false, "1..65535"},
		{"ssh.port", "1", true, ""},
		{"discovery.timeout", "-1s", false, "> 0"},
		{"discovery.timeout", "0s", false, "> 0"},
		{"probe.timeout", "0s", false, "> 0"},
		{"probe.timeout", "1ms", true, ""},
		{"probe.parallel", "0", false, "1..4096"},
		{"probe.parallel", "-3", false, "1..4096"},
		{"probe.parallel", "4097", false, "1..4096"},
		{"probe.parallel", "1", true, ""},
		{"probe.ssh-sample", "-1", false, "0..100000"},
		{"probe.ssh-sample", "0", true, ""},
		{"workers-expected", "-1", false, "0..100000"},
		{"discovery.default-slots", "0", false, "1..1048576"},
		{"slots", "0", false, `"auto" or an integer in 1..1048576`},
		{"slots", "3", true, ""},
		{"mpirun.timeout", "-5s", false, ">= 0"},
		{"mpirun.timeout", "0s", true, ""},
		{"mpirun.kill-grace", "0s", false, "> 0"},
		{"mpi.implementation", "lam", false, "auto, openmpi"},
		{"web.listen-address", ":99999", false, "0..65535"},
		{"web.listen-address", "nocolon", false, "host:port"},
		{"metrics.push-url", "ftp://user:secret@gw", false, "http://host:port"},
		{"hostfile.output", "", false, "the path of the hostfile"},
	}
	for _, tc := range cases {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), quickJob(t, "--"+tc.flag, tc.value), nil, &out, &out)
			if tc.ok {
				if code != exitcode.OK {
					t.Fatalf("--%s %s: exit %d, want 0\n%s", tc.flag, tc.value, code, out.String())
				}
				return
			}
			if code != exitcode.Usage {
				t.Fatalf("--%s %s: exit %d, want %d\n%s", tc.flag, tc.value, code, exitcode.Usage, out.String())
			}
			msg := out.String()
			for _, w := range []string{"--" + tc.flag, cli.EnvName(tc.flag), tc.want} {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("message echoes the push URL's credentials:\n%s", msg)
			}
		})
	}
	// The environment twin is checked the same way.
	t.Run("env twin", func(t *testing.T) {
		t.Setenv(cli.EnvName("probe.parallel"), "0")
		var out bytes.Buffer
		if code := run(context.Background(), quickJob(t), nil, &out, &out); code != exitcode.Usage || !strings.Contains(out.String(), "PODMPI_PROBE_PARALLEL") {
			t.Fatalf("exit %d\n%s", code, out.String())
		}
	})
}

// panicWriter panics on every write.
type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("test writer refuses to write") }

// A panic in the run (here from the log writer, on the launcher's own
// goroutine) ends in exit 71 with a termination message naming it, not in
// Go's exit 2 without one.
func TestPanicIsInternalError(t *testing.T) {
	args := quickJob(t)
	var term string
	for i, a := range args {
		if a == "--termination-log" {
			term = args[i+1]
		}
	}
	code := run(context.Background(), args, nil, panicWriter{}, panicWriter{})
	if code != exitcode.Internal {
		t.Fatalf("exit %d, want %d", code, exitcode.Internal)
	}
	b, err := os.ReadFile(term)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"exit code 71", "internal error: panic: test writer refuses to write", "report it"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("termination message lacks %q:\n%s", w, b)
		}
	}
}

// buildWith builds the launcher with -ldflags -X main.panicForTest=where.
func buildWith(t *testing.T, where string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "launcher-"+where)
	cmd := exec.Command("go", "build", "-ldflags", "-X main.panicForTest="+where, "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The real binary: a panic on the launcher's goroutine exits 71 with the
// termination message; a panic in a goroutine nothing recovers still exits
// 2 (Go gives no way around it) but the runtime copies the crash into the
// termination log, so the pod status shows it.
func TestPanicRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two binaries")
	}
	for _, tc := range []struct {
		where string
		code  int
		want  string
	}{
		{"main", int(exitcode.Internal), "podmpi launcher failed (exit code 71): internal error: panic: injected by the test build (main.panicForTest=main)"},
		{"goroutine", 2, "panic: injected by the test build (main.panicForTest=goroutine)"},
	} {
		t.Run(tc.where, func(t *testing.T) {
			bin := buildWith(t, tc.where)
			args := quickJob(t)
			term := args[slicesIndex(args, "--termination-log")+1]
			args[len(args)-1] = "--" // a job, not `launcher hostfile`
			args = append(args, "true")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, args[1:]...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("exit %v, want %d\n%s", err, tc.code, out)
			}
			b, err := os.ReadFile(term)
			if err != nil || !strings.Contains(string(b), tc.want) {
				t.Fatalf("termination log (%v):\n%s\nwant %q", err, b, tc.want)
			}
		})
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// A FIFO given as the hostfile is refused at once (exit 65 naming the
// file) instead of blocking in open() where SIGTERM cannot reach the run.
func TestHostfileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "hostfile")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, launcherBin, "--hostfile", fifo, "--mpi.implementation", "openmpi4",
		"--web.listen-address", "", "--termination-log", "", "--", "mpirun", "true")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("launcher still running after a minute with a FIFO as hostfile:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != int(exitcode.Config) {
		t.Fatalf("exit %v, want %d\n%s", err, exitcode.Config, out)
	}
	for _, w := range []string{fifo, "not a regular file", "FIFO"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// podmpi-rsh closes what it inherits above stderr, as ssh(1) does: started
// with 50 extra descriptors, it runs a remote command on a real worker-agent
// while holding none of them.
func TestRshClosesInheritedFDs(t *testing.T) {
	dir := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	port := startAgent(t, dir)
	rshBin := filepath.Join(t.TempDir(), "podmpi-rsh")
	if err := os.Symlink(launcherBin, rshBin); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "inherited")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var extra []*os.File
	for range 50 {
		f, err := os.Open(marker)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		extra = append(extra, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rshBin, "-p", strconv.Itoa(port), "127.0.0.1", "echo ready; exec sleep 60")
	cmd.Env = append(os.Environ(), cli.EnvName("ssh.auth-dir")+"="+dir)
	cmd.ExtraFiles = extra
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("remote command output %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	// The session is up: the client is past its start.
	fdDir := fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && target == marker {
			held++
		}
	}
	if held != 0 {
		t.Errorf("podmpi-rsh holds %d of the 50 inherited descriptors (%d open in all)", held, len(ents))
	}
	t.Logf("podmpi-rsh has %d descriptors open during the session", len(ents))
}
