package launcher

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcher/trainerstatus"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

// The ranks on worker pods reach the launcher's status endpoint through
// the worker-agents (package statusfwd): on each connection the pool holds
// to a worker, the launcher asks the agent to listen on loopback there,
// with the run's token and CA, and answers the channels the agent opens
// for each connection to that listener with the same endpoint its own pod
// has. Without connection sharing (no pool) the ranks on workers get no
// endpoint.

const (
	// forwardParallel bounds the requests in flight to the workers.
	forwardParallel = 32
	// forwardTimeout bounds one worker's answer: a first session on its
	// connection waits no longer.
	forwardTimeout = 2 * time.Second
)

// forwardStatus asks every worker on the pool's connections, now (in the
// background) and on those it makes later (before their first session),
// to carry the ranks' requests to srv (the local endpoint's server,
// listening on port) and returns what stops it.
func (l *Launcher) forwardStatus(srv *http.Server, local *trainerstatus.Local, port int, path string) (stop func()) {
	if l.pool == nil {
		return func() {}
	}
	ln := newChannelListener()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(tls.NewListener(ln, local.TLSConfig()))
	}()
	req := statusfwd.Request{Version: statusfwd.Version, Port: uint32(port), Path: path, Dir: local.Dir, Token: local.Token,
		CA: string(local.CAPEM)}.Marshal()
	var mu sync.Mutex
	var other []string // workers that serve it at another port or directory
	register := func(host string, c *ssh.Client) {
		chans := c.HandleChannelOpen(statusfwd.ChannelType)
		if chans == nil {
			return // asked on this connection already
		}
		go func() {
			for nc := range chans {
				ch, reqs, err := nc.Accept()
				if err != nil {
					continue
				}
				go ssh.DiscardRequests(reqs)
				if !ln.push(channelConn{Channel: ch, host: host}) {
					ch.Close()
				}
			}
		}()
		type answer struct {
			ok      bool
			payload []byte
			err     error
		}
		done := make(chan answer, 1)
		go func() {
			ok, payload, err := c.SendRequest(statusfwd.RequestType, true, req)
			done <- answer{ok, payload, err}
		}()
		var a answer
		select {
		case a = <-done:
		case <-time.After(forwardTimeout):
			l.log.Debug("a worker-agent did not answer the status forward in time; its ranks may not reach the TrainJob's status", "host", host, "component", "trainer-status")
			return
		}
		switch rep, err := statusfwd.ParseReply(a.payload); {
		case a.err != nil || !a.ok:
			// An older worker-agent, or OpenSSH: its ranks get no endpoint.
			l.log.Debug("a worker does not carry the ranks' status requests (an older worker-agent?)", "host", host, "err", a.err, "component", "trainer-status")
		case err != nil:
			l.log.Debug("a worker's answer to the status forward", "host", host, "err", err, "component", "trainer-status")
		case int(rep.Port) != port || rep.Dir != local.Dir:
			mu.Lock()
			other = append(other, host)
			mu.Unlock()
			l.log.Debug("a worker serves the ranks' status endpoint at another port or directory than the launcher's pod", "host", host,
				"port", rep.Port, "dir", rep.Dir, "component", "trainer-status")
		}
	}
	// Every connection the pool holds or makes asks before its first
	// session; the held ones start now, in the background: the launcher
	// does not wait (its init is the same with the status API), a session
	// that comes first waits for its own connection's answer.
	l.pool.SetConnSetup(register)
	warmed := l.pool.Warm(forwardParallel)
	go func() {
		warmed()
		mu.Lock()
		defer mu.Unlock()
		if len(other) > 0 {
			// Hydra (MPICH, Intel MPI) gives the ranks mpiexec's own
			// variables, which name the launcher's port and files.
			l.log.Info("some workers serve the ranks' status endpoint at another port or directory than the launcher's pod: ranks that get mpiexec's environment there (MPICH, Intel MPI) cannot report",
				"workers", len(other), "first", other[0], "component", "trainer-status")
		}
	}()
	return func() {
		l.pool.SetConnSetup(nil)
		warmed()
		ln.Close()
		<-served
	}
}

// channelListener is a net.Listener of the channels the worker-agents open
// for the ranks' connections.
type channelListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChannelListener() *channelListener {
	return &channelListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to Accept; false when the listener is closed.
func (l *channelListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *channelListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *channelListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *channelListener) Addr() net.Addr { return channelAddr("launcher") }

// channelConn is a channel as a net.Conn. A channel has no deadlines: the
// worker-agent bounds how long it carries a connection.
type channelConn struct {
	ssh.Channel
	host string
}

func (c channelConn) LocalAddr() net.Addr              { return channelAddr("launcher") }
func (c channelConn) RemoteAddr() net.Addr             { return channelAddr(c.host) }
func (c channelConn) SetDeadline(time.Time) error      { return nil }
func (c channelConn) SetReadDeadline(time.Time) error  { return nil }
func (c channelConn) SetWriteDeadline(time.Time) error { return nil }

// channelAddr names a channel's end.
type channelAddr string

func (a channelAddr) Network() string { return "ssh" }
func (a channelAddr) String() string  { return string(a) }
