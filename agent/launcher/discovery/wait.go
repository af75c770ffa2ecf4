package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/podmpi/podmpi/agent/launcher/awaited"
)

// Clock is Wait's time source; tests inject a fake one so a 5-minute deadline
// passes instantly.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff computes the jittered exponential wait between discovery rounds.
type Backoff struct {
	// Base is the first wait (200ms when zero).
	Base time.Duration
	// Factor multiplies the wait each round (2 when < 1).
	Factor float64
	// Max caps the wait before jitter (5s when zero).
	Max time.Duration
	// Jitter returns the factor applied to each wait; nil means uniform in
	// [0.5, 1.5), which spreads the DNS queries of many launchers.
	Jitter func() float64
}

// Delay returns the wait before round attempt+1 (attempt counts from 0).
func (b Backoff) Delay(attempt int) time.Duration {
	base, factor, maxD := b.Base, b.Factor, b.Max
	if base <= 0 {
		base = 200 * time.Millisecond
	}
	if factor < 1 {
		factor = 2
	}
	if maxD <= 0 {
		maxD = 5 * time.Second
	}
	d := float64(base)
	for i := 0; i < attempt && d < float64(maxD); i++ {
		d *= factor
	}
	d = min(d, float64(maxD))
	j := jitter
	if b.Jitter != nil {
		j = b.Jitter
	}
	return time.Duration(d * j())
}

// WaitOptions configures Wait. Zero values take the documented defaults.
type WaitOptions struct {
	// Resolver answers the lookups; nil means net.DefaultResolver.
	Resolver Resolver
	// Timeout bounds the whole wait (--discovery.timeout); default 5m.
	Timeout time.Duration
	// Parallel bounds the lookups in flight; default 64.
	Parallel int
	// LookupTimeout bounds each lookup; default 2s.
	LookupTimeout time.Duration
	// Progress, if set, is called with the state of the wait when the number
	// of resolved hosts changes and otherwise at most every ProgressEvery.
	Progress func(Progress)
	// ProgressEvery is the period of progress reports while nothing
	// changes; default 5s.
	ProgressEvery time.Duration
	// Explain, if set, says what else is known of a host that does not
	// resolve yet (what Kubernetes says of its pod: "pod tj-node-0-2-x is
	// Pending, not scheduled: ..."), "" for nothing; the progress lines
	// add it. It must not block.
	Explain func(host string) string
	// DNSServer names the DNS server the Resolver asks in progress lines,
	// warnings and errors ("127.0.0.1:5353"); "" names the one Go's
	// resolver reports, else the nameservers of /etc/resolv.conf. Set it
	// for a Resolver whose Dial goes elsewhere than /etc/resolv.conf says.
	DNSServer string
	// Warn, if set, is called with each warning Wait logs about the DNS
	// service itself (a DNS server that answers no lookup), for the caller
	// to raise where users look (a Kubernetes Event). It is called from a
	// lookup's goroutine and must not block.
	Warn func(msg string)
	// Logger gets the same progress at Info level, the warnings at Warn
	// level and each retry at Debug level; nil discards.
	Logger *slog.Logger
	// Clock is the time source; nil means real time.
	Clock Clock
	// Backoff spaces the rounds; the zero value is 200ms, x2, cap 5s,
	// jitter [0.5, 1.5).
	Backoff Backoff
}

func (o WaitOptions) withDefaults() WaitOptions {
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = DefaultLookupTimeout
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	return o
}

// Progress is the state of a wait.
type Progress struct {
	// Resolved hosts so far, out of Expected (0 when a Service has answered
	// nothing yet and no count was given).
	Resolved, Expected int
	// Waiting names the hosts that do not resolve yet, in plan order; for a
	// Service it can also say how many entries are still missing from its
	// answer ("2 more in _ssh._tcp.tj").
	Waiting []string
	// Elapsed since the wait started.
	Elapsed time.Duration
	// Notes are WaitOptions.Explain's words on the hosts Waiting names.
	Notes map[string]string
	// Answers is what the last lookup for each entry of Waiting got, in
	// package awaited's words (NXDOMAIN, no answer from the DNS server
	// 10.96.0.10:53, ...); an entry without one was not looked up.
	Answers map[string]awaited.Answer
	// DNSSilent names the DNS server when no lookup of the last round got
	// an answer from it and some got none (timeouts, a refused port): the
	// way to the server fails, not the names.
	DNSSilent string
}

