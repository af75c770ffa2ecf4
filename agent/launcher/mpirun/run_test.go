package mpirun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/agent/rsh"

	"github.com/podmpi/podmpi/mpi"
)

// syncBuffer collects child output while tests read it.
type syncBuffer = sshtest.Buffer

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	sshtest.Eventually(t, d, what, cond)
}

func shRun(t *testing.T, script string, o RunOptions) (RunResult, *syncBuffer, error) {
	t.Helper()
	out := &syncBuffer{}
	o.Argv = []string{"/bin/sh", "-c", script}
	o.Stdout, o.Stderr = out, out
	if o.Signals == nil {
		o.Signals = make(chan os.Signal) // never fires; keeps the test binary's own signals alone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, o)
	return res, out, err
}

func TestRunExitCodePassthrough(t *testing.T) {
	for _, code := range []int{0, 3, 255} {
		res, _, err := shRun(t, "exit "+strconv.Itoa(code), RunOptions{})
		if err != nil || res.ExitCode != code || res.Signal != "" || res.TimedOut || res.Pid == 0 {
			t.Errorf("exit %d: %+v, %v", code, res, err)
		}
	}
	res, _, err := shRun(t, "kill -SEGV $$", RunOptions{})
	if err != nil || res.ExitCode != 128+int(syscall.SIGSEGV) || res.Signal != "SIGSEGV" {
		t.Errorf("killed by SIGSEGV: %+v, %v", res, err)
	}
}

func TestRunPassesEnvArgvAndStdin(t *testing.T) {
	out := &syncBuffer{}
	res, err := Run(context.Background(), RunOptions{
		Argv:    []string{"sh", "-c", `echo "$1|$PODMPI_TEST|$(cat)"`, "sh", "a b"},
		Env:     []string{"PATH=/usr/bin:/bin", "PODMPI_TEST=yes"},
		Stdin:   strings.NewReader("input"),
		Stdout:  out,
		Signals: make(chan os.Signal),
	})
	if err != nil || res.ExitCode != 0 || out.String() != "a b|yes|input\n" {
		t.Errorf("got %+v, %v, %q", res, err, out.String())
	}
}

func TestRunNotFound(t *testing.T) {
	res, err := Run(context.Background(), RunOptions{Argv: []string{"podmpi-no-such-mpirun", "-np", "2"}, Env: []string{"PATH=/nonexistent-dir:/usr/bin"}})
	var nf *NotFoundError
	if !res.NotFound || !errors.As(err, &nf) || !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("got %+v, %v", res, err)
	}
	for _, want := range []string{"podmpi-no-such-mpirun", "PATH=/nonexistent-dir:/usr/bin", "install the MPI"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// Present but not executable.
	p := filepath.Join(t.TempDir(), "mpirun")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = Run(context.Background(), RunOptions{Argv: []string{p}})
	if !res.NotFound || err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("non-executable: %+v, %v", res, err)
	}
	if _, err := Run(context.Background(), RunOptions{}); err == nil {
		t.Error("empty argv accepted")
	}
}

const readyLoop = `echo ready; while :; do sleep 0.02; done`

