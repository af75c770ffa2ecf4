package sshclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/crypto/ssh"
)

// peekLimit is how many of the server's first bytes are kept to recognise
// what answered when the handshake fails: one line of text an SSH server
// may send before its identification (RFC 4253 §4.2 allows 255 bytes).
const peekLimit = 256

// RefusalMarker is the phrase of the line worker-agent sends (like
// OpenSSH's "Exceeded MaxStartups") when it refuses a connection because too
// many unauthenticated connections are open, from this client's IP address
// or in all.
const RefusalMarker = "too many unauthenticated connections"

// refusalLine returns the server's refusal line when got carries one.
func refusalLine(got []byte) (string, bool) {
	for line := range strings.SplitSeq(string(got), "\n") {
		if strings.Contains(line, RefusalMarker) {
			return strings.TrimSpace(line), true
		}
	}
	return "", false
}

// peekConn records the first peekLimit bytes read from the server.
type peekConn struct {
	net.Conn
	mu      sync.Mutex
	first   []byte
	stopped bool
}

func (p *peekConn) Read(b []byte) (int, error) {
	n, err := p.Conn.Read(b)
	if n > 0 {
		p.mu.Lock()
		if !p.stopped && len(p.first) < peekLimit {
			p.first = append(p.first, b[:min(n, peekLimit-len(p.first))]...)
		}
		p.mu.Unlock()
	}
	return n, err
}

func (p *peekConn) received() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.first...)
}

func (p *peekConn) stop() {
	p.mu.Lock()
	p.stopped = true
	p.first = nil
	p.mu.Unlock()
}

// HostKeyError is a server host key that is not the pinned one.
type HostKeyError struct {
	Expected  ssh.PublicKey // nil if nothing was pinned
	Derived   ssh.PublicKey // the key derived from the job's id_rsa, also accepted; nil if none
	Presented ssh.PublicKey
	Source    string // where Expected came from, e.g. /home/mpiuser/.ssh/id_rsa.pub
}

func (e *HostKeyError) Error() string {
	src := e.Source
	if src == "" {
		src = "id_rsa.pub"
	}
	msg := fmt.Sprintf("server presented host key %s, want %s from %s", describeKey(e.Presented), describeKey(e.Expected), src)
	if e.Derived != nil {
		msg += fmt.Sprintf(" (or %s, derived from the job's id_rsa)", describeKey(e.Derived))
	}
	return msg
}

func describeKey(k ssh.PublicKey) string {
	if k == nil {
		return "(none)"
	}
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// AuthError is the server refusing every offered client key.
type AuthError struct {
	User           string
	KeyFingerprint string // SHA256 fingerprint of the first offered key
	Err            error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("public key %s refused for user %q: %v", e.KeyFingerprint, e.User, e.Err)
}

// Unwrap returns the x/crypto error.
func (e *AuthError) Unwrap() error { return e.Err }

// HandshakeError is a failed SSH handshake together with the first bytes the
// server sent, which tell an HTTP or TLS answer from a silent peer.
type HandshakeError struct {
	Received []byte
	Err      error
}

func (e *HandshakeError) Error() string {
	if line, ok := refusalLine(e.Received); ok {
		return fmt.Sprintf("server refused the connection: %q", line)
	}
	switch {
	case len(e.Received) == 0:
		return fmt.Sprintf("%v (server sent nothing)", e.Err)
	case strings.HasPrefix(string(e.Received), "SSH-"):
		return e.Err.Error() // an SSH server: its bytes say nothing more
	}
	return fmt.Sprintf("%v (server sent %q)", e.Err, shorten(e.Received))
}

// Unwrap returns the handshake error.
func (e *HandshakeError) Unwrap() error { return e.Err }

func shorten(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// isAuthError matches x/crypto's client auth failure, which is a plain
// string ("ssh: unable to authenticate, attempted methods [...], no supported
// methods remain"), not a typed error. This is the one place that matches it.
func isAuthError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ssh: unable to authenticate")
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// Classify turns err, seen during phase (the step the caller was in:
// PhaseDNS, PhaseTCP for connect, PhaseHandshake, PhaseRemoteCommand), into a
// Failure with the precise phase and a hint. The phase is refined from the
// error: a connect error becomes tcp-refused, tcp-timeout or tcp (or dns when
// the dialer resolved a name); a handshake error becomes host-key or auth
// when it is one. Classify is pure and never panics; a nil err gives nil.
func Classify(host string, port int, phase Phase, err error) *Failure {
	if err == nil {
		return nil
	}
	f := &Failure{Host: host, Port: port, Phase: phase, Cause: err}
	var hk *HostKeyError
	var ae *AuthError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &hk):
		f.Phase = PhaseHostKey
		f.Hint = fmt.Sprintf("the worker's host key is not this job's key (%s): the job's SSH Secret was rotated and one side still holds the old key (worker-agent picks a new Secret up on the next connection, a running launcher keeps the key it started with; restart it), the worker runs with a different job's Secret, or the port is served by something other than worker-agent", describeKey(hk.Expected))
	case errors.As(err, &ae) || isAuthError(err):
		f.Phase = PhaseAuth
		fp := ""
		if ae != nil && ae.KeyFingerprint != "" {
			fp = " (fingerprint " + ae.KeyFingerprint + ")"
		}
		f.Hint = "the worker's authorized_keys does not hold this job's key" + fp + ": the SSH Secret was rotated and one side still holds the old key (a running launcher keeps the key it started with; restart it), or launcher and workers mount different Secrets; mount the same SSH Secret on launcher and workers"
	case strings.Contains(err.Error(), "no common algorithm for host key"):
		f.Phase = PhaseHostKey
		f.Hint = "the worker has no host key of the pinned key's type: it does not serve this job's key (a different job's Secret, a Secret rotated to another key type, or not worker-agent)"
	case phase == PhaseConfig:
		// Validate sets its own hint; a bare config error keeps the phase.
	case phase == PhaseRemoteCommand:
		f.Hint = remoteHint(err)
	case phase == PhaseHandshake:
		classifyHandshake(f, err)
	case errors.Is(err, context.Canceled):
		f.Hint = "interrupted before the connection was made"
	case phase == PhaseDNS || errors.As(err, &dnsErr):
		f.Phase = PhaseDNS
		f.Hint = dnsHint(err)
	default:
		classifyTCP(f, err)
	}
	return f
}

