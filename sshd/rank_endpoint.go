package sshd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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

// The ranks' endpoint: Trainer's status API for the ranks of this pod,
// through the job's launcher. The launcher, on a connection that declared
// its instance (launcher.go), asks for it with the status forward's
// request (package statusfwd: the wire contract); the agent then listens
// on loopback in this pod with the certificate the launcher gave it (for
// 127.0.0.1, signed by the run's CA, whose key stays with the launcher),
// writes the run's token and CA where the variables say, and gives every
// session started while it stands the three variables. It is the one
// endpoint the agent serves for a client, and only on loopback: a forward
// a client asks for (ssh -L, -R) stays refused.
//
// What reaches the launcher is checked here first, so that nothing but a
// rank's request takes a slot or a channel: the agent ends TLS, reads the
// request (its header within rankHeaderTimeout, all of it within
// rankReadTimeout), and answers a wrong path, method, size or bearer token
// itself. A request that passes waits up to rankSlotWait for one of
// rankCarriedMax slots (503 with Retry-After after that), and is carried in
// one channel of the launcher's connection, plain HTTP/1.1 in the
// encrypted connection, within rankCarryTimeout; the launcher's endpoint
// answers it and sends it on to Trainer with the launcher's token, which
// never leaves the launcher. At most rankReadingMax connections are being
// read, checked or waiting for a slot: more wait in the listen backlog,
// unread, as sshd's MaxStartups and LoginGraceTime bound the
// unauthenticated. So the endpoint holds at most rankReadingMax +
// rankCarriedMax connections and request bodies. One connection carries
// one request (keep-alives are off): an idle rank holds nothing.
//
// One endpoint stands at a time: that of the newest launcher instance, as
// far as this agent can prove (launcher.go). An instance gets it only when
// no instance the agent heard of provably started after it, and it
// replaces a standing endpoint only when it provably started after that
// endpoint's instance: whatever the order in which the agent heard of
// them, an older instance never takes the endpoint from a newer one (and
// one whose start cannot be told from the standing one's does not
// either). Its connections carry it (the launcher asks on each connection
// it holds to this agent, for the same endpoint); it ends when the last of
// them closes, or when a newer instance (or the same one, for a new
// endpoint) asks, and its listener, its files (when the agent made their
// directory) and the requests it carries go with it, at once: a new
// request never waits for what the old endpoint carries.

const (
	// rankReadingMax bounds the connections being read, checked or
	// waiting for a slot at once.
	rankReadingMax = 32
	// rankHeaderTimeout bounds a connection's TLS handshake and request
	// header, rankReadTimeout the whole request.
	rankHeaderTimeout = 5 * time.Second
	rankReadTimeout   = 10 * time.Second
	// rankCarriedMax bounds the requests carried to the launcher at once;
	// rankSlotWait how long a checked request waits for one of them.
	rankCarriedMax = 16
	rankSlotWait   = 3 * time.Second
	// rankCarryTimeout bounds one carried request, from opening its
	// channel to the launcher's answer (which sends it on to Trainer
	// within 5 s); rankOpenTimeout the launcher's answer to opening the
	// channel on one of its connections before the next one is tried.
	rankCarryTimeout = 20 * time.Second
	rankOpenTimeout  = 5 * time.Second
	// maxRankAnswer bounds the launcher's answer passed to a rank.
	maxRankAnswer = 1 << 20
	// rankDrainMax bounds what is read and dropped of a body refused as
	// too big (tooBig).
	rankDrainMax = 1 << 20
)

// rankEndpoint is the standing endpoint.
type rankEndpoint struct {
	launcher *launcherRecord // the instance that asked
	token    string          // the endpoint's token: the same endpoint when asked again
	// via are the connections of that instance that asked for it, the
	// last asked last; requests go back on the last one that takes them.
	// Guarded by Server.mu.
	via  []endpointVia
	ln   *readingListener
	srv  *http.Server
	port int
	path string
	dir  string
	// made are the directories the agent made for dir, dir first, then
	// the parents it had to make, deepest first: they go with the
	// endpoint, the parents only when empty.
	made    []string
	maxBody int64
	slots   chan struct{}
	// ctx is every request's context, cancelled when the endpoint ends.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	// refusals limits the log lines of refused and failed requests.
	refusals logLimiter
}

// endpointVia is one connection an endpoint's requests go back on.
type endpointVia struct {
	st *connState
	sc *ssh.ServerConn
}

// env is the three variables of the endpoint.
func (e *rankEndpoint) env() []string { return statusfwd.Env(e.port, e.path, e.dir) }

// close ends the endpoint: its listener and files now, the requests it
// carries (their contexts are cancelled), its connections in the
// background. Nothing here waits on a launcher connection.
func (e *rankEndpoint) close() {
	e.once.Do(func() {
		e.cancel()
		e.ln.Close()
		go e.srv.Close() // closing a TLS connection may wait on its peer
		e.removeDir()
	})
}

