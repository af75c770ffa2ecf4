// Package slots decides how many MPI processes each worker takes (the
// hostfile's slots) and, when the user's mpirun command sets no process
// count, injects -np with their sum.
//
// --slots takes "auto" or a positive integer N:
//
//   - N: every host gets N slots (Decision.Source "flag"); no worker is asked.
//   - auto: each worker-agent is asked for GET http://<host>:<web-port>/info
//     (default port 9022) with bounded retries (go-retryablehttp, jittered
//     exponential backoff, a per-host deadline). When it answers, its slot
//     count wins (Source "agent") unless it is only the agent's default
//     (no GPU found, no --slots given: source "default"), in which case a
//     count from the hostfile stands (Source "hostfile"); when the hostfile
//     also gave a count and the two disagree, Decision.Warning says so and
//     how to make them agree. When the agent cannot be reached (or answers
//     garbage), the hostfile's count is used (Source "hostfile"), else
//     Options.DefaultSlots (Source "default"), with a warning rather than an
//     error: the job can still run.
//
// A Host.Slots of 0 means "the source gave no count" (see package discovery),
// so an operator-given count can be told from a default.
package slots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/podmpi/podmpi/hostfile"
)

// WorkerInfo is the part of worker-agent's /info that the launcher reads. The
// agent serves a superset with these JSON keys.
type WorkerInfo struct {
	Hostname string   `json:"hostname"`
	Slots    SlotInfo `json:"slots"`
	GPUs     GPUInfo  `json:"gpus"`
}

// SlotInfo is the agent's slot decision.
type SlotInfo struct {
	// N is the number of slots the agent offers (>= 1).
	N int `json:"n"`
	// Source is how N was found: "gpu", "cpu", "fixed" or "default".
	Source string `json:"source"`
	// Reason explains a fallback, e.g. why no GPU was counted.
	Reason string `json:"reason,omitempty"`
}

// GPUInfo is the agent's GPU inventory.
type GPUInfo struct {
	// Count is the number of GPUs the agent sees.
	Count int `json:"count"`
	// Source is "nvml" or "none".
	Source string `json:"source"`
	// Reason says why no GPU was found, when Source is "none".
	Reason string `json:"reason,omitempty"`
}

// maxInfoBytes bounds the /info body read.
const maxInfoBytes = 1 << 20

// Defaults of Options.
const (
	DefaultWebPort        = 9022
	DefaultTimeout        = 10 * time.Second
	DefaultAttemptTimeout = 3 * time.Second
	DefaultRetryMax       = 3
	DefaultRetryWait      = 250 * time.Millisecond
	DefaultParallel       = 32
	maxRetryWait          = 2 * time.Second
)

