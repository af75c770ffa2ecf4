package cluster

import (
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
	"time"
)

// Process is one daemon of the cluster, in the shape of controller-runtime's
// envtest process: what to run, how to tell it is healthy, how long to wait
// for it, and a folder it owns (log, pid file). Every daemon is a Process;
// only its arguments and health check differ.
//
// A Process outlives the command that started it (make cluster-up returns
// while the cluster runs): it is started in a session of its own, and found
// again through its pid file, which holds the PID and the process's start
// time so that a reused PID is never mistaken for it.
type Process struct {
	Name string   // short name: file names, logs, messages
	Path string   // binary
	Args []string // arguments
	Env  []string // extra environment (on top of a minimal PATH/HOME)
	// Health returns nil once the daemon serves. It is polled every
	// 200 ms until StartTimeout.
	Health       func(ctx context.Context) error
	StartTimeout time.Duration
	StopTimeout  time.Duration
	// Dir is the folder the process owns: <Dir>/<Name>.log, <Dir>/<Name>.pid.
	Dir string
	// Binds, if set, runs the daemon in a mount namespace of its own with
	// these bind mounts (source -> target): the controllers that hard-code a
	// certificate folder see a folder of the cluster's there.
	Binds []Bind
	// Self is this program (for the mount-namespace helper).
	Self string
}

// Bind is one bind mount in a Process's own mount namespace.
type Bind struct{ Source, Target string }

func (p *Process) pidFile() string { return filepath.Join(p.Dir, p.Name+".pid") }

// LogFile is where the daemon's stdout and stderr go.
func (p *Process) LogFile() string { return filepath.Join(p.Dir, p.Name+".log") }

// Running reports the PID of the daemon if its pid file names a live
// process that is still the one started (same start time).
func (p *Process) Running() (int, bool) {
	return pidFileAlive(p.pidFile())
}

