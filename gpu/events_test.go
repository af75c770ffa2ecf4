//go:build cgo

package gpu

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// eventRig is a DGX H100 fake whose event set delivers what the test
// queues, and records what Watch registered.
type eventRig struct {
	s                *server.Server
	queue            chan nvml.EventData
	waitRet          atomic.Value // nvml.Return Wait returns instead of timing out, when set
	freed, shutdowns atomic.Int32

	mu         sync.Mutex
	registered map[string]uint64 // uuid -> mask
}

func newEventRig(t *testing.T) *eventRig {
	t.Helper()
	r := &eventRig{s: dgxh100.New(), queue: make(chan nvml.EventData, 8), registered: map[string]uint64{}}
	shutdown := r.s.ShutdownFunc
	r.s.ShutdownFunc = func() nvml.Return { r.shutdowns.Add(1); return shutdown() }
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			if ret, ok := r.waitRet.Load().(nvml.Return); ok {
				return nvml.EventData{}, ret
			}
			select {
			case ev := <-r.queue:
				return ev, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { r.freed.Add(1); return nvml.SUCCESS },
	}
	r.s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for i, d := range r.s.Devices {
		dev := d.(*server.Device)
		supported := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)
		if i == 3 {
			supported = nvml.EventTypeSingleBitEccError
		}
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return supported, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return {
			if i == 5 {
				return nvml.ERROR_NOT_SUPPORTED
			}
			r.mu.Lock()
			r.registered[dev.UUID] = mask
			r.mu.Unlock()
			return nvml.SUCCESS
		}
	}
	return r
}

func (r *eventRig) devices() []Device {
	var out []Device
	for i := range r.s.Devices {
		out = append(out, Device{Index: i, UUID: gpuUUID(r.s, i)})
	}
	return out
}

// watch runs Watch until the test queued its events and collected them.
func (r *eventRig) watch(t *testing.T, devices []Device, want int) ([]Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	w := newNVMLEventWatcher(r.s)
	w.wait = 20 * time.Millisecond
	w.now = func() time.Time { return time.Unix(100, 0) }
	got := make(chan Event, 16)
	errc := make(chan error, 1)
	go func() { errc <- w.Watch(ctx, devices, func(e Event) { got <- e }) }()
	var evs []Event
	for len(evs) < want {
		select {
		case e := <-got:
			evs = append(evs, e)
		case err := <-errc:
			return evs, err
		case <-ctx.Done():
			t.Fatalf("only %d of %d events before the deadline", len(evs), want)
		}
	}
	cancel()
	return evs, <-errc
}

func TestWatchXidAndDoubleBitECC(t *testing.T) {
	r := newEventRig(t)
	dev := func(i int) nvml.Device { return r.s.Devices[i] }
	r.queue <- nvml.EventData{Device: dev(2), EventType: nvml.EventTypeXidCriticalError, EventData: 79,
		GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
	r.queue <- nvml.EventData{Device: dev(4), EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: 1, ComputeInstanceId: 0}
	evs, err := r.watch(t, r.devices(), 2)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	want := []Event{
		{Time: time.Unix(100, 0), Kind: EventXid, Index: 2, UUID: gpuUUID(r.s, 2), Xid: 79, GPUInstance: -1, ComputeInstance: -1},
		{Time: time.Unix(100, 0), Kind: EventDoubleBitECC, Index: 4, UUID: gpuUUID(r.s, 4), GPUInstance: 1, ComputeInstance: 0},
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, evs[i], want[i])
		}
	}
	if m := evs[0].Message(); !strings.Contains(m, "Xid 79 (GPU has fallen off the bus)") || !strings.Contains(m, "GPU 2 (GPU-") {
		t.Errorf("message = %q", m)
	}
	if m := evs[1].Message(); !strings.Contains(m, "MIG instance 1/0") || !strings.Contains(m, "double-bit ECC") {
		t.Errorf("message = %q", m)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.registered) != 6 {
		t.Errorf("registered %d GPUs, want 6 (GPU 3 supports neither event, GPU 5 refuses)", len(r.registered))
	}
	for uuid, mask := range r.registered {
		if mask != watchedEvents {
			t.Errorf("%s registered for %#x, want %#x (single-bit ECC left out)", uuid, mask, watchedEvents)
		}
	}
	if r.freed.Load() != 1 || r.shutdowns.Load() != 1 {
		t.Errorf("event set freed %d times, NVML shut down %d times; want 1 and 1", r.freed.Load(), r.shutdowns.Load())
	}
}

func TestWatchMIGRegistersTheParent(t *testing.T) {
	r := newEventRig(t)
	parent := gpuUUID(r.s, 1)
	devs := []Device{
		{Index: 1, UUID: "MIG-a", MIG: true, Parent: parent},
		{Index: 1, UUID: "MIG-b", MIG: true, Parent: parent},
	}
	r.queue <- nvml.EventData{Device: r.s.Devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 43, GpuInstanceId: 2, ComputeInstanceId: 0}
	evs, err := r.watch(t, devs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Index != 1 || evs[0].GPUInstance != 2 || !XidFromProgram(evs[0].Xid) {
		t.Errorf("event = %+v", evs[0])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.registered) != 1 || r.registered[parent] == 0 {
		t.Errorf("registered %v, want only the parent GPU", r.registered)
	}
}

func TestWatchNothingToWatch(t *testing.T) {
	r := newEventRig(t)
	_, err := r.watch(t, []Device{{Index: 3, UUID: gpuUUID(r.s, 3)}, {Index: 5, UUID: gpuUUID(r.s, 5)}}, 1)
	if err == nil || !strings.Contains(err.Error(), "no GPU could be watched") || !strings.Contains(err.Error(), "supports neither") {
		t.Fatalf("err = %v; want every GPU named with why it is skipped", err)
	}
	if _, err := r.watch(t, nil, 1); err == nil || !strings.Contains(err.Error(), "no GPU to watch") {
		t.Fatalf("no devices: err = %v", err)
	}
	if r.shutdowns.Load() != 2 || r.freed.Load() != 2 {
		t.Errorf("shutdowns %d, frees %d; want 2 and 2", r.shutdowns.Load(), r.freed.Load())
	}
}

func TestWatchStopsOnLostGPU(t *testing.T) {
	r := newEventRig(t)
	r.waitRet.Store(nvml.ERROR_GPU_IS_LOST)
	_, err := r.watch(t, r.devices(), 1)
	if err == nil || !strings.Contains(err.Error(), "waiting on the NVML event set") {
		t.Fatalf("err = %v; want the failed wait", err)
	}
}

func TestWatchInitFailure(t *testing.T) {
	r := newEventRig(t)
	r.s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	_, err := r.watch(t, r.devices(), 1)
	if err == nil || !strings.Contains(err.Error(), "NVML initialisation failed") {
		t.Fatalf("err = %v", err)
	}
	if r.shutdowns.Load() != 0 {
		t.Errorf("Shutdown after a failed Init")
	}
}

func TestXidMeaning(t *testing.T) {
	if XidMeaning(79) == "" || XidMeaning(1) != "" {
		t.Errorf("XidMeaning(79) = %q, XidMeaning(1) = %q", XidMeaning(79), XidMeaning(1))
	}
	if XidFromProgram(79) || !XidFromProgram(31) {
		t.Error("XidFromProgram: 79 is the hardware's, 31 the program's")
	}
}
