package mpirun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/signals"
)

// DefaultKillGrace is how long Run waits after forwarding SIGTERM (or
// another terminating signal) before it SIGKILLs mpirun's process tree.
const DefaultKillGrace = 10 * time.Second

// ForwardedSignals are the signals Run relays to mpirun when
// RunOptions.Signals is nil. mpirun itself relays SIGUSR1/SIGUSR2 to the
// ranks, and tears down its remote daemons on SIGTERM/SIGINT/SIGHUP.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// RunOptions configures Run.
type RunOptions struct {
	// Argv is the command: argv[0] is looked up in the PATH of Env, unless
	// Path is set.
	Argv []string
	// Path is the program to start when the caller resolved it (the
	// launcher skips its own mpirun names on PATH); argv[0] is still passed
	// as the program's argv[0]. "" looks argv[0] up.
	Path string
	// Env is the complete child environment (Wiring.Env); nil means
	// os.Environ().
	Env []string
	// Dir is the working directory; "" means the current one.
	Dir string
	// Timeout bounds mpirun's run time; 0 means none. On expiry mpirun gets
	// SIGTERM, and its process tree SIGKILL after KillGrace.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL; 0 means
	// DefaultKillGrace.
	KillGrace time.Duration
	// Stdin, Stdout and Stderr are the child's streams; nil means /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Logger receives lifecycle events (never env values); nil discards.
	Logger *slog.Logger
	// Signals, when non-nil, supplies the signals to forward (tests inject
	// them here). When nil, Run subscribes to ForwardedSignals itself with
	// signal.Notify for the duration of the run.
	Signals <-chan os.Signal
	// Reap makes Run reap orphaned zombies even when it is not PID 1 (set it
	// after SetSubreaper). Run always reaps when os.Getpid() == 1 or the
	// process is already a child subreaper.
	Reap bool
}

// RunResult is the outcome of Run.
type RunResult struct {
	// ExitCode is mpirun's exit status, or 128+signal when a signal ended it
	// (as a shell reports it). -1 when it never ran.
	ExitCode int
	// Signal names the signal that ended mpirun ("SIGTERM"), or "".
	Signal string
	// TimedOut is true when Timeout expired (map to exitcode.MPIRunTimeout).
	TimedOut bool
	// Canceled is true when ctx ended the run.
	Canceled bool
	// Killed is true when the grace period ran out and the tree got SIGKILL.
	Killed bool
	// NotFound is true when the command could not be started (map to
	// exitcode.MPIRunNotFound).
	NotFound bool
	// Pid is mpirun's process id (0 when it never started).
	Pid int
	// Duration is the time from start to exit.
	Duration time.Duration
	// Reaped counts orphaned processes reaped while mpirun ran.
	Reaped int
}

// NotFoundError reports a command Run could not start.
type NotFoundError struct {
	Name string // argv[0]
	Path string // the PATH searched
	Err  error
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("cannot start %q (searched PATH=%s): %v; install the MPI in the image, put its bin directory on PATH, or give the absolute path after --",
		e.Name, e.Path, e.Err)
}

func (e *NotFoundError) Unwrap() error { return e.Err }

// lookPath finds name like execvp does, in the given PATH value.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if err := checkExecutable(name); err != nil {
			return "", err
		}
		return name, nil
	}
	var firstErr error = exec.ErrNotFound
	for dir := range strings.SplitSeq(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && errors.Is(firstErr, exec.ErrNotFound) {
			firstErr = err // e.g. found but not executable
		}
	}
	return "", firstErr
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory: %w", p, fs.ErrPermission)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable: %w", p, fs.ErrPermission)
	}
	return nil
}

