package slots

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/agent/worker/api"

	"github.com/podmpi/podmpi/hostfile"
)

// agent is a fake worker-agent /info endpoint on 127.0.0.1.
type agent struct {
	srv      *httptest.Server
	requests atomic.Int32
	inflight atomic.Int32
	maxIn    atomic.Int32
	// failFirst answers 503 to that many requests, then info.
	failFirst int32
	status    int           // non-zero: always answer this status
	body      string        // non-empty: raw body instead of info
	delay     time.Duration // before answering
	hang      bool          // never answer until the client goes away
	// first are raw bodies for the first requests (after failFirst), then
	// info.
	first []string
	info  api.Info
}

func newAgent(t *testing.T, a *agent) *agent {
	t.Helper()
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.requests.Add(1)
		in := a.inflight.Add(1)
		defer a.inflight.Add(-1)
		for {
			m := a.maxIn.Load()
			if in <= m || a.maxIn.CompareAndSwap(m, in) {
				break
			}
		}
		if r.URL.Path != "/info" {
			http.NotFound(w, r)
			return
		}
		if a.hang {
			<-r.Context().Done()
			return
		}
		if a.delay > 0 {
			time.Sleep(a.delay)
		}
		switch {
		case n <= a.failFirst:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case int(n-a.failFirst) <= len(a.first):
			fmt.Fprint(w, a.first[n-a.failFirst-1])
		case a.status != 0:
			http.Error(w, "boom", a.status)
		case a.body != "":
			fmt.Fprint(w, a.body)
		default:
			w.Header().Set("Content-Type", "application/json")
			// A superset of api.Info, as the agent serves it.
			json.NewEncoder(w).Encode(map[string]any{
				"hostname": a.info.Hostname, "slots": a.info.Slots, "gpus": a.info.GPUs,
				"version": map[string]any{"version": "test"}, "ssh": map[string]any{"port": 2222},
			})
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agent) addr() string { return strings.TrimPrefix(a.srv.URL, "http://") }

func gpuInfo(host string, n int) api.Info {
	return api.Info{Hostname: host, Slots: api.Slots{N: n, Source: "gpu"}, GPUs: api.GPUs{Count: n, Source: "nvml"}}
}

// fastOpts points hosts at agents and keeps retries quick; hosts without an
// agent get 127.0.0.1:1, where nothing listens (connection refused).
func fastOpts(agents map[string]*agent, logBuf *bytes.Buffer) Options {
	o := Options{
		RetryWait: 5 * time.Millisecond,
		Deadline:  time.Second,
		AddrFor: func(host string) string {
			if a, ok := agents[host]; ok {
				return a.addr()
			}
			return "127.0.0.1:1"
		},
	}
	if logBuf != nil {
		o.Logger = slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

func TestDecideAuto(t *testing.T) {
	t.Parallel()
	flaky := newAgent(t, &agent{failFirst: 2, info: api.Info{Hostname: "tj-node-0-0", Slots: api.Slots{N: 4, Source: "gpu"}, GPUs: api.GPUs{Count: 4, Source: "nvml"}}})
	gpus8 := newAgent(t, &agent{info: gpuInfo("tj-node-0-2", 8)})
	cpu := newAgent(t, &agent{info: api.Info{Hostname: "tj-node-0-3", Slots: api.Slots{N: 1, Source: "default"}, GPUs: api.GPUs{Source: "none", Reason: "libnvidia-ml.so.1 not found"}}})
	agents := map[string]*agent{"tj-node-0-0.tj": flaky, "tj-node-0-2.tj": gpus8, "tj-node-0-3.tj": cpu, "tj-node-0-4.tj": cpu}
	hosts := []hostfile.Host{
		{Name: "tj-node-0-0.tj", Slots: 4},
		{Name: "tj-node-0-2.tj", Slots: 1},
		{Name: "tj-node-0-3.tj"},
		{Name: "tj-node-0-4.tj", Slots: 2},
	}
	var logBuf bytes.Buffer
	got, decisions, err := Decide(context.Background(), hosts, nil, fastOpts(agents, &logBuf))
	if err != nil {
		t.Fatal(err)
	}
	want := []hostfile.Host{{Name: "tj-node-0-0.tj", Slots: 4}, {Name: "tj-node-0-2.tj", Slots: 8}, {Name: "tj-node-0-3.tj", Slots: 1}, {Name: "tj-node-0-4.tj", Slots: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("hosts = %v, want %v", got, want)
	}
	// Retries: two 503s, then the answer.
	if d := decisions[0]; d.Source != SourceAgent || d.Warning != "" || d.Err != nil || d.Info == nil || d.Info.GPUs.Count != 4 || d.Attempts != 3 || flaky.requests.Load() != 3 {
		t.Errorf("flaky: %+v after %d requests", d, flaky.requests.Load())
	}
	// 8 GPUs vs hostfile slots=1: the agent wins, with the documented warning.
	if d := decisions[1]; d.Source != SourceAgent || d.Warning != "tj-node-0-2.tj: hostfile says slots=1 but worker-agent sees 8 GPUs; using slots=8 from worker-agent; set numProcPerNode/slotsPerWorker to 8 or pass --slots" {
		t.Errorf("gpus8: %+v", d)
	}
	// No hostfile count: the agent's default is an answer, no warning.
	if d := decisions[2]; d.Source != SourceAgent || d.Slots != 1 || d.Warning != "" {
		t.Errorf("cpu: %+v", d)
	}
	// The agent's default does not override the hostfile's count.
	if d := decisions[3]; d.Source != SourceHostfile || d.Slots != 2 || d.Warning != "" || !d.Asked {
		t.Errorf("cpu with count: %+v", d)
	}
	logs := logBuf.String()
	for _, w := range []string{"level=WARN", "worker-agent sees 8 GPUs", "retrying worker-agent /info", "attempt=2"} {
		if !strings.Contains(logs, w) {
			t.Errorf("log lacks %q:\n%s", w, logs)
		}
	}
}

// An agent that gives no count by the deadline leaves the hostfile's count
// (a warning: the world size is the operator's), but a host without a count
// is an error naming it and why, never a silent default.
func TestDecideUnknownFails(t *testing.T) {
	t.Parallel()
	broken := newAgent(t, &agent{status: http.StatusInternalServerError})
	ok := newAgent(t, &agent{info: gpuInfo("w-0", 2)})
	agents := map[string]*agent{"w-0": ok, "w-1": broken, "w-3": broken}
	hosts := []hostfile.Host{{Name: "w-0"}, {Name: "w-1", Slots: 2}, {Name: "w-2"}, {Name: "w-3"}}
	opts := fastOpts(agents, nil)
	opts.Deadline = 2 * time.Second // room for several attempts on a loaded machine
	out, ds, err := Decide(context.Background(), hosts, nil, opts)
	var ue *UnknownError
	if !errors.As(err, &ue) {
		t.Fatalf("error = %v, want *UnknownError", err)
	}
	if !reflect.DeepEqual(ue.Names(), []string{"w-2", "w-3"}) || ue.Hosts != 4 {
		t.Fatalf("unknown = %v of %d", ue.Names(), ue.Hosts)
	}
	msg := err.Error()
	for _, w := range []string{"slot count unknown for 2 of 4 workers", "never runs a smaller world in silence",
		"\nw-2: GET http://127.0.0.1:1/info: no answer within 2s", "connection refused",
		"\nw-3: GET http://" + broken.addr() + "/info: no answer within 2s", "HTTP 500"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "w-1") || strings.Contains(msg, "w-0:") {
		t.Errorf("error names hosts whose slots are known:\n%s", msg)
	}
	// Retried until the deadline, then the hostfile's count with a warning.
	if d := ds[1]; d.Source != SourceHostfile || d.Slots != 2 || d.Attempts < 2 || !strings.Contains(d.Warning, "using slots=2 from the hostfile") {
		t.Errorf("broken with count: %+v", d)
	}
	if out[0].Slots != 2 || out[2].Slots != 0 {
		t.Errorf("hosts = %v", out)
	}

	// --slots.allow-default: the default instead, with a warning.
	opts.AllowDefault = true
	opts.DefaultSlots = 3
	out, ds, err = Decide(context.Background(), hosts, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if hostfile.TotalSlots(out) != 2+2+3+3 || ds[2].Source != SourceDefault || !strings.Contains(ds[2].Warning, "--slots.allow-default") {
		t.Errorf("allow-default: %v %+v", out, ds[2])
	}
}

// An agent that starts after the phase began (connection refused first) is
// waited for, and its count used: the late-worker case that ran 29 ranks
// instead of 32.
func TestDecideWaitsForLateAgent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused until the agent starts
	refusedSeen := make(chan struct{})
	var once sync.Once
	var logBuf syncBuffer
	opts := fastOpts(nil, nil)
	opts.Deadline = time.Minute
	opts.AddrFor = func(string) string { return addr }
	opts.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil && strings.Contains(err.Error(), "refused") {
			once.Do(func() { close(refusedSeen) })
		}
		return resp, err
	})}
	go func() {
		<-refusedSeen
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("re-listen on %s: %v", addr, err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, `{"slots":{"n":2,"source":"fixed"},"gpus":{"count":0,"source":"none"}}`)
		})}
		t.Cleanup(func() { srv.Close() })
		_ = srv.Serve(ln)
	}()
	opts.ProgressEvery = time.Hour // the first line must not wait for it
	out, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "late-0.job"}}, nil, opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, logBuf.String())
	}
	if out[0].Slots != 2 || ds[0].Source != SourceAgent || ds[0].Attempts < 2 {
		t.Fatalf("%v %+v", out, ds[0])
	}
	// The wait is reported when it starts, however short it is.
	if n := strings.Count(logBuf.String(), "slots: 0/1 worker-agents answered; waiting for late-0.job"); n != 1 {
		t.Errorf("%d progress lines, want 1 as soon as the agent was awaited:\n%s", n, logBuf.String())
	}
}

