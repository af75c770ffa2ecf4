package share

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/sshclient"
)

// OpenTimeout is how long a session request on a held connection may go
// unanswered before the connection counts as stalled: new sessions pass
// over it, and the request tries another connection (held, or a new one)
// meanwhile. Nothing is closed for it. A stall (a path that drops packets
// for a while, a worker-agent starved of CPU) is not proof that the
// connection is dead, and the MPI daemons running on it would die with it;
// OpenSSH's ControlMaster never drops its master for a slow open either.
const OpenTimeout = 10 * time.Second

// maxPicks bounds how many held or new connections one session tries.
const maxPicks = 8

// Pool holds authenticated SSH connections to workers, each reused for
// every session the launcher serves to the same worker with the same
// identity (sshclient.Config.Identity): the probe's, handed over when it
// ends, and those dialed on first use. Each session runs in its own channel
// with its own flow-control window, so a slow reader of one never holds up
// another on the same connection.
//
// A connection is dropped only on proof that it is dead: a session request
// on it fails because its transport failed (the worker restarted, the
// connection was reset, TCP gave up). One the worker refuses another
// session on (its MaxSessions) is passed over while it is full; one whose
// worker does not answer a request within OpenTimeout is passed over while
// that request is unanswered, and kept with everything running on it.
type Pool struct {
	mu     sync.Mutex
	closed bool
	hosts  map[string][]*pooled
	// setup runs once on each connection before the first session the
	// pool opens on it after SetConnSetup set it (nil: nothing to run).
	setup func(host string, c *ssh.Client)
	log   *slog.Logger
	// openTimeout is OpenTimeout (tests shorten it).
	openTimeout time.Duration
}

type pooled struct {
	c       *ssh.Client
	host    string    // the worker's host name
	setUp   sync.Once // the pool's connection setup (SetConnSetup)
	open    int       // sessions open or being opened on it
	running int       // sessions open on it (of open, those the worker answered)
	full    bool      // the server refused a session for its limit; cleared when one ends
	// stalled counts the session requests on it that went unanswered for
	// the open timeout and are unanswered still.
	stalled int
}

// NewPool returns an empty pool that logs to log (nil: nowhere).
func NewPool(log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{hosts: map[string][]*pooled{}, log: log, openTimeout: OpenTimeout}
}

func poolKey(host string, port int, cfg sshclient.Config) string {
	return net.JoinHostPort(host, strconv.Itoa(port)) + " " + cfg.Identity()
}

// Add hands the pool a connection to host:port made with cfg, such as the
// probe's. It reports false when the pool is closed: the caller keeps the
// connection then.
func (p *Pool) Add(host string, port int, cfg sshclient.Config, c *ssh.Client) bool {
	return p.hold(host, poolKey(host, port, cfg), c, false) != nil
}

// SetConnSetup makes the pool run fn once on every connection it holds,
// now and later, before the first session it opens there from now on; nil
// runs nothing more. A session waits for it; Warm runs it ahead on the
// held connections, so that it is mostly done before mpirun asks. A run
// sets one function (a connection set up once is not set up again). The
// launcher's one use: asking each worker for the ranks' status endpoint.
func (p *Pool) SetConnSetup(fn func(host string, c *ssh.Client)) {
	p.mu.Lock()
	p.setup = fn
	p.mu.Unlock()
}

// Warm runs the connection setup on every connection held now, at most n
// at once, in the background; wait waits until each has run.
func (p *Pool) Warm(n int) (wait func()) {
	p.mu.Lock()
	var held []*pooled
	for _, cs := range p.hosts {
		held = append(held, cs...)
	}
	p.mu.Unlock()
	sem := make(chan struct{}, max(n, 1))
	var wg sync.WaitGroup
	wg.Go(func() {
		var each sync.WaitGroup
		for _, pc := range held {
			sem <- struct{}{}
			each.Go(func() {
				defer func() { <-sem }()
				p.setUpConn(pc)
			})
		}
		each.Wait()
	})
	return wg.Wait
}

// setUpConn runs the connection setup on pc unless it ran (or runs)
// already.
func (p *Pool) setUpConn(pc *pooled) {
	p.mu.Lock()
	fn, once := p.setup, &pc.setUp
	p.mu.Unlock()
	if fn != nil {
		once.Do(func() { fn(pc.host, pc.c) })
	}
}

