package sshd

import (
	"os"

	"golang.org/x/sys/unix"
)

// outputPipeSize is the capacity asked for the pipes of a session's stdout
// and stderr (Linux's default is 64 KiB, and an unprivileged process may
// ask up to /proc/sys/fs/pipe-max-size, 1 MiB by default). The kernel
// allocates a pipe's pages as data arrives, so an idle session costs
// nothing more; a streaming command runs further ahead of worker-agent
// between wakeups.
const outputPipeSize = 1 << 20

// growPipe asks for outputPipeSize on the pipe f; a refusal keeps the
// default.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, outputPipeSize)
	})
}
