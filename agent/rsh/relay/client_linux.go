package relay

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Run has the launcher run the command and returns the status to exit
// with. An *Unserved error means nothing ran; ErrLost and ErrOutcomeUnknown
// come with 255.
func (c *Client) Run() (int, error) {
	modes, fds, err := Classify(c.Stdio)
	if err != nil {
		return 0, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	sock, err := dial(c.Socket, timeout)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(sock)
	open := Open{Token: Token(c.Env), Args: c.Args, Env: SentEnv(c.Env), Stdio: modes}
	if err := sendAll(sock, AppendFrame(nil, FrameOpen, EncodeOpen(open)), syscall.UnixRights(fds...)); err != nil {
		return 0, &Unserved{Reason: fmt.Sprintf("sending the request to %s: %v", c.Socket, err)}
	}
	// The launcher answers Refuse (nothing ran) or Accept, after which it
	// runs the command; if it closes the socket first, nothing ran.
	conn := fdConn(sock)
	typ, p, err := ReadFrame(conn)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return 0, &Unserved{Reason: fmt.Sprintf("%s closed before it answered", c.Socket)}
	case err != nil:
		// Whether the command runs is not known: it must not run twice.
		return 255, fmt.Errorf("%w (%s: %v)", ErrOutcomeUnknown, c.Socket, err)
	case typ == FrameRefuse:
		return 0, &Unserved{Reason: "the launcher refused: " + printable(string(p))}
	case typ != FrameAccept:
		return 255, fmt.Errorf("%w: unexpected frame %d from %s", ErrOutcomeUnknown, typ, c.Socket)
	}
	// From here on the command is the launcher's to run, and any failure
	// is the session's.
	if c.Release != nil {
		c.Release()
	}
	if err := setTimeout(sock, 0); err != nil {
		return 255, fmt.Errorf("%w (%v)", ErrLost, err)
	}
	if c.Started != nil {
		c.Started()
	}
	return c.wait(sock, conn)
}

// wait reads until the launcher sends the exit status or goes away, while
// a goroutine forwards the signals the relay receives. The reading stays on
// the calling goroutine, so that the status reaches the caller without a
// hand-off between threads.
func (c *Client) wait(sock int, conn io.Reader) (int, error) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if c.Signals != nil {
		wg.Go(func() {
			for {
				select {
				case sig := <-c.Signals:
					if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 256 {
						// A launcher that is gone shows in the reader.
						_ = sendAll(sock, AppendFrame(nil, FrameSignal, []byte{byte(s)}), nil)
					}
				case <-stop:
					return
				}
			}
		})
	}
	// The forwarder ends before the caller closes the socket.
	defer wg.Wait()
	defer close(stop)
	for {
		typ, p, err := ReadFrame(conn)
		switch {
		case err != nil:
			return 255, fmt.Errorf("%w (%v)", ErrLost, err)
		case typ == FrameExit && len(p) == 1:
			return int(p[0]), nil
		}
	}
}

// dial connects to the launcher's socket with send and receive timeouts
// for the handshake.
func dial(path string, timeout time.Duration) (int, error) {
	if path == "" {
		return -1, &Unserved{Reason: EnvSocket + " is not set (no launcher shares its connections here)"}
	}
	sock, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, &Unserved{Reason: fmt.Sprintf("socket: %v", err)}
	}
	if err := setTimeout(sock, timeout); err != nil {
		syscall.Close(sock)
		return -1, &Unserved{Reason: fmt.Sprintf("socket timeouts: %v", err)}
	}
	for {
		err = syscall.Connect(sock, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Close(sock)
		return -1, &Unserved{Reason: fmt.Sprintf("connecting to %s: %v", path, err)}
	}
	return sock, nil
}

// setTimeout sets the socket's send and receive timeouts (0: none).
func setTimeout(sock int, d time.Duration) error {
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	if err := syscall.SetsockoptTimeval(sock, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	return syscall.SetsockoptTimeval(sock, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
}

// sendAll writes b (with oob attached to its first byte), without SIGPIPE.
func sendAll(sock int, b, oob []byte) error {
	for len(b) > 0 {
		n, err := syscall.SendmsgN(sock, b, oob, nil, syscall.MSG_NOSIGNAL)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, oob = b[n:], nil
	}
	return nil
}

// fdConn reads a raw blocking descriptor.
type fdConn int

func (c fdConn) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(c), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, errors.New("timed out")
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// devNull is /dev/null's device number.
var devNull = unix.Mkdev(1, 3)

// Classify says how each of the stdio descriptors travels, and lists the
// ones to attach: /dev/null and closed descriptors travel as StreamNull, a
// stderr on the same pipe or socket as stdout as StreamStdout. A terminal
// cannot be served: the launcher is not in its foreground process group, so
// it could neither read from it nor be sure to write to it.
func Classify(stdio [3]int) ([3]Stream, []int, error) {
	var modes [3]Stream
	var fds []int
	var sts [3]syscall.Stat_t
	for i, fd := range stdio {
		if err := syscall.Fstat(fd, &sts[i]); err != nil {
			if err == syscall.EBADF {
				modes[i] = StreamNull
				continue
			}
			return modes, nil, &Unserved{Reason: fmt.Sprintf("fstat of descriptor %d: %v", fd, err)}
		}
		st := sts[i]
		kind := st.Mode & syscall.S_IFMT
		switch {
		case kind == syscall.S_IFCHR && isTerminal(fd):
			return modes, nil, &Unserved{Reason: fmt.Sprintf("descriptor %d is a terminal", fd)}
		case kind == syscall.S_IFCHR && st.Rdev == devNull:
			modes[i] = StreamNull
		case i == 2 && modes[1] == StreamFD && st.Dev == sts[1].Dev && st.Ino == sts[1].Ino &&
			(kind == syscall.S_IFIFO || kind == syscall.S_IFSOCK):
			modes[i] = StreamStdout
		default:
			modes[i] = StreamFD
			fds = append(fds, fd)
		}
	}
	return modes, fds, nil
}

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// printable keeps control characters out of a line.
func printable(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = '?'
		}
	}
	return string(b)
}
