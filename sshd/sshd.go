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
//     (jobkey). Password, keyboard-interactive and "none" are never
//     offered. The decision uses only the key of the current callback
//     (compared by its wire encoding), and the identity travels in
//     ssh.Permissions.Extensions. A key line's "restrict" or "no-pty" keeps
//     its key from a PTY; a key with options the server does not implement
//     (command=, from=, ...) is refused and logged as an error.
//   - The host key is the job's id_rsa, so clients pin it to id_rsa.pub with
//     no known_hosts to distribute, plus an ed25519 key derived from it
//     (jobkey.LoadJobKey; none in FIPS 140 mode). Without id_rsa an ed25519
//     key is generated once into Config.StateDir and reused (clients cannot
//     pin that one).
//   - The keys follow the mounted Secret: authorized_keys, id_rsa and
//     id_rsa.pub are re-checked (one stat each) whenever keys are used and
//     re-read when they changed, as after the kubelet swaps the Secret's
//     "..data" link; each change is logged with the old and new
//     fingerprints. An authorized_keys that turns unreadable or empty
//     refuses every login (Server.KeyError says why).
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
//     §6.10), a signal outside the RFC's list by the name "BUS@podmpi" (the
//     RFC's "sig-name@xyz" form; OpenSSH's sshd says "SIG@openssh.com" and
//     loses the number), so that podmpi-rsh exits 128+N for each. When the client disconnects or closes the channel the whole
//     process group gets SIGTERM, then SIGKILL after Config.KillGrace; group
//     members left behind after a normal exit are terminated the same way,
//     and group members re-parented to the agent (when it is PID 1 or a
//     child subreaper) are reaped.
//   - OpenSSH-grade limits: LoginGraceTime, MaxStartups "begin:rate:full"
//     with random early drop and PerSourceMaxStartups per client IP (an
//     over-limit connection gets one text line naming the limit, then is
//     closed), MaxAuthTries, MaxSessions, keepalive@openssh.com probes (off by
//     default, as OpenSSH's ClientAliveInterval; TCP keepalive on with the
//     kernel's timing, as OpenSSH's TCPKeepAlive), and client "env" requests bounded per session by what execve accepts. No
//     port, agent or X11 forwarding, no subsystems (sftp is refused).
//   - A launcher lost without closing its connections leaves no orphans
//     once its replacement connects: a connection that declares a newer
//     instance of the job's launcher (launcherid.RequestType) ends the
//     sessions of older instances' connections, on proof from this
//     server's own clock (launcher.go). Connections that declare nothing
//     are never ended that way.
//   - The ranks' status endpoint, for the newest launcher instance that asks
//     (statusfwd.RequestType): HTTPS on loopback in this pod with the run's
//     certificate; each rank's request is checked here (path, method, size,
//     bearer token) within bounds before it is carried to the launcher in a
//     channel of its connection (rank_endpoint.go).
//   - TCP_NODELAY and, during the handshake, TCP_QUICKACK after every read,
//     which removes a ~40 ms Nagle/delayed-ACK stall per OpenSSH connection.
//   - Key exchange, cipher and MAC lists are set explicitly (jobkey.KeyExchanges,
//     Ciphers, MACs: no SHA-1 key exchange, no SHA-1 or truncated MAC), and an
//     RSA host key signs with SHA-2 only. Under GODEBUG=fips140=on (FIPS 140-3
//     mode) x/crypto drops the non-approved entries, leaving ML-KEM, the NIST
//     curves, AES and HMAC-SHA2.
//
// Every connection and session is audit-logged on the caller's slog.Logger
// (never key material or environment values) and counted in Metrics; the
// start of each session's command (its pid) goes to Config.OnSessionStart and
// its end (status or signal, and whether the server ended it) to
// Config.OnSessionExit, both with the launcher instance its connection
// declared.
package sshd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// Defaults applied by New for zero Config fields.
const (
	DefaultShell                = "/bin/sh"
	DefaultLoginGraceTime       = 30 * time.Second
	DefaultMaxStartups          = 100 // unauthenticated connections at which every new one is refused
	DefaultMaxStartupsBegin     = 20  // ... at which random early drop starts
	DefaultMaxStartupsRate      = 30  // ... percent refused at DefaultMaxStartupsBegin, rising to 100
	DefaultPerSourceMaxStartups = 10  // unauthenticated connections from one IP address
	DefaultMaxAuthTries         = 6
	DefaultMaxSessions          = 10
	// DefaultKeepAliveInterval is 0: no keepalive probes, as OpenSSH's
	// ClientAliveInterval 0, so that a network partition OpenSSH carries
	// through does not drop a healthy job's daemons either. TCP keepalive
	// stays on with the kernel's settings (jobkey.TCPKeepAlive).
	DefaultKeepAliveInterval = 0
	DefaultKeepAliveCountMax = 3
	DefaultKillGrace         = time.Second
	DefaultShutdownGrace     = 10 * time.Second
)