// hold adds c, a connection to host, under key and returns it, with one
// session counted on it when reserve is set (the caller opens one at once);
// nil when the pool is closed. A
// connection that dies is found when a session request on it fails
// (Session drops it then): no goroutine per connection waits for it.
func (p *Pool) hold(host, key string, c *ssh.Client, reserve bool) *pooled {
	pc := &pooled{c: c, host: host}
	if reserve {
		pc.open = 1
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.hosts[key] = append(p.hosts[key], pc)
	p.mu.Unlock()
	return pc
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

// Sessions is how many sessions are open, or being opened, on the held
// connections.
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
// full, counting the session about to open on it: one that is not
// stalled, else, when stalledToo, a stalled one (stalled reports it).
func (p *Pool) pick(key string, stalledToo bool) (pc *pooled, stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best, slow *pooled
	for _, c := range p.hosts[key] {
		switch {
		case c.full:
		case c.stalled == 0:
			if best == nil || c.open < best.open {
				best = c
			}
		case slow == nil || c.open < slow.open:
			slow = c
		}
	}
	if best == nil && stalledToo {
		best, stalled = slow, slow != nil
	}
	if best != nil {
		best.open++
	}
	return best, stalled
}

// done ends a request for a session on pc that opened none; full says the
// server refused it for its limit.
func (p *Pool) done(pc *pooled, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.open--
	pc.full = full
}

// opened counts a session the worker opened on pc as running.
func (p *Pool) opened(pc *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.running++
}

// ended ends a running session on pc.
func (p *Pool) ended(pc *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.open--
	pc.running--
	pc.full = false
}

// stall counts a request on pc unanswered for the open timeout (by 1) or
// answered after it (by -1), and returns how many sessions run on pc
// (requests still unanswered there, this one or others, are not sessions).
func (p *Pool) stall(pc *pooled, by int) (running int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.stalled += by
	return pc.running
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

// errNoAnswer ends a request whose client stopped waiting for the worker.
var errNoAnswer = errors.New("no answer from the worker")

// Session opens a session to req's worker on a held connection made with
// its configuration, or on a new one that req.Dial makes (and the pool then
// keeps), and waits for it at most req.Wait (rsh.DefaultWait when zero).
// end must be called once the session is over. A failure is classified as
// Dial's are; a worker that never answered in time is a remote-command
// failure that says so (the connection and its sessions are kept).
//
// A request the worker leaves unanswered for the open timeout goes on
// waiting, and another connection is tried meanwhile (a held one that is
// not stalled, or a new one): the first session to open serves, and one
// that opens later, even after the client stopped waiting, is closed
// unused, so that the command runs once or not at all. A request that
// finds only stalled connections waits on one of them too (OpenSSH's
// ControlMaster would wait on its one connection), besides trying a new
// one: a worker-agent starved of CPU answers on the connection it has long
// before it can take a new one's handshake.
func (p *Pool) Session(ctx context.Context, req rsh.SessionRequest) (s *ssh.Session, end func(), f *sshclient.Failure) {
	wait := req.Wait
	if wait <= 0 {
		wait = rsh.DefaultWait
	}
	ctx, cancel := context.WithTimeoutCause(ctx, wait, errNoAnswer)
	defer cancel()
	o := &opening{p: p, key: poolKey(req.Host, req.Port, req.Config), req: req, events: make(chan attempt, 3*maxPicks)}
	defer o.settle()
	fail := func(err error) *sshclient.Failure {
		return sshclient.Classify(req.Host, req.Port, sshclient.PhaseRemoteCommand, err)
	}
	var last error               // why the last connection could not serve (full, dead)
	var lastF *sshclient.Failure // the last failure another connection would not mend
	running := -1                // sessions running on the first stalled connection; -1: none stalled
	o.start(ctx, true)
	for o.pending > 0 {
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), errNoAnswer) {
				return nil, nil, fail(context.Cause(ctx))
			}
			return nil, nil, o.timedOut(wait, running)
		case a := <-o.events:
			switch {
			case a.queued:
				o.start(ctx, false) // a connection that is not stalled meanwhile
			case a.stalled:
				if running < 0 {
					running = a.running
					if req.Stalled != nil {
						req.Stalled(p.openTimeout, a.running)
					}
				}
				o.start(ctx, false) // another connection meanwhile
			case a.s != nil:
				pc := a.pc
				return a.s, func() { p.ended(pc) }, nil
			case a.f != nil:
				o.pending--
				lastF = a.f
			default: // full or dead: another connection takes it
				o.pending--
				last = a.err
				o.start(ctx, false)
			}
		}
	}
	if lastF != nil {
		return nil, nil, lastF
	}
	return nil, nil, fail(fmt.Errorf("opening a session: %w (after %d connections)", last, maxPicks))
}

// opening is one Session call's attempts: each opens a session on one
// connection, in a goroutine of its own, and reports on events.
type opening struct {
	p   *Pool
	key string
	req rsh.SessionRequest
	// events carries every attempt's reports: at most three each
	// (queued, stalled, then its end), so sending never blocks.
	events chan attempt
	// pending and tried are the attempts not ended yet and all started
	// (Session's goroutine only).
	pending, tried int
	mu             sync.Mutex
	settled        bool // Session returned: what comes now is late
}

// attempt is one report of an attempt.
type attempt struct {
	// queued: the attempt waits on a connection that was stalled already.
	queued bool
	// stalled: the worker has not answered within the open timeout;
	// running is how many sessions run on that connection.
	stalled bool
	running int
	// s is the session, opened on pc.
	s  *ssh.Session
	pc *pooled
	// f ends the attempt with a failure that another connection would not
	// mend (the worker refused the session, the dial failed); err with one
	// it may (the connection was full, or dead).
	f   *sshclient.Failure
	err error
}

