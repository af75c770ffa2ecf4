//go:build linux

package mpirun

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/proc"
)

// procID identifies a process across pid reuse: pid plus start time (clock
// ticks since boot).
type procID struct {
	pid   int
	start uint64
}

// statInfo reads /proc/<pid>/stat: state, ppid and start time.
func statInfo(pid int) (state byte, ppid int, start uint64, err error) {
	st, err := proc.ReadStat(proc.DefaultRoot, pid)
	return st.State, st.PPID, st.Start, err
}

func (p procID) alive() bool {
	state, _, start, err := statInfo(p.pid)
	return err == nil && start == p.start && state != 'Z' && state != 'X'
}

// stats reads /proc/<pid>/stat of every process; processes that exit
// meanwhile are left out.
func stats() []proc.Stat {
	all, _ := proc.All(proc.DefaultRoot)
	return all
}

// descendants lists every process below root (not root itself), by walking
// the parent links in /proc once.
func descendants(root int) []procID {
	var out []procID
	for _, st := range proc.Descendants(stats(), root, 0) {
		out = append(out, procID{st.PID, st.Start})
	}
	return out
}

// SetSubreaper marks this process a child subreaper (PR_SET_CHILD_SUBREAPER):
// orphans of mpirun's tree are then re-parented to the launcher instead of
// PID 1, so Run can reap them and kill them on timeout. Call it before Run
// and set RunOptions.Reap (Run also notices it by itself).
func SetSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

func isSubreaper() bool {
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		return false
	}
	return v != 0
}

// exitedChildren lists the pids of this process's children that have
// exited and wait to be reaped (zombies).
func exitedChildren() []int {
	self := os.Getpid()
	var out []int
	for _, st := range stats() {
		if st.PPID == self && st.State == 'Z' {
			out = append(out, st.PID)
		}
	}
	return out
}

// reaper reaps orphaned children that were re-parented to this process,
// never the main child: it reaps only the zombies /proc lists besides
// mpirun, and leaves mpirun's status to exec.Cmd.Wait, so the exit code is
// never lost.
type reaper struct {
	main     int
	log      *slog.Logger
	mainDone chan struct{}
	quit     chan struct{}
	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	reaped   int
}

func startReaper(main int, log *slog.Logger) *reaper {
	r := &reaper{main: main, log: log, mainDone: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	go r.loop(sigc)
	return r
}

// mainReaped tells the reaper that exec.Cmd.Wait has collected mpirun.
func (r *reaper) mainReaped() { r.once.Do(func() { close(r.mainDone) }) }

// stop marks mpirun reaped, reaps what has exited by now and returns the
// number of orphans reaped.
func (r *reaper) stop() int {
	r.mainReaped()
	close(r.quit)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaped
}

func (r *reaper) loop(sigc chan os.Signal) {
	defer close(r.done)
	defer signal.Stop(sigc)
	tick := time.NewTicker(500 * time.Millisecond) // SIGCHLDs coalesce; belt and braces
	defer tick.Stop()
	mainDone := r.mainDone
	for {
		r.drain()
		select {
		case <-sigc:
		case <-tick.C:
		case <-mainDone:
			mainDone = nil
		case <-r.quit:
			r.drain()
			return
		}
	}
}

// drain reaps every exited child except mpirun.
func (r *reaper) drain() {
	for _, pid := range exitedChildren() {
		if pid == r.main {
			continue // exec.Cmd.Wait collects mpirun's status
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil || got != pid {
			continue // someone else collected it
		}
		r.mu.Lock()
		r.reaped++
		r.mu.Unlock()
		r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
	}
}
