package trainerstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		ok      bool
		wantErr string
	}{
		{"unset", nil, false, ""},
		{"blank", map[string]string{statusfwd.EnvURL: "  "}, false, ""},
		{"https", map[string]string{statusfwd.EnvURL: "https://svc.ns.svc:10443/apis/x/status", statusfwd.EnvToken: "/t"}, true, ""},
		{"no token", map[string]string{statusfwd.EnvURL: "https://svc.ns.svc:10443/apis/x/status"}, true, statusfwd.EnvToken + " is not"},
		{"http remote", map[string]string{statusfwd.EnvURL: "http://svc.ns.svc:10443/apis/x/status", statusfwd.EnvToken: "/t"}, true, "loopback address only"},
		{"http loopback", map[string]string{statusfwd.EnvURL: "http://127.0.0.1:1/apis/x/status", statusfwd.EnvToken: "/t"}, true, ""},
		{"ftp", map[string]string{statusfwd.EnvURL: "ftp://h/p", statusfwd.EnvToken: "/t"}, true, "must be https"},
		{"no path", map[string]string{statusfwd.EnvURL: "https://h", statusfwd.EnvToken: "/t"}, true, "no host or no path"},
		{"garbage", map[string]string{statusfwd.EnvURL: "https://h:x:y/%zz", statusfwd.EnvToken: "/t"}, true, "not a URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, ok, err := FromEnv(func(k string) string { return tc.env[k] })
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if ok && err == nil && (ep.URL == nil || ep.TokenFile != "/t") {
				t.Fatalf("endpoint %+v", ep)
			}
		})
	}
}

func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxField+1)
	var many []string
	for i := range MaxMetrics + 1 {
		many = append(many, fmt.Sprintf(`{"name":"m%d","value":"1"}`, i))
	}
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"empty request", `{}`, ""},
		{"sdk shape", `{"trainerStatus":{"lastUpdatedTime":"2026-11-27T22:00:00.123456+00:00","progressPercentage":50,"metrics":[{"name":"loss","value":"0.5"}]}}`, ""},
		{"not json", `{"trainerStatus":`, "not a status request"},
		{"progress over", `{"trainerStatus":{"progressPercentage":101}}`, "not between 0 and 100"},
		{"eta negative", `{"trainerStatus":{"estimatedRemainingSeconds":-1}}`, "negative"},
		{"empty name", `{"trainerStatus":{"metrics":[{"name":"","value":"1"}]}}`, "empty name"},
		{"long value", `{"trainerStatus":{"metrics":[{"name":"a","value":"` + long + `"}]}}`, "over 64"},
		{"too many", `{"trainerStatus":{"metrics":[` + strings.Join(many, ",") + `]}}`, "over the 256"},
		{"too big", `{"x":"` + strings.Repeat("a", MaxBody) + `"}`, "over the 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(tc.body))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzDecodeRequest: a rank's body never panics the launcher, and what is
// accepted is within the API's limits.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"trainerStatus":{"progressPercentage":50,"metrics":[{"name":"loss","value":"0.5"}]}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"trainerStatus":{"metrics":[{"name":"é","value":"` + strings.Repeat("é", 64) + `"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil || r.TrainerStatus == nil {
			return
		}
		if len(r.TrainerStatus.Metrics) > MaxMetrics {
			t.Fatalf("accepted %d metrics", len(r.TrainerStatus.Metrics))
		}
		st := merge(r.TrainerStatus, []Metric{{Name: "podmpi_phase", Value: "mpirun"}}, false, time.Unix(0, 0))
		if len(st.Metrics) > MaxMetrics {
			t.Fatalf("merged %d metrics", len(st.Metrics))
		}
	})
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := Clip("  a \n b  "); got != "a b" {
		t.Errorf("Clip spaces: %q", got)
	}
	if got := Clip(""); got != "-" {
		t.Errorf("Clip empty: %q", got)
	}
	got := Clip(strings.Repeat("é", 100))
	if n := len([]rune(got)); n != MaxField || !strings.HasSuffix(got, "...") {
		t.Errorf("Clip long: %d runes %q", n, got)
	}
}