// Config configures a Server. Zero values select the defaults above.
type Config struct {
	ListenAddress        string        // TCP address, e.g. ":2222"
	AuthDir              string        // resolved auth dir (authorized_keys required; id_rsa optional)
	StateDir             string        // where a generated host key lives when id_rsa is absent ("" -> in memory)
	Shell                string        // "" -> /bin/sh; sessions run `Shell -c <command>`
	Env                  []string      // base environment of sessions; nil -> os.Environ()
	AllowPTY             bool          // grant pty-req (Linux only); MPI never asks for one
	LoginGraceTime       time.Duration // 0 -> 30s: time from TCP accept to successful auth
	MaxStartups          int           // 0 -> 100 (and Begin 20, Rate 30): concurrent unauthenticated connections at which all new ones are refused
	MaxStartupsBegin     int           // 0 -> MaxStartups (no early drop) when MaxStartups is set: from here new connections are refused at random
	MaxStartupsRate      int           // 0 -> 30: percent refused at MaxStartupsBegin, rising linearly to 100 at MaxStartups
	PerSourceMaxStartups int           // 0 -> 10: concurrent unauthenticated connections from one IP address
	MaxAuthTries         int           // 0 -> 6: failed auth attempts per connection
	MaxSessions          int           // 0 -> 10: open session channels per connection
	KeepAliveInterval    time.Duration // 0 or negative -> no keepalive probes (OpenSSH's ClientAliveInterval 0)
	KeepAliveCountMax    int           // 0 -> 3 unanswered probes before the connection is dropped
	KillGrace            time.Duration // 0 -> 1s: SIGTERM -> SIGKILL for a session's process group
	ShutdownGrace        time.Duration // 0 -> 10s: SIGTERM -> SIGKILL for sessions on Shutdown (capped by its ctx)
	Logger               *slog.Logger  // nil -> discard
	Metrics              *Metrics      // nil -> none
	// OnSessionStart, when set, is called once per session whose command
	// started, right after it started. It must not block.
	OnSessionStart func(SessionStart)
	// OnSessionExit, when set, is called once per session whose command
	// started or failed to start, after its exit status was sent. It must
	// not block.
	OnSessionExit func(SessionExit)
	// OnLauncherReplaced, when set, is called when a newer launcher
	// instance of the job made the server end an older one's sessions
	// (see launcher.go). It must not block.
	OnLauncherReplaced func(LauncherReplaced)
}

