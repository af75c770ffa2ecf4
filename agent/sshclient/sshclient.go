// Package sshclient dials a worker-agent with x/crypto/ssh in named phases,
// so that every failure says which step broke and what to do about it. It is
// shared by the launcher's probe (agent/launcher/probe) and by the ssh-compatible
// client that mpirun uses as its remote shell (agent/rsh).
//
// A connection goes through these phases, each of which can fail:
//
//	config          the configuration is unusable (no client key, nothing to pin)
//	dns             resolve the worker's name (skipped for IP literals)
//	tcp-refused     connect: nothing listens on the port
//	tcp-timeout     connect: no answer (SYN dropped, for example by a NetworkPolicy)
//	tcp             connect: any other network error (no route, reset, ...)
//	handshake       SSH version exchange and key exchange
//	host-key        the server's host key is not the job's pinned key
//	auth            the server refused the job's client key
//	remote-command  the session or the command on the worker failed
//
// Host keys are pinned: both operators mount one Secret (id_rsa, id_rsa.pub,
// authorized_keys) into every pod and worker-agent serves id_rsa as its host
// key, so the launcher (and any worker acting as a client) can require the
// server to present exactly the key in id_rsa.pub. Nothing is learned on
// first use and no known_hosts file is read or written.
//
// Dial never reads $HOME, ~/.ssh, /etc/passwd or ssh_config: it works under
// any UID. Key exchanges, ciphers and MACs are podmpi's explicit lists
// (jobkey.KeyExchanges, Ciphers, MACs: no SHA-1 key exchange, no SHA-1 or
// truncated MAC), the ones worker-agent offers; in FIPS 140 mode x/crypto
// keeps only their approved entries, which still meet a worker in FIPS
// mode and OpenSSH.
//
// A worker-agent over its limit of unauthenticated connections answers with
// one line of text (RefusalMarker) instead of its SSH identification; that
// is a handshake failure that says so, and Transient.
//
// A connection of the launcher (Config.Launcher) declares its launcher
// instance right after authentication, within the handshake's deadline
// (package launcherid): a worker-agent ends what an older instance of the
// job's launcher left running; any other server refuses the request, which
// changes nothing.
package sshclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/jobkey"
)

// Phase names the step of a connection that failed.
type Phase string

// The phases of Dial and of the remote command, in order.
const (
	PhaseConfig        Phase = "config" // the client configuration is unusable (no key, nothing to pin)
	PhaseDNS           Phase = "dns"
	PhaseTCPRefused    Phase = "tcp-refused"
	PhaseTCPTimeout    Phase = "tcp-timeout"
	PhaseTCP           Phase = "tcp" // other network errors, e.g. no route to host
	PhaseHandshake     Phase = "handshake"
	PhaseHostKey       Phase = "host-key"
	PhaseAuth          Phase = "auth"
	PhaseRemoteCommand Phase = "remote-command"
	// PhaseNotWorkerAgent: nothing accepts on the SSH port, but the host
	// answers on worker-agent's HTTP port as something else (another
	// launcher pod, a program without /info) or as a worker-agent that
	// listens for SSH elsewhere; the launcher's probe finds it out (see
	// probe.Options.Explain). Waiting does not help.
	PhaseNotWorkerAgent Phase = "not-worker-agent"
)

// Phases lists every phase, for metrics that count failures by phase.
var Phases = []Phase{PhaseConfig, PhaseDNS, PhaseTCPRefused, PhaseTCPTimeout, PhaseTCP, PhaseHandshake,
	PhaseHostKey, PhaseAuth, PhaseRemoteCommand, PhaseNotWorkerAgent}

// Transient reports whether a failure in phase p is worth retrying because
// the worker may still be starting: its name not yet in DNS (negative
// answers are cached up to 30 s), the agent not yet listening, or its pod IP
// not yet routable. Handshake, host-key, auth and remote-command failures
// come from a running server and are permanent, with one exception decided
// by Failure.Transient: a connection closed before the server sent a single
// byte.
func (p Phase) Transient() bool {
	switch p {
	case PhaseDNS, PhaseTCPRefused, PhaseTCPTimeout, PhaseTCP:
		return true
	}
	return false
}

// Failure is a classified connection failure: where, in which phase, the
// underlying error, and a one-line operator hint. It never holds key
// material.
type Failure struct {
	Host  string
	Port  int
	Phase Phase
	Cause error
	Hint  string
}

