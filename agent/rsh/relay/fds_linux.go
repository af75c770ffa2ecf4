package relay

import (
	"errors"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// CloseInheritedFDs closes every file descriptor above 2 that this process
// inherited from its parent, as OpenSSH's ssh(1) does at start
// (closefrom(STDERR_FILENO + 1)). mpirun starts one ssh program per
// daemon and Hydra's mpiexec leaves its other children's pipes open in each,
// so without this every rsh holds every pipe of every sibling: at 199
// workers one rsh held 410 descriptors and the launcher pod 42,188, growing
// with the square of the workers.
//
// Only descriptors without FD_CLOEXEC are closed. An inherited descriptor
// has no FD_CLOEXEC (it would not have survived execve otherwise), while the
// Go runtime opens everything it keeps with O_CLOEXEC before main runs
// (since Go 1.25 it keeps the cgroup CPU limit files open to follow limit
// changes), so a blanket close_range(3, ~0) would pull files from under the
// runtime. Call it first thing in main of the rsh entry point, never in
// code that tests run in-process. It returns how many it closed.
func CloseInheritedFDs() (int, error) {
	fds, err := openFDs()
	if err != nil {
		return 0, err
	}
	closed := 0
	for _, fd := range fds {
		if fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // gone already, or ours
		}
		if unix.Close(fd) == nil {
			closed++
		}
	}
	return closed, nil
}

// openFDs lists this process's open descriptors from /proc/self/fd, read
// with raw system calls (os.Open would start the runtime's poller and so
// open descriptors of its own). Without /proc it returns every number below
// the descriptor limit (capped at 65536): F_GETFD on a closed one just fails.
func openFDs() ([]int, error) {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		var lim unix.Rlimit
		if gerr := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); gerr != nil {
			return nil, errors.Join(err, gerr)
		}
		n := int(min(lim.Cur, 1<<16))
		fds := make([]int, n)
		for i := range fds {
			fds[i] = i
		}
		return fds, nil
	}
	defer unix.Close(dir)
	var fds []int
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(dir, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		var names []string
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err == nil && fd != dir {
				fds = append(fds, fd)
			}
		}
	}
	return fds, nil
}
