// Package sshtest holds the test fixtures of podmpi: the job's key and its
// Secret as the kubelet mounts it (GenerateJobKey, WriteSecret,
// WriteAuthDir), a goroutine-safe Buffer and a polling Eventually, used by
// every package's tests; and, for the tests of sshclient, probe and rsh, a
// small SSH server built on plain x/crypto/ssh (exec through /bin/sh -c,
// exit-status and exit-signal, signal requests delivered to the command's
// process group), and endpoints that answer wrongly on purpose: a silent
// listener, one that closes at once, a TLS alert, a listener whose accept
// queue is full (SYNs dropped, so connects time out) and an NXDOMAIN DNS
// server.
//
// It is test support: import it from _test.go files, or from the harness
// programs under test/ (GenerateJobKey and WriteSecret take no testing.TB).
// Everything listens on 127.0.0.1 and is torn down by t.Cleanup; every
// command it starts is killed (by process group) and reaped.
package sshtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/signals"
)

// Key is a generated key pair with its private key in PEM.
type Key struct {
	Signer ssh.Signer
	PEM    []byte
}

// Public returns the public key.
func (k Key) Public() ssh.PublicKey { return k.Signer.PublicKey() }

// NewKey generates an ed25519 key (cheap, for most tests).
func NewKey(t testing.TB) Key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "sshtest")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Signer: s, PEM: pem.EncodeToMemory(blk)}
}

// GenerateJobKey generates the key Trainer v2 and mpi-operator put in the
// job's Secret: ECDSA P-521 in SEC1 "EC PRIVATE KEY" PEM. It takes no
// testing.TB so that the network-namespace harness (demo, benchmarks) can
// use it too.
func GenerateJobKey() (Key, error) {
	k, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		return Key{}, fmt.Errorf("generating a P-521 key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return Key{}, fmt.Errorf("marshalling the P-521 key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(k)
	if err != nil {
		return Key{}, fmt.Errorf("ssh signer: %w", err)
	}
	return Key{Signer: s, PEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})}, nil
}

// NewTrainerKey is GenerateJobKey for tests.
func NewTrainerKey(t testing.TB) Key {
	t.Helper()
	k, err := GenerateJobKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Secret file modes as the kubelet mounts the job's Secret (Trainer v2's
// items: id_rsa 0640 so that an fsGroup can read it, the public files 0644).
const (
	PrivateKeyMode = 0o640
	PublicKeyMode  = 0o644
)

// WriteSecret writes dir the way the job's Secret volume looks: id_rsa (the
// identity's private key, PrivateKeyMode), id_rsa.pub (its public key) and
// authorized_keys (one line per authorized key), the public files
// PublicKeyMode. Running as root, the files are root-owned as the kubelet
// makes them, so a process of another uid reads id_rsa only through group
// 0. Modes are set explicitly, whatever the umask.
func WriteSecret(dir string, identity Key, authorized ...ssh.PublicKey) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("auth dir %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("auth dir %s: %w", dir, err)
	}
	var ak []byte
	for _, k := range authorized {
		ak = append(ak, ssh.MarshalAuthorizedKey(k)...)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"id_rsa", identity.PEM, PrivateKeyMode},
		{"id_rsa.pub", ssh.MarshalAuthorizedKey(identity.Public()), PublicKeyMode},
		{"authorized_keys", ak, PublicKeyMode},
	} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(p, 0, 0); err != nil {
				return fmt.Errorf("chown %s: %w", p, err)
			}
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	return nil
}

