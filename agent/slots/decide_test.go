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
	info      WorkerInfo
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
		case a.status != 0:
			http.Error(w, "boom", a.status)
		case a.body != "":
			fmt.Fprint(w, a.body)
		default:
			w.Header().Set("Content-Type", "application/json")
			// A superset of WorkerInfo, as the agent serves it.
			json.NewEncoder(w).Encode(map[string]any{
				"hostname": a.info.Hostname, "slots": a.info.Slots, "gpus": a.info.GPUs,
				"version": "test", "ssh": map[string]any{"port": 2222},
			})
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agent) addr() string { return strings.TrimPrefix(a.srv.URL, "http://") }

func gpuInfo(host string, n int) WorkerInfo {
	return WorkerInfo{Hostname: host, Slots: SlotInfo{N: n, Source: "gpu"}, GPUs: GPUInfo{Count: n, Source: "nvml"}}
}

// fastOpts points hosts at agents and keeps retries quick.
func fastOpts(agents map[string]*agent, logBuf *bytes.Buffer) Options {
	o := Options{
		Mode:      "auto",
		RetryWait: 5 * time.Millisecond,
		Timeout:   5 * time.Second,
		AddrFor: func(host string) string {
			if a, ok := agents[host]; ok {
				return a.addr()
			}
			return "127.0.0.1:1" // nothing listens on port 1
		},
	}
	if logBuf != nil {
		o.Logger = slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

func TestDecideAuto(t *testing.T) {
	t.Parallel()
	flaky := newAgent(t, &agent{failFirst: 2, info: WorkerInfo{Hostname: "tj-node-0-0", Slots: SlotInfo{N: 4, Source: "gpu"}, GPUs: GPUInfo{Count: 4, Source: "nvml"}}})
	broken := newAgent(t, &agent{status: http.StatusInternalServerError})
	gpus8 := newAgent(t, &agent{info: gpuInfo("tj-node-0-2", 8)})
	cpu := newAgent(t, &agent{info: WorkerInfo{Hostname: "tj-node-0-3", Slots: SlotInfo{N: 1, Source: "default"}, GPUs: GPUInfo{Source: "none", Reason: "libnvidia-ml.so.1 not found"}}})
	agents := map[string]*agent{"tj-node-0-0.tj": flaky, "tj-node-0-1.tj": broken, "tj-node-0-2.tj": gpus8, "tj-node-0-3.tj": cpu}
	hosts := []hostfile.Host{
		{Name: "tj-node-0-0.tj", Slots: 4},
		{Name: "tj-node-0-1.tj", Slots: 2},
		{Name: "tj-node-0-2.tj", Slots: 1},
		{Name: "tj-node-0-3.tj"},
		{Name: "tj-node-0-4.tj"}, // no agent at all
	}
	var logBuf bytes.Buffer
	got, decisions, err := Decide(context.Background(), hosts, nil, fastOpts(agents, &logBuf))
	if err != nil {
		t.Fatal(err)
	}
	want := []hostfile.Host{{Name: "tj-node-0-0.tj", Slots: 4}, {Name: "tj-node-0-1.tj", Slots: 2}, {Name: "tj-node-0-2.tj", Slots: 8}, {Name: "tj-node-0-3.tj", Slots: 1}, {Name: "tj-node-0-4.tj", Slots: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("hosts = %v, want %v", got, want)
	}
	if hostfile.TotalSlots(got) != 16 {
		t.Errorf("np = %d", hostfile.TotalSlots(got))
	}

	// Retries: two 503s, then the answer.
	if d := decisions[0]; d.Source != SourceAgent || d.Warning != "" || d.Err != nil || d.Info == nil || d.Info.GPUs.Count != 4 || flaky.requests.Load() != 3 {
		t.Errorf("flaky: %+v after %d requests", d, flaky.requests.Load())
	}
	// Always 500: bounded retries (1 + RetryMax 3), then the hostfile's count with a warning.
	d := decisions[1]
	if d.Source != SourceHostfile || d.Slots != 2 || d.Err == nil || broken.requests.Load() != 4 {
		t.Errorf("broken: %+v after %d requests", d, broken.requests.Load())
	}
	for _, w := range []string{"tj-node-0-1.tj: could not get slots from worker-agent", "giving up after 4 attempts: HTTP 500", "using slots=2 from the hostfile", "--worker.web-port (9022)"} {
		if !strings.Contains(d.Warning, w) {
			t.Errorf("broken warning lacks %q: %s", w, d.Warning)
		}
	}
	// 8 GPUs vs hostfile slots=1: the agent wins, with the documented warning.
	if d := decisions[2]; d.Source != SourceAgent || d.Warning != "tj-node-0-2.tj: hostfile says slots=1 but worker-agent sees 8 GPUs; using slots=8 from worker-agent; set numProcPerNode/slotsPerWorker to 8 or pass --slots" {
		t.Errorf("gpus8: %+v", d)
	}
	// No hostfile count: the agent's, no warning.
	if d := decisions[3]; d.Source != SourceAgent || d.Slots != 1 || d.Warning != "" {
		t.Errorf("cpu: %+v", d)
	}
	// Unreachable and no count: the default, with a warning.
	if d := decisions[4]; d.Source != SourceDefault || d.Slots != 1 || !strings.Contains(d.Warning, "using slots=1 from the default") || !strings.Contains(d.Warning, "connection refused") {
		t.Errorf("unreachable: %+v", d)
	}
	logs := logBuf.String()
	for _, w := range []string{"level=WARN", "worker-agent sees 8 GPUs", "retrying worker-agent /info", "attempts_left=3", "attempts_left=1"} {
		if !strings.Contains(logs, w) {
			t.Errorf("log lacks %q:\n%s", w, logs)
		}
	}
}

func TestDecideAgentDisagreesWithoutGPUs(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{info: WorkerInfo{Slots: SlotInfo{N: 16, Source: "cpu"}, GPUs: GPUInfo{Source: "none"}}})
	_, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "w", Slots: 1}}, nil, fastOpts(map[string]*agent{"w": a}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Slots != 16 || ds[0].Warning != "w: hostfile says slots=1 but worker-agent offers 16 (source cpu); using 16 from worker-agent; set numProcPerNode/slotsPerWorker to 16 or pass --slots" {
		t.Errorf("%+v", ds[0])
	}
}

func TestDecideFixed(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{info: gpuInfo("w", 8)})
	opts := fastOpts(map[string]*agent{"a": a, "b": a}, nil)
	opts.Mode = " 3 "
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
		if _, _, err := Decide(context.Background(), []hostfile.Host{{Name: "a"}}, nil, Options{Mode: in}); err == nil {
			t.Errorf("Decide accepted mode %q", in)
		}
	}
}

func TestDecideBadAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		a        *agent
		requests int32
		warning  string
	}{
		{"404 is not retried", &agent{status: http.StatusNotFound}, 1, "HTTP 404 Not Found (is this a worker-agent?"},
		{"garbage", &agent{body: "<html>"}, 1, "decoding worker-agent /info"},
		{"zero slots", &agent{body: `{"slots":{"n":0}}`}, 1, "slots.n=0"},
		{"negative gpus", &agent{body: `{"slots":{"n":1},"gpus":{"count":-1}}`}, 1, "gpus.count=-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAgent(t, tc.a)
			_, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "w", Slots: 2}}, nil, fastOpts(map[string]*agent{"w": a}, nil))
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Source != SourceHostfile || ds[0].Slots != 2 || !strings.Contains(ds[0].Warning, tc.warning) || a.requests.Load() != tc.requests {
				t.Errorf("%+v after %d requests", ds[0], a.requests.Load())
			}
		})
	}
}

func TestDecideHangingAgentTimesOut(t *testing.T) {
	t.Parallel()
	a := newAgent(t, &agent{hang: true})
	opts := fastOpts(map[string]*agent{"w": a}, nil)
	opts.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, ds, err := Decide(context.Background(), []hostfile.Host{{Name: "w"}}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %s", el)
	}
	if ds[0].Source != SourceDefault || ds[0].Err == nil || !errors.Is(ds[0].Err, context.DeadlineExceeded) && !strings.Contains(ds[0].Warning, "deadline") {
		t.Errorf("%+v", ds[0])
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

	opts.LocalInfo = func(context.Context) (WorkerInfo, error) { return gpuInfo("launcher", 4), nil }
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
	_, _, err := Decide(ctx, []hostfile.Host{{Name: "w"}}, nil, fastOpts(map[string]*agent{"w": a}, nil))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v", err)
	}
}

func TestDecodeInfoSuperset(t *testing.T) {
	t.Parallel()
	body := `{"hostname":"tj-node-0-1","slots":{"n":2,"source":"gpu","reason":""},"gpus":{"count":8,"source":"nvml","reason":"","devices":[{"uuid":"GPU-1"}]},"version":"v1"}`
	info, err := DecodeInfo(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := WorkerInfo{Hostname: "tj-node-0-1", Slots: SlotInfo{N: 2, Source: "gpu"}, GPUs: GPUInfo{Count: 8, Source: "nvml"}}
	if info != want {
		t.Errorf("%+v", info)
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
	out, ds, err := Decide(context.Background(), hosts, nil, Options{Mode: "auto", AddrFor: func(string) string { return addr }})
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
