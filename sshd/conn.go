package sshd

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/statusfwd"
	"github.com/podmpi/podmpi/jobkey"
)

// connState is the server's view of one TCP connection.
type connState struct {
	id       string
	raw      net.Conn
	remote   net.Addr // unique per connection (key of Server.failed)
	local    net.Addr
	rc       syscall.RawConn // nil when not a TCP conn
	start    time.Time
	deadline time.Time // LoginGraceTime expiry

	preAuth     atomic.Bool // true until authenticated: deadline pinned, QUICKACK re-armed
	releaseOnce sync.Once
	release     func() // frees the MaxStartups slot

	mu            sync.Mutex
	authenticated bool
	user          string
	noneCount     int
	failures      int  // as x/crypto counts them for MaxAuthTries
	offeredKnown  bool // an authorized key was offered
	unknownFP     string
	triedOther    bool // password / keyboard-interactive / other methods
	attempts      int
	failErr       error
	sessions      int
	keyFP         string
	keyType       string
	keySource     string
	keys          *keySnapshot // the keys when the connection's config was made

	// launcher is the launcher instance the connection declared, nil when
	// none; guarded by Server.mu.
	launcher *launcherRecord
}

func (c *connState) releaseStartup() {
	c.releaseOnce.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
}

// opaqueAddr gives a non-TCP address (net.Pipe in tests and fuzzing) a
// per-connection identity.
type opaqueAddr struct{ net.Addr }

// wrappedConn pins the LoginGraceTime deadline until authentication
// (gliderlabs resets deadlines before every read and write) and re-arms
// TCP_QUICKACK after every read of the handshake.
type wrappedConn struct {
	net.Conn
	st *connState
}

func (c *wrappedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.st.preAuth.Load() && c.st.rc != nil && n > 0 {
		setQuickAck(c.st.rc)
	}
	return n, err
}

func (c *wrappedConn) RemoteAddr() net.Addr { return c.st.remote }

func (c *wrappedConn) SetDeadline(t time.Time) error {
	if c.st.preAuth.Load() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *wrappedConn) SetReadDeadline(t time.Time) error {
	if c.st.preAuth.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *wrappedConn) SetWriteDeadline(t time.Time) error {
	if c.st.preAuth.Load() {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

// serveConn runs one connection to its end. release frees its MaxStartups
// slot (called at authentication or at the end, whichever is first).
func (s *Server) serveConn(c net.Conn, release func()) {
	st := &connState{
		id:      "c" + strconv.FormatUint(s.nextConn.Add(1), 10),
		raw:     c,
		remote:  c.RemoteAddr(),
		local:   c.LocalAddr(),
		start:   time.Now(),
		release: release,
	}
	if _, ok := st.remote.(*net.TCPAddr); !ok {
		st.remote = &opaqueAddr{st.remote}
	}
	st.deadline = st.start.Add(s.cfg.LoginGraceTime)
	st.preAuth.Store(true)
	defer st.releaseStartup()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if rc, err := tc.SyscallConn(); err == nil {
			st.rc = rc
			setQuickAck(rc)
		}
	}
	if err := c.SetDeadline(st.deadline); err != nil {
		c.Close()
		return
	}

	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[st] = struct{}{}
	s.failed[st.remote] = st
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, st)
		delete(s.failed, st.remote)
		s.mu.Unlock()
		s.endRankEndpoint(st)
	}()

	s.log.Info("ssh connection", "conn", st.id, "remote", st.remote.String())
	s.gs.HandleConn(&wrappedConn{Conn: c, st: st})
	c.Close()

	st.mu.Lock()
	defer st.mu.Unlock()
	if st.authenticated {
		s.log.Info("ssh connection closed", "conn", st.id, "remote", st.remote.String(), "user", st.user,
			"duration", time.Since(st.start).Round(time.Millisecond))
		return
	}
	s.m.conn(connHandshakeFailed)
	reason := ""
	timedOut := !time.Now().Before(st.deadline)
	switch {
	case st.attempts == 0:
	case st.failures >= s.cfg.MaxAuthTries:
		reason = authMaxTries
	case timedOut:
		reason = authTimeout
	case st.offeredKnown:
		reason = authSignature
	case st.unknownFP != "":
		reason = authUnknownKey
	default:
		reason = authNoKey
	}
	attrs := []any{"conn", st.id, "remote", st.remote.String(), "duration", time.Since(st.start).Round(time.Millisecond)}
	if st.attempts > 0 {
		s.m.authFailure(reason)
		attrs = append(attrs, "user", truncate(st.user, 64), "reason", reason, "attempts", st.attempts)
		if st.unknownFP != "" {
			attrs = append(attrs, "last_unknown_key_fp", st.unknownFP)
		}
	}
	if timedOut {
		attrs = append(attrs, "login_grace_time", s.cfg.LoginGraceTime)
	}
	if st.failErr != nil {
		attrs = append(attrs, "err", st.failErr.Error())
	}
	if st.attempts > 0 {
		s.log.Warn("ssh authentication failed", attrs...)
	} else {
		s.log.Info("ssh handshake failed", attrs...)
	}
}

