package trainerstatus

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

// Reporter keeps what goes into the TrainJob's status, the launcher's own
// metrics and the ranks' last request, and sends it to Trainer from Run's
// goroutine, the only one that sends (the package doc says when).
type Reporter struct {
	c     poster
	log   *slog.Logger
	clock clock

	kick chan struct{} // wakes Run: something changed

	mu      sync.Mutex
	own     []Metric // podmpi's metrics, names starting with Prefix
	first   bool     // own go first (a failure's root cause)
	user    *Status  // the ranks' last request, nil before one
	version uint64   // counts the changes of own, first and user
	done    uint64   // the version last settled: taken by Trainer, or its content refused
	result  error    // nil when version done was taken, why not when it was refused
	last    time.Time
	// notBefore is the earliest time of the next request after a failure
	// (the backoff's, or Retry-After's when later); asked is Retry-After's
	// alone, which the end honours too.
	notBefore, asked time.Time
	failures         int   // requests failed in a row (no answer, 429, 5xx)
	failure          error // the last of them, nil once a request is taken
	final            bool  // the end is set: send without the pace
	refused          *Refusal
	sent             int
	heard            bool          // Trainer answered a request (whatever it said)
	settled          chan struct{} // closed, and replaced, at every answer
	warned           map[string]bool
}

// poster is Client.Post (a test's stand-in too).
type poster interface {
	Post(ctx context.Context, st *Status) (Answer, error)
}

// clock is the reporter's time: the pace and the backoff (a test's
// stand-in too).
type clock interface {
	Now() time.Time
	// Timer is a channel that receives once the time is at, and what
	// stops it.
	Timer(at time.Time) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Timer(at time.Time) (<-chan time.Time, func() bool) {
	t := time.NewTimer(time.Until(at))
	return t.C, t.Stop
}

// The waits after a failed request: while the job runs, from MinInterval
// up to a minute (Trainer's client serves every TrainJob of the cluster);
// for the end, short, within the launcher's last seconds.
var (
	runBackoff = discovery.Backoff{Base: MinInterval, Max: time.Minute}
	endBackoff = discovery.Backoff{Base: 250 * time.Millisecond, Max: time.Second}
)

// Refusal is Trainer's refusal of this job's requests for good (HTTP 401,
// 403 or 404): no request is sent after it.
type Refusal struct {
	Code int
	Body string // Trainer's answer, trimmed
}

func (e *Refusal) Error() string {
	return fmt.Sprintf("Trainer refused this TrainJob's status requests (HTTP %d: %s), and the launcher sends no more: %s",
		e.Code, e.Body, refusalHint(e.Code))
}

// NewReporter returns a reporter that sends through c and logs to log
// (nil discards).
func NewReporter(c *Client, log *slog.Logger) *Reporter {
	return newReporter(c, log, realClock{})
}

func newReporter(c poster, log *slog.Logger, clk clock) *Reporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reporter{c: c, log: log, clock: clk, warned: map[string]bool{}, kick: make(chan struct{}, 1), settled: make(chan struct{})}
}

// Set replaces the launcher's own metrics (each name should start with
// Prefix and every value go through Clip). Run sends them, paced.
func (r *Reporter) Set(own []Metric) { r.set(own, false) }

// SetFailure replaces the launcher's own metrics with those of a failure:
// they go first when the status has no room for all metrics.
func (r *Reporter) SetFailure(own []Metric) { r.set(own, true) }

func (r *Reporter) set(own []Metric, first bool) {
	r.mu.Lock()
	changed := !slices.Equal(r.own, own) || r.first != first
	if changed {
		r.own, r.first = slices.Clone(own), first
		r.version++
	}
	r.mu.Unlock()
	if changed {
		r.poke()
	}
}

// Forward takes a rank's request: it becomes the ranks' last status, which
// Run sends with the launcher's metrics. nil means it will be sent (alone,
// or within a newer request of the ranks that replaces it first); a
// *Refusal, that it will not: Trainer refused this job's requests for
// good.
func (r *Reporter) Forward(st *Status) error {
	r.mu.Lock()
	if r.refused != nil {
		r.mu.Unlock()
		return r.refused
	}
	r.user = st
	r.version++
	r.mu.Unlock()
	r.poke()
	return nil
}

func (r *Reporter) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Sent is how many requests were sent to Trainer.
func (r *Reporter) Sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// Heard reports whether Trainer answered any request so far: when it has
// not, its endpoint is likely out of reach (a NetworkPolicy), and the last
// request is not worth waiting long for.
func (r *Reporter) Heard() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heard
}

