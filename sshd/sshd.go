// Package sshd is the worker-agent's embedded SSH server: the process that
// MPI launchers (Open MPI's orted/prted via plm_rsh_agent, MPICH/Intel
// Hydra's hydra_pmi_proxy) reach through "ssh worker <command>".
//
// It is built on github.com/gliderlabs/ssh over golang.org/x/crypto/ssh and
// is meant to run as any UID/GID, including a random OpenShift UID with no
// passwd entry, no writable home and no capabilities:
//
//   - Any user name is accepted and logged; the user name carries no
//     authority (every session runs as the agent's own uid).
//   - Public-key auth only, against authorized_keys in the job's auth dir
//     (agent/authdir). Password, keyboard-interactive and "none" are never
//     offered. The decision uses only the key of the current callback
//     (compared by its wire encoding), and the identity travels in
//     ssh.Permissions.Extensions.
//   - The host key is the job's id_rsa, so clients pin it to id_rsa.pub with
//     no known_hosts to distribute. Without id_rsa an ed25519 key is generated
//     once into Config.StateDir and reused (clients cannot pin that one).
//   - Commands run as `$SHELL -c "<command string>"`, exactly as sshd does,
//     because ORTE/PRRTE send shell text (a leading space, double quotes, `;`,
//     "PATH=...; export PATH"). This is deliberate: the client is the job's own
//     launcher holding the job key, and it already has a shell on the worker.
//     No PTY unless Config.AllowPTY (Linux, via /dev/ptmx; the pty-req's
//     terminal modes are ignored). Each session runs in its own process
//     group with the agent's environment (so PATH and LD_LIBRARY_PATH of the
//     image reach orted), plus client "env" requests allowed by EnvAllowed.
//   - stdout and stderr stay separate and are drained completely before the
//     exit status; death by signal is reported as "exit-signal" (RFC 4254
//     §6.10). When the client disconnects or closes the channel the whole
//     process group gets SIGTERM, then SIGKILL after Config.KillGrace; group
//     members left behind after a normal exit are terminated the same way,
//     and group members re-parented to the agent (when it is PID 1 or a
//     child subreaper) are reaped.
//   - OpenSSH-grade limits: LoginGraceTime, MaxStartups (excess pre-auth
//     connections are closed at once), MaxAuthTries, MaxSessions,
//     keepalive@openssh.com probes. No port, agent or X11 forwarding, no
//     subsystems (sftp is refused).
//   - TCP_NODELAY and, during the handshake, TCP_QUICKACK after every read,
//     which removes a ~40 ms Nagle/delayed-ACK stall per OpenSSH connection.
//   - Key exchange, cipher and MAC lists are x/crypto's defaults, so the
//     server works under GODEBUG=fips140=on (FIPS 140-3 mode).
//
// Every connection and session is audit-logged on the caller's slog.Logger
// (never key material or environment values) and counted in Metrics.
package sshd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"github.com/podmpi/podmpi/agent/authdir"
	"golang.org/x/crypto/ssh"
)

// Defaults applied by New for zero Config fields.
const (
	DefaultShell             = "/bin/sh"
	DefaultLoginGraceTime    = 30 * time.Second
	DefaultMaxStartups       = 100
	DefaultMaxAuthTries      = 6
	DefaultMaxSessions       = 10
	DefaultKeepAliveInterval = 15 * time.Second
	DefaultKeepAliveCountMax = 3
	DefaultKillGrace         = time.Second
	DefaultShutdownGrace     = 10 * time.Second
)

// Config configures a Server. Zero values select the defaults above.
type Config struct {
	ListenAddress     string        // TCP address, e.g. ":2222"
	AuthDir           string        // resolved auth dir (authorized_keys required; id_rsa optional)
	StateDir          string        // where a generated host key lives when id_rsa is absent ("" -> in memory)
	Shell             string        // "" -> /bin/sh; sessions run `Shell -c <command>`
	Env               []string      // base environment of sessions; nil -> os.Environ()
	AllowPTY          bool          // grant pty-req (Linux only); MPI never asks for one
	LoginGraceTime    time.Duration // 0 -> 30s: time from TCP accept to successful auth
	MaxStartups       int           // 0 -> 100: concurrent unauthenticated connections
	MaxAuthTries      int           // 0 -> 6: failed auth attempts per connection
	MaxSessions       int           // 0 -> 10: open session channels per connection
	KeepAliveInterval time.Duration // 0 -> 15s; negative disables keepalive probes
	KeepAliveCountMax int           // 0 -> 3 unanswered probes before the connection is dropped
	KillGrace         time.Duration // 0 -> 1s: SIGTERM -> SIGKILL for a session's process group
	ShutdownGrace     time.Duration // 0 -> 10s: SIGTERM -> SIGKILL for sessions on Shutdown (capped by its ctx)
	Logger            *slog.Logger  // nil -> discard
	Metrics           *Metrics      // nil -> none
}

