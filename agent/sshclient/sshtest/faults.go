package sshtest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// ServeLater starts serving the job key k on loopback port once ready is
// closed: a worker whose agent starts after the client first tried it.
func ServeLater(t testing.TB, k Key, port int, ready <-chan struct{}) {
	t.Helper()
	go func() {
		<-ready
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("port %d taken meanwhile: %v", port, err)
			return
		}
		srv := Serve(ln, Options{HostKey: k.Signer, Authorized: []ssh.PublicKey{k.Public()}})
		t.Cleanup(srv.Close)
	}()
}

// Proxy is a TCP proxy on loopback in front of a server, whose traffic a
// test can stall and whose connections it can cut or refuse: the network
// between a client and a worker. Frozen, it moves no byte in either
// direction and joins no new connection to the server (they wait), as a
// stalled path or a CPU-starved peer look to the client; the connections
// stay open. Thawed, everything held moves on.
type Proxy struct {
	// Port is the proxy's loopback port.
	Port int

	target string
	ln     net.Listener
	mu     sync.Mutex
	thawed *sync.Cond
	frozen bool
	refuse bool
	closed bool
	conns  map[net.Conn]bool
	// accepted and refused count the connections taken and refused.
	accepted, refused int
	wg                sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port), removed when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Port: ln.Addr().(*net.TCPAddr).Port, target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Freeze stops the proxy's traffic until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw lets the traffic held since Freeze move on.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

// RefuseNew has the proxy close every connection it accepts from now on,
// at once and before a byte (on), frozen or not, or take them again (off):
// a path on which no new connection can be made.
func (p *Proxy) RefuseNew(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// refusing counts the connection just accepted as refused when the proxy
// refuses new ones.
func (p *Proxy) refusing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse {
		p.refused++
	}
	return p.refuse
}

// Refused is how many connections RefuseNew closed.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// Cut closes every connection through the proxy, as a worker that
// restarted or a connection reset does; new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Accepted is how many connections the proxy took.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// wait blocks while the proxy is frozen; it reports false once it is
// closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
	return !p.closed
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refusing() {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.connect(c) })
	}
}

// connect joins c to the target once the proxy is not frozen.
func (p *Proxy) connect(c net.Conn) {
	if !p.wait() {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	for _, dir := range [][2]net.Conn{{up, c}, {c, up}} {
		p.wg.Go(func() {
			p.pump(dir[0], dir[1])
			// One direction ended: so does the other.
			dir[0].Close()
			dir[1].Close()
		})
	}
}

// track registers a connection's two ends; false when the proxy is closed.
func (p *Proxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		up.Close()
		return false
	}
	p.accepted++
	p.conns[c], p.conns[up] = true, true
	return true
}

// pump copies src to dst, holding what it read while the proxy is frozen.
func (p *Proxy) pump(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.thawed.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
