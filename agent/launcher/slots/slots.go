// Package slots decides how many MPI processes each worker takes (the
// hostfile's slots) and, when the user's mpirun command sets no process
// count, injects -np with their sum.
//
// --slots takes "auto" or a positive integer N:
//
//   - N: every host gets N slots (Decision.Source "flag"); no worker is asked.
//   - auto: each worker-agent is asked for GET http://<host>:<web-port>/info
//     (default port 9022), and asked again (connection refused or reset,
//     timeouts, 429, 5xx, and an agent still detecting its GPUs, which
//     answers slots.n=0) until Options.Deadline, the deadline of the whole
//     phase, which the launcher shares with its SSH probe. Workers that
//     answer at once cost one request each; at most Options.Parallel
//     requests are in flight, and the phase ends by the deadline whatever
//     the network does.
//
// What an answer decides:
//
//   - The agent's count wins (Source "agent") unless it is only the agent's
//     default (no GPU found, no --slots given: source "default") and the
//     hostfile gave a count, which then stands (Source "hostfile"). When the
//     two disagree, Decision.Warning says so and how to make them agree.
//   - An agent that gives no count by the deadline (or answers garbage, 404,
//     or a failed GPU detection) leaves the hostfile's count when there is
//     one (Source "hostfile", with a warning): that is the world size the
//     operator asked for (Trainer's numProcPerNode, mpi-operator's
//     slotsPerWorker). Without one, the host's slots are unknown, and Decide
//     fails with an *UnknownError naming every such host and why, rather
//     than run a smaller world than the workers offer; Options.AllowDefault
//     (--slots.allow-default) gives them Options.DefaultSlots instead, with
//     a warning.
//
// When every host already has a count from the hostfile, the agents' answers
// can only confirm it or point at a misconfiguration that is the same on
// every worker, so only a spread sample of Options.Sample hosts is asked
// (the probe's --probe.ssh-sample, chosen by probe.SpreadSample); if any
// sampled agent disagrees with its count, the rest are asked too.
//
// A Host.Slots of 0 means "the source gave no count" (see package discovery),
// so an operator-given count can be told from a default.
package slots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/podmpi/podmpi/agent/launcher/awaited"
	"github.com/podmpi/podmpi/agent/launcher/probe"
	"github.com/podmpi/podmpi/agent/panictrap"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/hostfile"
)

// Defaults of Options.
const (
	DefaultWebPort        = 9022
	DefaultDeadline       = 2 * time.Minute // the probe's default deadline
	DefaultAttemptTimeout = 3 * time.Second
	DefaultRetryWait      = 250 * time.Millisecond
	DefaultMaxRetryWait   = 2 * time.Second
	DefaultParallel       = 64 // the probe's
	DefaultProgressEvery  = 5 * time.Second
)

// Options configures Decide. Zero values take the documented defaults.
type Options struct {
	// Fixed is --slots as ParseMode returns it: 0 for auto, else the count
	// every host gets without asking.
	Fixed int
	// AllowDefault lets a host whose source gives no count and whose agent
	// gives none by the deadline run with DefaultSlots (a warning) instead
	// of failing Decide (--slots.allow-default).
	AllowDefault bool
	// DefaultSlots are the slots of such a host when AllowDefault is set;
	// default 1.
	DefaultSlots int
	// WebPort is worker-agent's HTTP port (--worker.web-port); default 9022.
	WebPort int
	// Deadline bounds the whole phase from Decide's start: every agent is
	// asked again until it; default DefaultDeadline. No attempt outlives it.
	Deadline time.Duration
	// AttemptTimeout bounds one HTTP attempt; default 3s. Unused when
	// HTTPClient is set (set its Timeout instead).
	AttemptTimeout time.Duration
	// RetryWait is the wait before the first retry of a host, doubled each
	// time up to MaxRetryWait, with jitter in [0.5, 1.5); defaults 250ms
	// and 2s.
	RetryWait, MaxRetryWait time.Duration
	// Parallel bounds the requests in flight; default 64. A host waiting to
	// retry holds no place, so that hosts that do not answer cannot starve
	// the others.
	Parallel int
	// Sample, when > 0, is how many hosts are asked when every host
	// already has a count from its source (see the package documentation);
	// 0 asks every host.
	Sample int
	// HTTPClient makes the requests; nil means a client that ignores
	// HTTP(S)_PROXY (workers are reached pod to pod).
	HTTPClient *http.Client
	// AddrFor, if set, returns the "host:port" to query for a host, instead
	// of the resolved address (or the name) and WebPort. Tests point it at
	// httptest servers.
	AddrFor func(host string) string
	// Self is the launcher's own entry in the host list, if any (see
	// discovery.FindSelf). It is not queried over HTTP: LocalInfo, if set,
	// gives its info; otherwise its slots come from the hostfile or
	// DefaultSlots without a warning.
	Self string
	// LocalInfo returns the launcher pod's own info for Self.
	LocalInfo func(ctx context.Context) (api.Info, error)
	// ProgressEvery is how often, while agents are still awaited, one Info
	// line names them (the first as soon as one must be waited for);
	// default 5s.
	ProgressEvery time.Duration
	// Explain, if set, says what else is known of a host whose agent is
	// awaited (what Kubernetes says of its pod), "" for nothing; the
	// progress lines add it. It must not block.
	Explain func(host string) string
	// Logger gets warnings (Warn), progress (Info) and each retry (Debug);
	// nil discards.
	Logger *slog.Logger
}