func metrics(prefix string, n int) []Metric {
	out := make([]Metric, n)
	for i := range out {
		out[i] = Metric{Name: fmt.Sprintf("%s%d", prefix, i), Value: "1"}
	}
	return out
}

func TestMerge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	fifty := int32(50)
	own := []Metric{{Name: "podmpi_phase", Value: "failed"}, {Name: "podmpi_exit_code", Value: "4"}}
	user := &Status{ProgressPercentage: &fifty, LastUpdatedTime: "2026-11-27T21:59:59.5+00:00",
		Metrics: []Metric{{Name: "loss", Value: "0.5"}, {Name: "podmpi_phase", Value: "running"}, {Name: "podmpi_mine", Value: "x"}}}

	st := merge(nil, own, false, now)
	if st.ProgressPercentage != nil || st.LastUpdatedTime != "2026-11-27T22:00:00Z" || len(st.Metrics) != 2 {
		t.Fatalf("own only: %+v", st)
	}
	st = merge(user, own, false, now)
	if st.ProgressPercentage == nil || *st.ProgressPercentage != 50 || st.LastUpdatedTime != user.LastUpdatedTime {
		t.Fatalf("the ranks' progress and time are kept: %+v", st)
	}
	// podmpi's names are its own: a rank's podmpi_phase=running never
	// shows beside a failed job's exit code.
	if want := []Metric{{"loss", "0.5"}, own[0], own[1]}; !slices.Equal(st.Metrics, want) {
		t.Fatalf("the ranks' metrics first, podmpi's after, podmpi's names podmpi's only: %+v, want %+v", st.Metrics, want)
	}

	// No room: the ranks' metrics fill the status; podmpi's are left out,
	// except after a failure, when podmpi's go first.
	full := &Status{Metrics: metrics("m", MaxMetrics)}
	if st := merge(full, own[:1], false, now); len(st.Metrics) != MaxMetrics || st.Metrics[MaxMetrics-1].Name != "m255" {
		t.Fatalf("full, running: %d metrics, last %+v", len(st.Metrics), st.Metrics[len(st.Metrics)-1])
	}
	if st := merge(full, own[:1], true, now); len(st.Metrics) != MaxMetrics || st.Metrics[0].Name != "podmpi_phase" || st.Metrics[MaxMetrics-1].Name != "m254" {
		t.Fatalf("full, failed: %d metrics, first %+v", len(st.Metrics), st.Metrics[0])
	}
}

// fakePoster records what the reporter sends and answers from a script:
// the replies in order, then 200 and the request echoed, as Trainer does.
type fakePoster struct {
	mu     sync.Mutex
	got    []*Status
	script []reply
	// hold, when set, makes each request wait for a value from it (or for
	// its context): a request in flight for as long as the test wants.
	hold chan struct{}
}

type reply struct {
	a   Answer
	err error
}

func (p *fakePoster) Post(ctx context.Context, st *Status) (Answer, error) {
	p.mu.Lock()
	p.got = append(p.got, st)
	var rp reply
	if len(p.script) > 0 {
		rp, p.script = p.script[0], p.script[1:]
	}
	hold := p.hold
	p.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return Answer{}, ctx.Err()
		}
	}
	if rp.a.Code == 0 && rp.err == nil {
		rp.a.Code = 200
		rp.a.Body, _ = json.Marshal(Request{TrainerStatus: st})
	}
	return rp.a, rp.err
}

func (p *fakePoster) sent() []*Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Status(nil), p.got...)
}