// maxNamesListed is how many waiting hosts a progress line lists one by
// one; more are grouped by answer (awaited.Line).
const maxNamesListed = 3

// String formats the progress as "3/4 workers resolved; waiting for
// tj-node-0-3.tj (NXDOMAIN), 12s": each host with what its last lookup got
// while there are at most three, else grouped by answer (see awaited.Line),
// and when the DNS server answers nothing, that egress to it may be
// blocked.
func (p Progress) String() string {
	var b strings.Builder
	if p.Expected > 0 {
		fmt.Fprintf(&b, "%d/%d workers resolved", p.Resolved, p.Expected)
	} else {
		fmt.Fprintf(&b, "%d workers resolved", p.Resolved)
	}
	if len(p.Waiting) > 0 {
		b.WriteString("; waiting for ")
		hosts := make([]awaited.Host, len(p.Waiting))
		for i, n := range p.Waiting {
			hosts[i] = awaited.Host{Name: n, Answer: p.Answers[n], Note: p.Notes[n]}
		}
		b.WriteString(awaited.Line(hosts, maxNamesListed))
	}
	if p.DNSSilent != "" {
		fmt.Fprintf(&b, "; the DNS server %s does not answer: egress to it may be blocked (a NetworkPolicy's DNS rule)", p.DNSSilent)
	}
	b.WriteString(", ")
	b.WriteString(p.Elapsed.Round(time.Second).String())
	return b.String()
}

// progress is the state of the wait after a pass, with each waiting
// entry's last answer.
func (f *finder) progress(st state, elapsed time.Duration) Progress {
	p := Progress{Resolved: st.resolvedCount(), Expected: st.expected(), Elapsed: elapsed}
	p.Waiting = append([]string(nil), st.pending...)
	answers := make(map[string]awaited.Answer, len(p.Waiting)+1)
	for _, n := range st.pending {
		if err := f.lastErr[n]; err != nil {
			answers[n] = awaited.DNS(err, "")
		}
	}
	// A Service's own query answers for the entries it lacks.
	var entry string
	switch {
	case st.shortBy > 0:
		entry = fmt.Sprintf("%d more in %s", st.shortBy, st.query)
	case st.query != "" && len(st.targets) == 0:
		entry = st.query
	case !st.complete && len(st.pending) == 0:
		p.Waiting = append(p.Waiting, "a stable answer from "+st.query)
	}
	if entry != "" {
		p.Waiting = append(p.Waiting, entry)
		if err := f.lastErr[st.query]; err != nil {
			answers[entry] = awaited.DNS(err, "")
		}
	}
	if len(answers) > 0 {
		p.Answers = answers
	}
	p.DNSSilent = serverOf(f.passHeard().allSilent())
	return p
}

// serverOf is the DNS server a lookup error names, "" for none.
func serverOf(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.Server != "" {
			return de.Server
		}
		return "in /etc/resolv.conf"
	}
	return ""
}

// dnsEgressAdvice is what a DNS server that answers nothing points at, and
// how to check it: the warning and the deadline's hint both say it.
const dnsEgressAdvice = "egress to it may be blocked: a NetworkPolicy whose DNS rule allows only the kube-dns pods in kube-system " +
	"misses a DNS server that runs elsewhere (NodeLocal DNSCache on 169.254.20.10, a CoreDNS on each node, OpenShift's DNS pods on port 5353); " +
	"compare `kubectl describe networkpolicy` in the launcher's namespace with where the cluster's DNS really runs " +
	"(the nameserver in the launcher pod's /etc/resolv.conf; `kubectl get pods -A -o wide | grep dns`)"

