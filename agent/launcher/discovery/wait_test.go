package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podmpi/podmpi/hostfile"
)

func mustResolve(t *testing.T, spec Spec) Plan {
	t.Helper()
	plan, err := Resolve(spec)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func names(rs []Resolved) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Host.Name
	}
	return out
}

// progressLog collects Progress reports safely.
type progressLog struct {
	mu sync.Mutex
	ps []Progress
}

func (l *progressLog) add(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ps = append(l.ps, p)
}

func (l *progressLog) strings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.ps {
		out = append(out, p.String())
	}
	return out
}

func TestWaitTemplateResolvesLater(t *testing.T) {
	t.Parallel()
	spec := Spec{Template: "tj-node-0-{i}.tj", Expected: 4}
	plan := mustResolve(t, spec)
	r := newFake()
	for i := 0; i < 4; i++ {
		r.setHost(fmt.Sprintf("tj-node-0-%d.tj", i), fmt.Sprintf("10.0.0.%d", i+1))
	}
	r.after["tj-node-0-3.tj"] = 5 // not published for the first 5 lookups
	r.after["tj-node-0-1.tj"] = 1
	clock := newClock()
	var logBuf bytes.Buffer
	var prog progressLog
	res, err := Wait(context.Background(), spec, plan, WaitOptions{
		Resolver: r, Clock: clock, Progress: prog.add, ProgressEvery: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tj-node-0-0.tj", "tj-node-0-1.tj", "tj-node-0-2.tj", "tj-node-0-3.tj"}; !reflect.DeepEqual(names(res), want) {
		t.Fatalf("resolved %v, want %v", names(res), want)
	}
	if res[3].Addrs[0] != "10.0.0.4" || res[3].Host.Slots != 0 {
		t.Errorf("res[3] = %+v", res[3])
	}
	// Resolved names are not looked up again.
	if n := r.callCount("tj-node-0-0.tj"); n != 1 {
		t.Errorf("tj-node-0-0.tj looked up %d times, want 1", n)
	}
	if n := r.callCount("tj-node-0-3.tj"); n != 6 {
		t.Errorf("tj-node-0-3.tj looked up %d times, want 6", n)
	}
	msgs := prog.strings()
	if len(msgs) < 3 {
		t.Fatalf("progress reports %q, want at least 3 (2/4, 3/4 ..., 4/4)", msgs)
	}
	if !strings.HasPrefix(msgs[0], "2/4 workers resolved; waiting for tj-node-0-1.tj, tj-node-0-3.tj (NXDOMAIN), 0s") {
		t.Errorf("first report %q", msgs[0])
	}
	if !slicesContainPrefix(msgs, "3/4 workers resolved; waiting for tj-node-0-3.tj (NXDOMAIN), ") {
		t.Errorf("no 3/4 report in %q", msgs)
	}
	if last := msgs[len(msgs)-1]; !strings.HasPrefix(last, "4/4 workers resolved, ") {
		t.Errorf("last report %q", last)
	}
	logs := logBuf.String()
	for _, want := range []string{"waiting for tj-node-0-3.tj", "retrying DNS lookups", "all workers resolve"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	// Backoff: 200ms base, doubled, reset after progress, jitter in [0.5,1.5).
	for i, d := range clock.slept {
		if d < 100*time.Millisecond || d > 7500*time.Millisecond {
			t.Errorf("sleep %d = %s out of range", i, d)
		}
	}
}

func slicesContainPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func TestWaitProgressPeriodic(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"a", "b"}}
	plan := mustResolve(t, spec)
	r := newFake()
	r.setHost("a", "10.0.0.1")
	r.setHost("b", "10.0.0.2")
	r.after["b"] = 40
	clock := newClock()
	var prog progressLog
	_, err := Wait(context.Background(), spec, plan, WaitOptions{
		Resolver: r, Clock: clock, Progress: prog.add, ProgressEvery: 20 * time.Second,
		Backoff: Backoff{Jitter: func() float64 { return 1 }},
	})
	if err != nil {
		t.Fatal(err)
	}
	// 40 rounds, mostly 5s apart: one report per 20s plus the final one,
	// far fewer than the rounds.
	n := len(prog.strings())
	if n < 5 || n > 15 {
		t.Errorf("%d progress reports over %s for 41 rounds: %q", n, clock.total, prog.strings())
	}
}

