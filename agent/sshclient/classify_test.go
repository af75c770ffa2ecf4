package sshclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

type classifyCase struct {
	name      string
	phase     Phase
	err       error
	want      Phase
	transient bool
	hint      string // substring
}

func classifyCases() []classifyCase {
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	return []classifyCase{
		{"refused", PhaseTCP, opErr(syscall.ECONNREFUSED), PhaseTCPRefused, true, "nothing listens on port 2222"},
		{"dial timeout", PhaseTCP, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, PhaseTCPTimeout, true, "NetworkPolicy may drop port 2222"},
		{"kernel timeout", PhaseTCP, opErr(syscall.ETIMEDOUT), PhaseTCPTimeout, true, "NetworkPolicy"},
		{"ctx deadline", PhaseTCP, context.DeadlineExceeded, PhaseTCPTimeout, true, "NetworkPolicy"},
		{"no route", PhaseTCP, opErr(syscall.EHOSTUNREACH), PhaseTCP, true, "no route"},
		{"net unreachable", PhaseTCP, opErr(syscall.ENETUNREACH), PhaseTCP, true, "no route"},
		{"reset on connect", PhaseTCP, opErr(syscall.ECONNRESET), PhaseTCP, true, "TCP connection to port 2222 failed"},
		{"nxdomain", PhaseDNS, &net.DNSError{Err: "no such host", Name: "w", IsNotFound: true}, PhaseDNS, true, "publishNotReadyAddresses"},
		{"dns timeout", PhaseDNS, &net.DNSError{Err: "i/o timeout", Name: "w", IsTimeout: true}, PhaseDNS, true, "CoreDNS"},
		{"dns other", PhaseDNS, errors.New("weird"), PhaseDNS, true, "could not be resolved"},
		{"dns via dialer", PhaseTCP, &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, PhaseDNS, true, "does not resolve"},
		{"cancelled", PhaseTCP, context.Canceled, PhaseTCP, true, "interrupted"},
		{"http", PhaseHandshake, &HandshakeError{Received: []byte("HTTP/1.1 400 Bad Request\r\n"), Err: io.EOF}, PhaseHandshake, false, `sidecar.istio.io/inject: "false"`},
		{"tls alert", PhaseHandshake, &HandshakeError{Received: []byte{0x15, 3, 1, 0, 2, 2, 0x46}, Err: io.EOF}, PhaseHandshake, false, "TLS endpoint"},
		{"tls handshake record", PhaseHandshake, &HandshakeError{Received: []byte{0x16, 3, 3}, Err: io.EOF}, PhaseHandshake, false, "TLS endpoint"},
		{"silent then timeout", PhaseHandshake, &HandshakeError{Err: fmt.Errorf("ssh: handshake failed: %w", os.ErrDeadlineExceeded)}, PhaseHandshake, false, "never spoke SSH"},
		{"silent then EOF", PhaseHandshake, &HandshakeError{Err: fmt.Errorf("ssh: handshake failed: %w", io.EOF)}, PhaseHandshake, true, "closed it without speaking SSH"},
		{"silent then reset", PhaseHandshake, &HandshakeError{Err: os.NewSyscallError("read", syscall.ECONNRESET)}, PhaseHandshake, true, "closed it without speaking SSH"},
		{"other protocol", PhaseHandshake, &HandshakeError{Received: []byte("220 smtp ready\r\n"), Err: io.EOF}, PhaseHandshake, false, "speaks another protocol"},
		{"banner lines then ssh", PhaseHandshake, &HandshakeError{Received: []byte("hello\r\nSSH-2.0-x\r\n"), Err: errors.New("ssh: no common algorithm for key exchange")}, PhaseHandshake, false, "FIPS"},
		{"ssh timeout mid kex", PhaseHandshake, &HandshakeError{Received: []byte("SSH-2.0-x\r\n"), Err: os.ErrDeadlineExceeded}, PhaseHandshake, false, "did not finish in time"},
		{"ssh other", PhaseHandshake, &HandshakeError{Received: []byte("SSH-2.0-x\r\n"), Err: errors.New("ssh: parse error")}, PhaseHandshake, false, "handshake with the worker failed"},
		{"host key", PhaseHandshake, fmt.Errorf("ssh: handshake failed: %w", &HostKeyError{}), PhaseHostKey, false, "different job's Secret"},
		{"host key rotation", PhaseHandshake, fmt.Errorf("ssh: handshake failed: %w", &HostKeyError{}), PhaseHostKey, false, "Secret was rotated and one side still holds the old key"},
		{"auth rotation", PhaseHandshake, &AuthError{User: "u", Err: errors.New("x")}, PhaseAuth, false, "Secret was rotated"},
		{"refused: too many unauthenticated", PhaseHandshake, &HandshakeError{Received: []byte("worker-agent: too many unauthenticated connections from 10.0.0.9 (per-source limit 10, --ssh.per-source-max-startups); try again later\r\n"), Err: io.EOF}, PhaseHandshake, true, "raise --ssh.per-source-max-startups or --ssh.max-startups"},
		{"refused after a reset", PhaseHandshake, &HandshakeError{Received: []byte("worker-agent: too many unauthenticated connections (100 open, --ssh.max-startups 20:30:100); try again later\r\n"), Err: os.NewSyscallError("read", syscall.ECONNRESET)}, PhaseHandshake, true, "floods port 2222"},
		{"host key type", PhaseHandshake, errors.New("ssh: handshake failed: ssh: no common algorithm for host key; we offered: [a], peer offered: [b]"), PhaseHostKey, false, "different job's Secret"},
		{"auth typed", PhaseHandshake, &AuthError{User: "u", KeyFingerprint: "SHA256:abc", Err: errors.New("x")}, PhaseAuth, false, "(fingerprint SHA256:abc)"},
		{"auth plain string", PhaseHandshake, errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain"), PhaseAuth, false, "authorized_keys does not hold this job's key"},
		{"remote exit", PhaseRemoteCommand, errors.New("boom"), PhaseRemoteCommand, false, "could not be run"},
		{"remote closed", PhaseRemoteCommand, io.EOF, PhaseRemoteCommand, false, "closed during the command"},
		{"config", PhaseConfig, errors.New("no key"), PhaseConfig, false, ""},
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range classifyCases() {
		t.Run(tc.name, func(t *testing.T) {
			f := Classify("w-1.job", 2222, tc.phase, tc.err)
			if f.Phase != tc.want {
				t.Fatalf("phase %s, want %s (%v)", f.Phase, tc.want, f)
			}
			if f.Transient() != tc.transient {
				t.Errorf("Transient() = %v, want %v", f.Transient(), tc.transient)
			}
			if !strings.Contains(f.Hint, tc.hint) {
				t.Errorf("hint %q, want it to contain %q", f.Hint, tc.hint)
			}
			if !errors.Is(f, tc.err) {
				t.Error("Failure does not unwrap to its cause")
			}
			if !strings.HasPrefix(f.Error(), "w-1.job:2222: "+string(tc.want)+": ") {
				t.Errorf("Error() = %q", f.Error())
			}
		})
	}
	if Classify("h", 1, PhaseTCP, nil) != nil {
		t.Fatal("nil error must classify as nil")
	}
}

func TestFailureErrorOneLine(t *testing.T) {
	t.Parallel()
	f := &Failure{Host: "::1", Port: 2222, Phase: PhaseHandshake,
		Cause: errors.New("ssh: handshake failed: ssh: disconnect, reason 2: line1\nline2\r\n"), Hint: "a\nb"}
	got := f.Error()
	want := "[::1]:2222: handshake: ssh: disconnect, reason 2: line1 line2; hint: a b"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if (&Failure{Host: "h", Port: 1, Phase: PhaseTCP}).Error() != "h:1: tcp: unknown error" {
		t.Fatal("nil cause")
	}
}

var knownPhases = map[Phase]bool{
	PhaseConfig: true, PhaseDNS: true, PhaseTCPRefused: true, PhaseTCPTimeout: true, PhaseTCP: true,
	PhaseHandshake: true, PhaseHostKey: true, PhaseAuth: true, PhaseRemoteCommand: true,
}

// FuzzClassify: any phase, message, received bytes and errno classify to a
// known phase (or the caller's own), without panicking, on one line.
func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases() {
		var recv []byte
		var he *HandshakeError
		if errors.As(tc.err, &he) {
			recv = he.Received
		}
		f.Add(string(tc.phase), tc.err.Error(), recv, uint8(0), "w-1.job", 2222)
	}
	f.Add("tcp", "", []byte(nil), uint8(111), "", 0)
	f.Add("handshake", "x", []byte("HTTP/"), uint8(104), "[::1]", -1)
	f.Add("handshake", "EOF", []byte("worker-agent: too many unauthenticated connections (100 open, --ssh.max-startups 20:30:100); try again later\r\n"), uint8(1), "w-1.job", 2222)
	f.Add("handshake", "reset", []byte("hello\r\nworker-agent: too many unauthenticated connections from ::1 (per-source limit 10"), uint8(3), "w-1.job", 2222)
	errnos := []syscall.Errno{0, syscall.ECONNREFUSED, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ECONNRESET, syscall.EPIPE}
	f.Fuzz(func(t *testing.T, phase, msg string, recv []byte, errno uint8, host string, port int) {
		var err error = errors.New(msg)
		if e := errnos[int(errno)%len(errnos)]; e != 0 {
			err = fmt.Errorf("%s: %w", msg, os.NewSyscallError("connect", e))
		}
		switch errno % 5 {
		case 1:
			err = &HandshakeError{Received: recv, Err: err}
		case 2:
			err = &net.DNSError{Err: msg, Name: host, IsNotFound: errno&8 != 0, IsTimeout: errno&16 != 0}
		case 3:
			err = fmt.Errorf("wrapped: %w", &HandshakeError{Received: recv, Err: io.EOF})
		}
		fl := Classify(host, port, Phase(phase), err)
		if fl == nil {
			t.Fatal("nil Failure for non-nil error")
		}
		if !knownPhases[fl.Phase] && fl.Phase != Phase(phase) {
			t.Fatalf("unknown phase %q", fl.Phase)
		}
		s := fl.Error()
		if strings.ContainsAny(s, "\r\n") {
			t.Fatalf("multi-line: %q", s)
		}
		_ = fl.Transient()
		_ = fl.LogValue()
		// worker-agent's refusal line is recognised wherever it comes in the
		// received bytes, is transient, and is never blamed on a sidecar.
		var he *HandshakeError
		if _, refused := refusalLine(recv); refused && fl.Phase == PhaseHandshake && errors.As(err, &he) {
			if !fl.Transient() || strings.Contains(fl.Hint, "sidecar") || !strings.Contains(fl.Hint, "too many unauthenticated connections") {
				t.Fatalf("refusal %q: transient %v hint %q", recv, fl.Transient(), fl.Hint)
			}
		}
	})
}
