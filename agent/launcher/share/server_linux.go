package share

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
)

// SocketName is the launcher's socket in its private directory (Setup's).
const SocketName = "rsh.sock"

// closeWait bounds how long Close waits for the sessions it ended.
const closeWait = rsh.AbortWait + 5*time.Second

var (
	errRelayGone      = errors.New("the client process went away")
	errLauncherEnding = errors.New("the launcher is ending")
	// errNotThisRun is a request without the run's token.
	errNotThisRun = errors.New("the request does not carry this run's " + relay.EnvToken +
		": the launcher serves only the processes its mpirun starts")
)

// Server serves relays' sessions (package relay) on the pool's connections:
// the launcher's side of connection sharing. It listens on a unix socket in
// the launcher's private directory (mode 0700), answers only processes of
// its own UID (SO_PEERCRED) whose request carries the run's token (Token,
// which only mpirun's environment holds), takes each relay's stdin, stdout
// and stderr, and runs the client's whole logic (the command line, its
// settings from the relay's variables, waiting for a late worker, the exit
// status, signals, failure lines and records) on the relay's behalf.
type Server struct {
	ln      *net.UnixListener
	path    string
	token   string
	pool    *Pool
	log     *slog.Logger
	uid     int
	ctx     context.Context
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
	pipes   pipes
	configs configs
}

// Serve listens on path (which must not exist; its directory should be the
// launcher's private one) and serves relays until Close. log may be nil.
func Serve(path string, pool *Pool, log *slog.Logger) (*Server, error) {
	return serve(path, pool, log, os.Getuid())
}

// serve is Serve answering processes of uid only.
func serve(path string, pool *Pool, log *slog.Logger, uid int) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("socket path %s is %d bytes, over the %d a unix socket allows; set TMPDIR to a shorter directory",
			path, len(path), len(unix.RawSockaddrUnix{}.Path)-1)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Server{ln: ln, path: path, token: rand.Text(), pool: pool, log: log, uid: uid, ctx: ctx, cancel: cancel}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Path is the socket's path, for relay.EnvSocket.
func (s *Server) Path() string { return s.path }

// Token is the run's token (128 random bits, crypto/rand.Text), for
// relay.EnvToken in mpirun's environment only: what a relay proves it
// belongs to this run with. Never log it.
func (s *Server) Token() string { return s.token }

// Close stops accepting, ends the sessions still running (each relay gets
// a line and status 255) and waits for them, at most closeWait. It removes
// the socket.
func (s *Server) Close() {
	s.cancel(errLauncherEnding)
	_ = s.ln.Close()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("shared ssh sessions still ending after the launcher closed them", "waited", closeWait)
	}
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.log.Warn("accepting a podmpi-rsh connection", "err", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(c)
		}()
	}
}

