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

// The ranks' endpoint on the worker pods: on each connection the pool
// holds to a worker, the launcher asks the worker-agent, with the status
// forward's request (package statusfwd), to serve the ranks there on
// loopback with the run's certificate, token and CA; the agent checks each
// rank's request and carries it back in a channel of that connection, as
// plain HTTP, where the launcher's endpoint server answers it as it
// answers the ranks of its own pod (with real deadlines: statusfwd's
// ChannelConn). Without connection sharing (no pool) the ranks on workers
// get no endpoint.

const (
	// endpointAskParallel bounds the requests in flight to the workers.
	endpointAskParallel = 32
	// endpointAskTimeout bounds one worker's answer: a first session on its
	// connection waits no longer.
	endpointAskTimeout = 2 * time.Second
)

// endpointOnWorkers asks every worker on the pool's connections, now (in
// the background) and on those it makes later (before their first
// session), to serve the ranks' endpoint and carry their requests to srv
// (the local endpoint's server, listening on port), and returns what stops
// it.
func (l *Launcher) endpointOnWorkers(srv *http.Server, local *trainerstatus.Local, port int, path string) (stop func()) {
	if l.pool == nil {
		return func() {}
	}
	var cert tls.Certificate // the local endpoint's, which the agents serve too
	if certs := local.TLSConfig().Certificates; len(certs) > 0 {
		cert = certs[0]
	}
	r, err := statusfwd.NewRequest(port, path, local.Dir, local.Token, local.CAPEM, cert, trainerstatus.MaxBody)
	if err != nil {
		l.log.Warn("the ranks on the workers cannot report to the TrainJob's status (the job goes on)", "err", err, "component", "trainer-status")
		return func() {}
	}
	req := r.Marshal()
	ln := newCarriedListener()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	var mu sync.Mutex
	var other, refused []string // workers that serve it at another port or directory, or not at all
	ask := func(host string, c *ssh.Client) {
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
				if !ln.push(statusfwd.ChannelConn(ch, statusfwd.Addr("launcher"), statusfwd.Addr(host))) {
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
		case <-time.After(endpointAskTimeout):
			l.log.Debug("a worker-agent did not answer the request for the ranks' endpoint in time; its ranks may not reach the TrainJob's status", "host", host, "component", "trainer-status")
			return
		}
		switch rep, err := statusfwd.ParseReply(a.payload); {
		case a.err != nil || !a.ok:
			// An agent of another podmpi release, or OpenSSH: its ranks
			// get no endpoint. The agent's log says why.
			mu.Lock()
			refused = append(refused, host)
			mu.Unlock()
			l.log.Debug("a worker did not take the ranks' endpoint", "host", host, "err", a.err, "component", "trainer-status")
		case err != nil:
			l.log.Debug("a worker's answer to the request for the ranks' endpoint", "host", host, "err", err, "component", "trainer-status")
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
	l.pool.SetConnSetup(ask)
	warmed := l.pool.Warm(endpointAskParallel)
	go func() {
		warmed()
		mu.Lock()
		defer mu.Unlock()
		if len(refused) > 0 {
			l.log.Info("some workers did not take the ranks' status endpoint (a worker-agent of another podmpi release, or not podmpi's): the ranks there cannot report; the worker's log says why",
				"workers", len(refused), "first", refused[0], "component", "trainer-status")
		}
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

// carriedListener is a net.Listener of the requests the worker-agents
// carry, one channel each.
type carriedListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newCarriedListener() *carriedListener {
	return &carriedListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to Accept; false when the listener is closed.
func (l *carriedListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *carriedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *carriedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *carriedListener) Addr() net.Addr { return statusfwd.Addr("launcher") }