// Start starts the daemon unless it already runs, then waits until it is
// healthy. A daemon that exits while starting is reported with the end of
// its log.
func (p *Process) Start(ctx context.Context) error {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return err
	}
	if pid, ok := p.Running(); ok {
		if err := p.waitHealthy(ctx, pid); err != nil {
			return err
		}
		return nil
	}
	logf, err := os.OpenFile(p.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n==== %s start %s: %s %s\n", p.Name, time.Now().UTC().Format(time.RFC3339), p.Path, strings.Join(p.Args, " "))
	path, args := p.Path, p.Args
	attr := &syscall.SysProcAttr{Setsid: true}
	if len(p.Binds) > 0 {
		// The helper mounts, then execs the daemon: same PID. Go makes
		// the new namespace's mounts private before the helper runs.
		helper := []string{"nsexec"}
		for _, b := range p.Binds {
			helper = append(helper, "--bind", b.Source+"="+b.Target)
		}
		helper = append(helper, "--", p.Path)
		path, args = p.Self, append(helper, p.Args...)
		attr.Unshareflags = syscall.CLONE_NEWNS
	}
	closeOnExec()
	cmd := exec.Command(path, args...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + p.Dir}, p.Env...)
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s (%s): %w", p.Name, p.Path, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while this program still runs; once this program
	// exits, init adopts it.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	died := func(err error) error {
		_ = os.Remove(p.pidFile())
		return fmt.Errorf("%s exited while starting (%v); last lines of %s:\n%s", p.Name, err, p.LogFile(), tail(p.LogFile(), 25))
	}
	if err := writePidFile(p.pidFile(), pid); err != nil {
		// The daemon may have exited (and been reaped by Wait) before its
		// start time could be read: that is a daemon that exits at once.
		_ = cmd.Process.Kill()
		select {
		case werr := <-exited:
			return died(werr)
		case <-time.After(p.StopTimeout + time.Second):
			return err
		}
	}
	hctx, cancel := context.WithTimeout(ctx, p.StartTimeout)
	defer cancel()
	for {
		select {
		case err := <-exited:
			return died(err)
		default:
		}
		herr := p.Health(hctx)
		if herr == nil {
			return nil
		}
		select {
		case <-hctx.Done():
			return fmt.Errorf("%s not healthy after %s: %v; last lines of %s:\n%s", p.Name, p.StartTimeout, herr, p.LogFile(), tail(p.LogFile(), 25))
		case err := <-exited:
			return died(err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (p *Process) waitHealthy(ctx context.Context, pid int) error {
	hctx, cancel := context.WithTimeout(ctx, p.StartTimeout)
	defer cancel()
	for {
		herr := p.Health(hctx)
		if herr == nil {
			return nil
		}
		if !alive(pid) {
			return fmt.Errorf("%s (pid %d) exited; last lines of %s:\n%s", p.Name, pid, p.LogFile(), tail(p.LogFile(), 25))
		}
		select {
		case <-hctx.Done():
			return fmt.Errorf("%s (pid %d) runs but is not healthy: %v", p.Name, pid, herr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM, waits StopTimeout, then SIGKILL, and removes the pid
// file. Stopping a daemon that does not run is not an error.
func (p *Process) Stop() error {
	err := stopPidFile(p.pidFile(), p.StopTimeout)
	if err != nil {
		return fmt.Errorf("stopping %s: %w", p.Name, err)
	}
	return nil
}

// closeOnExec marks every descriptor of this process above stderr
// close-on-exec. Go opens its own so, but not those this process inherited:
// flock(1)'s lock on /work/cluster.lock, say, when make cluster-up runs
// under it. A daemon that inherited that descriptor held the lock for as
// long as the cluster ran (a lock is released when every descriptor of it
// is closed), and every later flock of the machine's users waited.
func closeOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// stopPidFile stops the process a pid file names (if it is still that
// process) and removes the file.
func stopPidFile(file string, grace time.Duration) error {
	pid, ok := pidFileAlive(file)
	if ok {
		if err := stopPID(pid, grace); err != nil {
			return err
		}
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// stopPID sends SIGTERM to pid, waits up to grace for it to go, then sends
// SIGKILL and waits up to 10 s more.
func stopPID(pid int, grace time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGTERM to %d: %w", pid, err)
	}
	if waitGone(pid, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL to %d: %w", pid, err)
	}
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d still there 10 s after SIGKILL", pid)
}

// waitGone polls until pid no longer exists (or is a zombie) or d passes.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := statFields(st)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// statFields returns the fields of /proc/<pid>/stat after the command name
// (which may hold spaces and parentheses): state, ppid, ..., starttime at
// index 19.
func statFields(st []byte) []string {
	i := bytes.LastIndexByte(st, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(st[i+1:]))
}

// startTime is the process's start time in clock ticks since boot.
func startTime(pid int) (string, bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	f := statFields(st)
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

func writePidFile(file string, pid int) error {
	st, ok := startTime(pid)
	if !ok {
		return fmt.Errorf("process %d vanished at once", pid)
	}
	return os.WriteFile(file, fmt.Appendf(nil, "%d %s\n", pid, st), 0o644)
}

// pidFileAlive reads "<pid> <starttime>" and reports the PID if that very
// process still runs.
func pidFileAlive(file string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 1 {
		return 0, false
	}
	st, ok := startTime(pid)
	if !ok || st != f[1] || !alive(pid) {
		return 0, false
	}
	return pid, true
}

// tail returns the last n lines of a file (for error messages).
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// DaemonPID returns the PID of the cluster's daemon name ("coredns",
// "kubelet", ...) from its pid file, when it runs: the drills that pause
// a daemon use it.
func DaemonPID(l Layout, name string) (int, bool) {
	return pidFileAlive(filepath.Join(l.Logs(), name+".pid"))
}

// Controllers are the controllers the cluster runs on the host, by the
// names of their folders under Layout.Controllers().
var Controllers = []string{"jobset", "trainer", "mpi-operator", "kueue", "kube-router"}

// ControllerPID returns the PID of one of the cluster's Controllers from
// its pid file, when it runs: the fault drills check which of them a
// control-plane outage ended.
func ControllerPID(l Layout, name string) (int, bool) {
	return pidFileAlive(filepath.Join(l.Controllers(), name, name+".pid"))
}