func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	spec := Spec{Template: "tj-node-0-{i}.tj", Expected: 4}
	plan := mustResolve(t, spec)
	r := newFake()
	r.setHost("tj-node-0-0.tj", "10.0.0.1")
	r.setHost("tj-node-0-1.tj", "10.0.0.2")
	clock := newClock()
	start := time.Now()
	_, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: clock})
	if real := time.Since(start); real > 10*time.Second {
		t.Errorf("the 5m wait took %s of real time", real)
	}
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("error = %v, want *TimeoutError", err)
	}
	if !reflect.DeepEqual(te.Missing, []string{"tj-node-0-2.tj", "tj-node-0-3.tj"}) || te.Resolved != 2 || te.Expected != 4 {
		t.Errorf("TimeoutError = %+v", te)
	}
	if te.Elapsed != 5*time.Minute || clock.total != 5*time.Minute {
		t.Errorf("Elapsed = %s, slept %s, want exactly the 5m default deadline", te.Elapsed, clock.total)
	}
	if te.Source != SourceTemplate || te.Self != "" || te.Rounds < 30 {
		t.Errorf("Source %s Self %q Rounds %d", te.Source, te.Self, te.Rounds)
	}
	if !IsNotFound(te.LastErr["tj-node-0-3.tj"]) {
		t.Errorf("LastErr = %v", te.LastErr)
	}
	msg := err.Error()
	for _, want := range []string{
		"within 5m0s", "2/4 resolved", "missing: tj-node-0-2.tj (NXDOMAIN), tj-node-0-3.tj (NXDOMAIN)",
		"\nlikely causes:\n  - ", "gang scheduling", "ResourceQuota", "publishNotReadyAddresses: true",
		"--discovery.template", "relative name", "--discovery.timeout",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "DNS errors other than") {
		t.Errorf("NXDOMAIN alone should not blame the DNS server:\n%s", msg)
	}
	if strings.Count(msg, "\n") < 4 {
		t.Errorf("hint is not multi-line:\n%s", msg)
	}
}

func TestTimeoutErrorListsFirstTen(t *testing.T) {
	t.Parallel()
	spec := Spec{Template: "w-{i}.job.ns.svc", Expected: 15}
	plan := mustResolve(t, spec)
	_, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: newFake(), Clock: newClock(), Timeout: time.Minute})
	var te *TimeoutError
	if !errors.As(err, &te) || len(te.Missing) != 15 {
		t.Fatalf("error = %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "w-9.job.ns.svc (NXDOMAIN) and 5 more") || strings.Contains(msg, "w-10.job") {
		t.Errorf("message does not stop at ten names:\n%s", msg)
	}
	if strings.Contains(msg, "relative name") {
		t.Errorf("FQDN-ish .svc names are not relative:\n%s", msg)
	}
}

func TestWaitSelfRequired(t *testing.T) {
	t.Parallel()
	content := "tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-launcher-0-0.tj slots=2\n"
	spec := Spec{Hostfile: writeFile(t, content), Self: "tj-launcher-0-0"}
	plan := mustResolve(t, spec)
	if plan.SelfIndex != 2 {
		t.Fatalf("SelfIndex = %d", plan.SelfIndex)
	}
	newR := func() *fakeResolver {
		r := newFake()
		r.setHost("tj-node-0-0.tj", "10.0.0.1")
		r.setHost("tj-node-0-1.tj", "10.0.0.2")
		return r
	}

	t.Run("waits for its own name", func(t *testing.T) {
		t.Parallel()
		r := newR()
		r.setHost("tj-launcher-0-0.tj", "10.0.0.9")
		r.after["tj-launcher-0-0.tj"] = 3
		res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock()})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 3 || res[2].Host != (hostfile.Host{Name: "tj-launcher-0-0.tj", Slots: 2}) || r.callCount("tj-launcher-0-0.tj") != 4 {
			t.Errorf("res = %+v, self lookups %d", res, r.callCount("tj-launcher-0-0.tj"))
		}
	})
	t.Run("times out naming itself", func(t *testing.T) {
		t.Parallel()
		_, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: newR(), Clock: newClock(), Timeout: 30 * time.Second})
		var te *TimeoutError
		if !errors.As(err, &te) || te.Self != "tj-launcher-0-0.tj" || te.Source != SourceHostfile {
			t.Fatalf("error = %#v", err)
		}
		msg := err.Error()
		for _, want := range []string{"tj-launcher-0-0.tj [this launcher] (NXDOMAIN)", "the launcher's own name tj-launcher-0-0.tj", "runLauncherAsNode", "wrong subdomain"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message lacks %q:\n%s", want, msg)
			}
		}
	})
}

