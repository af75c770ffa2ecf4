package sshd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
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
// One forward stands at a time: that of the newest launcher instance, as
// far as this agent can prove (launcher.go). An instance gets it only when
// no instance the agent heard of provably started after it, and it
// replaces a standing forward only when it provably started after that
// forward's instance: whatever the order in which the agent heard of them,
// an older instance never takes the forward from a newer one (and one
// whose start cannot be told from the standing one's does not either). Its
// connections carry it (the launcher asks on each connection it holds to
// this agent, for the same endpoint); it ends when the last of them
// closes, or when a newer instance (or the same one, for a new endpoint)
// asks, and its listener, its files (when the agent made their directory)
// and the connections it carries go with it, at once: a new request never
// waits for what the old forward carries.

const (
	// maxStatusConns bounds the connections the forward carries at once.
	maxStatusConns = 16
	// statusConnLife bounds how long it carries one (a status request
	// takes a few seconds at most).
	statusConnLife = 2 * time.Minute
)

// statusForward is the standing forward.
type statusForward struct {
	launcher *launcherRecord // the instance that asked
	token    string          // the endpoint's token: the same endpoint when asked again
	// via are the connections of that instance that asked for it, the
	// last asked last; the ranks' connections go back on the last one
	// still open. Guarded by Server.mu.
	via     []forwardVia
	ln      net.Listener
	port    int
	path    string
	dir     string
	madeDir bool // the agent made dir: it is removed with the forward
	sem     chan struct{}

	mu      sync.Mutex
	closed  bool
	carried map[net.Conn]struct{} // the ranks' connections carried now
}

// forwardVia is one connection a forward goes back on.
type forwardVia struct {
	st *connState
	sc *ssh.ServerConn
}

// env is the three variables of the forward.
func (f *statusForward) env() []string { return statusfwd.Env(f.port, f.path, f.dir) }

// close ends the forward: its listener, the connections it carries, its
// files. It does not wait for the goroutines that carried them, which end
// with their channels: a stalled launcher connection holds up nothing but
// them.
func (f *statusForward) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	carried := f.carried
	f.carried = nil
	f.mu.Unlock()
	f.ln.Close()
	for c := range carried {
		c.Close()
	}
	f.removeDir()
}

// track counts c among the carried connections; false when the forward is
// closed (c is not to be carried).
func (f *statusForward) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.carried[c] = struct{}{}
	return true
}

func (f *statusForward) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.carried, c)
	f.mu.Unlock()
}

// statusRequest handles statusfwd.RequestType.
func (s *Server) statusRequest(ctx gliderssh.Context, req *ssh.Request) (bool, []byte) {
	st := stateOf(ctx)
	sc, _ := ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
	if st == nil || sc == nil {
		return false, nil
	}
	r, err := statusfwd.ParseRequest(req.Payload)
	if err != nil {
		s.log.Info("status endpoint forward refused", "conn", st.id, "err", err)
		return false, nil
	}
	s.mu.Lock()
	declared, cur := st.launcher, s.statusFwd
	var newer *launcherRecord
	if declared != nil {
		newer = s.startedAfter(declared)
	}
	switch {
	case declared == nil:
		s.mu.Unlock()
		s.log.Info("status endpoint forward refused: the connection declared no launcher instance", "conn", st.id)
		return false, nil
	case newer != nil:
		s.mu.Unlock()
		s.log.Info("status endpoint forward refused: a newer launcher instance of the job connected to this agent", "conn", st.id,
			"launcher", declared.inst.String(), "newer", newer.inst.String())
		return false, nil
	case cur != nil && cur.launcher == declared && cur.token == r.Token:
		// The same instance asks on another of its connections: the
		// forward stands, and goes back on this one too.
		cur.via = append(cur.via, forwardVia{st, sc})
		s.mu.Unlock()
		return true, statusfwd.Reply{Port: uint32(cur.port), Dir: cur.dir}.Marshal()
	case cur != nil && cur.launcher != declared && !declared.startedAfter(cur.launcher):
		s.mu.Unlock()
		s.log.Info("status endpoint forward refused: the launcher instance whose forward stands is not provably older", "conn", st.id,
			"launcher", declared.inst.String(), "standing", cur.launcher.inst.String())
		return false, nil
	}
	// The forward of another instance, or of an endpoint this one made
	// anew, gives way first: the new one may take its port.
	s.statusFwd = nil
	s.mu.Unlock()
	if cur != nil {
		cur.close()
	}
	f, err := s.openStatusForward(r)
	if err != nil {
		s.log.Warn("the ranks of this pod cannot report to the TrainJob's status (the job goes on)", "conn", st.id, "err", err)
		return false, nil
	}
	f.launcher, f.via = declared, []forwardVia{{st, sc}}
	s.mu.Lock()
	if s.statusFwd != nil { // another request won the race
		s.mu.Unlock()
		f.close()
		return false, nil
	}
	s.statusFwd = f
	s.mu.Unlock()
	go s.serveStatusForward(f)
	s.log.Info("the ranks of this pod report to the TrainJob's status through the launcher", "conn", st.id,
		"addr", f.ln.Addr().String(), "dir", f.dir, "launcher", declared.inst.String())
	return true, statusfwd.Reply{Port: uint32(f.port), Dir: f.dir}.Marshal()
}

// openStatusForward makes the forward's directory, files and listener:
// the launcher's port and directory when they can be had, others when not.
func (s *Server) openStatusForward(r statusfwd.Request) (*statusForward, error) {
	f := &statusForward{token: r.Token, path: r.Path, sem: make(chan struct{}, maxStatusConns), carried: map[net.Conn]struct{}{}}
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
		go func() {
			defer func() { <-f.sem }()
			s.carryStatusConn(f, c)
		}()
	}
}

// carryStatusConn carries c in a channel to the launcher, on the last of
// the forward's connections that takes it (one may have closed a moment
// ago).
func (s *Server) carryStatusConn(f *statusForward, c net.Conn) {
	defer c.Close()
	if !f.track(c) {
		return
	}
	defer f.untrack(c)
	_ = c.SetDeadline(time.Now().Add(statusConnLife))
	s.mu.Lock()
	via := slices.Clone(f.via)
	s.mu.Unlock()
	var ch ssh.Channel
	var reqs <-chan *ssh.Request
	for i := len(via) - 1; i >= 0 && ch == nil; i-- {
		var err error
		if ch, reqs, err = via[i].sc.OpenChannel(statusfwd.ChannelType, nil); err != nil {
			s.log.Debug("the launcher did not take a status connection", "conn", via[i].st.id, "err", err)
		}
	}
	if ch == nil {
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

// endStatusForward takes st's connection, closed, from the standing
// forward, which ends with the last of its connections.
func (s *Server) endStatusForward(st *connState) {
	s.mu.Lock()
	f := s.statusFwd
	if f == nil {
		s.mu.Unlock()
		return
	}
	n := len(f.via)
	f.via = slices.DeleteFunc(f.via, func(v forwardVia) bool { return v.st == st })
	if len(f.via) > 0 || n == 0 {
		s.mu.Unlock()
		return
	}
	s.statusFwd = nil
	s.mu.Unlock()
	f.close()
	s.log.Info("the ranks' status endpoint forward ended with the launcher's connections", "conn", st.id)
}
