package discovery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/podmpi/podmpi/agent/launcher/awaited"
	"github.com/podmpi/podmpi/hostfile"
)

// Resolver is the part of *net.Resolver that discovery uses; tests substitute
// a fake.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
	LookupAddr(ctx context.Context, addr string) ([]string, error)
}

var _ Resolver = (*net.Resolver)(nil)

// Defaults of WaitOptions.
const (
	DefaultTimeout       = 5 * time.Minute
	DefaultParallel      = 64
	DefaultLookupTimeout = 2 * time.Second
	DefaultProgressEvery = 5 * time.Second
)

// errEmptyAnswer: the resolver answered without error but with no records.
var errEmptyAnswer = errors.New("empty answer")

// abandonGrace is how long a lookup whose context has ended may still take to
// return before its result is abandoned (a Resolver that ignores ctx).
const abandonGrace = 50 * time.Millisecond

// IsNotFound reports whether err means "this name has no records (yet)":
// NXDOMAIN ("no such host") or an empty answer. Such errors are the normal
// state of a pod that is not scheduled or not published; other errors (server
// failure, timeouts) point at the DNS service itself.
func IsNotFound(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return true
	}
	return errors.Is(err, errEmptyAnswer)
}

// call runs f under its own timeout and returns when f does or, should f
// ignore its context, shortly after the timeout.
func call[T any](ctx context.Context, timeout time.Duration, what string, f func(context.Context) (T, error)) (T, error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f(lctx)
		ch <- result{v, err}
	}()
	var zero T
	// timedOut keeps the server the resolver names in its own error (Go's
	// names the one it asked).
	timedOut := func(err error) (T, error) {
		if err := ctx.Err(); err != nil {
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		e := &net.DNSError{Err: fmt.Sprintf("no answer within %s", timeout), Name: what, IsTimeout: true}
		var de *net.DNSError
		if errors.As(err, &de) {
			e.Server = de.Server
		}
		return zero, e
	}
	select {
	case r := <-ch:
		if r.err != nil && lctx.Err() != nil && ctx.Err() == nil {
			// The lookup's own timeout fired: report it uniformly.
			return timedOut(r.err)
		}
		return r.v, r.err
	case <-lctx.Done():
		t := time.NewTimer(abandonGrace)
		defer t.Stop()
		select {
		case r := <-ch:
			if r.err == nil {
				return r.v, nil
			}
			return timedOut(r.err)
		case <-t.C:
		}
		return timedOut(nil)
	}
}

// ask is call for the finder's lookups: the error names the DNS server
// asked (see finder.attribute), and the finder hears whether the server
// answered at all (finder.heard).
func ask[T any](ctx context.Context, f *finder, what string, fn func(context.Context) (T, error)) (T, error) {
	v, err := call(ctx, f.lookupTimeout, what, fn)
	err = f.attribute(err)
	f.heard(err)
	return v, err
}