func (c *Config) applyDefaults() {
	if c.Shell == "" {
		c.Shell = DefaultShell
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.LoginGraceTime <= 0 {
		c.LoginGraceTime = DefaultLoginGraceTime
	}
	if c.MaxStartups <= 0 {
		c.MaxStartups = DefaultMaxStartups
	}
	if c.MaxAuthTries <= 0 {
		c.MaxAuthTries = DefaultMaxAuthTries
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if c.KeepAliveCountMax <= 0 {
		c.KeepAliveCountMax = DefaultKeepAliveCountMax
	}
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Permissions.Extensions keys set on successful auth.
const (
	extKeyFP     = "podmpi-key-fp"
	extKeyType   = "podmpi-key-type"
	extKeySource = "podmpi-key-source"
)

type ctxKey struct{ name string }

var ctxKeyConnState = &ctxKey{"podmpi-conn-state"}

// Server is the SSH server. Create it with New, then Listen, Serve and
// finally Shutdown.
type Server struct {
	cfg    Config
	log    *slog.Logger
	m      *Metrics
	gs     *gliderssh.Server
	signer ssh.Signer
	pinned bool
	keys   map[string]authdir.Key // by ssh wire encoding
	akPath string
	// derived is the ed25519 key derived from the job's id_rsa
	// (authdir.LoadJobKey), offered as a second host key; derivedAuth is
	// its wire encoding when it is also accepted as a client key (only when
	// id_rsa's own public key is in authorized_keys), else "".
	derived     ssh.Signer
	derivedAuth string
	id          identity

	startups  chan struct{} // MaxStartups semaphore
	nextConn  atomic.Uint64
	listening atomic.Bool
	authOK    atomic.Uint64 // successful authentications (tests, fuzzing)
	rejectLog logLimiter

	mu              sync.Mutex
	ln              net.Listener
	serving         bool
	serveDone       chan struct{}
	shutdown        bool // no new connections or sessions
	shutdownClaimed bool // a Shutdown call runs the sequence
	conns           map[*connState]struct{}
	sessions        map[*session]struct{}
	failed          map[net.Addr]*connState // pre-auth conns, for ConnectionFailedCallback

	connWG       sync.WaitGroup // connection and keepalive goroutines
	sessWG       sync.WaitGroup // session goroutines
	shutdownDone chan struct{}
}

// New loads the host key and authorized_keys from cfg.AuthDir and prepares a
// server. Key problems are returned as *authdir.Error (use errors.As), naming
// the file and a fix.
func New(cfg Config) (*Server, error) {
	cfg.applyDefaults()
	if cfg.AuthDir == "" {
		return nil, &authdir.Error{Path: "(empty)", Op: "find auth dir", Err: errors.New("no auth dir configured"),
			Hint: "pass the resolved auth dir (authdir.Find) holding authorized_keys"}
	}
	s := &Server{
		cfg:          cfg,
		log:          cfg.Logger,
		m:            cfg.Metrics,
		startups:     make(chan struct{}, cfg.MaxStartups),
		conns:        make(map[*connState]struct{}),
		sessions:     make(map[*session]struct{}),
		failed:       make(map[net.Addr]*connState),
		serveDone:    make(chan struct{}),
		shutdownDone: make(chan struct{}),
		akPath:       filepath.Join(cfg.AuthDir, authdir.AuthorizedKeys),
	}
	keys, skipped, err := authdir.LoadAuthorizedKeys(s.akPath)
	for _, le := range skipped {
		s.log.Warn("skipped authorized_keys line", "file", s.akPath, "line", le.Line, "err", le.Err)
	}
	if err != nil {
		return nil, err
	}
	s.keys = make(map[string]authdir.Key, len(keys))
	for _, k := range keys {
		if _, dup := s.keys[string(k.Key.Marshal())]; !dup {
			s.keys[string(k.Key.Marshal())] = k
		}
	}
	s.signer, s.derived, s.pinned, err = loadHostKey(cfg.AuthDir, cfg.StateDir, s.log)
	if err != nil {
		return nil, err
	}
	hostSigners := []gliderssh.Signer{s.signer}
	if s.derived != nil {
		hostSigners = append(hostSigners, s.derived)
		if _, ok := s.keys[string(s.signer.PublicKey().Marshal())]; ok {
			s.derivedAuth = string(s.derived.PublicKey().Marshal())
		}
	}
	s.id = lookupIdentity(cfg.Env)
	if _, err := os.Stat(cfg.Shell); err != nil {
		s.log.Warn("session shell not found; every command will fail with exit status 127",
			"shell", cfg.Shell, "err", err)
	}
	s.gs = &gliderssh.Server{
		Version:                  "podmpi",
		HostSigners:              hostSigners,
		PublicKeyHandler:         s.publicKeyHandler, // must stay non-nil: nil handlers mean NO auth
		ConnCallback:             s.connCallback,
		ServerConfigCallback:     s.serverConfig,
		ConnectionFailedCallback: s.connectionFailed,
		ChannelHandlers: map[string]gliderssh.ChannelHandler{
			"session": s.handleSessionChannel,
			"default": s.rejectChannel,
		},
		RequestHandlers:   map[string]gliderssh.RequestHandler{"default": s.globalRequest},
		SubsystemHandlers: map[string]gliderssh.SubsystemHandler{},
	}
	s.log.Info("ssh server configured",
		"auth_dir", cfg.AuthDir, "authorized_keys", len(s.keys),
		"host_key_fp", s.HostKeyFingerprint(), "host_key_type", s.signer.PublicKey().Type(),
		"host_key_pinned", s.pinned, "shell", cfg.Shell, "passwd_user", s.id.passwdName, "home", s.id.home,
		"uid", os.Getuid(), "gid", os.Getgid())
	return s, nil
}

// HostKeyFingerprint returns the host key's SHA256 fingerprint ("SHA256:...").
func (s *Server) HostKeyFingerprint() string { return authdir.Fingerprint(s.signer.PublicKey()) }

// HostKeyPinned reports whether the host key is the job's id_rsa, which
// clients can pin to id_rsa.pub.
func (s *Server) HostKeyPinned() bool { return s.pinned }

// authorizedKey reports whether key may log in, and where it is authorized:
// its authorized_keys line, or the key derived from the job's id_rsa.
func (s *Server) authorizedKey(key ssh.PublicKey) (source string, ok bool) {
	m := string(key.Marshal())
	if k, ok := s.keys[m]; ok {
		return s.akPath + ":" + strconv.Itoa(k.Line), true
	}
	if s.derivedAuth != "" && m == s.derivedAuth {
		return "derived from " + filepath.Join(s.cfg.AuthDir, authdir.PrivateKey), true
	}
	return "", false
}

// AuthorizedKeyCount returns the number of distinct keys loaded from
// authorized_keys.
func (s *Server) AuthorizedKeyCount() int { return len(s.keys) }

// Listening reports whether the server is bound: true between a successful
// Listen and Shutdown.
func (s *Server) Listening() bool { return s.listening.Load() }

// Addr returns the bound address, or nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Listen binds cfg.ListenAddress. A busy port gives an error wrapping
// syscall.EADDRINUSE that names the address.
func (s *Server) Listen() (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return nil, errors.New("sshd: Listen after Shutdown")
	}
	if s.ln != nil {
		return nil, fmt.Errorf("sshd: already listening on %s", s.ln.Addr())
	}
	addr := s.cfg.ListenAddress
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("SSH listen address %s is already in use (another worker-agent or sshd in this pod?); stop it or choose another port with --ssh.listen-address: %w", addr, err)
		case errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("cannot listen for SSH on %s: ports below 1024 need privileges a restricted pod does not have; use 2222: %w", addr, err)
		}
		return nil, fmt.Errorf("listen for SSH on %s: %w", addr, err)
	}
	s.ln = ln
	s.listening.Store(true)
	s.log.Info("ssh server listening", "addr", ln.Addr().String())
	return ln.Addr(), nil
}