// SessionExit is how one session's command ended.
type SessionExit struct {
	Session string // the session id of the logs ("c3/s4")
	Command string // the command line, shortened as in the logs; "(shell)" for a shell session
	PID     int    // 0 when the command did not start
	// ExitCode is the exit status; -1 when Signal ended the command.
	ExitCode   int
	Signal     syscall.Signal
	CoreDumped bool
	// Aborted is true when the server ended the session itself: its client
	// went away, a newer launcher of the job connected, or the server is
	// shutting down.
	Aborted bool
	// Replaced is true when the server ended the session because a newer
	// launcher instance of the job connected (Aborted is true too).
	Replaced bool
	Duration time.Duration
	// Launcher is the launcher instance (launcherid.Instance.ID) the
	// session's connection had declared when the command started, "" when
	// none.
	Launcher string
}

// SessionStart is one session's command as it started.
type SessionStart struct {
	Session string // the session id of the logs ("c3/s4")
	PID     int    // the command's process (the shell that runs it)
	// Launcher is the launcher instance (launcherid.Instance.ID) the
	// session's connection had declared, "" when none.
	Launcher string
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
		if c.MaxStartupsBegin <= 0 {
			c.MaxStartupsBegin = DefaultMaxStartupsBegin
		}
	}
	if c.MaxStartupsBegin <= 0 || c.MaxStartupsBegin > c.MaxStartups {
		c.MaxStartupsBegin = c.MaxStartups
	}
	if c.MaxStartupsRate <= 0 || c.MaxStartupsRate > 100 {
		c.MaxStartupsRate = DefaultMaxStartupsRate
	}
	if c.PerSourceMaxStartups <= 0 {
		c.PerSourceMaxStartups = DefaultPerSourceMaxStartups
	}
	if c.MaxAuthTries <= 0 {
		c.MaxAuthTries = DefaultMaxAuthTries
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
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
	extNoPTY     = "podmpi-no-pty" // "1": the key's authorized_keys line has restrict or no-pty
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
	keys   *keyStore // host keys and authorized keys, re-read when the Secret changes
	id     identity
	limits *startupLimiter // MaxStartups and PerSourceMaxStartups
	envMax int             // bytes of client env requests one session may add

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
	failed          map[net.Addr]*connState    // pre-auth conns, for ConnectionFailedCallback
	launchers       map[string]*launcherRecord // declared launcher instances by id (launcher.go)
	launcherSeq     uint64                     // instances heard of so far
	rankEP          *rankEndpoint              // the ranks' status endpoint (rank_endpoint.go), nil when none

	connWG       sync.WaitGroup // connection and keepalive goroutines
	sessWG       sync.WaitGroup // session goroutines
	shutdownDone chan struct{}
}