// forEach calls f(i) for i in 0..n-1 with at most parallel calls running at a
// time, and returns when all started calls have returned. It stops starting
// new calls when ctx ends.
func forEach(ctx context.Context, n, parallel int, f func(i int)) {
	if parallel < 1 {
		parallel = 1
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// Resolved is a host that resolves.
type Resolved struct {
	// Host is the entry, with the Plan's slots (0 for hosts found through a
	// Service).
	Host hostfile.Host
	// Addrs are the addresses the name resolved to.
	Addrs []string
	// Port is the SRV record's port (SSH port of the worker), 0 otherwise.
	Port uint16
}

// finder holds the state of one discovery: what resolved, the last error per
// name, and for a Service the previous answer (stability check).
type finder struct {
	spec          Spec
	plan          Plan
	r             Resolver
	parallel      int
	lookupTimeout time.Duration

	resolved map[string]Resolved // by nameKey
	lastErr  map[string]error    // by name as shown to the user
	badSRV   []badTarget         // SRV targets ignored, in the order found; Wait warns about each once
	badSeen  map[string]bool     // query+target already in badSRV
	rawDone  map[string]bool     // SRV queries already asked raw to name dropped targets
	ipName   map[string]string   // service-a: IP -> host name (the IP itself without a usable PTR)
	prev     map[Source]string   // previous answer per source, for the stability check

	// server names the DNS server in errors that do not (see attribute);
	// serverSet: it is WaitOptions.DNSServer and names it in every error.
	server    string
	serverSet bool
	// onSilence, if set, is called once, from a lookup's goroutine, when a
	// lookup goes unanswered before any lookup of its pass was answered.
	onSilence func(silent error)

	mu       sync.Mutex // guards the fields below
	lookups  int        // number of lookups made, for logs
	heardOf  hearing    // of the current pass
	silenced bool       // onSilence was called
}

// hearing counts what a pass's lookups heard from the DNS server: answers
// (records, NXDOMAIN, an error code) and silences (timeouts, a refused
// port), with the last silence.
type hearing struct {
	answered, silent int
	last             error
}

// allSilent is the error of the silence when nothing of the pass was
// answered and something was not, else nil.
func (h hearing) allSilent() error {
	if h.answered == 0 && h.silent > 0 {
		return h.last
	}
	return nil
}

func newFinder(spec Spec, plan Plan, r Resolver, parallel int, lookupTimeout time.Duration, server string) *finder {
	f := &finder{
		spec: spec, plan: plan, r: r, parallel: parallel, lookupTimeout: lookupTimeout,
		resolved:  make(map[string]Resolved),
		lastErr:   make(map[string]error),
		ipName:    make(map[string]string),
		badSeen:   make(map[string]bool),
		rawDone:   make(map[string]bool),
		prev:      make(map[Source]string),
		server:    server,
		serverSet: server != "",
	}
	if !f.serverSet {
		f.server = strings.Join(nameservers("/etc/resolv.conf"), " or ")
	}
	return f
}

// attribute makes a lookup error name the DNS server asked: the one Go's
// resolver names, else the nameservers of /etc/resolv.conf, which every
// resolver of the pod asks; WaitOptions.DNSServer, when set, always (a
// Resolver with its own Dial asks a server Go's errors cannot know).
func (f *finder) attribute(err error) error {
	var de *net.DNSError
	if !errors.As(err, &de) || IsNotFound(err) || de.Server != "" && !f.serverSet {
		return err
	}
	c := *de
	c.Server = f.server
	return &c
}

// heard counts what a lookup heard (err nil is an answer; ctx's end is
// neither), and calls onSilence at the first lookup nothing answered in a
// pass where nothing was answered before it.
func (f *finder) heard(err error) {
	var de *net.DNSError
	silent := awaited.Silent(err)
	f.mu.Lock()
	switch {
	case silent:
		f.heardOf.silent++
		f.heardOf.last = err
	case err == nil || errors.As(err, &de):
		f.heardOf.answered++
	}
	fire := silent && f.heardOf.answered == 0 && !f.silenced && f.onSilence != nil
	if fire {
		f.silenced = true
	}
	f.mu.Unlock()
	if fire {
		f.onSilence(err)
	}
}

// startPass starts counting what a new pass hears.
func (f *finder) startPass() {
	f.mu.Lock()
	f.heardOf = hearing{}
	f.mu.Unlock()
}

// passHeard is what the pass heard so far.
func (f *finder) passHeard() hearing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heardOf
}

// state is the outcome of one pass.
type state struct {
	source   Source          // the source that produced targets (srv or service-a for a Service)
	targets  []hostfile.Host // the hosts known so far, in final order
	ports    map[string]uint16
	pending  []string // target names that do not resolve yet, in target order
	complete bool     // the target list is final (count reached / stable)
	shortBy  int      // expected entries not in the answer yet
	query    string   // the DNS name queried for a Service
}

func (s state) resolvedCount() int { return len(s.targets) - len(s.pending) }

func (s state) expected() int { return len(s.targets) + s.shortBy }

// pass runs one round of lookups. strict applies the Service completeness
// rules (Expected, or the same answer twice); DiscoverNow passes false.
func (f *finder) pass(ctx context.Context, strict bool) state {
	switch f.plan.Source {
	case SourceSRV, SourceServiceA:
		return f.servicePass(ctx, strict)
	default:
		st := state{source: f.plan.Source, targets: f.plan.Hosts, complete: true}
		f.resolveTargets(ctx, &st)
		return st
	}
}

// resolveTargets looks up the targets that did not resolve yet and fills in
// st.pending.
func (f *finder) resolveTargets(ctx context.Context, st *state) {
	var todo []hostfile.Host
	for _, h := range st.targets {
		if _, ok := f.resolved[nameKey(h.Name)]; !ok {
			todo = append(todo, h)
		}
	}
	type result struct {
		addrs []string
		err   error
	}
	results := make([]result, len(todo))
	forEach(ctx, len(todo), f.parallel, func(i int) {
		a, err := f.lookupHost(ctx, todo[i].Name)
		results[i] = result{a, err}
	})
	for i, h := range todo {
		r := results[i]
		if r.err == nil && r.addrs == nil && ctx.Err() != nil {
			continue // not started
		}
		if r.err != nil {
			f.lastErr[h.Name] = r.err
			continue
		}
		delete(f.lastErr, h.Name)
		f.resolved[nameKey(h.Name)] = Resolved{Host: h, Addrs: r.addrs, Port: st.ports[nameKey(h.Name)]}
	}
	st.pending = st.pending[:0]
	for _, h := range st.targets {
		if _, ok := f.resolved[nameKey(h.Name)]; !ok {
			st.pending = append(st.pending, h.Name)
		}
	}
}

func (f *finder) count() {
	f.mu.Lock()
	f.lookups++
	f.mu.Unlock()
}

func (f *finder) lookupHost(ctx context.Context, name string) ([]string, error) {
	f.count()
	addrs, err := ask(ctx, f, name, func(c context.Context) ([]string, error) {
		return f.r.LookupHost(c, name)
	})
	if err == nil && len(addrs) == 0 {
		err = &net.DNSError{Err: errEmptyAnswer.Error(), Name: name, IsNotFound: true}
	}
	return addrs, err
}

// servicePass handles a Service: SRV records first, then (unless the Service
// is an explicit SRV name) the Service's A records.
func (f *finder) servicePass(ctx context.Context, strict bool) state {
	svc := f.spec.Service
	_, explicit := explicitSRV(svc)
	query := "_ssh._tcp." + svc
	if explicit {
		query = svc
	}
	st := state{source: SourceSRV, query: query}
	f.count()
	type srvAnswer struct {
		cname string
		srvs  []*net.SRV
	}
	ans, err := ask(ctx, f, query, func(c context.Context) (srvAnswer, error) {
		var cname string
		var srvs []*net.SRV
		var err error
		if explicit {
			cname, srvs, err = f.r.LookupSRV(c, "", "", svc)
		} else {
			cname, srvs, err = f.r.LookupSRV(c, "ssh", "tcp", svc)
		}
		return srvAnswer{cname, srvs}, err
	})
	if err != nil && len(ans.srvs) > 0 {
		// Go's resolver drops records whose target is not a valid DNS name
		// and returns the others with an error: keep them, and find out
		// which target it dropped (it does not say).
		f.noteDroppedSRV(ctx, query, ans.cname, err)
		err = nil
	}
	if err == nil && len(ans.srvs) == 0 {
		err = &net.DNSError{Err: errEmptyAnswer.Error(), Name: query, IsNotFound: true}
	}
	if err != nil {
		f.lastErr[query] = err
		if !explicit {
			ast := f.aPass(ctx, strict)
			if len(ast.targets) > 0 {
				delete(f.lastErr, query) // the A records answered instead
			}
			return ast
		}
		st.shortBy = f.spec.Expected
		return st
	}
	delete(f.lastErr, query)
	ports := make(map[string]uint16)
	var names []string
	for _, s := range ans.srvs {
		if s == nil {
			continue
		}
		name := strings.TrimSuffix(s.Target, ".")
		if verr := hostfile.ValidateName(name); verr != nil {
			f.noteBadSRV(query, s.Target, verr.Error())
			continue
		}
		k := nameKey(name)
		if _, dup := ports[k]; dup {
			continue
		}
		ports[k] = s.Port
		names = append(names, name)
	}
	sortNatural(names)
	st.ports = ports
	st.targets = f.hostsFor(names)
	st.complete, st.shortBy = f.completeness(SourceSRV, names, strict)
	f.resolveTargets(ctx, &st)
	return st
}

// aPass looks up the Service's addresses and names each one by PTR.
func (f *finder) aPass(ctx context.Context, strict bool) state {
	svc := f.spec.Service
	st := state{source: SourceServiceA, query: svc}
	addrs, err := f.lookupHost(ctx, svc)
	if err != nil {
		f.lastErr[svc] = err
		st.shortBy = f.spec.Expected
		return st
	}
	delete(f.lastErr, svc)
	ips := pickFamily(addrs)
	// Name the IPs not named yet: PTR, then a forward check of that name.
	var todo []string
	for _, ip := range ips {
		if _, ok := f.ipName[ip]; !ok {
			todo = append(todo, ip)
		}
	}
	type result struct {
		name  string // "" = not decided yet, retry next pass
		addrs []string
		err   error
	}
	results := make([]result, len(todo))
	forEach(ctx, len(todo), f.parallel, func(i int) {
		name, a, err := f.nameIP(ctx, todo[i])
		results[i] = result{name, a, err}
	})
	for i, ip := range todo {
		r := results[i]
		if r.name == "" {
			if r.err != nil {
				f.lastErr[ip] = r.err
			}
			continue
		}
		delete(f.lastErr, ip)
		f.ipName[ip] = r.name
		k := nameKey(r.name)
		if prev, ok := f.resolved[k]; ok {
			r.addrs = mergeAddrs(prev.Addrs, r.addrs)
		}
		f.resolved[k] = Resolved{Host: hostfile.Host{Name: r.name}, Addrs: r.addrs}
	}
	var names []string
	seen := make(map[string]bool)
	for _, ip := range ips {
		n, ok := f.ipName[ip]
		if !ok {
			n = ip // pending: shown by its IP
		}
		if !seen[nameKey(n)] {
			seen[nameKey(n)] = true
			names = append(names, n)
		}
	}
	sortNatural(names)
	st.targets = f.hostsFor(names)
	st.complete, st.shortBy = f.completeness(SourceServiceA, ips, strict)
	for _, h := range st.targets {
		if _, ok := f.resolved[nameKey(h.Name)]; !ok {
			st.pending = append(st.pending, h.Name)
		}
	}
	return st
}

// nameIP finds the host name for a Service IP: its PTR name when that name
// resolves forward, else the IPv4 literal itself. It returns name "" when the
// answer should be retried (a DNS error other than "not found", or an IPv6
// address without a usable name: hostfiles cannot carry IPv6 literals).
func (f *finder) nameIP(ctx context.Context, ip string) (string, []string, error) {
	f.count()
	ptrs, err := ask(ctx, f, ip, func(c context.Context) ([]string, error) {
		return f.r.LookupAddr(c, ip)
	})
	fallback := func(cause error) (string, []string, error) {
		if a, perr := netip.ParseAddr(ip); perr == nil && a.Is4() {
			return ip, []string{ip}, nil
		}
		return "", nil, fmt.Errorf("IPv6 address %s has no usable PTR name (hostfiles cannot hold IPv6 literals): %w", ip, cause)
	}
	if err != nil && !IsNotFound(err) {
		return "", nil, err
	}
	for _, p := range ptrs {
		name := strings.TrimSuffix(p, ".")
		if hostfile.ValidateName(name) != nil {
			continue
		}
		addrs, ferr := f.lookupHost(ctx, name)
		if ferr == nil {
			return name, mergeAddrs([]string{ip}, addrs), nil
		}
		if !IsNotFound(ferr) {
			return "", nil, ferr
		}
	}
	if err == nil {
		err = &net.DNSError{Err: "no PTR name that resolves forward", Name: ip, IsNotFound: true}
	}
	return fallback(err)
}

// completeness applies the Service rules: at least Expected entries, or with
// Expected 0 at least one entry and the same answer as the previous pass.
func (f *finder) completeness(src Source, answer []string, strict bool) (bool, int) {
	key := strings.Join(answer, ",")
	prev, hadPrev := f.prev[src]
	f.prev[src] = key
	if exp := f.spec.Expected; exp > 0 {
		if len(answer) >= exp {
			return true, 0
		}
		return !strict, exp - len(answer)
	}
	if len(answer) == 0 {
		return false, 0
	}
	return !strict || (hadPrev && prev == key), 0
}

func (f *finder) hostsFor(names []string) []hostfile.Host {
	hosts := make([]hostfile.Host, len(names))
	for i, n := range names {
		hosts[i] = hostfile.Host{Name: n}
	}
	return hosts
}

// results returns the resolved targets in target order.
func (f *finder) results(st state) []Resolved {
	out := make([]Resolved, 0, len(st.targets))
	for _, h := range st.targets {
		if r, ok := f.resolved[nameKey(h.Name)]; ok {
			r.Host = h
			out = append(out, r)
		}
	}
	return out
}

// pickFamily returns the IPv4 addresses of a Service (sorted, unique), or
// its IPv6 addresses when it has no IPv4 one. A dual-stack headless Service
// answers with both families for each pod; counting both would double the
// pods.
func pickFamily(addrs []string) []string {
	var v4, v6 []netip.Addr
	seen := make(map[netip.Addr]bool)
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil || seen[a] {
			continue
		}
		seen[a] = true
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	pick := v4
	if len(pick) == 0 {
		pick = v6
	}
	sort.Slice(pick, func(i, j int) bool { return pick[i].Less(pick[j]) })
	out := make([]string, 0, len(pick))
	for _, a := range pick {
		out = append(out, a.String())
	}
	return out
}

func mergeAddrs(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, x := range b {
		dup := false
		for _, y := range out {
			if x == y {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, x)
		}
	}
	return out
}

// sortNatural sorts names so that digit runs compare as numbers:
// w-2 before w-10.
func sortNatural(names []string) {
	sort.SliceStable(names, func(i, j int) bool { return naturalLess(names[i], names[j]) })
}

func naturalLess(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			if da != db {
				return da < db
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// jitter returns a random factor in [0.5, 1.5).
func jitter() float64 { return 0.5 + rand.Float64() }