// Serve accepts connections on the listener bound by Listen until Shutdown
// (or until ctx is cancelled, which starts a Shutdown bounded by
// ShutdownGrace plus a few seconds). It returns nil after a shutdown and an
// error when accepting fails for another reason.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	switch {
	case s.shutdown:
		s.mu.Unlock()
		return nil
	case ln == nil:
		s.mu.Unlock()
		return errors.New("sshd: Serve called before Listen")
	case s.serving:
		s.mu.Unlock()
		return errors.New("sshd: Serve called twice")
	}
	s.serving = true
	s.mu.Unlock()

	stop := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-ctx.Done():
			s.beginShutdown()
		case <-stop:
		}
	}()
	err := s.acceptLoop(ln)
	close(stop)
	<-watchDone
	close(s.serveDone)
	if ctx.Err() != nil {
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace+5*time.Second)
		if serr := s.Shutdown(sctx); serr != nil {
			s.log.Warn("shutdown after context cancellation incomplete", "err", serr)
		}
		cancel()
	}
	if s.isShutdown() {
		return nil
	}
	return err
}

func (s *Server) acceptLoop(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isShutdown() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
				errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("ssh accept failed; retrying", "addr", ln.Addr().String(), "err", err, "retry_in", delay)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("accept SSH connections on %s: %w", ln.Addr(), err)
		}
		delay = 0
		select {
		case s.startups <- struct{}{}:
		default:
			s.m.conn(connRejectedMaxStartups)
			if n, ok := s.rejectLog.allow(time.Now()); ok {
				s.log.Warn("ssh connection refused: too many unauthenticated connections (MaxStartups)",
					"remote", c.RemoteAddr().String(), "max_startups", s.cfg.MaxStartups, "refused_since_last_log", n)
			}
			c.Close()
			continue
		}
		if !s.trackConnGoroutine() {
			<-s.startups
			c.Close()
			continue
		}
		go func() {
			defer s.connWG.Done()
			s.serveConn(c, func() { <-s.startups })
		}()
	}
}