func dnsHint(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return "the name does not resolve (yet): the worker pod may not be scheduled or not yet in DNS; check the hostfile name, the headless Service (publishNotReadyAddresses: true) and the pod subdomain"
		case de.IsTimeout || isTimeout(err):
			return "the cluster DNS did not answer in time; check that CoreDNS is healthy and reachable from this pod"
		}
	}
	if isTimeout(err) {
		return "the cluster DNS did not answer in time; check that CoreDNS is healthy and reachable from this pod"
	}
	return "the name could not be resolved; check the hostfile name and the pod's DNS configuration"
}

func classifyTCP(f *Failure, err error) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		f.Phase = PhaseTCPRefused
		f.Hint = fmt.Sprintf("nothing listens on port %d of %s: worker-agent is not running (yet) or listens on another port; compare the worker's --ssh.listen-address with -p / PODMPI_SSH_PORT", f.Port, f.Host)
	case isTimeout(err):
		f.Phase = PhaseTCPTimeout
		f.Hint = fmt.Sprintf("no answer to the TCP connect: a NetworkPolicy may drop port %d between launcher and workers, or the pod IP is stale", f.Port)
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		f.Phase = PhaseTCP
		f.Hint = "no route to the worker: its pod is gone, restarting, or its IP is stale in DNS"
	default:
		f.Phase = PhaseTCP
		f.Hint = fmt.Sprintf("the TCP connection to port %d failed; check that the worker pod is running and reachable from this pod", f.Port)
	}
}

func classifyHandshake(f *Failure, err error) {
	f.Phase = PhaseHandshake
	var he *HandshakeError
	var got []byte
	if errors.As(err, &he) {
		got = he.Received
	}
	if _, ok := refusalLine(got); ok {
		f.Hint = fmt.Sprintf("worker-agent sheds load: too many unauthenticated connections are open on port %d, from this address or in all (the server's line names the limit). "+
			"Something floods port %d: find its address in the worker's log (\"ssh connection refused\") and stop it or restrict port %d with a NetworkPolicy; "+
			"if the load is legitimate, raise --ssh.per-source-max-startups or --ssh.max-startups on the workers", f.Port, f.Port, f.Port)
		return
	}
	switch {
	case len(got) >= 5 && string(got[:5]) == "HTTP/":
		f.Hint = "an HTTP server answered instead of SSH: a sidecar proxy intercepts the connection; set sidecar.istio.io/inject: \"false\" on the job's pods (or exclude the SSH port from interception)"
	case len(got) > 0 && (got[0] == 0x15 || got[0] == 0x16):
		f.Hint = "a TLS endpoint answered instead of SSH: a sidecar proxy (mTLS) intercepts the connection; set sidecar.istio.io/inject: \"false\" on the job's pods (or exclude the SSH port from interception)"
	case len(got) > 0 && !strings.HasPrefix(string(got), "SSH-") && !strings.Contains(string(got), "\nSSH-"):
		f.Hint = fmt.Sprintf("port %d speaks another protocol (first bytes %q); check the port: worker-agent listens on 2222 by default", f.Port, shorten(got))
	case len(got) == 0 && isTimeout(err):
		f.Hint = fmt.Sprintf("something accepted TCP on port %d but never spoke SSH: a sidecar proxy or another service holds the port, or worker-agent is overloaded", f.Port)
	case len(got) == 0:
		f.Hint = fmt.Sprintf("something accepted TCP on port %d and closed it without speaking SSH: a sidecar proxy whose upstream is not up yet, or worker-agent shedding load", f.Port)
	case strings.Contains(err.Error(), "no common algorithm"):
		f.Hint = "client and worker share no SSH algorithm; check that both run in the same FIPS mode (GODEBUG=fips140)"
	case isTimeout(err):
		f.Hint = "the SSH handshake did not finish in time: the worker or the network is overloaded"
	default:
		f.Hint = "the SSH handshake with the worker failed; check that the port is served by worker-agent"
	}
}

func remoteHint(err error) string {
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return fmt.Sprintf("the remote command exited with status %d", ee.ExitStatus())
	}
	var oce *ssh.OpenChannelError
	if errors.As(err, &oce) {
		return "the worker refused to open a session: it may limit sessions per connection or be shutting down"
	}
	if isClosed(err) {
		return "the connection was closed during the command: the worker-agent restarted or the pod is terminating"
	}
	return "the remote command could not be run; see the worker-agent log"
}
