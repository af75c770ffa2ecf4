package statusfwd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// channelPair is a real SSH connection on loopback and one channel on it:
// the end that opened it, and the end that accepted it.
func channelPair(t *testing.T) (opened, accepted ssh.Channel) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	scfg := &ssh.ServerConfig{NoClientAuth: true}
	scfg.AddHostKey(signer)
	got := make(chan ssh.Channel, 1)
	go func() {
		conn, chans, reqs, err := ssh.NewServerConn(sc, scfg)
		if err != nil {
			close(got)
			return
		}
		t.Cleanup(func() { conn.Close() })
		go ssh.DiscardRequests(reqs)
		nc, ok := <-chans
		if !ok {
			close(got)
			return
		}
		ch, r, err := nc.Accept()
		if err != nil {
			close(got)
			return
		}
		go ssh.DiscardRequests(r)
		got <- ch
	}()
	conn, chans, reqs, err := ssh.NewClientConn(cc, "x", &ssh.ClientConfig{HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans {
			_ = nc.Reject(ssh.Prohibited, "")
		}
	}()
	ch, r, err := conn.OpenChannel(ChannelType, nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(r)
	acc, ok := <-got
	if !ok {
		t.Fatal("the channel was not accepted")
	}
	return ch, acc
}

// TestChannelConnDeadlines: a read past its deadline fails as on TCP and
// the channel stays open (a later read gets the peer's bytes); Close
// closes the channel. Before, a conn over a channel ignored its deadlines
// and such a read blocked until the peer wrote.
func TestChannelConnDeadlines(t *testing.T) {
	t.Parallel()
	a, b := channelPair(t)
	c := ChannelConn(a, Addr("launcher"), Addr("worker-0"))
	if c.RemoteAddr().String() != "worker-0" || c.LocalAddr().Network() != "ssh" {
		t.Fatalf("addresses %v %v", c.LocalAddr(), c.RemoteAddr())
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	done := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read past its deadline did not return")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := c.Read(buf); n != 1 || buf[0] != 'x' {
		t.Fatalf("read after the deadline moved: %d %v", n, err)
	}
	c.Close()
	readEOF(t, b, "the peer after Close")
}

// TestChannelConnServerTimeout: an http.Server over ChannelConn ends a
// channel whose peer never sends a request, at ReadHeaderTimeout, as the
// launcher's server does with a worker's channel.
func TestChannelConnServerTimeout(t *testing.T) {
	t.Parallel()
	a, b := channelPair(t)
	conns := make(chan net.Conn, 1)
	conns <- ChannelConn(b, Addr("launcher"), Addr("worker-0"))
	ln := &oneListener{conns: conns, done: make(chan struct{})}
	srv := &http.Server{ReadHeaderTimeout: 200 * time.Millisecond, Handler: http.NotFoundHandler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { ln.Close(); srv.Close() })
	readEOF(t, a, "a silent channel past the server's ReadHeaderTimeout")
}

func readEOF(t *testing.T, ch ssh.Channel, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(ch); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the channel was not closed", what)
	}
}

// oneListener hands out the conns it is given.
type oneListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *oneListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneListener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *oneListener) Addr() net.Addr { return Addr("test") }