// WriteAuthDir writes k as the job's Secret (WriteSecret, k authorizing
// itself) into a new temporary directory.
func WriteAuthDir(t testing.TB, k Key) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteSecret(dir, k, k.Public()); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Buffer is a goroutine-safe buffer for the output of processes, servers
// and loggers that tests read while they run.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Eventually polls cond every 10ms until it holds, and fails the test
// naming what it waited for when it still does not after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// UniqueJSONKeys parses one JSON value (a log line) and fails when an
// object in it, at any depth, repeats a key: strict parsers reject that.
func UniqueJSONKeys(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	if err := uniqueKeys(dec); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

func uniqueKeys(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	switch {
	case !ok:
		return nil
	case d == '[':
		for dec.More() {
			if err := uniqueKeys(dec); err != nil {
				return err
			}
		}
	case d == '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if seen[k] {
				return fmt.Errorf("key %q repeated", k)
			}
			seen[k] = true
			if err := uniqueKeys(dec); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// Options configure a Server.
type Options struct {
	HostKey    ssh.Signer      // required
	Authorized []ssh.PublicKey // client keys accepted
	// Env is the environment of every command; PATH=/usr/bin:/bin when nil.
	Env []string
	// ExecDelay is slept before each command starts, to make sessions
	// overlap in concurrency tests.
	ExecDelay time.Duration
	// ExecGate, when set, holds each command (counted in Running) until
	// it is closed or the server closes: a concurrency test waits for the
	// sessions it expects at once, with no timing involved.
	ExecGate <-chan struct{}
	// Addr to listen on; 127.0.0.1:0 when empty.
	Addr string
	// MaxSessions, when > 0, refuses a session channel beyond that many
	// open on one connection (ResourceShortage), as worker-agent's
	// --ssh.max-sessions does.
	MaxSessions int
	// OpenSSHSignalNames names a signal outside RFC 4254's list
	// "SIG@openssh.com" in exit-signal, as OpenSSH's sshd does, instead of
	// worker-agent's "BUS@podmpi".
	OpenSSHSignalNames bool
}

// Server is a minimal SSH server for tests.
type Server struct {
	Addr string // host:port
	Port int

	opts      Options
	ln        net.Listener
	cfg       *ssh.ServerConfig
	wg        sync.WaitGroup
	active    atomic.Int64
	maxActive atomic.Int64
	execs     atomic.Int64
	maxExecs  atomic.Int64
	accepted  atomic.Int64

	mu       sync.Mutex
	commands []string
	signals  []string
	conns    map[net.Conn]bool
	closed   bool
	quit     chan struct{} // closed by Close
}

// Start starts a Server and registers its shutdown with t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, opts)
	t.Cleanup(s.Close)
	return s
}

// Serve serves opts on ln until Close.
func Serve(ln net.Listener, opts Options) *Server {
	if opts.Env == nil {
		opts.Env = []string{"PATH=/usr/bin:/bin"}
	}
	s := &Server{opts: opts, ln: ln, Addr: ln.Addr().String(), conns: map[net.Conn]bool{}, quit: make(chan struct{})}
	s.Port = ln.Addr().(*net.TCPAddr).Port
	s.cfg = &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			for _, k := range opts.Authorized {
				if string(k.Marshal()) == string(key.Marshal()) {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, errors.New("key not authorized")
		},
	}
	s.cfg.AddHostKey(opts.HostKey)
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Close stops listening, drops every connection and waits for all
// handlers (and the commands they started) to finish.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		close(s.quit)
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// MaxActive is the largest number of simultaneously open connections seen.
// A client's close reaches the server a little after the client moves on,
// so this can exceed the client's own concurrency by one; MaxExecs cannot.
func (s *Server) MaxActive() int64 { return s.maxActive.Load() }

// Running is how many commands run now.
func (s *Server) Running() int64 { return s.execs.Load() }

// MaxExecs is the largest number of commands running at once, counted from
// the exec request until just before the exit status is sent.
func (s *Server) MaxExecs() int64 { return s.maxExecs.Load() }

func raise(max *atomic.Int64, n int64) {
	for {
		m := max.Load()
		if n <= m || max.CompareAndSwap(m, n) {
			return
		}
	}
}

// Accepted is the number of TCP connections accepted.
func (s *Server) Accepted() int64 { return s.accepted.Load() }

// Commands returns the exec requests received, in order.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// Signals returns the signal requests received (names like "TERM").
func (s *Server) Signals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.signals...)
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.accepted.Add(1)
		raise(&s.maxActive, s.active.Add(1))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.active.Add(-1)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.handleConn(c)
		}()
	}
}

func (s *Server) handleConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	var open atomic.Int64
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		if s.opts.MaxSessions > 0 && open.Load() >= int64(s.opts.MaxSessions) {
			_ = nc.Reject(ssh.ResourceShortage, "too many sessions on this connection")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		open.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer open.Add(-1)
			s.session(ch, creqs)
		}()
	}
}