func TestWaitSRVGrowing(t *testing.T) {
	t.Parallel()
	spec := Spec{Service: "tj", Expected: 4}
	plan := mustResolve(t, spec)
	r := newFake()
	r.srv["_ssh._tcp.tj"] = [][]*net.SRV{
		srvs(2222, "tj-node-0-1.tj.default.svc.cluster.local.", "tj-node-0-0.tj.default.svc.cluster.local."),
		srvs(2222, "tj-node-0-1.tj.default.svc.cluster.local.", "tj-node-0-0.tj.default.svc.cluster.local."),
		srvs(2222, "tj-node-0-1.tj.default.svc.cluster.local.", "tj-node-0-0.tj.default.svc.cluster.local.", "tj-node-0-2.tj.default.svc.cluster.local."),
		srvs(2222, "tj-node-0-3.tj.default.svc.cluster.local.", "tj-node-0-10.tj.default.svc.cluster.local.",
			"tj-node-0-1.tj.default.svc.cluster.local.", "tj-node-0-0.tj.default.svc.cluster.local.", "tj-node-0-2.tj.default.svc.cluster.local."),
	}
	for _, i := range []int{0, 1, 2, 3, 10} {
		r.setHost(fmt.Sprintf("tj-node-0-%d.tj.default.svc.cluster.local", i), fmt.Sprintf("10.0.1.%d", i))
	}
	var prog progressLog
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock(), Progress: prog.add})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tj-node-0-0.tj.default.svc.cluster.local", "tj-node-0-1.tj.default.svc.cluster.local",
		"tj-node-0-2.tj.default.svc.cluster.local", "tj-node-0-3.tj.default.svc.cluster.local", "tj-node-0-10.tj.default.svc.cluster.local"}
	if !reflect.DeepEqual(names(res), want) {
		t.Fatalf("resolved %v, want %v", names(res), want)
	}
	for _, x := range res {
		if x.Port != 2222 || x.Host.Slots != 0 || len(x.Addrs) != 1 {
			t.Errorf("%+v", x)
		}
	}
	if n := r.callCount("_ssh._tcp.tj"); n != 4 {
		t.Errorf("SRV looked up %d times, want 4", n)
	}
	if n := r.callCount("tj"); n != 0 {
		t.Errorf("A fallback used %d times although SRV answered", n)
	}
	if msgs := prog.strings(); !strings.HasPrefix(msgs[0], "2/4 workers resolved; waiting for 2 more in _ssh._tcp.tj") {
		t.Errorf("progress %q", msgs)
	}
}

func TestWaitSRVStableWithoutExpected(t *testing.T) {
	t.Parallel()
	spec := Spec{Service: "_ssh._tcp.job.ns.svc"}
	plan := mustResolve(t, spec)
	r := newFake()
	r.srv["_ssh._tcp.job.ns.svc"] = [][]*net.SRV{
		srvs(22, "w-0.job.ns.svc.", "w-1.job.ns.svc."),
		srvs(22, "w-0.job.ns.svc.", "w-1.job.ns.svc.", "w-2.job.ns.svc."),
	}
	for i := 0; i < 3; i++ {
		r.setHost(fmt.Sprintf("w-%d.job.ns.svc", i), fmt.Sprintf("10.0.2.%d", i))
	}
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || r.callCount("_ssh._tcp.job.ns.svc") != 3 {
		t.Errorf("resolved %v after %d SRV lookups, want 3 hosts after 3 (2, 3, 3 again)", names(res), r.callCount("_ssh._tcp.job.ns.svc"))
	}

	// An explicit SRV name never falls back to A records.
	r2 := newFake()
	r2.setHost("_ssh._tcp.job.ns.svc", "10.9.9.9")
	_, err = Wait(context.Background(), spec, plan, WaitOptions{Resolver: r2, Clock: newClock(), Timeout: 10 * time.Second})
	var te *TimeoutError
	if !errors.As(err, &te) || te.Source != SourceSRV || !strings.Contains(err.Error(), "_ssh._tcp.job.ns.svc has no records (NXDOMAIN)") ||
		!strings.Contains(err.Error(), "port named \"ssh\"") {
		t.Errorf("error = %v", err)
	}
}

