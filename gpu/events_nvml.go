//go:build cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// eventWait is how long one NVML wait blocks; Watch checks its context
// between waits (NVML calls cannot be interrupted).
const eventWait = time.Second

// watchedEvents are the NVML event types Watch registers for.
const watchedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)

// noInstance is NVML's GPU/compute instance id of an event that belongs to
// no MIG device.
const noInstance = 0xFFFFFFFF

type nvmlEvents struct {
	lib  nvml.Interface
	wait time.Duration
	now  func() time.Time
}

var _ EventWatcher = (*nvmlEvents)(nil)

// NewNVMLEventWatcher returns an EventWatcher that uses NVML event sets
// (libnvidia-ml.so.1, or the path from [WithLibraryPath]).
func NewNVMLEventWatcher(opts ...Option) EventWatcher {
	o := newOptions(opts)
	var libOpts []nvml.LibraryOption
	if o.libraryPath != "" {
		libOpts = append(libOpts, nvml.WithLibraryPath(o.libraryPath))
	}
	return newNVMLEventWatcher(nvml.New(libOpts...))
}

// newNVMLEventWatcher wraps an nvml.Interface (a go-nvml mock in tests).
func newNVMLEventWatcher(lib nvml.Interface) *nvmlEvents {
	return &nvmlEvents{lib: lib, wait: eventWait, now: time.Now}
}

// Watch registers every physical GPU of devices (the parent of a MIG
// device) for Xid and double-bit ECC events and reports each one to fn
// until ctx ends. A GPU that cannot be opened or supports neither event is
// skipped; when none is left, Watch returns an error.
func (w *nvmlEvents) Watch(ctx context.Context, devices []Device, fn func(Event)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("watching GPU events with NVML: panic in an NVML call: %v", r)
		}
	}()
	if ret := w.lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("watching GPU events: NVML initialisation failed: %w", ret)
	}
	defer w.lib.Shutdown()
	set, ret := w.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("watching GPU events: creating an NVML event set: %w", ret)
	}
	defer set.Free()

	index := make(map[string]int)
	var skipped []string
	for _, d := range devices {
		uuid := d.UUID
		if d.MIG {
			uuid = d.Parent
		}
		if _, done := index[uuid]; done || uuid == "" {
			continue
		}
		dev, ret := w.lib.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			skipped = append(skipped, fmt.Sprintf("%s: opening it: %v", uuid, ret))
			continue
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			skipped = append(skipped, fmt.Sprintf("%s: reading its event types: %v", uuid, ret))
			continue
		}
		mask := supported & watchedEvents
		if mask == 0 {
			skipped = append(skipped, uuid+": supports neither Xid nor ECC events")
			continue
		}
		if ret := dev.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			skipped = append(skipped, fmt.Sprintf("%s: registering for events: %v", uuid, ret))
			continue
		}
		index[uuid] = d.Index
	}
	if len(index) == 0 {
		if len(skipped) == 0 {
			return errors.New("watching GPU events: no GPU to watch")
		}
		return fmt.Errorf("watching GPU events: no GPU could be watched: %v", skipped)
	}
	ms := uint32(max(w.wait/time.Millisecond, 1))
	for ctx.Err() == nil {
		data, ret := set.Wait(ms)
		switch {
		case ret == nvml.SUCCESS:
			fn(w.event(data, index))
		case errors.Is(ret, nvml.ERROR_TIMEOUT):
		default:
			// A lost GPU (Xid 79) or a driver in trouble: NVML keeps
			// failing; report it once and stop rather than spin.
			return fmt.Errorf("watching GPU events: waiting on the NVML event set: %w", ret)
		}
	}
	return nil
}

// event converts NVML's event data.
func (w *nvmlEvents) event(data nvml.EventData, index map[string]int) Event {
	ev := Event{Time: w.now(), Kind: EventXid, Index: -1, GPUInstance: -1, ComputeInstance: -1}
	if data.EventType&uint64(nvml.EventTypeDoubleBitEccError) != 0 {
		ev.Kind = EventDoubleBitECC
	} else {
		ev.Xid = data.EventData
	}
	if data.Device != nil {
		if u, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
			ev.UUID = u
			if i, ok := index[u]; ok {
				ev.Index = i
			}
		}
		if ev.Index < 0 {
			if i, ret := data.Device.GetIndex(); ret == nvml.SUCCESS {
				ev.Index = i
			}
		}
	}
	if data.GpuInstanceId != noInstance {
		ev.GPUInstance = int(data.GpuInstanceId)
	}
	if data.ComputeInstanceId != noInstance {
		ev.ComputeInstance = int(data.ComputeInstanceId)
	}
	return ev
}