// Sources of a Decision.
const (
	SourceFlag     = "flag"
	SourceAgent    = "agent"
	SourceHostfile = "hostfile"
	SourceDefault  = "default"
)

// Decision records how one host's slots were chosen.
type Decision struct {
	// Host is the host name as listed.
	Host string
	// Slots is the chosen count (>= 1); 0 when unknown (see UnknownError).
	Slots int
	// Source is "flag", "agent", "hostfile" or "default"; "" when unknown.
	Source string
	// Warning is non-empty when the operator should look: the hostfile and
	// the agent disagree, or the agent gave no count.
	Warning string
	// Mismatch is true when the hostfile's count and the agent's (its
	// count, or its GPUs) disagree.
	Mismatch bool
	// Info is the agent's answer, when it gave one.
	Info *api.Info
	// Err is why the agent's answer is missing, if it was asked.
	Err error
	// Asked is whether the agent was asked (false for --slots N, for the
	// launcher itself, and for hosts outside the sample).
	Asked bool
	// Attempts is the number of requests made to the agent.
	Attempts int
}

// UnknownError is Decide's error when some hosts' slots are unknown at the
// deadline: their source gives no count, their agent gave none, and
// Options.AllowDefault is not set.
type UnknownError struct {
	// Unknown are those hosts' decisions (Err says why), in host order.
	Unknown []Decision
	// Hosts is the number of hosts decided.
	Hosts int
	// Deadline is the phase's deadline (Options.Deadline).
	Deadline time.Duration
}

func (e *UnknownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slot count unknown for %d of %d workers: their worker-agent gave none within %s and the discovery source gives none (--slots auto never runs a smaller world in silence):",
		len(e.Unknown), e.Hosts, e.Deadline)
	for _, d := range e.Unknown {
		fmt.Fprintf(&b, "\n%s: %v", d.Host, d.Err)
	}
	return b.String()
}

// Names returns the unknown hosts' names.
func (e *UnknownError) Names() []string {
	out := make([]string, len(e.Unknown))
	for i, d := range e.Unknown {
		out[i] = d.Host
	}
	return out
}

// ParseMode parses --slots: "auto" (or "") gives 0, a positive integer gives
// itself.
func ParseMode(mode string) (int, error) {
	m := strings.TrimSpace(mode)
	if m == "" || strings.EqualFold(m, "auto") {
		return 0, nil
	}
	n, err := strconv.Atoi(m)
	if err != nil || n < 1 || n > hostfile.MaxSlots {
		return 0, fmt.Errorf("--slots %q: want \"auto\" or an integer in 1..%d", mode, hostfile.MaxSlots)
	}
	return n, nil
}