// rankEndpointRequest handles statusfwd.RequestType.
func (s *Server) rankEndpointRequest(ctx gliderssh.Context, req *ssh.Request) (bool, []byte) {
	st := stateOf(ctx)
	sc, _ := ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
	if st == nil || sc == nil {
		return false, nil
	}
	r, err := statusfwd.ParseRequest(req.Payload)
	if err != nil {
		s.log.Info("the ranks' status endpoint refused", "conn", st.id, "err", err)
		return false, nil
	}
	s.mu.Lock()
	declared, cur := st.launcher, s.rankEP
	var newer *launcherRecord
	if declared != nil {
		newer = s.startedAfter(declared)
	}
	switch {
	case declared == nil:
		s.mu.Unlock()
		s.log.Info("the ranks' status endpoint refused: the connection declared no launcher instance", "conn", st.id)
		return false, nil
	case newer != nil:
		s.mu.Unlock()
		s.log.Info("the ranks' status endpoint refused: a newer launcher instance of the job connected to this agent", "conn", st.id,
			"launcher", declared.inst.String(), "newer", newer.inst.String())
		return false, nil
	case cur != nil && cur.launcher == declared && cur.token == r.Token:
		// The same instance asks on another of its connections: the
		// endpoint stands, and its requests go back on this one too.
		cur.via = append(cur.via, endpointVia{st, sc})
		s.mu.Unlock()
		return true, statusfwd.Reply{Port: uint32(cur.port), Dir: cur.dir}.Marshal()
	case cur != nil && cur.launcher != declared && !declared.startedAfter(cur.launcher):
		s.mu.Unlock()
		s.log.Info("the ranks' status endpoint refused: the launcher instance whose endpoint stands is not provably older", "conn", st.id,
			"launcher", declared.inst.String(), "standing", cur.launcher.inst.String())
		return false, nil
	}
	// The endpoint of another instance, or one this instance made anew,
	// gives way first: the new one may take its port.
	s.rankEP = nil
	s.mu.Unlock()
	if cur != nil {
		cur.close()
	}
	e, err := s.openRankEndpoint(r)
	if err != nil {
		s.log.Warn("the ranks of this pod cannot report to the TrainJob's status (the job goes on)", "conn", st.id, "err", err)
		return false, nil
	}
	e.launcher, e.via = declared, []endpointVia{{st, sc}}
	s.mu.Lock()
	if s.rankEP != nil { // another request won the race
		s.mu.Unlock()
		e.close()
		return false, nil
	}
	s.rankEP = e
	s.mu.Unlock()
	go func() { _ = e.srv.Serve(e.ln) }()
	s.log.Info("the ranks of this pod report to the TrainJob's status through the launcher", "conn", st.id,
		"addr", e.ln.Addr().String(), "dir", e.dir, "launcher", declared.inst.String())
	return true, statusfwd.Reply{Port: uint32(e.port), Dir: e.dir}.Marshal()
}

// openRankEndpoint makes the endpoint's directory, files and listener:
// the launcher's port and directory when they can be had, others when not.
func (s *Server) openRankEndpoint(r statusfwd.Request) (*rankEndpoint, error) {
	cert, err := r.KeyPair()
	if err != nil {
		return nil, err
	}
	e := &rankEndpoint{token: r.Token, path: r.Path, maxBody: int64(r.MaxBody), slots: make(chan struct{}, rankCarriedMax)}
	dir, made, err := rankDir(r.Dir)
	if err != nil {
		return nil, err
	}
	e.dir, e.made = dir, made
	if err := statusfwd.WriteFiles(dir, r.Token, []byte(r.CA)); err != nil {
		e.removeDir()
		return nil, fmt.Errorf("writing the endpoint's token and CA in %s: %w", dir, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(r.Port))))
	if err != nil && r.Port != 0 {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		e.removeDir()
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	e.port = ln.Addr().(*net.TCPAddr).Port
	e.ln = newReadingListener(ln, rankReadingMax, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { s.serveRank(e, w, req) }),
		ReadHeaderTimeout: rankHeaderTimeout,
		ReadTimeout:       rankReadTimeout,
		WriteTimeout:      rankReadTimeout + rankSlotWait + rankCarryTimeout,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return e.ctx },
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, rankConnKey{}, c) },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	e.srv.SetKeepAlivesEnabled(false)
	return e, nil
}

// removeDir removes what the agent made for the endpoint's files: their
// directory and, when empty, the parents it made for it (the launcher's
// private directory, which a worker's TMPDIR does not have otherwise).
func (e *rankEndpoint) removeDir() {
	if len(e.made) == 0 {
		return
	}
	os.RemoveAll(e.made[0])
	removeEmptyDirs(e.made[1:])
}

