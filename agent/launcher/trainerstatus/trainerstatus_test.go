package trainerstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
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
		{"blank", map[string]string{EnvURL: "  "}, false, ""},
		{"https", map[string]string{EnvURL: "https://svc.ns.svc:10443/apis/x/status", EnvToken: "/t"}, true, ""},
		{"no token", map[string]string{EnvURL: "https://svc.ns.svc:10443/apis/x/status"}, true, EnvToken + " is not"},
		{"http remote", map[string]string{EnvURL: "http://svc.ns.svc:10443/apis/x/status", EnvToken: "/t"}, true, "loopback address only"},
		{"http loopback", map[string]string{EnvURL: "http://127.0.0.1:1/apis/x/status", EnvToken: "/t"}, true, ""},
		{"ftp", map[string]string{EnvURL: "ftp://h/p", EnvToken: "/t"}, true, "must be https"},
		{"no path", map[string]string{EnvURL: "https://h", EnvToken: "/t"}, true, "no host or no path"},
		{"garbage", map[string]string{EnvURL: "https://h:x:y/%zz", EnvToken: "/t"}, true, "not a URL"},
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
	own := []Metric{{Name: "podmpi_phase", Value: "mpirun"}, {Name: "loss", Value: "podmpi's must not win"}}
	user := &Status{ProgressPercentage: &fifty, Metrics: []Metric{{Name: "loss", Value: "0.5"}}, LastUpdatedTime: "2026-11-27T21:59:59.5+00:00"}

	st := merge(nil, own, false, now)
	if st.ProgressPercentage != nil || st.LastUpdatedTime != "2026-11-27T22:00:00Z" || len(st.Metrics) != 2 {
		t.Fatalf("own only: %+v", st)
	}
	st = merge(user, own, false, now)
	if st.ProgressPercentage == nil || *st.ProgressPercentage != 50 || st.LastUpdatedTime != user.LastUpdatedTime {
		t.Fatalf("the ranks' progress and time are kept: %+v", st)
	}
	if len(st.Metrics) != 2 || st.Metrics[0] != (Metric{"loss", "0.5"}) || st.Metrics[1].Name != "podmpi_phase" {
		t.Fatalf("the ranks' metrics first, podmpi's after, no name twice: %+v", st.Metrics)
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

// fakePoster records what the reporter sends.
type fakePoster struct {
	mu     sync.Mutex
	got    []*Status
	answer Answer
	err    error
	block  chan struct{} // when set, Post waits for it
}

func (p *fakePoster) Post(_ context.Context, st *Status) (Answer, error) {
	if p.block != nil {
		<-p.block
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, st)
	a := p.answer
	if a.Code == 0 {
		a.Code = 200
		a.Body, _ = json.Marshal(Request{TrainerStatus: st})
	}
	return a, p.err
}

func (p *fakePoster) sent() []*Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Status(nil), p.got...)
}

// clock is a settable time for the reporter's pace.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestForwardPace(t *testing.T) {
	t.Parallel()
	p := &fakePoster{}
	clk := &clock{t: time.Unix(1_000_000, 0)}
	r := newReporter(p, nil, clk.now)
	r.Set([]Metric{{Name: "podmpi_phase", Value: "mpirun"}})
	ctx := context.Background()
	r.Final(ctx) // the launcher's own state goes first
	if n := len(p.sent()); n != 1 {
		t.Fatalf("%d requests after Final, want 1", n)
	}

	// A rank's request within MinInterval of the last: answered 200 with
	// its request, not sent yet.
	ten := int32(10)
	a, err := r.Forward(ctx, &Status{ProgressPercentage: &ten})
	if err != nil || a.Code != 200 || len(p.sent()) != 1 {
		t.Fatalf("early request: %v %+v, %d sent", err, a, len(p.sent()))
	}
	// After the interval, the next one goes at once, with podmpi's metrics.
	clk.add(MinInterval)
	fifty := int32(50)
	a, err = r.Forward(ctx, &Status{ProgressPercentage: &fifty, Metrics: []Metric{{Name: "loss", Value: "1"}}})
	sent := p.sent()
	if err != nil || a.Code != 200 || len(sent) != 2 {
		t.Fatalf("due request: %v %+v, %d sent", err, a, len(sent))
	}
	last := sent[1]
	if *last.ProgressPercentage != 50 || len(last.Metrics) != 2 || last.Metrics[1].Name != "podmpi_phase" {
		t.Fatalf("sent %+v", last)
	}
	// Nothing is pending now: Final sends nothing more.
	r.Final(ctx)
	if n := len(p.sent()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	if r.Sent() != 2 {
		t.Fatalf("Sent() = %d", r.Sent())
	}
}

// TestRunPaces: changes that come faster than MinInterval are sent at most
// once per interval, the latest state each time, and none is lost.
func TestRunPaces(t *testing.T) {
	t.Parallel()
	p := &fakePoster{}
	r := NewReporter(nil, nil)
	r.c = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	r.Set([]Metric{{Name: "podmpi_phase", Value: "discovery"}})
	waitSent(t, p, 1, 2*time.Second)
	r.Set([]Metric{{Name: "podmpi_phase", Value: "dns-wait"}})
	r.Set([]Metric{{Name: "podmpi_phase", Value: "probe"}})
	time.Sleep(200 * time.Millisecond)
	if n := len(p.sent()); n != 1 {
		t.Fatalf("%d requests within the interval, want 1", n)
	}
	r.Final(ctx) // the end is sent at once
	sent := p.sent()
	if len(sent) != 2 || sent[1].Metrics[0].Value != "probe" {
		t.Fatalf("after Final: %d requests, last %+v", len(sent), sent[len(sent)-1])
	}
}

func waitSent(t *testing.T, p *fakePoster, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(p.sent()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests after %s, want %d", len(p.sent()), d, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
