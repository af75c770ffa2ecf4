package sshd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/statusfwd"
)

// The ranks' status endpoint (package statusfwd). The job's launcher, on a
// connection that declared its instance (launcher.go), may ask the agent to
// listen on loopback in this pod and carry each connection to that
// listener back to it, in a channel on the same connection, where its
// endpoint answers: Trainer's status API for the ranks of this pod, with
// the launcher's token never leaving the launcher. Every session started
// while the forward stands gets the three variables pointing at it. It is
// the one forward the agent carries, and only to loopback: a forward a
// client asks for (ssh -L, -R) stays refused.
//
// One forward stands at a time: the latest, from the newest launcher
// instance; it ends with the connection that asked for it, or when a
// newer instance asks, and its listener, its files (when the agent made
// their directory) and its connections go with it.

const (
	// maxStatusConns bounds the connections the forward carries at once.
	maxStatusConns = 16
	// statusConnLife bounds how long it carries one (a status request
	// takes a few seconds at most).
	statusConnLife = 2 * time.Minute
)

// statusForward is the standing forward.
type statusForward struct {
	st      *connState
	sc      *ssh.ServerConn
	ln      net.Listener
	port    int
	path    string
	dir     string
	madeDir bool // the agent made dir: it is removed with the forward
	sem     chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// env is the three variables of the forward.
func (f *statusForward) env() []string { return statusfwd.Env(f.port, f.path, f.dir) }

// close ends the forward: its listener, its connections, its files.
func (f *statusForward) close() {
	f.once.Do(func() {
		f.ln.Close()
		f.wg.Wait()
		if f.madeDir {
			os.RemoveAll(f.dir)
		}
	})
}

// statusRequest handles statusfwd.RequestType.
func (s *Server) statusRequest(ctx gliderssh.Context, req *ssh.Request) (bool, []byte) {
	st := stateOf(ctx)
	sc, _ := ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
	if st == nil || sc == nil {
		return false, nil
	}
	s.mu.Lock()
	declared, cur := st.launcher, s.statusFwd
	newer := cur != nil && cur.st != st && cur.st.launcher != nil && declared != nil && cur.st.launcher.newerThan(declared)
	s.mu.Unlock()
	switch {
	case declared == nil:
		s.log.Info("status endpoint forward refused: the connection declared no launcher instance", "conn", st.id)
		return false, nil
	case newer:
		s.log.Info("status endpoint forward refused: a newer launcher instance of the job has one", "conn", st.id,
			"launcher", declared.inst.String(), "newer", cur.st.launcher.inst.String())
		return false, nil
	}
	r, err := statusfwd.ParseRequest(req.Payload)
	if err != nil {
		s.log.Info("status endpoint forward refused", "conn", st.id, "err", err)
		return false, nil
	}
	f, err := s.openStatusForward(st, sc, r)
	if err != nil {
		s.log.Warn("the ranks of this pod cannot report to the TrainJob's status (the job goes on)", "conn", st.id, "err", err)
		return false, nil
	}
	s.mu.Lock()
	old := s.statusFwd
	s.statusFwd = f
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	f.wg.Go(func() { s.serveStatusForward(f) })
	s.log.Info("the ranks of this pod report to the TrainJob's status through the launcher", "conn", st.id,
		"addr", f.ln.Addr().String(), "dir", f.dir, "launcher", declared.inst.String())
	return true, statusfwd.Reply{Port: uint32(f.port), Dir: f.dir}.Marshal()
}

// openStatusForward makes the forward's directory, files and listener:
// the launcher's port and directory when they can be had, others when not.
func (s *Server) openStatusForward(st *connState, sc *ssh.ServerConn, r statusfwd.Request) (*statusForward, error) {
	f := &statusForward{st: st, sc: sc, path: r.Path, sem: make(chan struct{}, maxStatusConns)}
	dir, made, err := statusDir(r.Dir)
	if err != nil {
		return nil, err
	}
	f.dir, f.madeDir = dir, made
	if err := statusfwd.WriteFiles(dir, r.Token, []byte(r.CA)); err != nil {
		f.removeDir()
		return nil, fmt.Errorf("writing the endpoint's token and CA in %s: %w", dir, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(r.Port))))
	if err != nil && r.Port != 0 {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		f.removeDir()
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	f.ln, f.port = ln, ln.Addr().(*net.TCPAddr).Port
	return f, nil
}

func (f *statusForward) removeDir() {
	if f.madeDir {
		os.RemoveAll(f.dir)
	}
}

// statusDir is the directory for the forward's files: want when it can be
// made or is this process's own directory already (a pod that shares its
// file system with the launcher's), else a new one under the temporary
// directory. made says the agent made it.
func statusDir(want string) (dir string, made bool, err error) {
	if fi, err := os.Lstat(want); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.IsDir() && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o022 == 0 {
			return want, false, nil
		}
	} else if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(want), 0o755); err == nil {
			if err := os.Mkdir(want, 0o700); err == nil {
				return want, true, nil
			}
		}
	}
	dir, err = os.MkdirTemp("", "podmpi-trainer-status-")
	if err != nil {
		return "", false, fmt.Errorf("making a directory for the endpoint's token and CA: %w", err)
	}
	return dir, true, nil
}

// serveStatusForward carries each connection to the listener to the
// launcher, at most maxStatusConns at once, each for statusConnLife at
// most, until the listener closes.
func (s *Server) serveStatusForward(f *statusForward) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		select {
		case f.sem <- struct{}{}:
		default:
			c.Close() // a rank's client retries; nothing else is due
			continue
		}
		f.wg.Go(func() {
			defer func() { <-f.sem }()
			s.carryStatusConn(f, c)
		})
	}
}

// carryStatusConn carries c in a channel to the launcher.
func (s *Server) carryStatusConn(f *statusForward, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(statusConnLife))
	ch, reqs, err := f.sc.OpenChannel(statusfwd.ChannelType, nil)
	if err != nil {
		s.log.Debug("the launcher did not take a status connection", "conn", f.st.id, "err", err)
		return
	}
	go ssh.DiscardRequests(reqs)
	timer := time.AfterFunc(statusConnLife, func() { ch.Close() })
	defer timer.Stop()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(ch, c)
		_ = ch.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(c, ch)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	ch.Close()
	c.Close()
	<-done
}

// statusEnv is the variables a session gets from the standing forward,
// nil without one.
func (s *Server) statusEnv() []string {
	s.mu.Lock()
	f := s.statusFwd
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.env()
}

// endStatusForward ends the forward st asked for, if it stands: st's
// connection closed.
func (s *Server) endStatusForward(st *connState) {
	s.mu.Lock()
	f := s.statusFwd
	if f == nil || f.st != st {
		s.mu.Unlock()
		return
	}
	s.statusFwd = nil
	s.mu.Unlock()
	f.close()
	s.log.Info("the ranks' status endpoint forward ended with the launcher's connection", "conn", st.id)
}