func TestRunForwardsSignals(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	out := &syncBuffer{}
	done := make(chan RunResult, 1)
	go func() {
		res, err := Run(context.Background(), RunOptions{
			Argv:    []string{"/bin/sh", "-c", `trap 'echo got-usr1' USR1; trap 'echo got-term; exit 43' TERM; ` + readyLoop},
			Stdout:  out,
			Signals: sigs,
		})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitFor(t, 10*time.Second, "child ready", func() bool { return strings.Contains(out.String(), "ready") })
	sigs <- syscall.SIGUSR1
	waitFor(t, 10*time.Second, "USR1 delivered", func() bool { return strings.Contains(out.String(), "got-usr1") })
	sigs <- syscall.SIGTERM
	select {
	case res := <-done:
		if res.ExitCode != 43 || res.Killed || res.TimedOut || !strings.Contains(out.String(), "got-term") {
			t.Errorf("after TERM: %+v, output %q", res, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
}

func TestRunKillsAfterGrace(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	out := &syncBuffer{}
	done := make(chan RunResult, 1)
	go func() {
		res, _ := Run(context.Background(), RunOptions{
			Argv:      []string{"/bin/sh", "-c", `trap '' TERM INT; ` + readyLoop},
			Stdout:    out,
			Signals:   sigs,
			KillGrace: 200 * time.Millisecond,
		})
		done <- res
	}()
	waitFor(t, 10*time.Second, "child ready", func() bool { return strings.Contains(out.String(), "ready") })
	start := time.Now()
	sigs <- syscall.SIGINT
	res := <-done
	if !res.Killed || res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Errorf("TERM-ignoring child: %+v", res)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 10*time.Second {
		t.Errorf("killed after %s, want about the 200ms grace", d)
	}
}

// procGone reports whether pid has exited (absent or a zombie).
func procGone(pid int) bool {
	state, _, _, err := statInfo(pid)
	return err != nil || state == 'Z' || state == 'X'
}

func TestRunTimeoutKillsTree(t *testing.T) {
	// sh starts a grandchild in its group and one that escaped into its own
	// session (as ORTE's setpgid'd ssh children do), then waits.
	script := `sleep 60 & echo $!; setsid sleep 61 & echo $!; wait`
	start := time.Now()
	res, out, err := shRun(t, script, RunOptions{Timeout: 300 * time.Millisecond, KillGrace: 5 * time.Second})
	if err != nil || !res.TimedOut || res.Killed {
		t.Fatalf("got %+v, %v", res, err)
	}
	if res.ExitCode != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want 143 (sh killed by the forwarded TERM)", res.ExitCode)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("took %s: the grace period should not be needed", d)
	}
	var pids []int
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			pids = append(pids, n)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("grandchild pids %v from output %q", pids, out.String())
	}
	t.Cleanup(func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	for _, p := range pids {
		waitFor(t, 5*time.Second, fmt.Sprintf("grandchild %d to die", p), func() bool { return procGone(p) })
	}
}

func TestRunContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, err := Run(ctx, RunOptions{Argv: []string{"/bin/sh", "-c", "sleep 30"}, Signals: make(chan os.Signal)})
	if err != nil || !res.Canceled || res.ExitCode != 143 {
		t.Errorf("got %+v, %v", res, err)
	}
}

// orphanScript leaves 5 orphans that exit (becoming zombies of the
// subreaper) well before the main process exits with 7.
const orphanScript = `for i in 1 2 3 4 5; do sh -c 'sleep 0.1 &'; done; sleep 0.8; exit 7`

type reaperReport struct {
	ExitCode       int
	Reaped         int
	ZombiesAfter   int
	ControlZombies int
	Err            string
}

// TestReaperHelper is the body of TestReaperSubprocess, run in a child test
// process that made itself a subreaper (the test binary must not be PID 1).
func TestReaperHelper(t *testing.T) {
	if os.Getenv("PODMPI_REAPER_HELPER") != "1" {
		t.Skip("helper for TestReaperSubprocess")
	}
	var rep reaperReport
	defer func() {
		b, _ := json.Marshal(rep)
		fmt.Printf("REPORT %s\n", b)
	}()
	if err := SetSubreaper(); err != nil {
		rep.Err = err.Error()
		return
	}
	if !isSubreaper() {
		rep.Err = "isSubreaper false after SetSubreaper"
		return
	}
	// Control: without a reaper the orphans stay zombies of this process.
	cmd := exec.Command("/bin/sh", "-c", orphanScript)
	_ = cmd.Run()
	time.Sleep(100 * time.Millisecond)
	rep.ControlZombies = len(exitedChildren())
	for _, z := range exitedChildren() { // clean up before the real run
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(z, &ws, 0, nil)
	}
	res, err := Run(context.Background(), RunOptions{Argv: []string{"/bin/sh", "-c", orphanScript}, Reap: true, Signals: make(chan os.Signal), Stdout: io.Discard})
	if err != nil {
		rep.Err = err.Error()
		return
	}
	rep.ExitCode, rep.Reaped = res.ExitCode, res.Reaped
	rep.ZombiesAfter = len(exitedChildren())
}

func TestReaperSubprocess(t *testing.T) {
	if os.Getenv("PODMPI_REAPER_HELPER") == "1" {
		t.Skip("inside the helper")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReaperHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PODMPI_REAPER_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	_, js, ok := strings.Cut(string(out), "REPORT ")
	if !ok {
		t.Fatalf("no report in helper output:\n%s", out)
	}
	js, _, _ = strings.Cut(js, "\n")
	var rep reaperReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("bad report %q: %v", js, err)
	}
	if rep.Err != "" {
		t.Fatalf("helper failed: %s", rep.Err)
	}
	if rep.ControlZombies < 1 {
		t.Errorf("control run left %d zombies: the setup does not create orphans, so the test proves nothing", rep.ControlZombies)
	}
	if rep.ExitCode != 7 {
		t.Errorf("exit code %d, want 7: the reaper stole mpirun's status", rep.ExitCode)
	}
	if rep.Reaped < 1 || rep.ZombiesAfter != 0 {
		t.Errorf("reaped %d, zombies left %d", rep.Reaped, rep.ZombiesAfter)
	}
	t.Logf("%+v", rep)
}

// TestIntelWiringFakeHydra drives the Intel wiring through a stand-in for
// Intel's mpirun that behaves as the Intel reference documents: it reads the
// bootstrap, its exec and the host file from I_MPI_HYDRA_* and starts
// hydra_bstrap_proxy on every host through the exec (argv shape from
// Intel MPI's bootstrap logs, as mpi-operator users reported them). The exec is podmpi-rsh from Setup, here pointing to a
// recorder, so the test sees exactly what the rsh program would receive.
func TestIntelWiringFakeHydra(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "rsh.log")
	recorder := writeScript(t, dir, "recorder", `printf '%s\n' "$*" >> `+record+"\n")
	rshPath, rshDir, cleanup, err := rsh.Setup(recorder, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	hf := filepath.Join(dir, "hostfile")
	if err := os.WriteFile(hf, []byte("pi-worker-0.pi.default.svc:2\npi-worker-1.pi.default.svc:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := writeScript(t, dir, "mpirun", `
[ "$I_MPI_HYDRA_BOOTSTRAP" = ssh ] || { echo "bootstrap $I_MPI_HYDRA_BOOTSTRAP" >&2; exit 9; }
command -v podmpi-rsh >/dev/null || { echo "podmpi-rsh not on PATH" >&2; exit 8; }
id=0
while IFS=: read -r host n; do
  "$I_MPI_HYDRA_BOOTSTRAP_EXEC" -q -x "$host" /opt/intel/oneapi/mpi/2021.13/bin/hydra_bstrap_proxy --upstream-host 10.250.0.10 --upstream-port 40000 --pgid 0 --launcher ssh --launcher-number 0 --base-path /opt/intel/oneapi/mpi/2021.13/bin/ --tree-width 16 --tree-level 1 --time-left -1 --collective-launch 1 --debug --proxy-id $id --node-id $id --subtree-size 1 --iface "$I_MPI_HYDRA_IFACE" --perhost "$I_MPI_PERHOST" /opt/intel/oneapi/mpi/2021.13/bin/hydra_pmi_proxy --usize -1 --auto-cleanup 1 --abort-signal 9
  id=$((id+1))
done < "$I_MPI_HYDRA_HOST_FILE"
echo "args: $*"
`)
	w := Wiring{Impl: mpi.IntelMPI, RshPath: rshPath, RshDir: rshDir, Hostfile: hf, Slots: 2, Iface: "eth0", Rsh: rsh.Settings{Port: 2222}}
	env, _ := w.Env([]string{"PATH=" + filepath.Dir(fake) + ":/usr/bin:/bin"})
	out := &syncBuffer{}
	res, err := Run(context.Background(), RunOptions{Argv: []string{"mpirun", "-n", "4", "./pi"}, Env: env, Stdout: out, Stderr: out, Signals: make(chan os.Signal)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("fake Intel mpirun: %+v, %v, output %q", res, err, out.String())
	}
	if !strings.Contains(out.String(), "args: -n 4 ./pi") {
		t.Errorf("user argv not passed unchanged: %q", out.String())
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("rsh called %d times: %q", len(lines), b)
	}
	for i, l := range lines {
		host := fmt.Sprintf("pi-worker-%d.pi.default.svc", i)
		if !strings.HasPrefix(l, "-q -x "+host+" /opt/intel/oneapi/mpi/2021.13/bin/hydra_bstrap_proxy ") ||
			!strings.Contains(l, "--iface eth0 --perhost 2") {
			t.Errorf("rsh call %d = %q", i, l)
		}
	}
}

// TestRunNilStreamsAreDevNull: with no writers the child's fds 0-2 are
// /dev/null, never closed (a closed fd 1 would let the next open() take it).
func TestRunNilStreamsAreDevNull(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "fds")
	res, err := Run(context.Background(), RunOptions{
		Argv:    []string{"/bin/sh", "-c", `fds=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo "$fds" > ` + out},
		Signals: make(chan os.Signal),
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	b, _ := os.ReadFile(out)
	if string(b) != "/dev/null\n/dev/null\n/dev/null\n" {
		t.Errorf("child fds: %q", b)
	}
}