// start starts another attempt, unless maxPicks have been; the first may
// wait on a stalled connection.
func (o *opening) start(ctx context.Context, first bool) {
	if o.tried == maxPicks {
		return
	}
	o.tried++
	o.pending++
	go o.try(ctx, first)
}

// report hands a to Session, or, once it returned, closes a late session.
func (o *opening) report(a attempt) {
	o.mu.Lock()
	if !o.settled {
		o.events <- a
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.late(a)
}

// late closes the session a late attempt opened: its client has one, or
// has stopped waiting. No command was started on it, so none runs.
func (o *opening) late(a attempt) {
	if a.s == nil {
		return
	}
	_ = a.s.Close()
	o.p.ended(a.pc)
	o.p.log.Info("a worker answered a session request after its client had stopped waiting or was served on another connection; closed it unused",
		"host", o.req.Host, "port", o.req.Port)
}

// settle marks the call returned and closes the sessions reported but not
// taken.
func (o *opening) settle() {
	o.mu.Lock()
	o.settled = true
	o.mu.Unlock()
	for {
		select {
		case a := <-o.events:
			o.late(a)
		default:
			return
		}
	}
}

// try opens a session on the held connection pick gives (a stalled one only
// when first), or on a new one.
func (o *opening) try(ctx context.Context, first bool) {
	p := o.p
	pc, stalled := p.pick(o.key, first)
	if stalled {
		o.report(attempt{queued: true})
	}
	if pc == nil {
		c, f := o.req.Dial(ctx)
		if f != nil {
			o.report(attempt{f: f})
			return
		}
		if pc = p.hold(o.req.Host, o.key, c, true); pc == nil {
			_ = c.Close()
			o.report(attempt{f: sshclient.Classify(o.req.Host, o.req.Port, sshclient.PhaseRemoteCommand, errPoolClosed)})
			return
		}
	}
	if err := ctx.Err(); err != nil {
		p.done(pc, false)
		o.report(attempt{f: sshclient.Classify(o.req.Host, o.req.Port, sshclient.PhaseRemoteCommand, context.Cause(ctx))})
		return
	}
	p.setUpConn(pc)
	s, err := o.open(pc)
	var oce *ssh.OpenChannelError
	switch {
	case err == nil:
		p.opened(pc)
		o.report(attempt{s: s, pc: pc})
	case errors.As(err, &oce) && oce.Reason == ssh.ResourceShortage:
		p.done(pc, true)
		o.report(attempt{err: err})
	case errors.As(err, &oce):
		// The worker answered: the connection lives, and refused.
		p.done(pc, false)
		o.report(attempt{f: sshclient.Classify(o.req.Host, o.req.Port, sshclient.PhaseRemoteCommand, fmt.Errorf("opening a session: %w", err))})
	default:
		// x/crypto fails a request without an answer only when the
		// connection's transport failed: proof that it is dead.
		p.done(pc, false)
		p.drop(o.key, pc)
		_ = pc.c.Close()
		o.report(attempt{err: err})
	}
}

// open opens a session on pc, reporting the request stalled when the worker
// has not answered it within the open timeout. x/crypto's request cannot be
// withdrawn: it waits for the worker's answer or for the transport to fail,
// however long that takes.
func (o *opening) open(pc *pooled) (*ssh.Session, error) {
	p := o.p
	var mu sync.Mutex
	answered, stalled := false, false
	t := time.AfterFunc(p.openTimeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if answered {
			return
		}
		stalled = true
		running := p.stall(pc, 1)
		p.log.Warn("a worker did not answer a session request on the launcher's connection in time; new sessions go to another connection while it does not, and the sessions on it go on",
			"host", o.req.Host, "port", o.req.Port, "waited", p.openTimeout, "sessions_running", running)
		o.report(attempt{stalled: true, running: running})
	})
	start := time.Now()
	s, err := pc.c.NewSession()
	t.Stop()
	mu.Lock()
	answered = true
	mu.Unlock()
	if stalled {
		p.stall(pc, -1)
		p.log.Info("the worker answered the stalled session request", "host", o.req.Host, "port", o.req.Port,
			"after", time.Since(start).Round(time.Millisecond), "err", err)
	}
	return s, err
}

// timedOut is the failure of a request whose worker did not answer within
// wait; running are the sessions on the connection it stalled on (-1: none
// stalled, the wait went on dialing).
func (o *opening) timedOut(wait time.Duration, running int) *sshclient.Failure {
	kept := ""
	switch {
	case running == 1:
		kept = " (the launcher keeps its connection: 1 other session runs on it)"
	case running >= 0:
		kept = fmt.Sprintf(" (the launcher keeps its connection: %d other sessions run on it)", running)
	}
	return &sshclient.Failure{Host: o.req.Host, Port: o.req.Port, Phase: sshclient.PhaseRemoteCommand,
		Cause: fmt.Errorf("no answer to a session request within %s%s", roundWait(wait), kept),
		Hint: "the worker-agent is slow to answer (starved of CPU: see its container's CPU limit and throttling) or the network to it stalls; " +
			"nothing ran for this command and the sessions already running on the connection go on; " + rsh.EnvWait + " sets how long a client waits"}
}

// roundWait rounds d for a message: whole seconds from one second up.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