// fakeClock is the reporter's time, moved by the test only: its timers
// fire when add passes them.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	timers map[*fakeTimer]bool
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC), timers: map[*fakeTimer]bool{}}
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Timer(at time.Time) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{at: at, c: make(chan time.Time, 1)}
	if !at.After(c.t) {
		ft.c <- c.t
	} else {
		c.timers[ft] = true
	}
	return ft.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := c.timers[ft]
		delete(c.timers, ft)
		return was
	}
}

// add moves the time on and fires the timers it passes.
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	for ft := range c.timers {
		if !ft.at.After(c.t) {
			ft.c <- c.t
			delete(c.timers, ft)
		}
	}
}

// waiting is how many timers are set and not fired: 1 when Run sleeps
// until a request is due.
func (c *fakeClock) waiting() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.timers) }

// settledNow reports whether Trainer answered for the latest state.
func (r *Reporter) settledNow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done == r.version || r.refused != nil
}

// waitFor waits, 20 s of real time at most, until cond holds: the sync
// point with Run's goroutine (nothing here waits on the reporter's time).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	sshtest.Eventually(t, 20*time.Second, what, cond)
}

// dueIn is due's answer as a wait from the clock's now.
func dueIn(r *Reporter, clk *fakeClock) (bool, time.Duration) {
	send, at := r.due()
	if at.IsZero() {
		return send, 0
	}
	return send, at.Sub(clk.Now())
}

// run starts r.Run until the test ends.
func run(t *testing.T, r *Reporter) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func phase(v string) []Metric { return []Metric{{Name: "podmpi_phase", Value: v}} }

func metric(st *Status, name string) string {
	for _, m := range st.Metrics {
		if m.Name == name {
			return m.Value
		}
	}
	return ""
}

func phases(sts []*Status) []string {
	var out []string
	for _, st := range sts {
		out = append(out, metric(st, "podmpi_phase"))
	}
	return out
}

// TestEndLandsWhileARequestIsInFlight is what users saw: a job that
// outlives the pace, whose paced request is under way when the launcher
// sets its end. The request is waited for, never given up, and the end
// follows it at once, whatever the pace.
func TestEndLandsWhileARequestIsInFlight(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := &fakePoster{hold: make(chan struct{})}
	r := newReporter(p, nil, clk)
	run(t, r)

	r.Set(phase("starting"))
	p.hold <- struct{}{} // Trainer answers the first request
	waitFor(t, "the first request's answer", r.settledNow)
	clk.add(MinInterval + time.Second) // the job runs on past the pace
	r.Set(phase("mpirun"))
	waitFor(t, "the paced request", func() bool { return len(p.sent()) == 2 })

	// The paced request is in flight: the end is set, and Final waits.
	r.SetFailure(append([]Metric{{Name: "podmpi_exit_code", Value: "4"}}, phase("failed")...))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- r.Final(ctx) }()
	p.hold <- struct{}{} // the paced request's answer
	p.hold <- struct{}{} // the end's, sent at once without moving the clock
	if err := <-res; err != nil {
		t.Fatalf("Final = %v", err)
	}
	sent := p.sent()
	if got := phases(sent); !slices.Equal(got, []string{"starting", "mpirun", "failed"}) {
		t.Fatalf("Trainer got the phases %v, want starting, mpirun, failed", got)
	}
	if end := sent[2]; end.Metrics[0].Name != "podmpi_exit_code" {
		t.Errorf("the end's metrics %v: the failure goes first", end.Metrics)
	}
}