func (o Options) withDefaults() Options {
	if o.DefaultSlots <= 0 {
		o.DefaultSlots = 1
	}
	if o.WebPort <= 0 {
		o.WebPort = DefaultWebPort
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.RetryWait <= 0 {
		o.RetryWait = DefaultRetryWait
	}
	if o.MaxRetryWait < o.RetryWait {
		o.MaxRetryWait = max(o.RetryWait, DefaultMaxRetryWait)
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DisableKeepAlives = true // one answer per agent: leave no idle connections behind
		o.HTTPClient = &http.Client{Transport: tr, Timeout: o.AttemptTimeout}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Decide chooses the slots of every host (see the package documentation) and
// returns the hosts with Slots filled in, in the same order, and one Decision
// per host. addrs, if not nil, maps a host name to its resolved addresses
// (discovery.Resolved.Addrs); the first one is queried instead of the name.
// The error is non-nil for a bad Options.Fixed, when ctx ends (wrapping its
// error), and as an *UnknownError (the decisions are returned with it).
func Decide(ctx context.Context, hosts []hostfile.Host, addrs map[string][]string, opts Options) ([]hostfile.Host, []Decision, error) {
	fixed := opts.Fixed
	if fixed < 0 || fixed > hostfile.MaxSlots {
		return nil, nil, fmt.Errorf("slots.Options.Fixed %d: want 0 (auto) or 1..%d", fixed, hostfile.MaxSlots)
	}
	o := opts.withDefaults()
	decisions := make([]Decision, len(hosts))
	if fixed > 0 {
		out := make([]hostfile.Host, len(hosts))
		for i, h := range hosts {
			out[i] = hostfile.Host{Name: h.Name, Slots: fixed}
			decisions[i] = Decision{Host: h.Name, Slots: fixed, Source: SourceFlag}
		}
		return out, decisions, nil
	}
	log := o.Logger.With("component", "slots")
	pctx, cancel := context.WithTimeout(ctx, o.Deadline)
	defer cancel()

	// The launcher itself is not asked over HTTP; every other host is, or
	// a sample of them when each has a count already.
	var remote []int
	allCounted := true
	for i, h := range hosts {
		if sameHost(o.Self, h.Name) {
			decisions[i] = o.decideSelf(pctx, h)
			continue
		}
		remote = append(remote, i)
		if h.Slots <= 0 {
			allCounted = false
		}
	}
	first, rest := remote, []int(nil)
	if allCounted && o.Sample > 0 {
		if pick := probe.SpreadSample(len(remote), o.Sample); pick != nil {
			first = nil
			for k, i := range remote {
				if pick[k] {
					first = append(first, i)
				} else {
					rest = append(rest, i)
				}
			}
		}
	}
	o.askAll(pctx, hosts, addrs, first, decisions, log)
	if len(rest) > 0 {
		disagree := ""
		for _, i := range first {
			if decisions[i].Slots != hosts[i].Slots {
				disagree = hosts[i].Name
				break
			}
		}
		if disagree == "" {
			for _, i := range rest {
				decisions[i] = Decision{Host: hosts[i].Name, Slots: hosts[i].Slots, Source: SourceHostfile}
			}
			log.Debug("every host has a count from the hostfile and the sampled worker-agents agree; the others were not asked",
				"asked", len(first), "not_asked", len(rest))
		} else {
			log.Info("a sampled worker-agent disagrees with the hostfile; asking every worker-agent", "host", disagree, "hosts", len(rest))
			o.askAll(pctx, hosts, addrs, rest, decisions, log)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("asking worker-agents for their slots: %w", err)
	}

	var unknown []Decision
	out := make([]hostfile.Host, len(hosts))
	for i, h := range hosts {
		if decisions[i].Slots == 0 {
			if o.AllowDefault {
				decisions[i] = o.fallbackDefault(decisions[i])
			} else {
				unknown = append(unknown, decisions[i])
			}
		}
		out[i] = hostfile.Host{Name: h.Name, Slots: decisions[i].Slots}
		if w := decisions[i].Warning; w != "" {
			log.Warn(w, "host", h.Name, "slots", decisions[i].Slots, "source", decisions[i].Source)
		}
	}
	if len(unknown) > 0 {
		return out, decisions, &UnknownError{Unknown: unknown, Hosts: len(hosts), Deadline: o.Deadline}
	}
	return out, decisions, nil
}

func sameHost(a, b string) bool {
	return a != "" && strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// decideSelf decides the launcher's own entry: its LocalInfo when set,
// else the hostfile's count or DefaultSlots, without a warning (the
// launcher pod runs no worker-agent to ask).
func (o Options) decideSelf(ctx context.Context, h hostfile.Host) Decision {
	d := Decision{Host: h.Name}
	if o.LocalInfo != nil {
		info, err := o.LocalInfo(ctx)
		if err == nil {
			err = info.SlotsError()
		}
		if err == nil {
			return o.apply(d, h, info)
		}
		d.Err = err
	}
	from := "the hostfile"
	if h.Slots > 0 {
		d.Slots, d.Source = h.Slots, SourceHostfile
	} else {
		d.Slots, d.Source, from = o.DefaultSlots, SourceDefault, "--discovery.default-slots"
	}
	if d.Err != nil {
		d.Warning = fmt.Sprintf("%s (this pod): could not count its own slots: %v; using slots=%d from %s", h.Name, d.Err, d.Slots, from)
	}
	return d
}

// apply turns an agent's valid answer into the decision.
func (o Options) apply(d Decision, h hostfile.Host, info api.Info) Decision {
	d.Info = &info
	d.Err = nil
	// An agent that found no GPU and was given no count answers a default
	// (1 slot): that says nothing about the job, so a count the operator
	// wrote into the hostfile (numProcPerNode, slotsPerWorker) stands.
	if info.Slots.Source == "default" && h.Slots > 0 {
		d.Slots, d.Source = h.Slots, SourceHostfile
		if info.GPUs.Count > 0 && info.GPUs.Count != h.Slots {
			d.Mismatch = true
			d.Warning = fmt.Sprintf("%s: hostfile says slots=%d but worker-agent sees %d GPUs; set numProcPerNode/slotsPerWorker to %d or pass --slots",
				h.Name, h.Slots, info.GPUs.Count, info.GPUs.Count)
		}
		return d
	}
	d.Slots, d.Source = info.Slots.N, SourceAgent
	if h.Slots > 0 && h.Slots != info.Slots.N {
		d.Mismatch = true
		if info.GPUs.Count > 0 && info.GPUs.Count != h.Slots {
			d.Warning = fmt.Sprintf("%s: hostfile says slots=%d but worker-agent sees %d GPUs; using slots=%d from worker-agent; set numProcPerNode/slotsPerWorker to %d or pass --slots",
				h.Name, h.Slots, info.GPUs.Count, info.Slots.N, info.GPUs.Count)
		} else {
			d.Warning = fmt.Sprintf("%s: hostfile says slots=%d but worker-agent offers %d (source %s); using %d from worker-agent; set numProcPerNode/slotsPerWorker to %d or pass --slots",
				h.Name, h.Slots, info.Slots.N, orUnknown(info.Slots.Source), info.Slots.N, info.Slots.N)
		}
	}
	return d
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// fallbackHostfile uses the hostfile's count for a host whose agent gave
// none (d.Err says why), with a warning; without a count the decision
// stays unknown (Slots 0).
func (o Options) fallbackHostfile(d Decision, h hostfile.Host) Decision {
	if h.Slots <= 0 {
		return d
	}
	d.Slots, d.Source = h.Slots, SourceHostfile
	d.Warning = fmt.Sprintf("%s: could not get slots from worker-agent: %v; using slots=%d from the hostfile; check that worker-agent runs there and serves HTTP on --worker.web-port (%d), or pass --slots",
		h.Name, d.Err, d.Slots, o.WebPort)
	return d
}

// fallbackDefault gives an unknown host DefaultSlots (--slots.allow-default).
func (o Options) fallbackDefault(d Decision) Decision {
	d.Slots, d.Source = o.DefaultSlots, SourceDefault
	d.Warning = fmt.Sprintf("%s: could not get slots from worker-agent: %v; using slots=%d from --discovery.default-slots because --slots.allow-default is set: the world may be smaller than the workers offer",
		d.Host, d.Err, d.Slots)
	return d
}

func (o Options) addrFor(host string, addrs []string) string {
	if o.AddrFor != nil {
		return o.AddrFor(host)
	}
	target := strings.TrimSuffix(host, ".")
	if len(addrs) > 0 && addrs[0] != "" {
		target = addrs[0]
	}
	return net.JoinHostPort(target, strconv.Itoa(o.WebPort))
}

// askAll asks the agents of hosts[idx...] until each answers or ctx (the
// phase deadline) ends, and fills their decisions. One goroutine per host;
// at most Parallel requests in flight. Once an agent must be waited for
// (its first answer was not one), an Info line names the agents awaited,
// each with what its last attempt got (connection refused on
// 10.0.0.7:9022, HTTP 503 ...), at once and again every ProgressEvery: the
// wait is seen, with what it sees, when it starts, however long it lasts.
func (o Options) askAll(ctx context.Context, hosts []hostfile.Host, addrs map[string][]string, idx []int, decisions []Decision, log *slog.Logger) {
	if len(idx) == 0 {
		return
	}
	slots := make(chan struct{}, o.Parallel)
	names := make([]string, len(idx))
	for k, i := range idx {
		names[k] = hosts[i].Name
	}
	awaiting := awaited.NewTracker(names, o.Explain)
	start := time.Now()
	stop := awaiting.Report(o.ProgressEvery, maxNamesListed, func(answered, asked int, waiting string) {
		left := ""
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl).Round(time.Second).String()
		}
		log.Info(fmt.Sprintf("slots: %d/%d worker-agents answered; waiting for %s", answered, asked, waiting),
			"answered", answered, "asked", asked, "elapsed", time.Since(start).Round(time.Second).String(), "time_left", left)
	})
	var wg sync.WaitGroup
	var trap panictrap.Trap
	for k, i := range idx {
		wg.Go(func() {
			defer trap.Capture("a slots goroutine")
			h := hosts[i]
			saw := func(a awaited.Answer) { awaiting.Saw(k, a) }
			info, n, err := o.ask(ctx, h.Name, o.addrFor(h.Name, addrs[h.Name]), slots, log, saw, awaiting.Waits)
			d := Decision{Host: h.Name, Asked: true, Attempts: n, Err: err}
			if err == nil {
				d = o.apply(d, h, info)
			} else {
				d = o.fallbackHostfile(d, h)
			}
			decisions[i] = d
			awaiting.Settled(k)
		})
	}
	wg.Wait()
	stop()
	trap.Rethrow()
}

// maxNamesListed is how many awaited agents a progress line lists one by
// one; more are grouped by answer (awaited.Line).
const maxNamesListed = 10

// ask asks one agent for /info until it gives a valid answer, gives a
// final one (404, garbage, a failed GPU detection), or ctx ends. Each
// attempt holds a place in slots. It returns the answer, the number of
// attempts and, without an answer, the last cause. saw gets what each
// failed attempt got; waitStarts is called before it waits to ask again.
func (o Options) ask(ctx context.Context, host, addr string, slots chan struct{}, log *slog.Logger, saw func(awaited.Answer), waitStarts func()) (api.Info, int, error) {
	url := "http://" + addr + "/info"
	wait := o.RetryWait
	var last error
	for n := 1; ; n++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return api.Info{}, n - 1, o.gaveUp(url, n-1, last)
		}
		if ctx.Err() != nil { // a place freed just as the deadline passed
			<-slots
			return api.Info{}, n - 1, o.gaveUp(url, n-1, last)
		}
		info, retry, answer, err := o.attempt(ctx, url, addr)
		<-slots
		if err == nil {
			return info, n, nil
		}
		if last == nil || ctx.Err() == nil {
			// An attempt the deadline cut short says less than the
			// answer before it (an HTTP 500, a refused connection).
			last = err
			saw(answer)
		}
		if !retry || ctx.Err() != nil {
			if ctx.Err() != nil {
				return api.Info{}, n, o.gaveUp(url, n, last)
			}
			return api.Info{}, n, fmt.Errorf("GET %s: %w", url, err)
		}
		d := jitter(wait)
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(d).After(dl) {
			return api.Info{}, n, o.gaveUp(url, n, last)
		}
		log.Debug("retrying worker-agent /info", "host", host, "url", url, "cause", err.Error(), "attempt", n, "in", d.Round(time.Millisecond))
		waitStarts()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return api.Info{}, n, o.gaveUp(url, n, last)
		case <-t.C:
		}
		wait = min(2*wait, o.MaxRetryWait)
	}
}

// gaveUp is the error of an agent that gave no answer by the deadline.
func (o Options) gaveUp(url string, attempts int, last error) error {
	if attempts == 0 || last == nil {
		return fmt.Errorf("GET %s: not asked before the deadline (%s; at most %d requests at once)", url, o.Deadline, o.Parallel)
	}
	return fmt.Errorf("GET %s: no answer within %s (%s): %w", url, o.Deadline, plural(attempts, "attempt"), last)
}

// attempt makes one request to url, at addr. retry says whether asking
// again may help; answer names what came back instead of a usable /info,
// for the progress lines.
func (o Options) attempt(ctx context.Context, url, addr string) (info api.Info, retry bool, answer awaited.Answer, err error) {
	info, resp, err := o.get(ctx, url)
	switch {
	case resp == nil:
		retry, _ = shouldRetry(ctx, nil, err)
		return api.Info{}, retry, awaited.Net(err, addr), errors.New(describe(nil, err))
	case resp.StatusCode != http.StatusOK:
		retry, _ = shouldRetry(ctx, resp, nil)
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (is this a worker-agent? an older one may lack /info)"
		}
		return api.Info{}, retry, awaited.HTTP(resp.Status), fmt.Errorf("HTTP %s%s", resp.Status, hint)
	case errors.Is(err, api.ErrNotDecided):
		return api.Info{}, true, awaited.Answer{Kind: "still detecting its GPUs (slots.n=0)"}, err
	case err != nil:
		return api.Info{}, false, awaited.Answer{Kind: err.Error()}, err
	}
	return info, false, awaited.Answer{}, nil
}