// An agent still detecting its GPUs answers slots.n=0 ("not yet"): it is
// asked again until it has a count, not taken as invalid (which gave 1 slot
// instead of 8 on GPU nodes where NVML takes seconds).
func TestDecideWaitsWhileDetecting(t *testing.T) {
	t.Parallel()
	detecting := `{"hostname":"g-0","slots":{"n":0,"source":"","reason":"gpu detection in progress"},"gpus":{"count":0,"source":"","reason":"gpu detection in progress","devices":[]}}`
	a := newAgent(t, &agent{first: []string{detecting, detecting, detecting}, info: gpuInfo("g-0", 8)})
	out, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "g-0"}}, nil, fastOpts(map[string]*agent{"g-0": a}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Slots != 8 || ds[0].Source != SourceAgent || a.requests.Load() != 4 {
		t.Fatalf("%v %+v after %d requests", out, ds[0], a.requests.Load())
	}
}

// A failed detection (slots.n=0 with the failure as reason) is final: one
// request, and the reason in the error.
func TestDecideDetectionFailedIsFinal(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{body: `{"slots":{"n":0,"source":"","reason":"gpu detection: --slots gpu but no GPU found"},"gpus":{"count":0,"source":""}}`})
	_, _, err := Decide(context.Background(), []hostfile.Host{{Name: "g-0"}}, nil, fastOpts(map[string]*agent{"g-0": a}, nil))
	var ue *UnknownError
	if !errors.As(err, &ue) || a.requests.Load() != 1 || !strings.Contains(err.Error(), "could not decide its slots (slots.n=0): gpu detection: --slots gpu but no GPU found") {
		t.Fatalf("%v after %d requests", err, a.requests.Load())
	}
}