// serve runs one relay's session.
func (s *Server) serve(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(relay.DefaultTimeout))
	cred, err := peerCred(c)
	if err != nil || int(cred.Uid) != s.uid {
		uid := -1
		if err == nil {
			uid = int(cred.Uid)
		}
		s.log.Warn("refused a connection to the podmpi-rsh socket from another user", "uid", uid, "err", err)
		discardOpen(c) // so that the relay's request is sent whole and it reads why
		refuse(c, "not the launcher's user")
		return
	}
	open, st, err := readOpen(c, &s.pipes, s.token)
	if errors.Is(err, errNotThisRun) {
		// The token itself is never logged, the request's nor the run's.
		s.log.Warn("refused a podmpi-rsh request without this run's token: a process of the launcher's UID that mpirun did not start (another container of the pod sharing TMPDIR?)",
			"pid", cred.Pid)
	}
	if err != nil {
		s.log.Debug("podmpi-rsh request refused", "pid", cred.Pid, "err", err)
		refuse(c, err.Error())
		return
	}
	defer st.close()
	if s.ctx.Err() != nil {
		refuse(c, "the launcher is ending")
		return
	}
	if _, err := c.Write(relay.AppendFrame(nil, relay.FrameAccept, nil)); err != nil {
		return // the relay is gone: nothing ran
	}
	_ = c.SetDeadline(time.Time{})

	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	sigs := make(chan os.Signal, 8)
	control := make(chan struct{})
	go func() {
		defer close(control)
		defer cancel(errRelayGone)
		for {
			typ, p, err := relay.ReadFrame(c)
			if err != nil {
				return
			}
			if typ == relay.FrameSignal && len(p) == 1 {
				select {
				case sigs <- syscall.Signal(p[0]):
				default: // a burst of signals: the first ones count
				}
			}
		}
	}()
	sv := rsh.Served{Env: open.Env, Signals: sigs, PID: int(cred.Pid), Sessions: s.pool, Load: s.configs.load,
		Gone: func() bool { return errors.Is(context.Cause(ctx), errRelayGone) }, Abort: st.interrupt}
	sv.Stdin, sv.Stdout, sv.Stderr = st.streams()
	code := sv.Run(ctx, open.Args)
	// Our copies of the streams close before the relay exits, so that
	// whoever reads its output sees the end with the exit.
	st.close()
	_ = c.SetWriteDeadline(time.Now().Add(relay.DefaultTimeout))
	_, _ = c.Write(relay.AppendFrame(nil, relay.FrameExit, []byte{byte(code)}))
	_ = c.Close()
	<-control
}

// refuse tells a relay it is not served (it falls back; nothing ran).
func refuse(c *net.UnixConn, why string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(relay.AppendFrame(nil, relay.FrameRefuse, []byte(why)))
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}

// readOpen reads the relay's Open frame and the descriptors that come with
// it (the first read carries them), and takes the descriptors when the
// request carries token.
func readOpen(c *net.UnixConn, pipes *pipes, token string) (relay.Open, *stdio, error) {
	buf := make([]byte, 16<<10)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return relay.Open{}, nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	st := &stdio{pipes: pipes}
	fail := func(err error) (relay.Open, *stdio, error) {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return relay.Open{}, nil, err
	}
	switch {
	case ferr != nil:
		return fail(ferr)
	case flags&unix.MSG_CTRUNC != 0:
		return fail(errors.New("more descriptors than stdin, stdout and stderr"))
	case n == 0:
		return fail(io.ErrUnexpectedEOF)
	}
	data := buf[:n]
	if len(data) < relay.HeaderSize {
		rest := make([]byte, relay.HeaderSize-len(data))
		if _, err := io.ReadFull(c, rest); err != nil {
			return fail(err)
		}
		data = append(data, rest...)
	}
	typ, size, err := relay.ParseHeader(data)
	if err != nil {
		return fail(err)
	}
	if typ != relay.FrameOpen {
		return fail(fmt.Errorf("frame %d where a request was expected", typ))
	}
	payload := data[relay.HeaderSize:]
	if len(payload) > size {
		return fail(errors.New("data after the request"))
	}
	if len(payload) < size {
		more := make([]byte, size-len(payload))
		if _, err := io.ReadFull(c, more); err != nil {
			return fail(fmt.Errorf("request cut short: %w", err))
		}
		payload = append(payload, more...)
	}
	open, err := relay.DecodeOpen(payload)
	if err != nil {
		return fail(err)
	}
	if subtle.ConstantTimeCompare([]byte(open.Token), []byte(token)) != 1 {
		return fail(errNotThisRun)
	}
	if len(fds) != open.FDs() {
		return fail(fmt.Errorf("%d descriptors for %d streams", len(fds), open.FDs()))
	}
	st.adopt(open.Stdio, fds)
	return open, st, nil
}

// discardOpen reads what a relay that is not served sent first and closes
// the descriptors that came with it.
func discardOpen(c *net.UnixConn) {
	buf := make([]byte, 16<<10)
	oob := make([]byte, unix.CmsgSpace(3*4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	fds, _ := parseRights(oob[:oobn])
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, err
		}
		for _, fd := range got {
			unix.CloseOnExec(fd)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