// Error returns "host:port: phase: cause; hint: hint" on one line.
func (f *Failure) Error() string {
	var b strings.Builder
	b.WriteString(oneLine(net.JoinHostPort(f.Host, strconv.Itoa(f.Port))))
	b.WriteString(": ")
	b.WriteString(oneLine(string(f.Phase)))
	b.WriteString(": ")
	b.WriteString(f.CauseText())
	if f.Hint != "" {
		b.WriteString("; hint: ")
		b.WriteString(oneLine(f.Hint))
	}
	return b.String()
}

// CauseText is the cause as one line, without x/crypto's redundant
// "ssh: handshake failed: " prefix (the phase already says so).
func (f *Failure) CauseText() string {
	if f.Cause == nil {
		return "unknown error"
	}
	return oneLine(strings.ReplaceAll(f.Cause.Error(), "ssh: handshake failed: ", ""))
}

// Unwrap returns the cause.
func (f *Failure) Unwrap() error { return f.Cause }

// Transient reports whether retrying may help: the phase is transient, the
// server accepted TCP and closed (or reset) the connection before sending any
// byte, or worker-agent refused it for too many unauthenticated connections
// (RefusalMarker). The silent close is what a sidecar proxy whose upstream is
// not listening yet looks like; the refusal is a server shedding load.
func (f *Failure) Transient() bool {
	if f == nil {
		return false
	}
	if f.Phase.Transient() {
		return true
	}
	if f.Phase == PhaseHandshake {
		var he *HandshakeError
		if errors.As(f.Cause, &he) {
			if _, refused := refusalLine(he.Received); refused {
				return true
			}
			if len(he.Received) == 0 && !isTimeout(he.Err) && isClosed(he.Err) {
				return true
			}
		}
	}
	return false
}

// LogValue renders the failure as structured log attributes.
func (f *Failure) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("host", f.Host), slog.Int("port", f.Port),
		slog.String("phase", string(f.Phase)), slog.String("cause", f.CauseText()),
		slog.String("hint", f.Hint))
}

func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.NewReplacer("\r", " ", "\n", " ").Replace(s)), " ")
}

// DefaultUser is the login name when Config.User is empty: the user of the
// Trainer v2 and mpi-operator images. worker-agent runs every session as its
// own UID whatever the name.
const DefaultUser = "mpiuser"

// Default timeouts.
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
)

// Config is what Dial needs. LoadJobConfig fills it from the job's auth dir.
type Config struct {
	// User is the login name; DefaultUser when empty.
	User string
	// Signer is the client key (the job's id_rsa, or -i). Required.
	Signer ssh.Signer
	// ExtraSigners are offered after Signer (further -i options).
	ExtraSigners []ssh.Signer
	// Derived is the ed25519 key derived from the job's id_rsa
	// (jobkey.LoadJobKey), nil when there is none. It is offered first for
	// user auth and accepted as the worker's host key besides HostKey: a
	// worker-agent with the same id_rsa derives the same key, and ed25519
	// saves ~6 ms of P-521 signatures per connection. Servers that do not
	// know it (OpenSSH) answer with the job key itself.
	Derived ssh.Signer
	// HostKey is the pinned server key (the job's id_rsa.pub). Required
	// unless InsecureIgnoreHostKey.
	HostKey ssh.PublicKey
	// HostKeySource names where HostKey came from, for messages.
	HostKeySource string
	// InsecureIgnoreHostKey accepts any server key. Only for debugging.
	InsecureIgnoreHostKey bool
	// ConnectTimeout bounds each TCP connect (and the DNS lookup);
	// DefaultConnectTimeout when zero.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds the SSH handshake including auth;
	// DefaultHandshakeTimeout when zero.
	HandshakeTimeout time.Duration
	// Resolver resolves host names; net.DefaultResolver when nil.
	Resolver *net.Resolver
	// Launcher, when not zero, is the launcher instance this connection
	// belongs to: Dial declares it to the worker right after
	// authentication, before any session (launcherid.RequestType), so
	// that a worker-agent can end the sessions of an older instance of the
	// job's launcher that was lost without closing its connections. Only
	// the launcher and the podmpi-rsh processes of its mpirun set it;
	// every other client declares nothing.
	Launcher launcherid.Instance
}