func TestDecideFixed(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{info: gpuInfo("w", 8)})
	opts := fastOpts(map[string]*agent{"a": a, "b": a}, nil)
	opts.Fixed = 3
	got, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "a", Slots: 1}, {Name: "b"}}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []hostfile.Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 3}}) || ds[0].Source != SourceFlag || ds[1].Warning != "" {
		t.Errorf("%v %+v", got, ds)
	}
	if a.requests.Load() != 0 {
		t.Errorf("--slots 3 queried the agent %d times", a.requests.Load())
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"": 0, "auto": 0, "AUTO": 0, "1": 1, "64": 64} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"0", "-1", "x", "2.5", "99999999999"} {
		if _, err := ParseMode(in); err == nil || !strings.Contains(err.Error(), "auto") {
			t.Errorf("ParseMode(%q) = %v", in, err)
		}
	}
	for _, n := range []int{-1, hostfile.MaxSlots + 1} {
		if _, _, err := Decide(context.Background(), []hostfile.Host{{Name: "a"}}, nil, Options{Fixed: n}); err == nil {
			t.Errorf("Decide accepted Fixed %d", n)
		}
	}
}

// Answers that asking again cannot fix end that host's questions at once.
func TestDecideBadAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		a       *agent
		warning string
	}{
		{"404 is not retried", &agent{status: http.StatusNotFound}, "HTTP 404 Not Found (is this a worker-agent?"},
		{"garbage", &agent{body: "<html>"}, "decoding worker-agent /info"},
		{"too many slots", &agent{body: `{"slots":{"n":99999999,"source":"fixed"}}`}, "slots.n=99999999"},
		{"negative gpus", &agent{body: `{"slots":{"n":1,"source":"fixed"},"gpus":{"count":-1}}`}, "gpus.count=-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAgent(t, tc.a)
			_, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "w", Slots: 2}}, nil, fastOpts(map[string]*agent{"w": a}, nil))
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Source != SourceHostfile || ds[0].Slots != 2 || !strings.Contains(ds[0].Warning, tc.warning) || a.requests.Load() != 1 {
				t.Errorf("%+v after %d requests", ds[0], a.requests.Load())
			}
		})
	}
}