// TestRetriesUntilTaken: Trainer answers 503 twice (restarting), then
// 200; each attempt waits for the backoff and the pace, carries the
// latest state, and the latest state lands.
func TestRetriesUntilTaken(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	unavailable := reply{a: Answer{Code: 503, Body: []byte(`{"kind":"Status","message":"Internal error"}`)}}
	p := &fakePoster{script: []reply{unavailable, unavailable}}
	r := newReporter(p, nil, clk)

	r.Set(phase("discovery"))
	if send, _ := r.due(); !send {
		t.Fatal("the first state is not due at once")
	}
	r.sendOnce(context.Background())
	// Not before the pace (5 s) and the first backoff (2.5 to 7.5 s).
	if send, wait := dueIn(r, clk); send || wait < MinInterval || wait >= 7500*time.Millisecond {
		t.Fatalf("after a 503: due %v in %s, want a wait of 5 to 7.5 s", send, wait)
	}

	run(t, r)
	r.Set(phase("probe")) // a newer state, during the backoff
	waitFor(t, "Run asleep until the retry", func() bool { return clk.waiting() == 1 })
	clk.add(7500 * time.Millisecond)
	waitFor(t, "the second attempt's answer", func() bool { return len(p.sent()) == 2 && clk.waiting() == 1 })
	if send, wait := dueIn(r, clk); send || wait < MinInterval || wait >= 15*time.Second {
		t.Fatalf("after the second 503: due %v in %s, want 5 to 15 s", send, wait)
	}
	clk.add(15 * time.Second)
	waitFor(t, "the third attempt's answer", r.settledNow)
	if got := phases(p.sent()); !slices.Equal(got, []string{"discovery", "probe", "probe"}) {
		t.Fatalf("Trainer got the phases %v, want discovery, then probe twice", got)
	}
	if err := r.Final(context.Background()); err != nil {
		t.Fatalf("Final after the state was taken: %v", err)
	}
	if n := len(p.sent()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

// TestRetryAfterIsHonoured: Trainer's Retry-After holds the next request,
// the end's too.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := &fakePoster{script: []reply{{a: Answer{Code: 429, RetryAfter: 30 * time.Second}}}}
	r := newReporter(p, nil, clk)
	r.Set(phase("probe"))
	r.sendOnce(context.Background())
	if send, wait := dueIn(r, clk); send || wait != 30*time.Second {
		t.Fatalf("after 429 with Retry-After 30: due %v in %s", send, wait)
	}
	// The end does not jump the queue Trainer asked for.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Final(ctx); err == nil || !strings.Contains(err.Error(), "HTTP 429") {
		t.Fatalf("Final before Retry-After's time: %v, want the 429 named", err)
	}
	if send, wait := dueIn(r, clk); send || wait != 30*time.Second {
		t.Fatalf("the end: due %v in %s, want 30 s", send, wait)
	}
	clk.add(30 * time.Second)
	if send, _ := r.due(); !send {
		t.Fatal("not due once Retry-After passed")
	}
}