// Options configures Decide. Zero values take the documented defaults.
type Options struct {
	// Mode is --slots: "auto" ("" means auto) or a positive integer.
	Mode string
	// DefaultSlots are the slots of a host for which neither the agent nor
	// the hostfile gives a count; default 1.
	DefaultSlots int
	// WebPort is worker-agent's HTTP port (--worker.web-port); default 9022.
	WebPort int
	// Timeout bounds the whole query of one host, retries included; default
	// 10s.
	Timeout time.Duration
	// AttemptTimeout bounds one HTTP attempt; default 3s. Unused when
	// HTTPClient is set (set its Timeout instead).
	AttemptTimeout time.Duration
	// RetryMax is the number of retries after the first attempt; default 3,
	// negative means none.
	RetryMax int
	// RetryWait is the wait before the first retry, doubled each time up to
	// 2s, with jitter in [0.5, 1.5); default 250ms.
	RetryWait time.Duration
	// Parallel bounds the hosts queried at once; default 32.
	Parallel int
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
	LocalInfo func(ctx context.Context) (WorkerInfo, error)
	// Logger gets each warning (Warn) and each retry (Debug); nil discards.
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
	// Slots is the chosen count (>= 1).
	Slots int
	// Source is "flag", "agent", "hostfile" or "default".
	Source string
	// Warning is non-empty when the operator should look: the hostfile and
	// the agent disagree, or the agent could not be asked.
	Warning string
	// Info is the agent's answer, when it gave one.
	Info *WorkerInfo
	// Err is why the agent's answer is missing (after retries), if asked.
	Err error
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
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	switch {
	case o.RetryMax == 0:
		o.RetryMax = DefaultRetryMax
	case o.RetryMax < 0:
		o.RetryMax = 0
	}
	if o.RetryWait <= 0 {
		o.RetryWait = DefaultRetryWait
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DisableKeepAlives = true // one request per agent: leave no idle connections behind
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
// The error is non-nil only for a bad Options.Mode or when ctx ends.
func Decide(ctx context.Context, hosts []hostfile.Host, addrs map[string][]string, opts Options) ([]hostfile.Host, []Decision, error) {
	fixed, err := ParseMode(opts.Mode)
	if err != nil {
		return nil, nil, err
	}
	o := opts.withDefaults()
	out := make([]hostfile.Host, len(hosts))
	decisions := make([]Decision, len(hosts))
	if fixed > 0 {
		for i, h := range hosts {
			out[i] = hostfile.Host{Name: h.Name, Slots: fixed}
			decisions[i] = Decision{Host: h.Name, Slots: fixed, Source: SourceFlag}
		}
		return out, decisions, nil
	}
	log := o.Logger.With("component", "slots")
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i, h := range hosts {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			decisions[i] = o.decideOne(ctx, h, addrs[h.Name], log)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("asking worker-agents for their slots: %w", err)
	}
	for i, h := range hosts {
		out[i] = hostfile.Host{Name: h.Name, Slots: decisions[i].Slots}
		if w := decisions[i].Warning; w != "" {
			log.Warn(w, "host", h.Name, "slots", decisions[i].Slots, "source", decisions[i].Source)
		}
	}
	return out, decisions, nil
}

func sameHost(a, b string) bool {
	return a != "" && strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// decideOne applies the auto rules to one host.
func (o Options) decideOne(ctx context.Context, h hostfile.Host, addrs []string, log *slog.Logger) Decision {
	d := Decision{Host: h.Name}
	var info WorkerInfo
	var err error
	switch {
	case sameHost(o.Self, h.Name) && o.LocalInfo == nil:
		return o.fallback(d, h, nil)
	case sameHost(o.Self, h.Name):
		lctx, cancel := context.WithTimeout(ctx, o.Timeout)
		info, err = o.LocalInfo(lctx)
		cancel()
		if err == nil {
			err = info.validate()
		}
	default:
		info, err = o.fetch(ctx, h.Name, o.addrFor(h.Name, addrs), log)
	}
	if err != nil {
		d.Err = err
		return o.fallback(d, h, err)
	}
	d.Info = &info
	// An agent that found no GPU and was given no count answers a default
	// (1 slot): that says nothing about the job, so a count the operator
	// wrote into the hostfile (numProcPerNode, slotsPerWorker) stands.
	if info.Slots.Source == "default" && h.Slots > 0 {
		d.Slots, d.Source = h.Slots, SourceHostfile
		if info.GPUs.Count > 0 && info.GPUs.Count != h.Slots {
			d.Warning = fmt.Sprintf("%s: hostfile says slots=%d but worker-agent sees %d GPUs; set numProcPerNode/slotsPerWorker to %d or pass --slots",
				h.Name, h.Slots, info.GPUs.Count, info.GPUs.Count)
		}
		return d
	}
	d.Slots, d.Source = info.Slots.N, SourceAgent
	if h.Slots > 0 && h.Slots != info.Slots.N {
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

// fallback uses the hostfile's count, else DefaultSlots; cause (nil for the
// launcher itself) becomes the warning.
func (o Options) fallback(d Decision, h hostfile.Host, cause error) Decision {
	if h.Slots > 0 {
		d.Slots, d.Source = h.Slots, SourceHostfile
	} else {
		d.Slots, d.Source = o.DefaultSlots, SourceDefault
	}
	if cause != nil {
		from := "the hostfile"
		if d.Source == SourceDefault {
			from = "the default"
		}
		d.Warning = fmt.Sprintf("%s: could not get slots from worker-agent: %v; using slots=%d from %s; check that worker-agent runs there and serves HTTP on --worker.web-port (%d), or pass --slots",
			h.Name, cause, d.Slots, from, o.WebPort)
	}
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

// fetch asks one worker-agent for /info with bounded retries.
func (o Options) fetch(ctx context.Context, host, addr string, log *slog.Logger) (WorkerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	url := "http://" + addr + "/info"
	attempts := 0
	client := &retryablehttp.Client{
		HTTPClient:   o.HTTPClient,
		RetryWaitMin: o.RetryWait,
		RetryWaitMax: max(o.RetryWait, maxRetryWait),
		RetryMax:     o.RetryMax,
		Backoff:      backoff,
		CheckRetry: func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			attempts++
			retry, cerr := shouldRetry(ctx, resp, err)
			if retry && attempts <= o.RetryMax {
				log.Debug("retrying worker-agent /info", "host", host, "url", url,
					"cause", describe(resp, err), "attempt", attempts, "attempts_left", o.RetryMax-attempts+1)
			}
			return retry, cerr
		},
		ErrorHandler: func(resp *http.Response, err error, tries int) (*http.Response, error) {
			cause := describe(resp, err)
			if resp != nil {
				resp.Body.Close()
			}
			if tries <= 1 {
				return nil, fmt.Errorf("GET %s: %s", url, cause)
			}
			return nil, fmt.Errorf("GET %s: giving up after %s: %s", url, plural(tries, "attempt"), cause)
		},
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return WorkerInfo{}, fmt.Errorf("building request for %s: %w", url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !strings.Contains(err.Error(), "giving up") {
			return WorkerInfo{}, fmt.Errorf("GET %s: no answer within %s (%s): %w", url, o.Timeout, plural(max(attempts, 1), "attempt"), cerr)
		}
		return WorkerInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (is this a worker-agent? an older one may lack /info)"
		}
		return WorkerInfo{}, fmt.Errorf("GET %s: HTTP %s%s", url, resp.Status, hint)
	}
	info, err := DecodeInfo(io.LimitReader(resp.Body, maxInfoBytes))
	if err != nil {
		return WorkerInfo{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return info, nil
}

// DecodeInfo parses and checks a /info body: slots.n must be in
// 1..hostfile.MaxSlots and gpus.count must not be negative. Unknown keys are
// ignored (the agent serves a superset).
func DecodeInfo(r io.Reader) (WorkerInfo, error) {
	var info WorkerInfo
	dec := json.NewDecoder(r)
	if err := dec.Decode(&info); err != nil {
		return WorkerInfo{}, fmt.Errorf("decoding worker-agent /info: %w", err)
	}
	return info, info.validate()
}

func (info WorkerInfo) validate() error {
	if info.Slots.N < 1 || info.Slots.N > hostfile.MaxSlots {
		return fmt.Errorf("worker-agent /info reports slots.n=%d, want 1..%d", info.Slots.N, hostfile.MaxSlots)
	}
	if info.GPUs.Count < 0 {
		return fmt.Errorf("worker-agent /info reports gpus.count=%d", info.GPUs.Count)
	}
	return nil
}

// shouldRetry is go-retryablehttp's default policy (connection errors, 429,
// 5xx except 501), kept apart from the backoff.
func shouldRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// backoff is min*2^attempt capped at max, times a jitter in [0.5, 1.5).
func backoff(minWait, maxWait time.Duration, attempt int, _ *http.Response) time.Duration {
	d := float64(minWait) * math.Pow(2, float64(min(attempt, 30)))
	d = math.Min(d, float64(maxWait))
	return time.Duration(d * (0.5 + rand.Float64()))
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
