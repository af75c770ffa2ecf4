package share

import (
	"encoding/binary"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pipeBuf is Linux's PIPE_BUF: a write of at most this many bytes to a
// pipe that polls writable does not block.
const pipeBuf = 4096

// deadlineCheck bounds a blocked write's poll, so that a write deadline set
// while it waits (stdio.interrupt) is seen that late at most.
const deadlineCheck = time.Second

// nowait is a relay's descriptor that the launcher cannot reopen as a
// description of its own: a socket, or a pipe when /proc cannot reopen it.
// The relay's parent (mpirun) shares the description, so O_NONBLOCK set on
// it would make the parent's own reads and writes fail with EAGAIN; and a
// blocking descriptor cannot be closed from under a read (Go defers the
// close until the read returns), which left a goroutine and a thread per
// session in read(2) after the session, until the peer wrote, and then took
// those bytes from whoever read the stream next.
//
// So each read and write is non-blocking by itself (MSG_DONTWAIT on a
// socket, RWF_NOWAIT on a pipe), and the wait in between is a poll(2) that
// also watches an eventfd that Close signals: a read or write in progress
// returns at once with os.ErrClosed, the descriptor is closed once none is
// in progress, and none is made after. A wait holds a thread, as a blocked
// read did, but only while the session runs.
type nowait struct {
	fd, wake int
	socket   bool
	name     string

	mu       sync.Mutex
	idle     *sync.Cond // busy reached 0
	busy     int        // reads and writes in progress
	closed   bool
	deadline time.Time // for writes
	// blocking is set when the kernel refused RWF_NOWAIT on this pipe
	// (Linux before 5.8): each read or write then waits in poll first and
	// makes a plain call, which can block past Close only when another
	// reader or writer of the pipe got there in between.
	blocking atomic.Bool
}

// newNowait adopts fd, a socket or a pipe; without an eventfd (the
// descriptor limit) fd is used as it is.
func newNowait(fd int, socket bool, name string) stream {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return os.NewFile(uintptr(fd), name)
	}
	n := &nowait{fd: fd, wake: wake, socket: socket, name: name}
	n.idle = sync.NewCond(&n.mu)
	return n
}

// enter starts a read or write; false once closed.
func (n *nowait) enter() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.busy++
	return true
}

func (n *nowait) leave() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.busy--
	if n.busy == 0 {
		n.idle.Broadcast()
	}
}

// Close ends the reads and writes in progress and closes the descriptor
// once they returned.
func (n *nowait) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return os.ErrClosed
	}
	n.closed = true
	// The eventfd stays readable from now on: every poll returns.
	_, _ = unix.Write(n.wake, binary.NativeEndian.AppendUint64(nil, 1))
	for n.busy > 0 {
		n.idle.Wait()
	}
	n.mu.Unlock()
	_ = unix.Close(n.wake)
	return unix.Close(n.fd)
}

// SetWriteDeadline bounds the writes from now on, and a write that waits
// already within deadlineCheck.
func (n *nowait) SetWriteDeadline(t time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deadline = t
	return nil
}

func (n *nowait) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !n.enter() {
		return 0, os.ErrClosed
	}
	defer n.leave()
	for {
		k, err := n.read(p)
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := n.wait(unix.POLLIN, false); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, &os.PathError{Op: "read", Path: n.name, Err: err}
		case k == 0:
			return 0, io.EOF
		default:
			return k, nil
		}
	}
}

func (n *nowait) Write(p []byte) (int, error) {
	if !n.enter() {
		return 0, os.ErrClosed
	}
	defer n.leave()
	done := 0
	for done < len(p) {
		k, err := n.write(p[done:])
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := n.wait(unix.POLLOUT, true); err != nil {
				return done, err
			}
		case err != nil:
			return done, &os.PathError{Op: "write", Path: n.name, Err: err}
		default:
			done += k
		}
	}
	return done, nil
}

// read is one read that does not block (EAGAIN: nothing to read yet).
func (n *nowait) read(p []byte) (int, error) {
	if n.socket {
		k, _, err := unix.Recvfrom(n.fd, p, unix.MSG_DONTWAIT)
		return k, err
	}
	if !n.blocking.Load() {
		k, err := unix.Preadv2(n.fd, [][]byte{p}, -1, unix.RWF_NOWAIT)
		if err != unix.EOPNOTSUPP {
			return k, err
		}
		n.blocking.Store(true)
	}
	if err := n.wait(unix.POLLIN, false); err != nil {
		return 0, err
	}
	return unix.Read(n.fd, p)
}

// write is one write that does not block (EAGAIN: no room yet), without
// SIGPIPE on a socket.
func (n *nowait) write(p []byte) (int, error) {
	if n.socket {
		return unix.SendmsgN(n.fd, p, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	}
	if !n.blocking.Load() {
		k, err := unix.Pwritev2(n.fd, [][]byte{p}, -1, unix.RWF_NOWAIT)
		if err != unix.EOPNOTSUPP {
			return k, err
		}
		n.blocking.Store(true)
	}
	if err := n.wait(unix.POLLOUT, true); err != nil {
		return 0, err
	}
	// Readiness promises room for PIPE_BUF bytes, no more.
	return unix.Write(n.fd, p[:min(len(p), pipeBuf)])
}

// wait waits until the descriptor is ready for events (or failed: the
// next call says how), Close ends it (os.ErrClosed), or, for a write, the
// write deadline passes (os.ErrDeadlineExceeded).
func (n *nowait) wait(events int16, write bool) error {
	for {
		timeout := -1
		if write {
			n.mu.Lock()
			deadline := n.deadline
			n.mu.Unlock()
			left := deadlineCheck
			if !deadline.IsZero() {
				if left = min(left, time.Until(deadline)); left <= 0 {
					return os.ErrDeadlineExceeded
				}
			}
			timeout = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		fds := []unix.PollFd{{Fd: int32(n.fd), Events: events}, {Fd: int32(n.wake), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, timeout)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return &os.PathError{Op: "poll", Path: n.name, Err: err}
		case fds[1].Revents != 0:
			return os.ErrClosed
		case fds[0].Revents != 0:
			return nil
		}
	}
}