func (s *Server) connCallback(ctx gliderssh.Context, c net.Conn) net.Conn {
	w, ok := c.(*wrappedConn)
	if !ok { // only serveConn feeds HandleConn
		return nil
	}
	ctx.SetValue(ctxKeyConnState, w.st)
	return c
}

func (s *Server) connectionFailed(c net.Conn, err error) {
	s.mu.Lock()
	st := s.failed[c.RemoteAddr()]
	s.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		st.failErr = err
		st.mu.Unlock()
	}
}

func stateOf(ctx gliderssh.Context) *connState {
	st, _ := ctx.Value(ctxKeyConnState).(*connState)
	return st
}

// publicKeyHandler decides on the key of this call only: it is in
// authorized_keys (compared by wire encoding) or it is not.
//
// This is also the query a client makes before it signs ("would this key
// do?"), so it answers from the keys of the connection's start; the
// decision itself (VerifiedPublicKeyCallback) re-checks the files.
func (s *Server) publicKeyHandler(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
	st := stateOf(ctx)
	var keys *keySnapshot
	if st != nil {
		st.mu.Lock()
		keys = st.keys
		st.mu.Unlock()
	}
	var ok bool
	if keys != nil {
		_, _, ok = keys.lookup(key, s.keys.akPath, s.keys.jobKeyPath)
	} else {
		_, _, ok = s.authorizedKey(key)
	}
	if st != nil {
		st.mu.Lock()
		if ok {
			st.offeredKnown = true
		} else {
			st.unknownFP = jobkey.Fingerprint(key)
		}
		st.mu.Unlock()
	}
	return ok
}

