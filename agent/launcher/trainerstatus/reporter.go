package trainerstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Reporter keeps what goes into the TrainJob's status, the launcher's own
// metrics and the ranks' last request, and sends it to Trainer at most
// once per MinInterval, from Run's goroutine or, for a rank's request
// when the pace allows, from the rank's own request (Forward).
type Reporter struct {
	c   poster
	log *slog.Logger
	now func() time.Time

	send chan struct{} // one request to Trainer at a time: a slot

	mu      sync.Mutex
	own     []Metric // podmpi's metrics, names starting with Prefix
	first   bool     // own go first (a failure's root cause)
	user    *Status  // the ranks' last request, nil before one
	pending bool     // something changed since the last request was sent
	last    time.Time
	sent    int
	heard   bool // Trainer answered a request (whatever it said)
	warned  map[string]bool
	kick    chan struct{}
}

// poster is Client.Post (a test's stand-in too).
type poster interface {
	Post(ctx context.Context, st *Status) (Answer, error)
}

// NewReporter returns a reporter that sends through c and logs to log
// (nil discards).
func NewReporter(c *Client, log *slog.Logger) *Reporter {
	return newReporter(c, log, time.Now)
}

func newReporter(c poster, log *slog.Logger, now func() time.Time) *Reporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reporter{c: c, log: log, now: now, warned: map[string]bool{}, kick: make(chan struct{}, 1), send: make(chan struct{}, 1)}
}

// Set replaces the launcher's own metrics (each name should start with
// Prefix and every value go through Clip). Run sends them, paced.
func (r *Reporter) Set(own []Metric) { r.set(own, false) }

// SetFailure replaces the launcher's own metrics with those of a failure:
// they go first when the status has no room for all metrics. Final sends
// them.
func (r *Reporter) SetFailure(own []Metric) { r.set(own, true) }

func (r *Reporter) set(own []Metric, first bool) {
	r.mu.Lock()
	changed := !slices.Equal(r.own, own) || r.first != first
	if changed {
		r.own, r.first, r.pending = slices.Clone(own), first, true
	}
	r.mu.Unlock()
	if changed {
		r.poke()
	}
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

// Run sends what changed, at most once per MinInterval, until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			pending, wait := r.pending, r.last.Add(MinInterval).Sub(r.now())
			r.mu.Unlock()
			if !pending {
				break
			}
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
			r.sendNow(ctx)
		}
	}
}

// Final sends what changed since the last request now, whatever the pace
// (once, at the launcher's end), within ctx.
func (r *Reporter) Final(ctx context.Context) {
	r.mu.Lock()
	pending := r.pending
	r.mu.Unlock()
	if pending {
		r.sendNow(ctx)
	}
}

// sendNow sends the status as it stands, once the request before it is
// done (or ctx ends), and records the answer.
func (r *Reporter) sendNow(ctx context.Context) (Answer, error) {
	select {
	case r.send <- struct{}{}:
	case <-ctx.Done():
		return Answer{}, context.Cause(ctx)
	}
	defer func() { <-r.send }()
	return r.sendLocked(ctx)
}

func (r *Reporter) sendLocked(ctx context.Context) (Answer, error) {
	r.mu.Lock()
	st := merge(r.user, r.own, r.first, r.now())
	r.pending = false
	r.last = r.now()
	r.sent++
	r.mu.Unlock()
	a, err := r.c.Post(ctx, st)
	if err == nil {
		r.mu.Lock()
		r.heard = true
		r.mu.Unlock()
	}
	r.note(a, err)
	return a, err
}

// Heard reports whether Trainer answered any request so far: when it has
// not, its endpoint is likely out of reach (a NetworkPolicy), and the last
// request is not worth waiting long for.
func (r *Reporter) Heard() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heard
}

// Forward takes a rank's request: it becomes the ranks' last status and is
// sent now with the launcher's metrics when the pace allows, Trainer's
// answer going back to the rank. Otherwise it is sent when the pace allows
// (a later request of the ranks replaces it first), and the rank gets 200
// and its request back, as Trainer answers: its SDK paces itself as
// podmpi does, so this is rare.
func (r *Reporter) Forward(ctx context.Context, st *Status) (Answer, error) {
	r.mu.Lock()
	r.user, r.pending = st, true
	due := !r.now().Before(r.last.Add(MinInterval))
	r.mu.Unlock()
	if due && r.trySend() {
		defer func() { <-r.send }()
		r.mu.Lock()
		due = r.pending && !r.now().Before(r.last.Add(MinInterval))
		r.mu.Unlock()
		if due {
			return r.sendLocked(ctx)
		}
	}
	r.poke()
	body, _ := json.Marshal(Request{TrainerStatus: st})
	return Answer{Code: http.StatusOK, Body: body}, nil
}

// trySend takes the request slot when it is free.
func (r *Reporter) trySend() bool {
	select {
	case r.send <- struct{}{}:
		return true
	default:
		return false
	}
}

// note logs a request that failed or was refused: the first of each kind
// at WARN with what to check, the rest at DEBUG.
func (r *Reporter) note(a Answer, err error) {
	var kind, hint string
	switch {
	case err != nil:
		kind = "no answer" // one warning, whatever the network said each time
		hint = "the launcher cannot reach Trainer's status endpoint: check that the namespace's NetworkPolicy lets the launcher reach the Trainer controller's status port (TCP 10443 in Trainer's namespace)"
	case a.Code == http.StatusOK:
		return
	case a.Code == http.StatusForbidden || a.Code == http.StatusUnauthorized:
		kind = fmt.Sprintf("HTTP %d", a.Code)
		hint = "Trainer refused the job's token: the launcher pod's projected token (KUBEFLOW_TRAINER_SERVER_TOKEN) is not the one Trainer gave this TrainJob"
	case a.Code == http.StatusNotFound:
		kind = fmt.Sprintf("HTTP %d", a.Code)
		hint = "Trainer does not know this TrainJob, or its status endpoint is off (feature gate TrainJobStatus)"
	default:
		kind = fmt.Sprintf("HTTP %d", a.Code)
		hint = "Trainer's answer: " + string(bytes.TrimSpace(a.Body))
	}
	r.mu.Lock()
	first := !r.warned[kind]
	r.warned[kind] = true
	r.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	attrs := []any{"component", "trainer-status", "hint", hint}
	if err != nil {
		attrs = append(attrs, "err", err)
	} else {
		attrs = append(attrs, "code", a.Code)
	}
	r.log.Log(context.Background(), level, "the TrainJob's status was not updated (the job goes on)", attrs...)
}