func TestDecideHangingAgentTimesOut(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{hang: true})
	opts := fastOpts(map[string]*agent{"w": a}, nil)
	opts.Deadline = 300 * time.Millisecond
	_, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "w", Slots: 1}}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Source != SourceHostfile || ds[0].Err == nil || !strings.Contains(ds[0].Err.Error(), "no answer within 300ms") {
		t.Errorf("%+v", ds[0])
	}
}

// filtered is a transport for a port a firewall drops: no answer, ever,
// until the request's context ends. It counts requests in flight.
type filtered struct {
	inflight, maxIn, requests atomic.Int32
}

func (f *filtered) RoundTrip(r *http.Request) (*http.Response, error) {
	f.requests.Add(1)
	in := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxIn.Load()
		if in <= m || f.maxIn.CompareAndSwap(m, in) {
			break
		}
	}
	<-r.Context().Done()
	return nil, fmt.Errorf("dial tcp %s: i/o timeout", r.URL.Host)
}

// 1,024 workers whose port 9022 is filtered: the phase ends by its
// deadline with every host named, at most Parallel requests in flight
// (it took 10 s per worker, 32 at a time: about 320 s).
func TestDecideFilteredPortsBoundedByDeadline(t *testing.T) {
	t.Parallel()
	tr := &filtered{}
	var hosts []hostfile.Host
	for i := range 1024 {
		hosts = append(hosts, hostfile.Host{Name: fmt.Sprintf("sw-%d.sj", i)})
	}
	opts := Options{Deadline: 500 * time.Millisecond, HTTPClient: &http.Client{Transport: tr}}
	start := time.Now()
	_, ds, err := Decide(context.Background(), hosts, nil, opts)
	took := time.Since(start)
	var ue *UnknownError
	if !errors.As(err, &ue) || len(ue.Unknown) != 1024 {
		t.Fatalf("error = %v", err)
	}
	// A hang detector, not a speed check: the old code needed ~320 s.
	if took > 60*time.Second {
		t.Errorf("Decide took %v with a 500ms deadline", took)
	}
	if m := tr.maxIn.Load(); m > DefaultParallel {
		t.Errorf("%d requests in flight, want at most %d", m, DefaultParallel)
	}
	for _, d := range ds {
		if d.Err == nil || !strings.Contains(d.Err.Error(), "http://"+d.Host+":9022/info") ||
			!strings.Contains(d.Err.Error(), "no answer within 500ms") && !strings.Contains(d.Err.Error(), "not asked before the deadline") {
			t.Fatalf("%s: %v", d.Host, d.Err)
		}
	}
}

// When every host has a count from the hostfile, a spread sample is asked;
// when a sampled agent disagrees, every agent is.
func TestDecideSample(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		answer   string
		requests int32
		total    int
	}{
		{"agree", `{"slots":{"n":2,"source":"fixed"},"gpus":{"count":0,"source":"none"}}`, 16, 200 * 2},
		{"agent default", `{"slots":{"n":1,"source":"default"},"gpus":{"count":0,"source":"none"}}`, 16, 200 * 2},
		{"disagree", `{"slots":{"n":4,"source":"gpu"},"gpus":{"count":4,"source":"nvml"}}`, 200, 200 * 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAgent(t, &agent{body: tc.answer})
			var hosts []hostfile.Host
			for i := range 200 {
				hosts = append(hosts, hostfile.Host{Name: fmt.Sprintf("w-%d", i), Slots: 2})
			}
			opts := fastOpts(nil, nil)
			opts.AddrFor = func(string) string { return a.addr() }
			opts.Sample = 16
			opts.Deadline = 30 * time.Second // every agent answers; 200 requests need room on a loaded machine
			out, ds, err := Decide(context.Background(), hosts, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			if a.requests.Load() != tc.requests || hostfile.TotalSlots(out) != tc.total {
				t.Fatalf("%d requests, %d slots; want %d, %d", a.requests.Load(), hostfile.TotalSlots(out), tc.requests, tc.total)
			}
			if !ds[0].Asked || !ds[199].Asked {
				t.Errorf("first and last hosts not in the sample")
			}
		})
	}
	// A host without a count disables sampling.
	a := newAgent(t, &agent{info: gpuInfo("w", 2)})
	hosts := []hostfile.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}, {Name: "c"}}
	opts := fastOpts(nil, nil)
	opts.AddrFor = func(string) string { return a.addr() }
	opts.Sample = 1
	if _, _, err := Decide(context.Background(), hosts, nil, opts); err != nil || a.requests.Load() != 3 {
		t.Fatalf("%v, %d requests", err, a.requests.Load())
	}
}

