package sshd

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGrowPipe: a session's output pipe asks for outputPipeSize, so that a
// streaming command runs further ahead of worker-agent (an unprivileged
// process gets it up to /proc/sys/fs/pipe-max-size, 1 MiB by default).
func TestGrowPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	growPipe(r)
	size, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	if size < outputPipeSize {
		b, _ := os.ReadFile("/proc/sys/fs/pipe-max-size")
		t.Fatalf("pipe size %d, want %d (pipe-max-size %s)", size, outputPipeSize, b)
	}
}