func TestWaitServiceAWithPTR(t *testing.T) {
	t.Parallel()
	spec := Spec{Service: "pi", Expected: 3, Self: "pi-launcher"}
	plan := mustResolve(t, spec)
	r := newFake()
	// No SRV records: the Service's A records are used.
	r.setHost("pi", "10.0.3.2", "fd00::2", "10.0.3.1", "10.0.3.3", "10.0.3.1")
	r.after["pi"] = 2
	r.ptr["10.0.3.1"] = []string{"pi-launcher.pi.default.svc.cluster.local."}
	r.ptr["10.0.3.2"] = []string{"bad_name.example.", "pi-worker-0.pi.default.svc.cluster.local."}
	// 10.0.3.3 has no PTR record: it is used as an IP literal.
	r.setHost("pi-launcher.pi.default.svc.cluster.local", "10.0.3.1")
	r.setHost("pi-worker-0.pi.default.svc.cluster.local", "10.0.3.2")
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock()})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.3.3", "pi-launcher.pi.default.svc.cluster.local", "pi-worker-0.pi.default.svc.cluster.local"}
	if !reflect.DeepEqual(names(res), want) {
		t.Fatalf("resolved %v, want %v", names(res), want)
	}
	if !reflect.DeepEqual(res[0].Addrs, []string{"10.0.3.3"}) || !reflect.DeepEqual(res[2].Addrs, []string{"10.0.3.2"}) {
		t.Errorf("addrs %+v", res)
	}
	hosts := []hostfile.Host{res[0].Host, res[1].Host, res[2].Host}
	if FindSelf(spec.Self, hosts) != 1 {
		t.Errorf("FindSelf over the Service's hosts = %d", FindSelf(spec.Self, hosts))
	}
	if r.callCount("_ssh._tcp.pi") != 3 || r.callCount("10.0.3.1") != 1 {
		t.Errorf("SRV tried %d times, PTR of 10.0.3.1 %d times", r.callCount("_ssh._tcp.pi"), r.callCount("10.0.3.1"))
	}
}

func TestWaitServiceATimeout(t *testing.T) {
	t.Parallel()
	spec := Spec{Service: "pi", Expected: 3}
	plan := mustResolve(t, spec)
	r := newFake()
	r.setHost("pi", "10.0.3.1")
	_, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock(), Timeout: time.Minute})
	var te *TimeoutError
	if !errors.As(err, &te) || te.Source != SourceServiceA || te.ShortBy != 2 || te.Resolved != 1 || te.Expected != 3 {
		t.Fatalf("error = %#v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "pi lacks 2 of the 3 expected entries") || !strings.Contains(msg, "wrong Service: pi") {
		t.Errorf("message:\n%s", msg)
	}
}

func TestWaitHangingResolver(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"a.j", "b.j"}}
	plan := mustResolve(t, spec)
	r := newFake()
	r.setHost("a.j", "10.0.0.1")
	r.hang["b.j"] = true
	start := time.Now()
	_, err := Wait(context.Background(), spec, plan, WaitOptions{
		Resolver: r, Clock: newClock(), Timeout: 3 * time.Second, LookupTimeout: 20 * time.Millisecond,
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	var te *TimeoutError
	if !errors.As(err, &te) || !reflect.DeepEqual(te.Missing, []string{"b.j"}) {
		t.Fatalf("error = %v", err)
	}
	var dnsErr *net.DNSError
	if !errors.As(te.LastErr["b.j"], &dnsErr) || !dnsErr.IsTimeout || IsNotFound(te.LastErr["b.j"]) {
		t.Errorf("LastErr[b.j] = %v", te.LastErr["b.j"])
	}
	// A lookup nothing answered is not "a DNS error": the hint says the
	// server does not answer and egress to it may be blocked.
	if msg := err.Error(); !strings.Contains(msg, "b.j (no answer from the DNS server ") || !strings.Contains(msg, "for b.j (nothing answered") ||
		!strings.Contains(msg, "egress to it may be blocked") || strings.Contains(msg, "DNS errors other than") {
		t.Errorf("message:\n%s", msg)
	}
}

// ignoringResolver never returns from LookupHost: Wait must not hang anyway.
type ignoringResolver struct {
	fakeResolver
	block chan struct{}
}

func (r *ignoringResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	<-r.block
	return nil, errors.New("unblocked")
}

func TestWaitResolverIgnoringContext(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"a.j"}}
	plan := mustResolve(t, spec)
	r := &ignoringResolver{block: make(chan struct{})}
	t.Cleanup(func() { close(r.block) })
	_, err := Wait(context.Background(), spec, plan, WaitOptions{
		Resolver: r, Clock: newClock(), Timeout: time.Second, LookupTimeout: 10 * time.Millisecond,
	})
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("error = %v", err)
	}
}