func TestDecideUsesResolvedAddress(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{info: gpuInfo("w", 2)})
	u, _ := url.Parse(a.srv.URL)
	host, portStr, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(portStr)
	// The name does not resolve; the address from discovery is used with WebPort.
	name := "w-0.podmpi-test.invalid"
	got, ds, err := Decide(context.Background(), []hostfile.Host{{Name: name}}, map[string][]string{name: {host}},
		Options{WebPort: port, RetryWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Slots != 2 || ds[0].Source != SourceAgent || a.requests.Load() != 1 {
		t.Errorf("%v %+v", got, ds[0])
	}
}

func TestDecideSelf(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{info: gpuInfo("x", 8)})
	agents := map[string]*agent{"w": a, "launcher.tj": a}
	hosts := []hostfile.Host{{Name: "w"}, {Name: "launcher.tj", Slots: 2}}

	opts := fastOpts(agents, nil)
	opts.Self = "launcher.tj."
	_, ds, err := Decide(context.Background(), hosts, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if ds[1].Source != SourceHostfile || ds[1].Slots != 2 || ds[1].Warning != "" || a.requests.Load() != 1 {
		t.Errorf("self without LocalInfo: %+v, %d requests", ds[1], a.requests.Load())
	}
	// The launcher without a count: the default, silently (it runs no agent).
	_, ds, err = Decide(context.Background(), []hostfile.Host{{Name: "launcher.tj"}}, nil, opts)
	if err != nil || ds[0].Source != SourceDefault || ds[0].Slots != 1 || ds[0].Warning != "" {
		t.Errorf("self without count: %+v, %v", ds[0], err)
	}

	opts.LocalInfo = func(context.Context) (api.Info, error) { return gpuInfo("launcher", 4), nil }
	_, ds, err = Decide(context.Background(), hosts, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if ds[1].Source != SourceAgent || ds[1].Slots != 4 || !strings.Contains(ds[1].Warning, "sees 4 GPUs") || a.requests.Load() != 2 {
		t.Errorf("self with LocalInfo: %+v, %d requests", ds[1], a.requests.Load())
	}
}

func TestDecideBoundedParallelism(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{info: gpuInfo("w", 1), delay: 5 * time.Millisecond})
	var hosts []hostfile.Host
	agents := map[string]*agent{}
	for i := 0; i < 30; i++ {
		n := fmt.Sprintf("w-%d", i)
		hosts = append(hosts, hostfile.Host{Name: n})
		agents[n] = a
	}
	opts := fastOpts(agents, nil)
	opts.Parallel = 3
	opts.Deadline = time.Minute
	got, _, err := Decide(context.Background(), hosts, nil, opts)
	if err != nil || hostfile.TotalSlots(got) != 30 {
		t.Fatalf("%v %v", got, err)
	}
	if m := a.maxIn.Load(); m > 3 || m < 2 {
		t.Errorf("max requests in flight = %d, want 2..3", m)
	}
}

func TestDecideCanceled(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	go func() {
		for a.requests.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		once.Do(cancel)
	}()
	t.Cleanup(func() { once.Do(cancel) })
	opts := fastOpts(map[string]*agent{"w": a}, nil)
	opts.Deadline = time.Minute
	_, _, err := Decide(ctx, []hostfile.Host{{Name: "w"}}, nil, opts)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v", err)
	}
}

