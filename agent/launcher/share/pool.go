package share

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/sshclient"
)

// OpenTimeout bounds opening a session channel on a held connection: a
// worker that does not answer within it is taken for gone, and its
// connection is closed and dropped.
const OpenTimeout = 10 * time.Second

// maxPicks bounds how many held or new connections one session tries.
const maxPicks = 8

// Pool holds authenticated SSH connections to workers, each reused for
// every session the launcher serves to the same worker with the same
// identity (sshclient.Config.Identity): the probe's, handed over when it
// ends, and those dialed on first use. A connection the worker refuses
// another session on (its MaxSessions) is passed over while it is full; one
// a session cannot open on (the worker restarted, the network dropped it)
// is closed and dropped. Each session runs in its own channel
// with its own flow-control window, so a slow reader of one never holds up
// another on the same connection.
type Pool struct {
	mu     sync.Mutex
	closed bool
	hosts  map[string][]*pooled
}

type pooled struct {
	c    *ssh.Client
	open int  // sessions open on it
	full bool // the server refused a session for its limit; cleared when one ends
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{hosts: map[string][]*pooled{}} }

func poolKey(host string, port int, cfg sshclient.Config) string {
	return net.JoinHostPort(host, strconv.Itoa(port)) + " " + cfg.Identity()
}

// Add hands the pool a connection to host:port made with cfg, such as the
// probe's. It reports false when the pool is closed: the caller keeps the
// connection then.
func (p *Pool) Add(host string, port int, cfg sshclient.Config, c *ssh.Client) bool {
	return p.add(poolKey(host, port, cfg), c)
}

func (p *Pool) add(key string, c *ssh.Client) bool {
	pc := &pooled{c: c}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.hosts[key] = append(p.hosts[key], pc)
	p.mu.Unlock()
	// A connection that dies is found when a session cannot open on it
	// (Session drops it then): no goroutine per connection waits for it.
	return true
}

// Len is how many connections the pool holds.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cs := range p.hosts {
		n += len(cs)
	}
	return n
}

// Sessions is how many sessions are open on the held connections.
func (p *Pool) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cs := range p.hosts {
		for _, pc := range cs {
			n += pc.open
		}
	}
	return n
}

// Close closes every held connection; sessions still open on them end.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	hosts := p.hosts
	p.hosts = map[string][]*pooled{}
	p.mu.Unlock()
	for _, cs := range hosts {
		for _, pc := range cs {
			_ = pc.c.Close()
		}
	}
}

// pick returns the held connection with the fewest sessions that is not
// full, counting the session about to open on it.
func (p *Pool) pick(key string) *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *pooled
	for _, pc := range p.hosts[key] {
		if !pc.full && (best == nil || pc.open < best.open) {
			best = pc
		}
	}
	if best != nil {
		best.open++
	}
	return best
}

// done ends a session on pc; full says the server refused it for its limit.
func (p *Pool) done(pc *pooled, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.open--
	pc.full = full
}

func (p *Pool) drop(key string, pc *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.hosts[key]
	for i, x := range cs {
		if x == pc {
			p.hosts[key] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(p.hosts[key]) == 0 {
		delete(p.hosts, key)
	}
}

// errPoolClosed is a session asked for after Close.
var errPoolClosed = errors.New("the launcher is ending its shared connections")

// Session opens a session to req's worker on a held connection made with
// its configuration, or on a new one that req.Dial makes (and the pool then
// keeps). end must be called once the session is over. A failure is
// classified as Dial's are.
func (p *Pool) Session(ctx context.Context, req rsh.SessionRequest) (s *ssh.Session, end func(), f *sshclient.Failure) {
	host, port := req.Host, req.Port
	key := poolKey(host, port, req.Config)
	var last error
	for range maxPicks {
		pc := p.pick(key)
		if pc == nil {
			c, f := req.Dial(ctx)
			if f != nil {
				return nil, nil, f
			}
			if !p.add(key, c) {
				_ = c.Close()
				return nil, nil, sshclient.Classify(host, port, sshclient.PhaseRemoteCommand, errPoolClosed)
			}
			continue
		}
		s, err := openSession(ctx, pc.c)
		if err == nil {
			return s, func() { p.done(pc, false) }, nil
		}
		last = err
		var oce *ssh.OpenChannelError
		switch {
		case ctx.Err() != nil:
			p.done(pc, false)
			return nil, nil, sshclient.Classify(host, port, sshclient.PhaseRemoteCommand, context.Cause(ctx))
		case errors.As(err, &oce) && oce.Reason == ssh.ResourceShortage:
			p.done(pc, true) // another connection, held or new, takes it
		default:
			// The connection is broken (the worker restarted, the
			// network dropped it): a new one may work.
			p.done(pc, false)
			p.drop(key, pc)
			_ = pc.c.Close()
		}
	}
	return nil, nil, sshclient.Classify(host, port, sshclient.PhaseRemoteCommand,
		fmt.Errorf("opening a session: %w (after %d connections)", last, maxPicks))
}

// openSession opens a session on c within OpenTimeout: a connection that
// does not answer in time is closed (it is of no use to anyone), which
// ends the request. It runs on the caller's goroutine, the command's path:
// a client that goes away meanwhile has its session closed by the caller.
func openSession(ctx context.Context, c *ssh.Client) (*ssh.Session, error) {
	var expired atomic.Bool
	t := time.AfterFunc(OpenTimeout, func() {
		expired.Store(true)
		_ = c.Close()
	})
	s, err := c.NewSession()
	if !t.Stop() && expired.Load() {
		if s != nil {
			_ = s.Close()
		}
		return nil, fmt.Errorf("no answer to a session request within %s", OpenTimeout)
	}
	if err == nil && ctx.Err() != nil {
		_ = s.Close()
		return nil, context.Cause(ctx)
	}
	return s, err
}