func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var (
		mu   sync.Mutex
		cmd  *exec.Cmd
		done = make(chan struct{})
	)
	killGroup := func(sig syscall.Signal) {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-done:
			return // reaped: the group may be gone, never signal a reused id
		default:
		}
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
	for req := range reqs {
		switch req.Type {
		case "exec":
			var msg struct{ Command string }
			mu.Lock()
			started := cmd != nil
			mu.Unlock()
			if started || ssh.Unmarshal(req.Payload, &msg) != nil {
				_ = req.Reply(false, nil)
				continue
			}
			s.mu.Lock()
			s.commands = append(s.commands, msg.Command)
			s.mu.Unlock()
			raise(&s.maxExecs, s.execs.Add(1))
			if s.opts.ExecDelay > 0 {
				time.Sleep(s.opts.ExecDelay)
			}
			if s.opts.ExecGate != nil {
				select {
				case <-s.opts.ExecGate:
				case <-s.quit:
				}
			}
			c, err := s.start(ch, msg.Command)
			if err != nil {
				s.execs.Add(-1)
				_ = req.Reply(false, nil)
				continue
			}
			mu.Lock()
			cmd = c
			mu.Unlock()
			_ = req.Reply(true, nil)
			go func() {
				defer close(done)
				s.finish(ch, c)
			}()
		case "signal":
			var msg struct{ Signal string }
			if ssh.Unmarshal(req.Payload, &msg) != nil {
				continue
			}
			s.mu.Lock()
			s.signals = append(s.signals, msg.Signal)
			s.mu.Unlock()
			if sig, ok := signals.ParseSSH(msg.Signal); ok {
				killGroup(sig)
			}
			if req.WantReply {
				_ = req.Reply(true, nil)
			}
		case "env":
			_ = req.Reply(true, nil)
		default: // pty-req, shell, subsystem, x11-req, ...: refused
			_ = req.Reply(false, nil)
		}
	}
	// The client closed the channel or the connection dropped: the command
	// must not outlive its session.
	killGroup(syscall.SIGKILL)
	mu.Lock()
	started := cmd != nil
	mu.Unlock()
	if started {
		<-done
	}
}

func (s *Server) start(ch ssh.Channel, command string) (*exec.Cmd, error) {
	c := exec.Command("/bin/sh", "-c", command)
	c.Env = s.opts.Env
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Stdout = ch
	c.Stderr = ch.Stderr()
	c.WaitDelay = 2 * time.Second
	stdin, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	go func() {
		_, _ = io.Copy(stdin, ch)
		stdin.Close()
	}()
	return c, nil
}

func (s *Server) finish(ch ssh.Channel, c *exec.Cmd) {
	_ = c.Wait()
	// Reap stragglers of the group (backgrounded children).
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	s.execs.Add(-1) // before the client can learn the status and start another
	ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		msg := struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: signals.SSHName(ws.Signal())}
		if _, rfc := signals.ParseSSH(msg.Signal); s.opts.OpenSSHSignalNames && !rfc {
			msg.Signal = signals.SSHOpenSSHOther
		}
		_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(&msg))
	} else {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(c.ProcessState.ExitCode()))
		_, _ = ch.SendRequest("exit-status", false, b[:])
	}
	_ = ch.CloseWrite()
	ch.Close()
}

// SilentListener accepts TCP connections and never writes a byte: a port
// that "never answers" at the SSH level. It returns the port.
func SilentListener(t testing.TB) int {
	return rawListener(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // until the client gives up or cleanup
	})
}

// ClosingListener accepts TCP connections and closes them at once without
// writing: what a sidecar proxy with no upstream yet does.
func ClosingListener(t testing.TB) int {
	return rawListener(t, func(c net.Conn) {})
}

// TLSAlertListener answers the client's first bytes with a TLS fatal alert
// record (protocol_version), as BoringSSL/OpenSSL-based proxies such as
// Envoy do when a non-TLS client talks to a TLS port.
func TLSAlertListener(t testing.TB) int {
	return rawListener(t, func(c net.Conn) {
		buf := make([]byte, 256)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46})
	})
}

func rawListener(t testing.TB, handle func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// FullBacklogPort returns a loopback port whose listener never accepts and
// whose accept queue is already full, so the kernel drops further SYNs and a
// connect times out: a real tcp-timeout on loopback without root or
// firewall rules (Linux, tcp_abort_on_overflow=0). It skips the test when
// the kernel does not behave that way.
func FullBacklogPort(t testing.TB) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; i < 8; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return port // the queue is full: SYNs are dropped now
			}
			t.Skipf("filling the accept queue: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("the kernel kept accepting connections into a backlog-0 queue; cannot provoke a connect timeout on loopback")
	return 0
}

// NXDomainResolver returns a resolver whose only DNS server is a loopback
// UDP server answering NXDOMAIN to every query.
func NXDomainResolver(t testing.TB) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := nxdomain(buf[:n]); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	srv := pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", srv)
		},
	}
}

// nxdomain builds an NXDOMAIN answer to query q (header and question only).
func nxdomain(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	i += 5 // root label + QTYPE + QCLASS
	if i > len(q) {
		return nil
	}
	r := append([]byte(nil), q[:i]...)
	r[2] = 0x80 | (q[2] & 0x79) // QR, same opcode, RD copied; AA, TC clear
	r[3] = 0x83                 // RA, RCODE 3 (NXDOMAIN)
	binary.BigEndian.PutUint16(r[4:], 1)
	for j := 6; j < 12; j++ {
		r[j] = 0
	}
	return r
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// String describes the server for test logs.
func (s *Server) String() string { return fmt.Sprintf("sshtest.Server(%s)", s.Addr) }