// Validate reports a configuration Dial cannot use, as a PhaseConfig failure
// for host:port.
func (c Config) Validate(host string, port int) *Failure {
	if c.Signer == nil {
		return &Failure{Host: host, Port: port, Phase: PhaseConfig,
			Cause: errors.New("no client key"),
			Hint:  "mount the job's SSH Secret (id_rsa) and point PODMPI_SSH_AUTH_DIR at it, or pass -i"}
	}
	if c.HostKey == nil && !c.InsecureIgnoreHostKey {
		return &Failure{Host: host, Port: port, Phase: PhaseConfig,
			Cause: errors.New("no pinned host key (id_rsa.pub not found next to the job key)"),
			Hint:  "mount the job's whole SSH Secret (id_rsa and id_rsa.pub) and point PODMPI_SSH_AUTH_DIR at it; PODMPI_SSH_INSECURE_IGNORE_HOST_KEY=true turns pinning off (debugging only)"}
	}
	if port <= 0 || port > 65535 {
		return &Failure{Host: host, Port: port, Phase: PhaseConfig,
			Cause: fmt.Errorf("port %d out of range", port), Hint: "use a port between 1 and 65535 (worker-agent listens on 2222)"}
	}
	if host == "" {
		return &Failure{Host: host, Port: port, Phase: PhaseConfig,
			Cause: errors.New("empty host name"), Hint: "check the hostfile"}
	}
	return nil
}

func (c Config) connectTimeout() time.Duration {
	if c.ConnectTimeout > 0 {
		return c.ConnectTimeout
	}
	return DefaultConnectTimeout
}

func (c Config) handshakeTimeout() time.Duration {
	if c.HandshakeTimeout > 0 {
		return c.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

// HostKeyAlgorithms returns the host key algorithms to offer so that the
// server presents a key of the pinned key's type: for RSA the SHA-2
// signature variants (ssh-rsa/SHA-1 is refused in FIPS mode and by modern
// servers), otherwise the key's own type.
func HostKeyAlgorithms(k ssh.PublicKey) []string {
	if k == nil {
		return nil
	}
	if k.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	}
	return []string{k.Type()}
}

// ClientConfig builds the x/crypto client configuration: public key auth with
// the job key, the pinned host key and its algorithms, and podmpi's key
// exchange, cipher and MAC lists (which x/crypto narrows in FIPS mode).
func (c Config) ClientConfig() *ssh.ClientConfig {
	user := c.User
	if user == "" {
		user = DefaultUser
	}
	var signers []ssh.Signer
	if c.Derived != nil {
		signers = append(signers, c.Derived)
	}
	if c.Signer != nil {
		signers = append(signers, c.Signer)
	}
	signers = append(signers, c.ExtraSigners...)
	cc := &ssh.ClientConfig{
		User:          user,
		Auth:          []ssh.AuthMethod{ssh.PublicKeys(signers...)},
		ClientVersion: "SSH-2.0-podmpi",
	}
	jobkey.SetAlgorithms(&cc.Config)
	if c.InsecureIgnoreHostKey {
		cc.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // explicit operator opt-in, warned about by callers
	} else {
		var derived ssh.PublicKey
		if c.Derived != nil && c.HostKey != nil {
			derived = c.Derived.PublicKey()
			cc.HostKeyAlgorithms = append(cc.HostKeyAlgorithms, derived.Type())
		}
		cc.HostKeyAlgorithms = append(cc.HostKeyAlgorithms, HostKeyAlgorithms(c.HostKey)...)
		cc.HostKeyCallback = pinnedHostKey(c.HostKey, derived, c.HostKeySource)
	}
	return cc
}

// Identity names what a connection made with c authenticates as and
// accepts from the server: the login name (DefaultUser when empty), the
// client keys in the order they are offered, the pinned host keys, or
// that any is accepted, and the launcher instance it declares. Two configurations with the same Identity make
// interchangeable connections to one host; the launcher's connection
// sharing serves a session only on a connection of the same Identity.
func (c Config) Identity() string {
	user := c.User
	if user == "" {
		user = DefaultUser
	}
	var b strings.Builder
	b.WriteString("user=" + strconv.Quote(user))
	for _, s := range append([]ssh.Signer{c.Derived, c.Signer}, c.ExtraSigners...) {
		if s != nil {
			b.WriteString(" key=" + ssh.FingerprintSHA256(s.PublicKey()))
		}
	}
	switch {
	case c.InsecureIgnoreHostKey:
		b.WriteString(" host=any")
	case c.HostKey != nil:
		b.WriteString(" host=" + ssh.FingerprintSHA256(c.HostKey))
	}
	if !c.Launcher.IsZero() {
		b.WriteString(" launcher=" + c.Launcher.ID)
	}
	return b.String()
}

// pinnedHostKey accepts the pinned job key, or the key derived from the
// job's private key (which only holders of id_rsa can present).
func pinnedHostKey(want, derived ssh.PublicKey, source string) ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, got ssh.PublicKey) error {
		if got != nil {
			for _, k := range []ssh.PublicKey{want, derived} {
				if k != nil && string(got.Marshal()) == string(k.Marshal()) {
					return nil
				}
			}
		}
		return &HostKeyError{Expected: want, Derived: derived, Presented: got, Source: source}
	}
}