// A panic in an asking goroutine reaches Decide's caller.
func TestDecidePanicReachesCaller(t *testing.T) {
	t.Parallel()
	opts := Options{Deadline: time.Second, HTTPClient: &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		panic("boom in the transport")
	})}}
	var got any
	func() {
		defer func() { got = recover() }()
		_, _, _ = Decide(context.Background(), []hostfile.Host{{Name: "a"}, {Name: "b"}}, nil, opts)
	}()
	if s, _ := got.(string); !strings.Contains(s, "boom in the transport") || !strings.Contains(s, "slots goroutine") {
		t.Fatalf("recovered %v", got)
	}
}

// A CPU-only worker-agent on --slots auto answers its default of 1 slot;
// that must not override the operator's numProcPerNode in the hostfile.
func TestDecideAgentDefaultDoesNotOverrideHostfile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"hostname":"w","slots":{"n":1,"source":"default"},"gpus":{"count":0,"source":"none"}}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	hosts := []hostfile.Host{{Name: "w-0.job", Slots: 2}, {Name: "w-1.job"}}
	out, ds, err := Decide(context.Background(), hosts, nil, Options{AddrFor: func(string) string { return addr }})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Slots != 2 || ds[0].Source != SourceHostfile || ds[0].Warning != "" {
		t.Fatalf("host with hostfile slots: %+v %+v", out[0], ds[0])
	}
	if out[1].Slots != 1 || ds[1].Source != SourceAgent {
		t.Fatalf("host without hostfile slots: %+v %+v", out[1], ds[1])
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// syncBuffer collects concurrent writes.
type syncBuffer = sshtest.Buffer

// closedPort is a loopback address where nothing listens: every connect is
// refused.
func closedPort(t *testing.T) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sshtest.FreePort(t)))
}

// progressLines are the "slots: ..." progress lines of a text log.
func progressLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if i := strings.Index(l, `msg="slots: `); i >= 0 {
			out = append(out, l[i:])
		}
	}
	return out
}

// The wait for an agent that refuses every connection says so from its
// first line, naming the address (it used to say only "waiting for
// w-0.job" for the whole deadline, and the refusal only in the error after
// it). The deadline and its error are the same.
func TestDecideProgressNamesTheAnswer(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	var logBuf syncBuffer
	opts := fastOpts(nil, nil)
	opts.Deadline = 700 * time.Millisecond
	opts.ProgressEvery = time.Hour // only the first line
	opts.AddrFor = func(string) string { return addr }
	opts.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	_, _, err := Decide(context.Background(), []hostfile.Host{{Name: "w-0.job"}}, nil, opts)
	var ue *UnknownError
	if !errors.As(err, &ue) || ue.Deadline != 700*time.Millisecond || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("error %v, want the deadline's UnknownError", err)
	}
	lines := progressLines(logBuf.String())
	if want := `msg="slots: 0/1 worker-agents answered; waiting for w-0.job (connection refused on ` + addr + `)"`; len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Errorf("progress lines %q, want one starting %s", lines, want)
	}
}

// More awaited agents than a line lists one by one are grouped by answer:
// 8 refused, 4 answering 503.
func TestDecideProgressGroupsHosts(t *testing.T) {
	t.Parallel()
	refused := closedPort(t)
	busy := newAgent(t, &agent{status: http.StatusServiceUnavailable})
	var hosts []hostfile.Host
	for i := range 12 {
		hosts = append(hosts, hostfile.Host{Name: fmt.Sprintf("w-%d.job", i)})
	}
	var logBuf syncBuffer
	opts := fastOpts(nil, nil)
	opts.Deadline = 4 * time.Second // ample for 12 first answers on a loaded machine
	opts.RetryWait = 100 * time.Millisecond
	opts.ProgressEvery = time.Hour // the first line only, once every agent answered once
	opts.AddrFor = func(h string) string {
		if n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(h, "w-"), ".job")); n%3 == 2 {
			return busy.addr()
		}
		return refused
	}
	opts.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	_, _, _ = Decide(context.Background(), hosts, nil, opts)
	lines := progressLines(logBuf.String())
	want := `msg="slots: 0/12 worker-agents answered; waiting for 12: 8 with connection refused on port ` + strings.Split(refused, ":")[1] +
		` (w-0.job, w-1.job, w-3.job and 5 more); 4 with HTTP 503 Service Unavailable (w-2.job, w-5.job, w-8.job and 1 more)"`
	if len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Errorf("progress lines %q, want one starting\n%s", lines, want)
	}
}