// Run sends the latest state whenever it is due (due), one request at a
// time, until ctx ends; a request under way then is given up.
func (r *Reporter) Run(ctx context.Context) {
	for ctx.Err() == nil {
		send, at := r.due()
		if send {
			r.sendOnce(ctx)
			continue
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if !at.IsZero() {
			timer, stop = r.clock.Timer(at)
		}
		select {
		case <-ctx.Done():
		case <-r.kick:
		case <-timer:
		}
		stop()
	}
}

// due says whether a request is to be sent now; if not, at is when one
// may be (zero: none is to be sent until something changes).
// Nothing is sent when the latest state is settled or Trainer refused the
// job; otherwise not before notBefore (a failure's backoff) and, while the
// job runs, not within MinInterval of the last request.
func (r *Reporter) due() (send bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused != nil || r.done == r.version {
		return false, time.Time{}
	}
	at = r.notBefore
	if !r.final {
		at = later(at, r.last.Add(MinInterval))
	}
	if !at.After(r.clock.Now()) {
		return true, time.Time{}
	}
	return false, at
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sendOnce sends the latest state and records Trainer's answer.
func (r *Reporter) sendOnce(ctx context.Context) {
	r.mu.Lock()
	v, now := r.version, r.clock.Now()
	st := merge(r.user, r.own, r.first, now)
	r.last = now
	r.sent++
	r.mu.Unlock()
	a, err := r.c.Post(ctx, st)
	if ctx.Err() != nil {
		return // given up (the launcher's end): nothing learnt
	}
	now = r.clock.Now()
	r.mu.Lock()
	r.heard = r.heard || err == nil
	var next string // what follows, for the log
	switch {
	case err == nil && a.Code == http.StatusOK:
		r.done, r.result = v, nil
		r.failures, r.failure, r.notBefore, r.asked = 0, nil, time.Time{}, time.Time{}
	case err != nil || a.Code == http.StatusTooManyRequests || a.Code >= 500:
		b := runBackoff
		if r.final {
			b = endBackoff
		}
		r.asked = now.Add(a.RetryAfter)
		r.notBefore = later(now.Add(b.Delay(r.failures)), r.asked)
		r.failures++
		r.failure = describe(a, err)
		next = fmt.Sprintf("the latest state is sent again in %s", r.notBefore.Sub(now).Round(time.Millisecond))
	case a.Code == http.StatusUnauthorized || a.Code == http.StatusForbidden || a.Code == http.StatusNotFound:
		r.refused = &Refusal{Code: a.Code, Body: trim(a.Body)}
		next = "the launcher sends no more requests, and the ranks' requests are refused with Trainer's answer"
	default:
		// The content is refused: sending it again would be refused
		// again. The next change is sent.
		r.done, r.result = v, describe(a, nil)
		r.failures, r.failure, r.notBefore, r.asked = 0, nil, time.Time{}, time.Time{}
		next = "this state is dropped; the next change is sent"
	}
	close(r.settled)
	r.settled = make(chan struct{})
	r.mu.Unlock()
	r.note(a, err, next)
}

// Final marks the launcher's end, already set with Set or SetFailure: from
// now on the latest state is sent without the pace, and Final waits until
// Trainer took it (nil), refused it or the job (the error says so), or ctx
// ends (the error names the last failure). A request under way is waited
// for, never given up: Trainer then applies the end after it. Run must be
// running.
func (r *Reporter) Final(ctx context.Context) error {
	r.mu.Lock()
	if !r.final {
		// The end goes at once: only Trainer's own Retry-After holds it.
		r.final, r.notBefore, r.failures = true, r.asked, 0
	}
	r.mu.Unlock()
	r.poke()
	for {
		r.mu.Lock()
		refused, settled, result, failure, ch := r.refused, r.done == r.version, r.result, r.failure, r.settled
		r.mu.Unlock()
		switch {
		case refused != nil:
			return refused
		case settled:
			return result
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if failure == nil {
				return fmt.Errorf("no answer from Trainer to the last request in time: %w", context.Cause(ctx))
			}
			return fmt.Errorf("the latest status was not taken by Trainer in time; the last request: %w", failure)
		}
	}
}

// describe is a failed request in one error.
func describe(a Answer, err error) error {
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	return fmt.Errorf("HTTP %d: %s", a.Code, trim(a.Body))
}

// trim is an answer's body for a log or an error: one line, at most 200
// bytes.
func trim(b []byte) string {
	b = bytes.Join(bytes.Fields(b), []byte(" "))
	if len(b) > 200 {
		b = append(b[:197:197], "..."...)
	}
	return string(b)
}

// refusalHint is what to check after Trainer refused the job.
func refusalHint(code int) string {
	if code == http.StatusNotFound {
		return "Trainer does not know this TrainJob, or its status endpoint is off (feature gate TrainJobStatus)"
	}
	return "Trainer refused the job's token: the launcher pod's projected token (" + statusfwd.EnvToken + ") is not the one Trainer gave this TrainJob"
}

// note logs a request that failed or was refused: the first of each kind
// at WARN with what to check, the rest at DEBUG; next says what follows.
func (r *Reporter) note(a Answer, err error, next string) {
	var kind, hint string
	switch {
	case err != nil:
		kind = "no answer" // one warning, whatever the network said each time
		hint = "the launcher cannot reach Trainer's status endpoint: check that the namespace's NetworkPolicy lets the launcher reach the Trainer controller's status port (TCP 10443 in Trainer's namespace)"
	case a.Code == http.StatusOK:
		return
	case a.Code == http.StatusUnauthorized || a.Code == http.StatusForbidden || a.Code == http.StatusNotFound:
		kind, hint = fmt.Sprintf("HTTP %d", a.Code), refusalHint(a.Code)
	default:
		kind, hint = fmt.Sprintf("HTTP %d", a.Code), "Trainer's answer: "+trim(a.Body)
	}
	r.mu.Lock()
	first := !r.warned[kind]
	r.warned[kind] = true
	r.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	attrs := []any{"component", "trainer-status", "hint", hint, "next", next}
	if err != nil {
		attrs = append(attrs, "err", err)
	} else {
		attrs = append(attrs, "code", a.Code)
	}
	r.log.Log(context.Background(), level, "the TrainJob's status was not updated (the job goes on)", attrs...)
}