// Run starts opts.Argv as a child in its own process group and supervises it
// until it exits:
//
//   - forwarded signals go to mpirun itself (it tears down its remote
//     daemons); a terminating one (INT, TERM, HUP, QUIT) also starts the
//     KillGrace timer, after which mpirun's whole process tree gets SIGKILL;
//   - Timeout and ctx cancellation do the same with SIGTERM;
//   - after a terminated mpirun exits, what is left of its process group and
//     of the descendants seen earlier is killed;
//   - as PID 1 or a subreaper, orphaned zombies are reaped without stealing
//     mpirun's own status.
//
// The error is non-nil only when the command could not be started (then
// NotFound is set for a missing or non-executable program, and the error is
// a *NotFoundError) or opts are invalid.
func Run(ctx context.Context, opts RunOptions) (RunResult, error) {
	res := RunResult{ExitCode: -1}
	if len(opts.Argv) == 0 || opts.Argv[0] == "" {
		return res, errors.New("run: empty command: give the mpirun command after --")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	grace := opts.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	pathVal := environ.Get(env, "PATH")
	name := opts.Argv[0]
	if opts.Path != "" {
		name = opts.Path
	}
	prog, err := lookPath(name, pathVal)
	if err != nil {
		res.NotFound = true
		return res, &NotFoundError{Name: opts.Argv[0], Path: pathVal, Err: err}
	}

	sigs := opts.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 8)
		signal.Notify(ch, ForwardedSignals...)
		defer signal.Stop(ch)
		sigs = ch
	}

	// Output goes through pipes of our own, so that the exit of mpirun is
	// seen at once even when a leftover grandchild still holds the pipe
	// (exec.Cmd.Wait would wait for it).
	var streams ioPipes
	defer streams.closeAll()
	stdout, err := streams.out(opts.Stdout)
	if err != nil {
		return res, fmt.Errorf("creating stdout pipe: %w", err)
	}
	stderr := stdout
	if !SameWriter(opts.Stdout, opts.Stderr) {
		if stderr, err = streams.out(opts.Stderr); err != nil {
			return res, fmt.Errorf("creating stderr pipe: %w", err)
		}
	}
	stdin, err := streams.in(opts.Stdin)
	if err != nil {
		return res, fmt.Errorf("creating stdin pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:        prog,
		Args:        opts.Argv,
		Env:         env,
		Dir:         opts.Dir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	// A nil *os.File in an interface is not nil: only assign real files, so
	// that a missing stream becomes /dev/null rather than a closed fd.
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	reap := opts.Reap || os.Getpid() == 1 || isSubreaper()
	start := time.Now()
	err = cmd.Start()
	streams.closeChildEnds()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) {
			res.NotFound = true
			return res, &NotFoundError{Name: opts.Argv[0], Path: pathVal, Err: err}
		}
		return res, fmt.Errorf("starting %s: %w", prog, err)
	}
	pid := cmd.Process.Pid
	res.Pid = pid
	log.Info("mpirun started", "pid", pid, "argv", opts.Argv, "timeout", opts.Timeout, "reaper", reap)

	var rp *reaper
	if reap {
		rp = startReaper(pid, log)
	}
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	var timeoutC <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	var graceC <-chan time.Time
	var graceTimer *time.Timer
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	terminating := false
	var seen []procID // descendants seen when termination began
	terminate := func(sig syscall.Signal, why string) {
		if !terminating {
			terminating = true
			seen = descendants(pid)
			graceTimer = time.NewTimer(grace)
			graceC = graceTimer.C
			log.Warn("stopping mpirun", "reason", why, "signal", signals.Name(sig), "kill_after", grace)
		}
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			log.Error("signalling mpirun", "pid", pid, "signal", signals.Name(sig), "err", err)
		}
	}
	ctxDone := ctx.Done()

	var werr error
loop:
	for {
		select {
		case werr = <-waitc:
			break loop
		case s := <-sigs:
			ss, ok := s.(syscall.Signal)
			if !ok {
				continue
			}
			switch ss {
			case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
				terminate(ss, "received "+signals.Name(ss))
			default:
				log.Info("forwarding signal", "signal", signals.Name(ss), "pid", pid)
				if err := syscall.Kill(pid, ss); err != nil && !errors.Is(err, syscall.ESRCH) {
					log.Error("forwarding signal", "pid", pid, "signal", signals.Name(ss), "err", err)
				}
			}
		case <-timeoutC:
			timeoutC = nil
			res.TimedOut = true
			terminate(syscall.SIGTERM, fmt.Sprintf("timeout %s reached", opts.Timeout))
		case <-ctxDone:
			ctxDone = nil
			res.Canceled = true
			terminate(syscall.SIGTERM, "canceled: "+context.Cause(ctx).Error())
		case <-graceC:
			graceC = nil
			res.Killed = true
			log.Warn("mpirun still running after grace period; killing its process tree", "pid", pid, "grace", grace)
			killTree(pid, append(seen, descendants(pid)...))
		}
	}
	res.Duration = time.Since(start)
	if terminating {
		// mpirun is gone; whatever it left behind goes too.
		killTree(pid, seen)
	}
	if !streams.wait(grace) {
		log.Warn("output still open after mpirun exited; a leftover process holds it, stopped reading", "pid", pid, "waited", grace)
	}
	if rp != nil {
		res.Reaped = rp.stop()
	}
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			log.Error("waiting for mpirun", "pid", pid, "err", werr)
		}
	}
	if st := cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
			res.Signal = signals.Name(ws.Signal())
		} else {
			res.ExitCode = st.ExitCode()
		}
	}
	log.Info("mpirun exited", "pid", pid, "exit_code", res.ExitCode, "signal", res.Signal,
		"duration", res.Duration, "timed_out", res.TimedOut, "killed", res.Killed, "reaped", res.Reaped)
	return res, nil
}

// killTree sends SIGKILL to pid's process group and to every process in
// procs that still is the same process (same start time).
func killTree(pid int, procs []procID) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range procs {
		if p.alive() {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}