// removeEmptyDirs removes each directory of dirs, in order, that is empty:
// one that holds anything (someone else's) stays.
func removeEmptyDirs(dirs []string) {
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

// rankDir is the directory for the endpoint's files: want when it can be
// made or is this process's own directory already (a pod that shares its
// file system with the launcher's), else a new one under the temporary
// directory. made lists what the agent made: the directory, then the
// parents of want it made, deepest first; nil when it made nothing.
func rankDir(want string) (dir string, made []string, err error) {
	if fi, err := os.Lstat(want); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.IsDir() && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o022 == 0 {
			return want, nil, nil
		}
	} else if errors.Is(err, os.ErrNotExist) {
		if parents, err := mkdirParents(filepath.Dir(want)); err == nil {
			if err := os.Mkdir(want, 0o700); err == nil {
				return want, append([]string{want}, parents...), nil
			}
			removeEmptyDirs(parents)
		}
	}
	dir, err = os.MkdirTemp("", "podmpi-trainer-status-")
	if err != nil {
		return "", nil, fmt.Errorf("making a directory for the endpoint's token and CA: %w", err)
	}
	return dir, []string{dir}, nil
}

// mkdirParents makes dir and whichever of its parents do not exist (mode
// 0755, as os.MkdirAll) and returns those it made, deepest first. A
// directory that appears meanwhile (another process made it) is not
// counted as made.
func mkdirParents(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			removeEmptyDirs(made)
			return nil, err
		}
		made = append([]string{missing[i]}, made...)
	}
	return made, nil
}

// serveRank answers a rank's request: checked here, then carried to the
// launcher, whose answer goes back to the rank.
func (s *Server) serveRank(e *rankEndpoint, w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != e.path:
		e.refuse(s, w, http.StatusNotFound, "NotFound", "not found: this endpoint takes the job's status at "+e.path)
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		e.refuse(s, w, http.StatusMethodNotAllowed, "MethodNotAllowed", "only POST")
		return
	case !statusfwd.Bearer(r.Header.Get("Authorization"), e.token):
		e.refuse(s, w, http.StatusForbidden, "Forbidden", "forbidden: send the token in the file "+statusfwd.EnvToken+" names")
		return
	case r.ContentLength > e.maxBody:
		e.tooBig(s, w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, e.maxBody+1))
	switch {
	case err != nil:
		e.refuse(s, w, http.StatusBadRequest, "BadRequest", "reading the body: "+err.Error())
		return
	case int64(len(body)) > e.maxBody:
		e.tooBig(s, w, r)
		return
	}
	wait := time.NewTimer(rankSlotWait)
	defer wait.Stop()
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
		// Carried now: the connection no longer counts among those
		// being read.
		if c, ok := r.Context().Value(rankConnKey{}).(*tls.Conn); ok {
			if rc, ok := c.NetConn().(*readingConn); ok {
				rc.done()
			}
		}
	case <-wait.C:
		w.Header().Set("Retry-After", "1")
		e.refuse(s, w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf(
			"the worker-agent carries %d status requests to the launcher already and none ended within %s; ask again in a second", rankCarriedMax, rankSlotWait))
		return
	case <-r.Context().Done():
		return
	}
	resp, end, err := s.carryRank(r.Context(), e, r, body)
	if err != nil {
		e.refuse(s, w, http.StatusBadGateway, "ServiceUnavailable",
			"the worker-agent could not carry the request to the launcher over its SSH connection ("+err.Error()+"); the launcher may be gone or stalled, the job goes on")
		return
	}
	defer end()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxRankAnswer))
}