func TestWaitOtherDNSErrorsAreRetried(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"a.j"}}
	plan := mustResolve(t, spec)
	r := newFake()
	r.setHost("a.j", "10.0.0.1")
	r.errs["a.j"] = &net.DNSError{Err: "server misbehaving", Name: "a.j", IsTemporary: true}
	clock := newClock()
	clock.onSleep = func(total time.Duration) {
		if total > 2*time.Second {
			r.mu.Lock()
			delete(r.errs, "a.j")
			r.mu.Unlock()
		}
	}
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: clock})
	if err != nil || len(res) != 1 || r.callCount("a.j") < 3 {
		t.Fatalf("res %v err %v after %d lookups", res, err, r.callCount("a.j"))
	}
}

func TestWaitBoundedParallelism(t *testing.T) {
	t.Parallel()
	spec := Spec{Template: "w-{i}.job.ns.svc", Expected: 200}
	plan := mustResolve(t, spec)
	r := newFake()
	r.delay = 2 * time.Millisecond
	for i := 0; i < 200; i++ {
		r.setHost(fmt.Sprintf("w-%d.job.ns.svc", i), "10.1.0.1")
	}
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock(), Parallel: 8})
	if err != nil || len(res) != 200 {
		t.Fatalf("%d resolved, err %v", len(res), err)
	}
	r.mu.Lock()
	maxIn := r.maxInflight
	r.mu.Unlock()
	if maxIn > 8 || maxIn < 2 {
		t.Errorf("max lookups in flight = %d, want 2..8", maxIn)
	}
}

func TestWaitContextCancel(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"a.j"}}
	plan := mustResolve(t, spec)
	ctx, cancel := context.WithCancel(context.Background())
	clock := newClock()
	clock.onSleep = func(total time.Duration) {
		if total > time.Second {
			cancel()
		}
	}
	_, err := Wait(ctx, spec, plan, WaitOptions{Resolver: newFake(), Clock: clock})
	var te *TimeoutError
	if !errors.Is(err, context.Canceled) || errors.As(err, &te) || !strings.Contains(err.Error(), "0/1 workers resolved; waiting for a.j") {
		t.Fatalf("error = %v", err)
	}
}

func TestWaitRealClock(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"a.j"}}
	plan := mustResolve(t, spec)
	start := time.Now()
	_, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: newFake(), Timeout: 300 * time.Millisecond})
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("error = %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("a 300ms deadline took %s", d)
	}
}

func TestWaitRejectsBadPlan(t *testing.T) {
	t.Parallel()
	for _, plan := range []Plan{{}, {Source: SourceHostfile}, {Source: SourceSRV}, {Source: "dns"}} {
		if _, err := Wait(context.Background(), Spec{}, plan, WaitOptions{Resolver: newFake()}); err == nil {
			t.Errorf("Wait accepted %+v", plan)
		}
	}
}

func TestDiscoverNow(t *testing.T) {
	t.Parallel()
	spec := Spec{Hostfile: writeFile(t, "w-0.j slots=4\nw-1.j slots=4\nw-2.j slots=4\n")}
	plan := mustResolve(t, spec)
	r := newFake()
	r.setHost("w-0.j", "10.0.0.1")
	r.setHost("w-2.j", "10.0.0.3")
	res, missing, err := DiscoverNow(context.Background(), spec, plan, r)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(names(res), []string{"w-0.j", "w-2.j"}) || !reflect.DeepEqual(missing, []string{"w-1.j"}) || res[1].Host.Slots != 4 {
		t.Errorf("res %+v missing %v", res, missing)
	}
	if r.callCount("w-1.j") != 1 {
		t.Errorf("DiscoverNow retried: %d lookups", r.callCount("w-1.j"))
	}

	// A server failure makes the answer unreliable: error, partial results.
	r.errs["w-1.j"] = &net.DNSError{Err: "server misbehaving", Name: "w-1.j"}
	res, missing, err = DiscoverNow(context.Background(), spec, plan, r)
	if err == nil || !strings.Contains(err.Error(), "w-1.j") || len(res) != 2 || len(missing) != 1 {
		t.Errorf("res %v missing %v err %v", names(res), missing, err)
	}

	// A Service: its answer as it is, no count and no stability required.
	sspec := Spec{Service: "tj", Expected: 8}
	splan := mustResolve(t, sspec)
	r = newFake()
	r.srv["_ssh._tcp.tj"] = [][]*net.SRV{srvs(2222, "b.tj.", "a.tj.")}
	r.setHost("a.tj", "10.0.0.1")
	res, missing, err = DiscoverNow(context.Background(), sspec, splan, r)
	if err != nil || !reflect.DeepEqual(names(res), []string{"a.tj"}) || !reflect.DeepEqual(missing, []string{"b.tj"}) || res[0].Host.Slots != 0 {
		t.Errorf("service: res %+v missing %v err %v", res, missing, err)
	}
}