// get asks url for a /info document once, bounded by AttemptTimeout. resp
// is nil when nothing answered (err is then the transport error); its body
// is closed. With a 200 answer, info and err are DecodeInfo's.
func (o Options) get(ctx context.Context, url string) (info api.Info, resp *http.Response, err error) {
	actx, cancel := context.WithTimeout(ctx, o.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, url, nil)
	if err != nil {
		return api.Info{}, nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err = o.HTTPClient.Do(req)
	if err != nil {
		return api.Info{}, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.Info{}, resp, nil
	}
	info, err = api.DecodeInfo(io.LimitReader(resp.Body, api.MaxInfoBytes))
	return info, resp, err
}

// Identify asks the HTTP server at addr (host:port) for its /info once,
// with the client and attempt timeout of opts. answered is true when an
// HTTP response came back at all (whatever its status or body): something
// runs there. err says why the answer is not a usable worker-agent /info
// (*api.NotWorkerError for another role, api.ErrNotDecided while the agent
// still detects its GPUs, an HTTP status, a decoding error), or is the
// transport error when nothing answered.
func Identify(ctx context.Context, addr string, opts Options) (info api.Info, answered bool, err error) {
	info, resp, err := opts.withDefaults().get(ctx, "http://"+addr+api.InfoPath)
	switch {
	case resp == nil:
		return api.Info{}, false, errors.New(describe(nil, err))
	case resp.StatusCode != http.StatusOK:
		return api.Info{}, true, fmt.Errorf("HTTP %s", resp.Status)
	}
	return info, true, err
}

// shouldRetry is go-retryablehttp's default policy (connection errors, 429,
// 5xx except 501), kept apart from the backoff.
func shouldRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// jitter spreads d over [0.5d, 1.5d) so that agents started together are
// not asked in lockstep.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

// describe names the outcome of one attempt for logs and errors.
func describe(resp *http.Response, err error) string {
	switch {
	case err != nil:
		var ue *neturl.Error
		if errors.As(err, &ue) {
			return ue.Err.Error() // the URL is already in the message
		}
		return err.Error()
	case resp != nil:
		return "HTTP " + resp.Status
	default:
		return "no response"
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