func (s *Server) trackConnGoroutine() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	s.connWG.Add(1)
	return true
}

func (s *Server) isShutdown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// beginShutdown stops accepting; it reports whether this call started the
// shutdown.
func (s *Server) beginShutdown() bool {
	s.mu.Lock()
	first := !s.shutdown
	s.shutdown = true
	ln := s.ln
	s.mu.Unlock()
	s.listening.Store(false)
	if first && ln != nil {
		ln.Close()
	}
	return first
}

// Shutdown stops accepting, sends SIGTERM to the process group of every
// running session, SIGKILL after ShutdownGrace (or shortly before ctx's
// deadline, whichever is first), waits for the sessions to end, closes every
// connection and returns. It returns ctx.Err() if ctx ends first. Calling it
// again waits for the first call.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginShutdown()
	s.mu.Lock()
	first := !s.shutdownClaimed
	s.shutdownClaimed = true
	serving := s.serving
	s.mu.Unlock()
	if !first {
		select {
		case <-s.shutdownDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(s.shutdownDone)
	start := time.Now()
	if serving {
		if err := waitCtx(ctx, s.serveDone); err != nil {
			s.closeAllConns()
			return err
		}
	}

	killAfter := s.cfg.ShutdownGrace
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl) * 9 / 10; d < killAfter {
			killAfter = max(d, 0)
		}
	}
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	for _, sess := range sessions {
		sess.abort("server shutting down", killAfter)
	}
	sessDone := make(chan struct{})
	go func() { s.sessWG.Wait(); close(sessDone) }()
	err := waitCtx(ctx, sessDone)
	s.closeAllConns()
	if err == nil {
		connDone := make(chan struct{})
		go func() { s.connWG.Wait(); close(connDone) }()
		err = waitCtx(ctx, connDone)
	}
	s.log.Info("ssh server stopped", "sessions_open", len(sessions), "took", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

func (s *Server) closeAllConns() {
	s.mu.Lock()
	conns := make([]*connState, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.raw.Close()
	}
}

func waitCtx(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// logLimiter lets one log line through per second and counts the rest.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *logLimiter) allow(now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < time.Second {
		l.suppressed++
		return 0, false
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return n, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[:n]
	// Do not split a UTF-8 sequence.
	for i := 0; i < 3 && len(cut) > 0 && cut[len(cut)-1]&0xC0 == 0x80; i++ {
		cut = cut[:len(cut)-1]
	}
	if len(cut) > 0 && cut[len(cut)-1] >= 0xC0 {
		cut = cut[:len(cut)-1]
	}
	return cut + "...(" + strconv.Itoa(len(s)) + " bytes)"
}