// serverConfig is called by gliderlabs once per connection; gliderlabs adds
// the PublicKeyCallback wrapping publicKeyHandler. The host keys are the
// current ones (re-read when the job's Secret changed) and the algorithms
// podmpi's explicit lists (jobkey.KeyExchanges, ...).
func (s *Server) serverConfig(ctx gliderssh.Context) *ssh.ServerConfig {
	st := stateOf(ctx)
	cfg := &ssh.ServerConfig{
		MaxAuthTries:            s.cfg.MaxAuthTries,
		PublicKeyAuthAlgorithms: append([]string(nil), jobkey.PublicKeyAuthAlgorithms...),
		// Called only after the client proved possession of the key (a
		// verified signature). The key is checked again here and the identity
		// is returned in fresh Permissions, never taken from earlier calls.
		VerifiedPublicKeyCallback: func(conn ssh.ConnMetadata, key ssh.PublicKey, _ *ssh.Permissions, sigAlg string) (*ssh.Permissions, error) {
			source, line, ok := s.authorizedKey(key)
			if !ok {
				return nil, errors.New("public key not in authorized_keys")
			}
			perms := &ssh.Permissions{Extensions: map[string]string{
				extKeyFP:     jobkey.Fingerprint(key),
				extKeyType:   key.Type(),
				extKeySource: source,
			}}
			if line.NoPTY {
				perms.Extensions[extNoPTY] = "1"
			}
			if st != nil {
				s.authenticated(ctx, st, conn, perms, sigAlg)
			}
			return perms, nil
		},
		AuthLogCallback: func(conn ssh.ConnMetadata, method string, err error) {
			if st == nil {
				return
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			st.attempts++
			st.user = conn.User()
			if method == "none" {
				st.noneCount++
			} else if method != "publickey" {
				st.triedOther = true
			}
			if err != nil && !(st.failures == 0 && method == "none" && st.noneCount == 1) {
				st.failures++
			}
			s.log.Debug("ssh auth attempt", "conn", st.id, "user", truncate(conn.User(), 64), "method", truncate(method, 32), "ok", err == nil)
		},
	}
	jobkey.SetAlgorithms(&cfg.Config)
	keys := s.keys.current()
	if st != nil {
		st.mu.Lock()
		st.keys = keys
		st.mu.Unlock()
	}
	for _, k := range keys.hostSigners() {
		cfg.AddHostKey(k)
	}
	return cfg
}

// authenticated ends the pre-auth phase of st: the grace deadline is
// cleared, the MaxStartups slot freed, and keepalives start.
func (s *Server) authenticated(ctx gliderssh.Context, st *connState, conn ssh.ConnMetadata, perms *ssh.Permissions, sigAlg string) {
	st.mu.Lock()
	if st.authenticated {
		st.mu.Unlock()
		return
	}
	st.authenticated = true
	st.user = conn.User()
	st.keyFP = perms.Extensions[extKeyFP]
	st.keyType = perms.Extensions[extKeyType]
	st.keySource = perms.Extensions[extKeySource]
	st.mu.Unlock()
	st.preAuth.Store(false)
	_ = st.raw.SetDeadline(time.Time{})
	st.releaseStartup()
	s.authOK.Add(1)
	s.m.conn(connAuthenticated)
	s.log.Info("ssh auth accepted", "conn", st.id, "remote", st.remote.String(), "user", truncate(conn.User(), 64),
		"method", "publickey", "key_fp", st.keyFP, "key_type", st.keyType, "sig_alg", sigAlg, "key_source", st.keySource,
		"client_version", truncate(string(conn.ClientVersion()), 64))
	if s.cfg.KeepAliveInterval > 0 && s.trackConnGoroutine() {
		go func() {
			defer s.connWG.Done()
			s.keepalive(ctx, st)
		}()
	}
}

// keepalive sends keepalive@openssh.com (want-reply) every interval and
// closes the connection when KeepAliveCountMax probes in a row went
// unanswered; one probe is outstanding at a time and each one's timeout is
// the interval.
func (s *Server) keepalive(ctx gliderssh.Context, st *connState) {
	t := time.NewTicker(s.cfg.KeepAliveInterval)
	defer t.Stop()
	var reply chan error
	missed := 0
	for {
		select {
		case <-ctx.Done():
			if reply != nil {
				<-reply
			}
			return
		case <-t.C:
		}
		if reply != nil {
			select {
			case err := <-reply:
				reply = nil
				missed = 0
				if err != nil { // connection failing; ctx ends soon
					continue
				}
			default:
				missed++
				if missed < s.cfg.KeepAliveCountMax {
					continue
				}
				s.log.Warn("ssh client not answering keepalives; dropping connection", "conn", st.id,
					"remote", st.remote.String(), "unanswered", missed, "interval", s.cfg.KeepAliveInterval)
				st.raw.Close()
				<-reply
				return
			}
		}
		sc, _ := ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
		if sc == nil { // handshake still finishing
			continue
		}
		reply = make(chan error, 1)
		go func() {
			_, _, err := sc.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
	}
}

// rejectChannel refuses every channel type but "session": direct-tcpip
// (ssh -L), forwarded-tcpip, x11, auth-agent and streamlocal.
func (s *Server) rejectChannel(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, ctx gliderssh.Context) {
	kind := "other"
	switch nc.ChannelType() {
	case "direct-tcpip", "forwarded-tcpip", "direct-streamlocal@openssh.com", "forwarded-streamlocal@openssh.com":
		kind = "port_forward"
	case "x11":
		kind = "x11"
	case "auth-agent@openssh.com":
		kind = "agent"
	}
	s.m.refusedReq(kind)
	if st := stateOf(ctx); st != nil {
		s.log.Info("ssh channel refused", "conn", st.id, "type", truncate(nc.ChannelType(), 64))
	}
	_ = nc.Reject(ssh.Prohibited, fmt.Sprintf("%s channels are not allowed by worker-agent", truncate(nc.ChannelType(), 64)))
}

// globalRequest records a launcher's declaration (launcherid.RequestType,
// launcher.go) and refuses every other global request: tcpip-forward (ssh
// -R) and streamlocal forwarding, and answers keepalives from clients
// (false, as OpenSSH's sshd does for unknown requests).
func (s *Server) globalRequest(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	switch req.Type {
	case launcherid.RequestType:
		return s.launcherRequest(ctx, req), nil
	case statusfwd.RequestType:
		return s.rankEndpointRequest(ctx, req)
	case "tcpip-forward", "cancel-tcpip-forward", "streamlocal-forward@openssh.com", "cancel-streamlocal-forward@openssh.com":
		s.m.refusedReq("port_forward")
		if st := stateOf(ctx); st != nil {
			s.log.Info("ssh port forwarding refused", "conn", st.id, "request", req.Type)
		}
	}
	return false, nil
}