// TestEndRetriesWithinItsDeadline: the end's request gets no answer, then
// 503, then 200: it is sent again within the end's short backoff.
func TestEndRetriesWithinItsDeadline(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := &fakePoster{}
	r := newReporter(p, nil, clk)
	run(t, r)
	r.Set(phase("mpirun"))
	waitFor(t, "the first request's answer", r.settledNow)
	p.mu.Lock()
	p.script = []reply{{err: errors.New("connection refused")}, {a: Answer{Code: 503}}}
	p.mu.Unlock()

	r.Set(phase("succeeded"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- r.Final(ctx) }()
	for n := 2; n <= 3; n++ {
		waitFor(t, fmt.Sprintf("attempt %d of the end, then Run asleep", n), func() bool { return len(p.sent()) == n && clk.waiting() == 1 })
		clk.add(2 * time.Second) // the end's backoff is at most 1.5 s
	}
	if err := <-res; err != nil {
		t.Fatalf("Final = %v", err)
	}
	if got := phases(p.sent()); !slices.Equal(got, []string{"mpirun", "succeeded", "succeeded", "succeeded"}) {
		t.Fatalf("Trainer got the phases %v", got)
	}
}

// TestRefusalsAreNotRetriedBlindly: a 422 drops that state (sent again it
// would be refused again) and the next change goes; a 403 refuses the job:
// nothing more is sent, and a rank is told so.
func TestRefusalsAreNotRetriedBlindly(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := &fakePoster{script: []reply{
		{a: Answer{Code: 422, Body: []byte(`{"message":"Validation failed"}`)}},
		{a: Answer{Code: 403, Body: []byte(`{"kind":"Status","message":"Forbidden","code":403}`)}},
	}}
	var logs strings.Builder
	r := newReporter(p, slog.New(slog.NewTextHandler(&logs, nil)), clk)
	r.Set(phase("probe"))
	r.sendOnce(context.Background())
	clk.add(time.Hour)
	if send, _ := r.due(); send {
		t.Fatal("a state Trainer refused (422) is due again")
	}
	r.Set(phase("mpirun"))
	if send, _ := r.due(); !send {
		t.Fatal("the next change is not due")
	}
	r.sendOnce(context.Background())
	ten := int32(10)
	err := r.Forward(&Status{ProgressPercentage: &ten})
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Code != 403 || !strings.Contains(err.Error(), "sends no more") {
		t.Fatalf("a rank's request after Trainer's 403: %v", err)
	}
	r.Set(phase("failed"))
	clk.add(time.Hour)
	if send, _ := r.due(); send {
		t.Fatal("a request is due after Trainer refused the job")
	}
	if err := r.Final(context.Background()); !errors.As(err, &ref) {
		t.Fatalf("Final after the job was refused: %v", err)
	}
	if n := len(p.sent()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 || !strings.Contains(logs.String(), "sends no more") {
		t.Fatalf("want one warning per kind:\n%s", logs.String())
	}
}

// TestPace: a job of 60 s whose launcher and ranks change the status 11
// times a second, nothing failing, makes at most 60/5+2 requests, each the
// latest state, and the end lands.
func TestPace(t *testing.T) {
	t.Parallel()
	const job = 60 * time.Second
	clk := newFakeClock()
	p := &fakePoster{}
	r := newReporter(p, nil, clk)
	ctx := context.Background()
	var progress int32
	for el := time.Duration(0); el < job; el += 100 * time.Millisecond {
		r.Set(phase(fmt.Sprintf("step-%d", el/(100*time.Millisecond))))
		if el%time.Second == 0 {
			progress = int32(el / (600 * time.Millisecond))
			if err := r.Forward(&Status{ProgressPercentage: &progress}); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 { // bounded: one request at most is due
			if send, _ := r.due(); !send {
				break
			}
			r.sendOnce(ctx)
		}
		clk.add(100 * time.Millisecond)
	}
	run(t, r)
	r.Set(phase("succeeded"))
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.Final(fctx); err != nil {
		t.Fatal(err)
	}
	sent := p.sent()
	if limit := int(job/MinInterval) + 2; len(sent) > limit || len(sent) < limit-1 {
		t.Fatalf("%d requests for a job of %s, want at most %d (and about as many)", len(sent), job, limit)
	}
	last := sent[len(sent)-1]
	if metric(last, "podmpi_phase") != "succeeded" || last.ProgressPercentage == nil || *last.ProgressPercentage != progress {
		t.Fatalf("the last request: %+v", last)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 0 ", 0},
		{"-3", 0},
		{"1.5", 0},
		{"99999999999999999999", maxRetryAfter},
		{"3600", maxRetryAfter},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
	} {
		if got := retryAfter(tc.h, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tc.h, got, tc.want)
		}
	}
}

// FuzzRetryAfter: whatever Trainer's header says, the wait is between 0
// and maxRetryAfter.
func FuzzRetryAfter(f *testing.F) {
	f.Add("7")
	f.Add("Fri, 27 Nov 2026 22:01:30 GMT")
	f.Add("18446744073709551616")
	f.Fuzz(func(t *testing.T, h string) {
		if d := retryAfter(h, time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)); d < 0 || d > maxRetryAfter {
			t.Fatalf("retryAfter(%q) = %s", h, d)
		}
	})
}