// silenceWarning is the warning of a DNS server that answered no lookup,
// silent being a lookup it left unanswered.
func silenceWarning(silent error, timeout time.Duration) string {
	return fmt.Sprintf("DNS lookups get %s (nothing answers, which a missing name would not cause: it gets NXDOMAIN); %s; "+
		"the wait goes on until --discovery.timeout (%s)", awaited.DNS(silent, "").Kind, dnsEgressAdvice, timeout)
}

// checkPlan rejects a Plan that Resolve would not produce for spec.
func checkPlan(spec Spec, plan Plan) error {
	switch plan.Source {
	case SourceSRV, SourceServiceA:
		if spec.Service == "" {
			return fmt.Errorf("discovery plan source %s without a service name", plan.Source)
		}
	case SourceWorkersFlag, SourceHostfile, SourceTemplate:
		if len(plan.Hosts) == 0 {
			return fmt.Errorf("discovery plan source %s with no hosts", plan.Source)
		}
	default:
		return fmt.Errorf("discovery plan has unknown source %q", plan.Source)
	}
	return nil
}

// Wait looks up every host of plan (for a Service: the SRV targets or the
// Service's addresses, see the package documentation) until all resolve,
// retrying with jittered backoff, and returns them in plan order (sorted by
// name, digit runs numerically, for a Service). The launcher's own entry
// (Plan.SelfIndex) must resolve too; for a Service, FindSelf(spec.Self, ...)
// over the returned hosts locates it. When opts.Timeout passes first, the
// error is a *TimeoutError naming the missing hosts and the likely causes;
// when ctx ends, the error wraps ctx.Err().
func Wait(ctx context.Context, spec Spec, plan Plan, opts WaitOptions) ([]Resolved, error) {
	if err := checkPlan(spec, plan); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	log := o.Logger.With("component", "discovery", "source", string(plan.Source))
	f := newFinder(spec, plan, o.Resolver, o.Parallel, o.LookupTimeout, o.DNSServer)
	// The first lookup the DNS server leaves unanswered, before it answered
	// any of that pass, is warned about at once: a pass over many names
	// takes several lookup timeouts, and a blocked DNS must not look like
	// a slow start until the deadline.
	f.onSilence = func(silent error) {
		msg := silenceWarning(silent, o.Timeout)
		log.Warn(msg, "server", serverOf(silent), "lookup", silent.Error())
		if o.Warn != nil {
			o.Warn(msg)
		}
	}
	answersAgain := false // logged that the DNS server answers again
	start := o.Clock.Now()
	deadline := start.Add(o.Timeout)

	var (
		lastReport  time.Time
		lastKey     = ""
		best        = -1
		attempt     = 0
		warned      = 0 // f.badSRV entries already logged
		interrupted = func(p Progress, err error) error {
			return fmt.Errorf("waiting for workers in DNS interrupted (%s): %w", p, err)
		}
	)
	for round := 1; ; round++ {
		// Lookups end with the deadline, but get at least minLookupTimeout:
		// a last round of instant timeouts would only hide the real answers.
		f.lookupTimeout = min(o.LookupTimeout, max(deadline.Sub(o.Clock.Now()), minLookupTimeout))
		f.startPass()
		st := f.pass(ctx, true)
		if f.silencedBefore() && f.passHeard().answered > 0 && !answersAgain {
			answersAgain = true
			log.Info("the DNS server answers again", "round", round)
		}
		var bad []badTarget
		bad, warned = f.takeBadSRV(warned)
		for _, b := range bad {
			log.Warn(b.String()+"; fix the Service's endpoints or the DNS record (the other targets are used)",
				"query", b.Query, "target", b.Target)
		}
		now := o.Clock.Now()
		p := f.progress(st, now.Sub(start))
		if o.Explain != nil {
			for _, n := range p.Waiting {
				if note := o.Explain(n); note != "" {
					if p.Notes == nil {
						p.Notes = map[string]string{}
					}
					p.Notes[n] = note
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, interrupted(p, err)
		}
		done := st.complete && len(st.pending) == 0 && len(st.targets) > 0
		// A new word on a host (what Kubernetes says of its pod) is
		// reported at once too.
		// So is a new answer (NXDOMAIN turning into no answer at all).
		key := fmt.Sprintf("%d/%d/%d/%v/%v/%s", p.Resolved, p.Expected, len(p.Waiting), p.Notes, answerCounts(p.Answers), p.DNSSilent)
		if key != lastKey || now.Sub(lastReport) >= o.ProgressEvery {
			lastKey, lastReport = key, now
			if o.Progress != nil {
				o.Progress(p)
			}
			if !done {
				log.Info(p.String(), "resolved", p.Resolved, "expected", p.Expected, "elapsed", p.Elapsed)
			}
		}
		if done {
			res := f.results(st)
			log.Info("all workers resolve", "workers", len(res), "source", string(st.source),
				"elapsed", p.Elapsed, "rounds", round)
			return res, nil
		}
		if p.Resolved > best {
			best, attempt = p.Resolved, 0
		}
		remaining := deadline.Sub(now)
		if remaining <= 0 {
			return nil, f.timeoutError(st, p, o.Timeout, round)
		}
		d := min(o.Backoff.Delay(attempt), remaining)
		attempt++
		log.Debug("retrying DNS lookups", "in", d, "round", round, "waiting", len(p.Waiting),
			"time_left", remaining.Round(time.Millisecond), "last_error", f.sampleErr(st))
		if err := o.Clock.Sleep(ctx, d); err != nil {
			return nil, interrupted(p, err)
		}
	}
}

// answerCounts counts the waiting entries by answer, for the progress
// key.
func answerCounts(answers map[string]awaited.Answer) map[string]int {
	n := make(map[string]int)
	for _, a := range answers {
		n[a.Kind]++
	}
	return n
}

// silencedBefore reports whether onSilence was called.
func (f *finder) silencedBefore() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.silenced
}

// sampleErr returns one recent lookup error for the retry log, or nil.
func (f *finder) sampleErr(st state) error {
	for _, n := range st.pending {
		if err := f.lastErr[n]; err != nil {
			return err
		}
	}
	if st.query != "" {
		return f.lastErr[st.query]
	}
	return nil
}

func (f *finder) timeoutError(st state, p Progress, timeout time.Duration, rounds int) *TimeoutError {
	e := &TimeoutError{
		Missing:  append([]string(nil), st.pending...),
		Resolved: p.Resolved,
		Expected: p.Expected,
		Elapsed:  p.Elapsed,
		Timeout:  timeout,
		LastErr:  make(map[string]error, len(f.lastErr)),
		Source:   st.source,
		Query:    st.query,
		ShortBy:  st.shortBy,
		Unstable: !st.complete && st.shortBy == 0 && len(st.targets) > 0,
		Rounds:   rounds,
	}
	for k, v := range f.lastErr {
		e.LastErr[k] = v
	}
	if i := FindSelf(f.spec.Self, st.targets); i >= 0 && slices.Contains(st.pending, st.targets[i].Name) {
		e.Self = st.targets[i].Name
	}
	return e
}

// TimeoutError is returned by Wait when the deadline passes before every
// host resolves. The launcher exits with exitcode.DiscoveryTimeout.
type TimeoutError struct {
	// Missing are the hosts that never resolved, in plan order.
	Missing []string
	// Resolved of Expected hosts resolved.
	Resolved, Expected int
	// Elapsed is how long Wait waited; Timeout the deadline it was given.
	Elapsed, Timeout time.Duration
	// LastErr is the last lookup error per name (hosts, IPs, the Service
	// query). "no such host" (see IsNotFound) means not scheduled or not
	// published; other errors point at the DNS service.
	LastErr map[string]error
	// Source is where the hosts came from (for a Service: srv or service-a,
	// whichever answered last).
	Source Source
	// Query is the DNS name looked up for a Service, e.g. "_ssh._tcp.tj".
	Query string
	// ShortBy is how many entries the Service's answer lacked to reach
	// Spec.Expected.
	ShortBy int
	// Unstable: with Spec.Expected 0, the Service's answer changed between
	// the last two rounds.
	Unstable bool
	// Self is the launcher's own name when it is among Missing.
	Self string
	// Rounds is the number of lookup rounds made.
	Rounds int
}

const maxListed = 10

// minLookupTimeout is the shortest per-lookup timeout Wait uses near its
// deadline (unless WaitOptions.LookupTimeout is shorter), so the deadline can
// be overrun by at most this much.
const minLookupTimeout = 500 * time.Millisecond

// Error names the missing hosts (the first ten, then "and N more") with their
// last lookup error, followed by Hint on the next lines.
func (e *TimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workers did not resolve in DNS within %s (giving up after %d rounds): ", e.Timeout, e.Rounds)
	if e.Expected > 0 {
		fmt.Fprintf(&b, "%d/%d resolved", e.Resolved, e.Expected)
	} else {
		fmt.Fprintf(&b, "%d resolved", e.Resolved)
	}
	fmt.Fprintf(&b, " (source %s)", e.Source)
	if len(e.Missing) > 0 {
		b.WriteString("; missing: ")
		for i, m := range e.Missing {
			if i == maxListed {
				fmt.Fprintf(&b, " and %d more", len(e.Missing)-maxListed)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(m)
			if m == e.Self {
				b.WriteString(" [this launcher]")
			}
			if err := e.LastErr[m]; err != nil {
				fmt.Fprintf(&b, " (%s)", shortCause(err))
			}
		}
	}
	switch {
	case e.ShortBy > 0:
		fmt.Fprintf(&b, "; %s lacks %d of the %d expected entries", e.Query, e.ShortBy, e.Expected)
		if err := e.LastErr[e.Query]; err != nil {
			fmt.Fprintf(&b, " (%s)", shortCause(err))
		}
	case e.Query != "" && e.Resolved == 0 && len(e.Missing) == 0:
		fmt.Fprintf(&b, "; %s has no records", e.Query)
		if err := e.LastErr[e.Query]; err != nil {
			fmt.Fprintf(&b, " (%s)", shortCause(err))
		}
	case e.Unstable:
		fmt.Fprintf(&b, "; the answer for %s was still changing (set --workers-expected to wait for a count)", e.Query)
	}
	b.WriteString("\nlikely causes:\n")
	b.WriteString(e.Hint())
	return b.String()
}

// shortCause renders a lookup error without repeating the name, in the
// progress lines' words (awaited.DNS).
func shortCause(err error) string { return awaited.DNS(err, "").Text() }

// Hint lists the likely causes, one "  - " line each, most specific first.
func (e *TimeoutError) Hint() string {
	var lines []string
	add := func(format string, args ...any) {
		lines = append(lines, "  - "+fmt.Sprintf(format, args...))
	}
	if silent := e.silentNames(); len(silent) > 0 {
		kind := awaited.DNS(e.LastErr[silent[0]], "").Kind
		add("%s for %s (nothing answered: a missing name gets NXDOMAIN instead): %s", kind, awaited.Names(silent, 3), dnsEgressAdvice)
	}
	if e.Self != "" {
		add("the launcher's own name %s does not resolve: a pod gets a DNS record only once it is Ready unless the headless Service sets publishNotReadyAddresses: true, and the launcher is not Ready while it waits (Trainer v2 runLauncherAsNode, mpi-operator runLauncherAsWorker)", e.Self)
	}
	add("pods not scheduled: `kubectl get pods` shows them Pending; gang scheduling (Kueue, Volcano, coscheduling) starts no pod until all of them fit, and a ResourceQuota or too few nodes/GPUs keeps them Pending (`kubectl describe pod <name>` says why)")
	add("pods not published in DNS: a headless Service lists only Ready pods unless it sets publishNotReadyAddresses: true (Trainer v2's shipped runtimes set it; mpi-operator only with runLauncherAsWorker)")
	switch e.Source {
	case SourceSRV:
		if e.Resolved > 0 || len(e.Missing) > 0 {
			add("wrong Service or count: compare %s and --workers-expected (%d) with the job's pods", e.Query, e.Expected)
			break
		}
		add("no SRV records: %s exists only when the Service has a TCP port named \"ssh\"; without one, pass the plain Service name so its A records are used", e.Query)
	case SourceServiceA:
		if e.Resolved == 0 && len(e.Missing) == 0 {
			add("no records: neither _ssh._tcp.%s (SRV) nor %s (A) has an answer; check the Service exists in the launcher's namespace (`kubectl get svc %s`)", e.Query, e.Query, e.Query)
		}
		add("wrong Service: %s must be the job's headless Service (clusterIP: None) in the launcher's namespace; Trainer v2 names it after spec.network.subdomain (default: the TrainJob name), mpi-operator after the MPIJob", e.Query)
	case SourceTemplate:
		add("wrong name template or count: compare --discovery.template and --workers-expected with the pods' hostnames (Trainer v2: <job>-node-0-{i}.<job>; mpi-operator: <job>-worker-{i}.<job>.<namespace>.svc)")
	default:
		add("wrong subdomain: each name must be <pod hostname>.<subdomain>, the subdomain being the headless Service's name (Trainer v2: spec.network.subdomain, default the TrainJob name; mpi-operator: the MPIJob name)")
	}
	for _, m := range e.Missing {
		if !strings.Contains(nameKey(m), ".svc") && !strings.HasSuffix(m, ".") && !isIPLiteral(m) {
			add("%s is a relative name: it resolves only through the pod's DNS search list (<namespace>.svc.cluster.local), so the launcher must run in the workers' namespace with dnsPolicy ClusterFirst", m)
			break
		}
	}
	for _, k := range sortedKeys(e.LastErr) {
		if err := e.LastErr[k]; !IsNotFound(err) && !awaited.Silent(err) {
			add("DNS errors other than \"no such host\" (%s: %s): check CoreDNS and /etc/resolv.conf in the launcher pod", k, shortCause(err))
			break
		}
	}
	add("if the pods are only slow to start (image pulls), raise --discovery.timeout (now %s)", e.Timeout)
	return strings.Join(lines, "\n")
}

// silentNames are the names whose last lookup nothing answered, sorted.
func (e *TimeoutError) silentNames() []string {
	var out []string
	for _, k := range sortedKeys(e.LastErr) {
		if awaited.Silent(e.LastErr[k]) {
			out = append(out, k)
		}
	}
	return out
}

func isIPLiteral(s string) bool { return net.ParseIP(s) != nil }

func sortedKeys(m map[string]error) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// DiscoverNow makes one pass of lookups without waiting, for `launcher
// discover-hosts` (Horovod elastic): it returns the hosts that resolve now, in
// plan order (sorted by name for a Service), and the names that do not. A
// Service's answer is used as it is, whatever Spec.Expected says. The error is
// non-nil when ctx ends or when a lookup failed with a DNS error other than
// "no such host": the answer is then unreliable and the caller should exit
// non-zero rather than report a shrunken host list, so that Horovod keeps its
// current hosts. The results are still returned with such an error.
func DiscoverNow(ctx context.Context, spec Spec, plan Plan, resolver Resolver) ([]Resolved, []string, error) {
	if err := checkPlan(spec, plan); err != nil {
		return nil, nil, err
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	f := newFinder(spec, plan, resolver, DefaultParallel, DefaultLookupTimeout, "")
	st := f.pass(ctx, false)
	res := f.results(st)
	missing := append([]string(nil), st.pending...)
	if err := ctx.Err(); err != nil {
		return res, missing, fmt.Errorf("discovering hosts: %w", err)
	}
	var failed []string
	var first error
	for _, k := range sortedKeys(f.lastErr) {
		if err := f.lastErr[k]; !IsNotFound(err) {
			failed = append(failed, k)
			if first == nil {
				first = err
			}
		}
	}
	if len(failed) > 0 {
		return res, missing, fmt.Errorf("discovering hosts: DNS lookups failed for %s (not \"no such host\", so the host list may be incomplete): %w",
			awaited.Names(failed, 3), first)
	}
	return res, missing, nil
}
