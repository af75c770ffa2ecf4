package discovery

import (
	"context"
	"net"
	"strings"
	"sync"
	"time"
)

// fakeResolver is a map-driven Resolver. Answers can change over time
// (after N calls, or through set* while a Wait runs), calls are counted, and
// lookups can be slow or hang until their context ends.
type fakeResolver struct {
	mu          sync.Mutex
	hosts       map[string][]string     // name -> addresses
	srv         map[string][][]*net.SRV // SRV name -> answers, one per call (the last repeats)
	ptr         map[string][]string     // IP -> names
	errs        map[string]error        // name -> error returned instead of an answer
	partial     map[string]error        // SRV name -> error returned WITH the answer (as Go does for dropped records)
	after       map[string]int          // name answers only from call N+1 on (NXDOMAIN before)
	hang        map[string]bool         // name blocks until ctx ends
	delay       time.Duration           // every lookup takes this long
	calls       map[string]int
	inflight    int
	maxInflight int
}

func newFake() *fakeResolver {
	return &fakeResolver{
		hosts: map[string][]string{}, srv: map[string][][]*net.SRV{}, ptr: map[string][]string{},
		errs: map[string]error{}, after: map[string]int{}, hang: map[string]bool{}, calls: map[string]int{},
		partial: map[string]error{},
	}
}

func (r *fakeResolver) setHost(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[strings.ToLower(name)] = addrs
}

func (r *fakeResolver) callCount(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[strings.ToLower(name)]
}

// enter records a call and reports what to do with it.
func (r *fakeResolver) enter(ctx context.Context, name string) (n int, hang bool, delay time.Duration, err error) {
	r.mu.Lock()
	key := strings.ToLower(name)
	r.calls[key]++
	n = r.calls[key]
	r.inflight++
	if r.inflight > r.maxInflight {
		r.maxInflight = r.inflight
	}
	err, hang, delay = r.errs[key], r.hang[key], r.delay
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
	} else if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	return n, hang, delay, err
}

func (r *fakeResolver) leave() {
	r.mu.Lock()
	r.inflight--
	r.mu.Unlock()
}

func notFound(name string) error {
	return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func (r *fakeResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	defer r.leave()
	n, hang, _, err := r.enter(ctx, host)
	if hang || ctx.Err() != nil {
		return nil, &net.DNSError{Err: "i/o timeout", Name: host, IsTimeout: true}
	}
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := strings.ToLower(host)
	addrs, ok := r.hosts[key]
	if !ok || n <= r.after[key] {
		return nil, notFound(host)
	}
	return append([]string(nil), addrs...), nil
}

func (r *fakeResolver) LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error) {
	full := name
	if service != "" || proto != "" {
		full = "_" + service + "._" + proto + "." + name
	}
	defer r.leave()
	n, hang, _, err := r.enter(ctx, full)
	if hang || ctx.Err() != nil {
		return "", nil, &net.DNSError{Err: "i/o timeout", Name: full, IsTimeout: true}
	}
	if err != nil {
		return "", nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seq := r.srv[strings.ToLower(full)]
	if len(seq) == 0 {
		return "", nil, notFound(full)
	}
	ans := seq[min(n, len(seq))-1]
	if len(ans) == 0 {
		return "", nil, notFound(full)
	}
	out := make([]*net.SRV, len(ans))
	for i, s := range ans {
		c := *s
		out[i] = &c
	}
	return full + ".", out, r.partial[strings.ToLower(full)]
}

func (r *fakeResolver) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	defer r.leave()
	_, hang, _, err := r.enter(ctx, addr)
	if hang || ctx.Err() != nil {
		return nil, &net.DNSError{Err: "i/o timeout", Name: addr, IsTimeout: true}
	}
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	names, ok := r.ptr[addr]
	if !ok {
		return nil, notFound(addr)
	}
	return append([]string(nil), names...), nil
}

// fakeClock advances only when Wait sleeps, so a 5-minute deadline passes
// in microseconds of real time.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
	// onSleep, if set, runs after each sleep with the total virtual time
	// slept; tests use it to change DNS answers "over time".
	onSleep func(total time.Duration)
	total   time.Duration
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	c.total += d
	total, hook := c.total, c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook(total)
	}
	return nil
}

func srvs(port uint16, targets ...string) []*net.SRV {
	out := make([]*net.SRV, len(targets))
	for i, t := range targets {
		out[i] = &net.SRV{Target: t, Port: port, Priority: 0, Weight: 10}
	}
	return out
}