// New loads the host key and authorized_keys from cfg.AuthDir and prepares a
// server. Key problems are returned as *jobkey.Error (use errors.As), naming
// the file and a fix.
func New(cfg Config) (*Server, error) {
	cfg.applyDefaults()
	if cfg.AuthDir == "" {
		return nil, &jobkey.Error{Path: "(empty)", Op: "find auth dir", Err: errors.New("no auth dir configured"),
			Hint: "pass the resolved auth dir (jobkey.Find) holding authorized_keys"}
	}
	s := &Server{
		cfg:          cfg,
		log:          cfg.Logger,
		m:            cfg.Metrics,
		limits:       newStartupLimiter(cfg),
		conns:        make(map[*connState]struct{}),
		sessions:     make(map[*session]struct{}),
		failed:       make(map[net.Addr]*connState),
		launchers:    make(map[string]*launcherRecord),
		serveDone:    make(chan struct{}),
		shutdownDone: make(chan struct{}),
	}
	var err error
	if s.keys, err = newKeyStore(cfg.AuthDir, cfg.StateDir, s.log); err != nil {
		return nil, err
	}
	s.id = lookupIdentity(cfg.Env)
	s.envMax = envBudget(cfg.Env, cfg.Shell, stackLimit())
	if _, err := os.Stat(cfg.Shell); err != nil {
		s.log.Warn("session shell not found; every command will fail with exit status 127",
			"shell", cfg.Shell, "err", err)
	}
	s.gs = &gliderssh.Server{
		Version: "podmpi",
		// HostSigners stays empty: serverConfig adds the current host keys
		// to each connection's configuration, so a rotated job key is
		// served from the next connection on.
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
	k := s.keys.current()
	s.log.Info("ssh server configured",
		"auth_dir", cfg.AuthDir, "authorized_keys", len(k.authorized),
		"host_key_fp", jobkey.Fingerprint(k.signer.PublicKey()), "host_key_type", k.signer.PublicKey().Type(),
		"derived_key_fp", derivedFP(k.derived), "host_key_pinned", k.pinned,
		"max_startups", s.limits.String(), "per_source_max_startups", cfg.PerSourceMaxStartups,
		"session_env_max_bytes", s.envMax,
		"shell", cfg.Shell, "passwd_user", s.id.passwdName, "home", s.id.home,
		"uid", os.Getuid(), "gid", os.Getgid())
	return s, nil
}

// HostKeyFingerprint returns the host key's SHA256 fingerprint ("SHA256:...").
// The job key is re-read when it changes on disk (a rotated Secret).
func (s *Server) HostKeyFingerprint() string {
	return jobkey.Fingerprint(s.keys.current().signer.PublicKey())
}

// DerivedKeyFingerprint returns the SHA256 fingerprint of the ed25519 key
// derived from the job key, which the server offers as a second host key
// and OpenSSH clients that pin nothing negotiate; "" when there is none
// (an ed25519 job key, no id_rsa, FIPS 140 mode).
func (s *Server) DerivedKeyFingerprint() string { return derivedFP(s.keys.current().derived) }

// RequestKey is the key that proves a request comes from a holder of the
// job's id_rsa (jobkey.RequestKey), derived from the job key as it is now;
// nil when there is none (no id_rsa, an ed25519 job key, FIPS 140 mode).
func (s *Server) RequestKey() []byte { return jobkey.RequestKey(s.keys.current().derived) }

// HostKeyPinned reports whether the host key is the job's id_rsa, which
// clients can pin to id_rsa.pub.
func (s *Server) HostKeyPinned() bool { return s.keys.current().pinned }

// KeyError describes why the keys in use differ from what the auth dir
// holds now (authorized_keys unusable after a change, so every login is
// refused; a changed job key that does not load), or nil.
func (s *Server) KeyError() error { return s.keys.current().problem }

// authorizedKey reports whether key may log in, where it is authorized
// (its authorized_keys line, or the key derived from the job's id_rsa) and
// that line's restrictions. authorized_keys is re-checked on every call.
func (s *Server) authorizedKey(key ssh.PublicKey) (source string, line jobkey.Key, ok bool) {
	return s.keys.current().lookup(key, s.keys.akPath, s.keys.jobKeyPath)
}

// AuthorizedKeyCount returns the number of distinct keys accepted from
// authorized_keys as it is now (0 while it is unusable).
func (s *Server) AuthorizedKeyCount() int { return len(s.keys.current().authorized) }

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
	lc := net.ListenConfig{KeepAliveConfig: jobkey.TCPKeepAlive}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
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
		src := sourceOf(c)
		release, reason, line := s.limits.acquire(src)
		if release == nil {
			s.m.conn(reason)
			if n, ok := s.rejectLog.allow(time.Now()); ok {
				total, bySrc := s.limits.held()
				s.log.Warn("ssh connection refused: too many unauthenticated connections",
					"remote", c.RemoteAddr().String(), "reason", reason, "unauthenticated", total, "from_this_source", bySrc[src],
					"max_startups", s.limits.String(), "per_source_max_startups", s.cfg.PerSourceMaxStartups,
					"refused_since_last_log", n)
			}
			s.refuseConn(c, line)
			continue
		}
		if !s.trackConnGoroutine() {
			release()
			c.Close()
			continue
		}
		go func() {
			defer s.connWG.Done()
			s.serveConn(c, release)
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