// Dial connects to host:port and returns an authenticated client, or the
// classified failure of the first phase that failed. ctx bounds every phase;
// cfg's timeouts bound each attempt's connect and handshake.
func Dial(ctx context.Context, host string, port int, cfg Config) (*ssh.Client, *Failure) {
	if f := cfg.Validate(host, port); f != nil {
		return nil, f
	}
	addrs, err := resolve(ctx, host, cfg)
	if err != nil {
		return nil, Classify(host, port, PhaseDNS, err)
	}
	conn, err := connect(ctx, addrs, port, cfg.connectTimeout())
	if err != nil {
		return nil, Classify(host, port, PhaseTCP, err)
	}
	client, err := handshake(ctx, conn, net.JoinHostPort(host, strconv.Itoa(port)), cfg)
	if err != nil {
		return nil, Classify(host, port, PhaseHandshake, err)
	}
	return client, nil
}

// resolve returns the addresses of host; an IP literal (bracketed or not) is
// returned as is.
func resolve(ctx context.Context, host string, cfg Config) ([]string, error) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip := net.ParseIP(h); ip != nil {
		return []string{ip.String()}, nil
	}
	r := cfg.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	lctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout())
	defer cancel()
	addrs, err := r.LookupHost(lctx, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// connect tries each address in turn, each with its own timeout, and returns
// the first connection (TCP_NODELAY set; TCP keepalive as OpenSSH sets it,
// jobkey.TCPKeepAlive) or the last error.
func connect(ctx context.Context, addrs []string, port int, timeout time.Duration) (net.Conn, error) {
	var lastErr error
	for _, a := range addrs {
		d := net.Dialer{Timeout: timeout, KeepAliveConfig: jobkey.TCPKeepAlive}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a, strconv.Itoa(port)))
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true) // Go's default, made explicit: the handshake is many small writes
			}
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// handshake runs the SSH handshake on conn under a deadline and wraps its
// error so Classify can tell host-key, auth and non-SSH answers apart.
func handshake(ctx context.Context, conn net.Conn, addr string, cfg Config) (*ssh.Client, error) {
	deadline := time.Now().Add(cfg.handshakeTimeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	cc := cfg.ClientConfig()
	pc := &peekConn{Conn: conn}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			_ = conn.SetDeadline(time.Unix(1, 0)) // abort blocked reads and writes now
		case <-done:
		}
	}()
	c, chans, reqs, err := ssh.NewClientConn(pc, addr, cc)
	if err == nil && !cfg.Launcher.IsZero() {
		// Still under the handshake's deadline and ctx.
		if err = declare(c, cfg.Launcher); err != nil {
			c.Close()
		}
	}
	close(done)
	<-stopped
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		switch {
		case errors.As(err, &hk):
			return nil, err
		case isAuthError(err):
			fp := ""
			if cfg.Signer != nil {
				fp = ssh.FingerprintSHA256(cfg.Signer.PublicKey())
			}
			return nil, &AuthError{User: cc.User, KeyFingerprint: fp, Err: err}
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return nil, &HandshakeError{Received: pc.received(), Err: err}
	}
	if ctx.Err() != nil {
		c.Close()
		return nil, &HandshakeError{Received: pc.received(), Err: ctx.Err()}
	}
	_ = conn.SetDeadline(time.Time{})
	pc.stop()
	return ssh.NewClient(c, chans, reqs), nil
}

// declare sends the launcher instance's declaration and waits for the
// answer, so that the worker has recorded it before the first session
// opens. A refusal (OpenSSH, an agent older than the request, a payload it
// does not take) changes nothing; only a connection that fails meanwhile
// is an error.
func declare(c ssh.Conn, inst launcherid.Instance) error {
	if _, _, err := c.SendRequest(launcherid.RequestType, true, inst.Declaration(time.Now())); err != nil {
		return fmt.Errorf("declaring the launcher instance to the worker: %w", err)
	}
	return nil
}
