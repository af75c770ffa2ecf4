package slots_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/worker/api"

	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/agent/worker"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/hostfile"
)

// noSSH is the least SSH server worker.New accepts: /info only reads it.
// It has every getter /info may call, so that it keeps satisfying the
// interface as /info grows.
type noSSH struct{}

func (noSSH) Addr() net.Addr                 { return nil }
func (noSSH) Listening() bool                { return false }
func (noSSH) HostKeyFingerprint() string     { return "" }
func (noSSH) DerivedKeyFingerprint() string  { return "" }
func (noSSH) HostKeyPinned() bool            { return false }
func (noSSH) AuthorizedKeyCount() int        { return 0 }
func (noSSH) Listen() (net.Addr, error)      { return nil, errors.New("not listening") }
func (noSSH) Serve(context.Context) error    { return nil }
func (noSSH) Shutdown(context.Context) error { return nil }

// slowDetector finds GPUs only once release is closed, as NVML on a GPU
// node may take seconds.
type slowDetector struct {
	release chan struct{}
	inv     gpu.Inventory
	err     error
}

func (d slowDetector) Detect(ctx context.Context) (gpu.Inventory, error) {
	select {
	case <-d.release:
	case <-ctx.Done():
		return gpu.Inventory{}, ctx.Err()
	}
	return d.inv, d.err
}

// startWorker serves a real agent/worker /info whose GPU detection ends
// when the returned func is called.
func startWorker(t *testing.T, det slowDetector, policy gpu.SlotPolicy) (addr string, requests *atomic.Int32, finish func()) {
	t.Helper()
	w, err := worker.New(worker.Config{SSH: noSSH{}, Detector: det, Slots: policy, Hostname: "gpu-node-0"})
	if err != nil {
		t.Fatal(err)
	}
	requests = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Handler().ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	done := make(chan struct{})
	go func() { _ = w.Detect(context.Background()); close(done) }()
	t.Cleanup(func() { <-done })
	return strings.TrimPrefix(srv.URL, "http://"), requests, func() { close(det.release) }
}

// The launcher's reader against the real worker-agent /info: while GPU
// detection runs the agent answers "not yet", and Decide waits for its
// count (8 GPUs: 8 slots) instead of taking 1.
func TestDecideWaitsForRealAgentDetection(t *testing.T) {
	devices := make([]gpu.Device, 8)
	det := slowDetector{release: make(chan struct{}), inv: gpu.Inventory{Devices: devices, Source: "nvml"}}
	addr, requests, finish := startWorker(t, det, gpu.SlotPolicy{Mode: gpu.SlotsAuto})
	go func() {
		for requests.Load() < 3 { // the agent said "not yet" at least twice
			time.Sleep(5 * time.Millisecond)
		}
		finish()
	}()
	out, ds, err := slots.Decide(context.Background(), []hostfile.Host{{Name: "gpu-node-0.job"}}, nil, slots.Options{
		RetryWait: 5 * time.Millisecond, Deadline: time.Minute, AddrFor: func(string) string { return addr }})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Slots != 8 || ds[0].Source != slots.SourceAgent || ds[0].Attempts < 3 {
		t.Fatalf("%v %+v", out, ds[0])
	}
}

// A detection that fails (--slots gpu on a node without GPUs) is a final
// answer naming the agent's reason, not something to wait for.
func TestDecideRealAgentDetectionFailed(t *testing.T) {
	det := slowDetector{release: make(chan struct{}), inv: gpu.Inventory{Source: "none", Reason: "no NVIDIA driver"}}
	addr, requests, finish := startWorker(t, det, gpu.SlotPolicy{Mode: gpu.SlotsGPU})
	finish()
	// Wait for the detection to end so the first answer is the final one.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := get(addr) // an error too: slots.n=0
		if info.Slots.Reason != "" && !strings.Contains(info.Slots.Reason, "in progress") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("detection never finished: %+v %v", info, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := requests.Load()
	_, _, err := slots.Decide(context.Background(), []hostfile.Host{{Name: "gpu-node-0.job"}}, nil, slots.Options{
		RetryWait: 5 * time.Millisecond, Deadline: time.Minute, AddrFor: func(string) string { return addr }})
	var ue *slots.UnknownError
	if !errors.As(err, &ue) || requests.Load()-before != 1 || !strings.Contains(err.Error(), "could not decide its slots") {
		t.Fatalf("%v after %d requests", err, requests.Load()-before)
	}
}

func get(addr string) (api.Info, error) {
	resp, err := http.Get("http://" + addr + "/info")
	if err != nil {
		return api.Info{}, err
	}
	defer resp.Body.Close()
	var info api.Info
	info, err = api.DecodeInfo(resp.Body)
	return info, err
}
