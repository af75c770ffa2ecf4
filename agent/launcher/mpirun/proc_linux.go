//go:build linux

package mpirun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// procID identifies a process across pid reuse: pid plus start time (clock
// ticks since boot, /proc/<pid>/stat field 22).
type procID struct {
	pid   int
	start uint64
}

// statInfo parses /proc/<pid>/stat: state, ppid and start time.
func statInfo(pid int) (state byte, ppid int, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	return parseStat(string(b))
}

// parseStat parses the text of /proc/<pid>/stat. The command name (field 2)
// may contain spaces and parentheses, so fields are counted after the last ')'.
func parseStat(s string) (state byte, ppid int, start uint64, err error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("parsing proc stat: no ')' in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, 0, fmt.Errorf("parsing proc stat: %d fields after the command name", len(f))
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, 0, fmt.Errorf("parsing proc stat ppid %q: %w", f[1], err)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("parsing proc stat starttime %q: %w", f[19], err)
	}
	return f[0][0], ppid, start, nil
}

func (p procID) alive() bool {
	state, _, start, err := statInfo(p.pid)
	return err == nil && start == p.start && state != 'Z' && state != 'X'
}

// descendants lists every process below root (not root itself), by walking
// the parent links in /proc once.
func descendants(root int) []procID {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procID{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		_, ppid, start, err := statInfo(pid)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], procID{pid, start})
	}
	var out []procID
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c.pid] {
				seen[c.pid] = true
				out = append(out, c)
				queue = append(queue, c.pid)
			}
		}
	}
	return out
}

const (
	prSetChildSubreaper = 36
	prGetChildSubreaper = 37
)

// SetSubreaper marks this process a child subreaper (PR_SET_CHILD_SUBREAPER):
// orphans of mpirun's tree are then re-parented to the launcher instead of
// PID 1, so Run can reap them and kill them on timeout. Call it before Run
// and set RunOptions.Reap (Run also notices it by itself).
func SetSubreaper() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", e)
	}
	return nil
}

func isSubreaper() bool {
	var v int32
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&v)), 0); e != 0 {
		return false
	}
	return v != 0
}

const (
	pAll    = 0
	wNoWait = 0x01000000
)

// peekExited returns the pid of one exited child without reaping it
// (waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT)); 0 when none has exited.
func peekExited() (int, error) {
	var info [128]byte // siginfo_t
	_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOHANG|wNoWait, 0, 0)
	if e != 0 {
		return 0, e
	}
	// si_pid follows si_signo, si_errno, si_code and, on 64-bit, 4 bytes of
	// padding that align the union.
	off := 12
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return int(int32(binary.NativeEndian.Uint32(info[off:]))), nil
}

// reaper reaps orphaned children that were re-parented to this process,
// never the main child: it peeks with WNOWAIT and leaves mpirun's status to
// exec.Cmd.Wait, so the exit code is never lost.
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

func (r *reaper) isMainReaped() bool {
	select {
	case <-r.mainDone:
		return true
	default:
		return false
	}
}

// drain reaps every exited child except mpirun (bounded).
func (r *reaper) drain() {
	for range 4096 {
		pid, err := peekExited()
		if err != nil || pid <= 0 {
			return // ECHILD: no children at all; 0: none exited
		}
		if pid == r.main && !r.isMainReaped() {
			// mpirun is a zombie until Cmd.Wait collects it; the others wait
			// for that (waitid returns the oldest child first).
			return
		}
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err != nil {
			if errors.Is(err, syscall.ECHILD) {
				continue // someone else collected it
			}
			return
		}
		if got == pid {
			r.mu.Lock()
			r.reaped++
			r.mu.Unlock()
			r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
		}
	}
}