// carryRank sends a rank's checked request to the launcher in a channel of
// its own and returns the launcher's answer, and what ends the channel.
func (s *Server) carryRank(ctx context.Context, e *rankEndpoint, r *http.Request, body []byte) (*http.Response, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, rankCarryTimeout)
	ch, err := s.openRankChannel(ctx, e)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	c := statusfwd.ChannelConn(ch, statusfwd.Addr("worker-agent"), statusfwd.Addr("launcher"))
	stop := context.AfterFunc(ctx, func() { c.Close() })
	end := func() {
		stop()
		c.Close()
		cancel()
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	out, err := http.NewRequest(http.MethodPost, "http://launcher"+e.path, bytes.NewReader(body))
	if err != nil {
		end()
		return nil, nil, err
	}
	out.Header.Set("Authorization", r.Header.Get("Authorization"))
	if ct := r.Header.Get("Content-Type"); ct != "" {
		out.Header.Set("Content-Type", ct)
	}
	out.Close = true
	if err := out.Write(c); err != nil {
		end()
		return nil, nil, fmt.Errorf("sending it: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), out)
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("reading the launcher's answer: %w", err)
	}
	return resp, end, nil
}

// openRankChannel opens a channel for one request on the last of the
// endpoint's connections that takes it within rankOpenTimeout (one may have
// closed or stalled).
func (s *Server) openRankChannel(ctx context.Context, e *rankEndpoint) (ssh.Channel, error) {
	s.mu.Lock()
	via := slices.Clone(e.via)
	s.mu.Unlock()
	err := errors.New("no connection of the launcher's")
	for i := len(via) - 1; i >= 0 && ctx.Err() == nil; i-- {
		var ch ssh.Channel
		if ch, err = openChannelWithin(ctx, via[i].sc, rankOpenTimeout); err == nil {
			return ch, nil
		}
		s.log.Debug("the launcher did not take a rank's status request", "conn", via[i].st.id, "err", err)
	}
	return nil, err
}

// openChannelWithin opens a statusfwd.ChannelType channel on sc, waiting
// at most within (or until ctx ends) for the launcher's answer; a channel
// it opens later is closed unused.
func openChannelWithin(ctx context.Context, sc *ssh.ServerConn, within time.Duration) (ssh.Channel, error) {
	type opened struct {
		ch  ssh.Channel
		err error
	}
	res := make(chan opened, 1)
	go func() {
		ch, reqs, err := sc.OpenChannel(statusfwd.ChannelType, nil)
		if err == nil {
			go ssh.DiscardRequests(reqs)
		}
		res <- opened{ch, err}
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	var err error
	select {
	case o := <-res:
		return o.ch, o.err
	case <-t.C:
		err = fmt.Errorf("no answer to opening a channel within %s", within)
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	go func() {
		if o := <-res; o.err == nil {
			o.ch.Close()
		}
	}()
	return nil, err
}

// tooBig refuses a body over the limit with 413, after reading and
// dropping what is left of it, up to rankDrainMax bytes and within the
// server's read deadline: a connection closed with the client's bytes
// unread is reset, and a client still writing its body then sees the
// reset instead of the answer that says why.
func (e *rankEndpoint) tooBig(s *Server, w http.ResponseWriter, r *http.Request) {
	_, _ = io.CopyN(io.Discard, r.Body, rankDrainMax)
	e.refuse(s, w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", fmt.Sprintf("the body is over the %d bytes the status endpoint takes", e.maxBody))
}

// refuse answers a rank's request with code and a Kubernetes Status, as
// Trainer's endpoint and the launcher's do, and logs it (once a second at
// most).
func (e *rankEndpoint) refuse(s *Server, w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code})
	if n, ok := e.refusals.allow(time.Now()); ok {
		s.log.Info("a request to the ranks' status endpoint refused", "code", code, "message", msg, "suppressed", n)
	}
}

// rankConnKey is the context key of a request's connection.
type rankConnKey struct{}

// readingListener serves TLS on loopback to at most max connections that
// are being read (the handshake and the request) or waiting for a slot: it
// accepts another only when one of those is carried or closed, and the
// rest wait in the listen backlog, unread.
type readingListener struct {
	net.Listener
	tls     *tls.Config
	reading chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func newReadingListener(ln net.Listener, max int, cfg *tls.Config) *readingListener {
	return &readingListener{Listener: ln, tls: cfg, reading: make(chan struct{}, max), closed: make(chan struct{})}
}

func (l *readingListener) Accept() (net.Conn, error) {
	select {
	case l.reading <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.reading
		return nil, err
	}
	rc := &readingConn{Conn: c}
	rc.done = sync.OnceFunc(func() { <-l.reading })
	return tls.Server(rc, l.tls), nil
}

func (l *readingListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// readingConn is a connection that counts among those being read until
// done is called (it is carried) or it is closed.
type readingConn struct {
	net.Conn
	done func()
}

func (c *readingConn) Close() error {
	c.done()
	return c.Conn.Close()
}

// rankEnv is the variables a session gets from the standing endpoint, nil
// without one.
func (s *Server) rankEnv() []string {
	s.mu.Lock()
	e := s.rankEP
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	return e.env()
}

// endRankEndpoint takes st's connection, closed, from the standing
// endpoint, which ends with the last of its connections.
func (s *Server) endRankEndpoint(st *connState) {
	s.mu.Lock()
	e := s.rankEP
	if e == nil {
		s.mu.Unlock()
		return
	}
	n := len(e.via)
	e.via = slices.DeleteFunc(e.via, func(v endpointVia) bool { return v.st == st })
	if len(e.via) > 0 || n == 0 {
		s.mu.Unlock()
		return
	}
	s.rankEP = nil
	s.mu.Unlock()
	e.close()
	s.log.Info("the ranks' status endpoint ended with the launcher's connections", "conn", st.id)
}