func TestProgressString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p    Progress
		want string
	}{
		{Progress{3, 4, []string{"tj-node-0-3.tj"}, 12*time.Second + 400*time.Millisecond, nil, nil, ""}, "3/4 workers resolved; waiting for tj-node-0-3.tj, 12s"},
		{Progress{0, 5, []string{"a", "b", "c", "d", "e"}, 90 * time.Second, nil, nil, ""}, "0/5 workers resolved; waiting for a, b, c and 2 more, 1m30s"},
		{Progress{1, 4, []string{"a", "b", "c"}, 0, nil, nil, ""}, "1/4 workers resolved; waiting for a, b, c, 0s"},
		{Progress{0, 0, []string{"_ssh._tcp.tj"}, time.Second, nil, nil, ""}, "0 workers resolved; waiting for _ssh._tcp.tj, 1s"},
		{Progress{4, 4, nil, 3 * time.Second, nil, nil, ""}, "4/4 workers resolved, 3s"},
		// What Kubernetes says of a host that does not resolve yet.
		{Progress{1, 2, []string{"tj-node-0-1.tj"}, 5 * time.Second, map[string]string{"tj-node-0-1.tj": "pod tj-node-0-1-x is Pending, not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."}, nil, ""},
			"1/2 workers resolved; waiting for tj-node-0-1.tj (pod tj-node-0-1-x is Pending, not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.), 5s"},
	}
	for _, tc := range cases {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	one := Backoff{Jitter: func() float64 { return 1 }}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := one.Delay(i); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i, got, w)
		}
	}
	if got := one.Delay(1 << 30); got != 5*time.Second {
		t.Errorf("Delay(huge) = %s", got)
	}
	var b Backoff
	for i := 0; i < 1000; i++ {
		d := b.Delay(i % 8)
		lo := time.Duration(float64(min(200*time.Millisecond<<(i%8), 5*time.Second)) * 0.5)
		if d < lo || d >= 3*lo {
			t.Fatalf("Delay(%d) = %s outside [%s, %s)", i%8, d, lo, 3*lo)
		}
	}
}

// An SRV answer that comes with an error (Go's resolver dropped a record
// with an invalid target and returned the rest) is used, not discarded; the
// dropped target and targets the hostfile rules reject are warned about.
func TestWaitSRVPartialAnswer(t *testing.T) {
	t.Parallel()
	spec := Spec{Service: "tj", Expected: 2}
	plan := mustResolve(t, spec)
	r := newFake()
	r.srv["_ssh._tcp.tj"] = [][]*net.SRV{srvs(2222, "tj-node-0-0.tj.", "tj_node_0_9.tj.", "tj-node-0-1.tj.")}
	r.partial["_ssh._tcp.tj"] = &net.DNSError{Err: "DNS response contained records which contain invalid names", Name: "_ssh._tcp.tj"}
	r.setHost("tj-node-0-0.tj", "10.0.1.0")
	r.setHost("tj-node-0-1.tj", "10.0.1.1")
	var logs syncBuf
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock(), Timeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(names(res), []string{"tj-node-0-0.tj", "tj-node-0-1.tj"}) {
		t.Fatalf("resolved %v", names(res))
	}
	if n := r.callCount("tj"); n != 0 {
		t.Errorf("fell back to A records %d times", n)
	}
	out := logs.String()
	for _, w := range []string{`SRV target \"tj_node_0_9.tj.\" ignored in the answer for _ssh._tcp.tj`,
		`SRV target \"(unnamed)\" ignored`, "did not say which", "dig SRV _ssh._tcp.tj."} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %s:\n%s", w, out)
		}
	}
	if strings.Count(out, "level=WARN msg=\"SRV target \\\"tj_node_0_9") != 1 {
		t.Errorf("the bad target is warned about more than once:\n%s", out)
	}
}
