//go:build cgo

package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const cgoEnabled = true

// defaultLibrary is the NVML library go-nvml opens when no path is given.
const defaultLibrary = "libnvidia-ml.so.1"

// maxMIGDevicesPerGPU bounds the MIG enumeration (NVML reports at most 7 on
// current hardware).
const maxMIGDevicesPerGPU = 64

// maxGPUs bounds the device enumeration against a corrupt count.
const maxGPUs = 1024

type nvmlDetector struct {
	lib     nvml.Interface
	libPath string
	opts    options
}

var _ Detector = (*nvmlDetector)(nil)

// NewNVML returns a Detector that enumerates GPUs through NVML. The library
// (libnvidia-ml.so.1, or the path from [WithLibraryPath]) is opened with
// dlopen at each Detect, and NVML is shut down before Detect returns. When
// NVML cannot be initialised, Detect returns a CPU-only Inventory whose
// Reason explains why, or an *InitError with [WithFailOnInitError].
func NewNVML(opts ...Option) Detector {
	o := newOptions(opts)
	var libOpts []nvml.LibraryOption
	path := defaultLibrary
	if o.libraryPath != "" {
		libOpts = append(libOpts, nvml.WithLibraryPath(o.libraryPath))
		path = o.libraryPath
	}
	return &nvmlDetector{lib: nvml.New(libOpts...), libPath: path, opts: o}
}

// newNVMLDetector wraps an nvml.Interface (a go-nvml mock in tests).
func newNVMLDetector(lib nvml.Interface, opts ...Option) *nvmlDetector {
	return &nvmlDetector{lib: lib, libPath: defaultLibrary, opts: newOptions(opts)}
}

// Detect enumerates the GPUs. NVML calls cannot be interrupted, so they run
// in a goroutine; when ctx ends first, Detect returns ctx's error and the
// goroutine finishes (and shuts NVML down) on its own.
func (d *nvmlDetector) Detect(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, fmt.Errorf("detecting GPUs with NVML: %w", err)
	}
	type result struct {
		inv Inventory
		err error
	}
	ch := make(chan result, 1)
	go func() {
		inv, err := d.detect(ctx)
		ch <- result{inv, err}
	}()
	select {
	case r := <-ch:
		return r.inv, r.err
	case <-ctx.Done():
		return Inventory{}, fmt.Errorf("detecting GPUs with NVML: %w (an NVML call did not return in time; "+
			"check the driver with nvidia-smi)", context.Cause(ctx))
	}
}

func (d *nvmlDetector) detect(ctx context.Context) (inv Inventory, err error) {
	defer func() {
		if r := recover(); r != nil {
			inv, err = Inventory{}, fmt.Errorf("detecting GPUs with NVML: panic in an NVML call: %v", r)
		}
	}()
	if ret := d.lib.Init(); ret != nvml.SUCCESS {
		reason := initFailureReason(ret, d.libPath)
		if d.opts.failOnInitError {
			return Inventory{}, &InitError{Reason: reason, Err: ret}
		}
		return Inventory{Devices: []Device{}, Source: SourceNone, Reason: reason}, nil
	}
	defer func() {
		if ret := d.lib.Shutdown(); ret != nvml.SUCCESS {
			inv.Notes = append(inv.Notes, fmt.Sprintf("nvml shutdown: %v", ret))
		}
	}()

	if err := ctx.Err(); err != nil {
		return Inventory{}, fmt.Errorf("detecting GPUs with NVML: %w", err)
	}
	inv.Source = SourceNVML
	if v, ret := d.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	gpus, notes, err := enumerate(ctx, d.lib)
	if err != nil {
		return Inventory{}, err
	}
	inv.Notes = append(inv.Notes, notes...)

	nvVal, nvSet := d.opts.env(EnvNVIDIAVisibleDevices)
	cudaVal, cudaSet := d.opts.env(EnvCUDAVisibleDevices)
	sel := selectDevices(gpus, parseNVIDIAVisible(nvVal, nvSet), parseCUDAVisible(cudaVal, cudaSet))
	inv.Devices = sel.Devices
	inv.Reason = sel.Reason
	inv.Notes = append(inv.Notes, sel.Notes...)
	if len(gpus) == 0 && inv.DriverVersion != "" {
		inv.Reason = fmt.Sprintf("NVML (driver %s) reports no GPUs in this container; "+
			"request GPUs for the pod (resources.limits nvidia.com/gpu)", inv.DriverVersion)
	}
	return inv, nil
}

// enumerate reads every physical GPU and its MIG devices. A device NVML
// cannot open is skipped with a note; only a failing device count is an error.
func enumerate(ctx context.Context, lib nvml.Interface) ([]gpuInfo, []string, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("nvml: counting GPUs: %w", ret)
	}
	if count < 0 || count > maxGPUs {
		return nil, nil, fmt.Errorf("nvml: counting GPUs: implausible count %d", count)
	}
	var gpus []gpuInfo
	var notes []string
	for i := 0; i < count; i++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("nvml: enumerating GPUs: %w", err)
		}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			notes = append(notes, fmt.Sprintf("GPU %d skipped: opening it failed: %v", i, ret))
			continue
		}
		g := gpuInfo{Index: i}
		if u, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = u
		} else {
			notes = append(notes, fmt.Sprintf("GPU %d: reading its UUID failed: %v", i, ret))
		}
		if n, ret := dev.GetName(); ret == nvml.SUCCESS {
			g.Model = n
		}
		if m, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryBytes = m.Total
		} else if !errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
			notes = append(notes, fmt.Sprintf("GPU %d: reading its memory size failed: %v", i, ret))
		}
		if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
			g.MIGEnabled = true
			var migNotes []string
			g.MIG, migNotes = enumerateMIG(g, dev)
			notes = append(notes, migNotes...)
		}
		gpus = append(gpus, g)
	}
	return gpus, notes, nil
}

func enumerateMIG(g gpuInfo, dev nvml.Device) ([]migInfo, []string) {
	var notes []string
	maxN, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, []string{fmt.Sprintf("GPU %d: MIG is enabled but counting its MIG devices failed: %v", g.Index, ret)}
	}
	maxN = min(maxN, maxMIGDevicesPerGPU)
	var migs []migInfo
	for j := 0; j < maxN; j++ {
		md, ret := dev.GetMigDeviceHandleByIndex(j)
		if errors.Is(ret, nvml.ERROR_NOT_FOUND) {
			continue // empty MIG slot
		}
		if ret != nvml.SUCCESS {
			// NO_PERMISSION: a MIG device of this GPU not given to this container.
			if !errors.Is(ret, nvml.ERROR_NO_PERMISSION) {
				notes = append(notes, fmt.Sprintf("GPU %d: MIG device %d skipped: %v", g.Index, j, ret))
			}
			continue
		}
		mi := migInfo{Slot: j, GI: -1, CI: -1}
		if u, ret := md.GetUUID(); ret == nvml.SUCCESS {
			mi.UUID = u
		}
		if n, ret := md.GetName(); ret == nvml.SUCCESS {
			mi.Model = n
		}
		if m, ret := md.GetMemoryInfo(); ret == nvml.SUCCESS {
			mi.MemoryBytes = m.Total
		}
		if id, ret := md.GetGpuInstanceId(); ret == nvml.SUCCESS {
			mi.GI = id
		}
		if id, ret := md.GetComputeInstanceId(); ret == nvml.SUCCESS {
			mi.CI = id
		}
		migs = append(migs, mi)
	}
	return migs, notes
}

// initFailureReason explains an nvmlInit failure to an operator.
func initFailureReason(ret nvml.Return, libPath string) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Sprintf("NVML library %s not found: no NVIDIA driver is mounted into this container "+
			"(a CPU-only node, a pod that did not request nvidia.com/gpu, or a node without the NVIDIA container runtime); running CPU-only",
			libPath)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVML is present but the NVIDIA kernel driver is not loaded on this node (nvidia-smi fails the same way); running CPU-only"
	case nvml.ERROR_NO_PERMISSION:
		return "NVML cannot open the GPU device nodes (/dev/nvidia*): permission denied; " +
			"request GPUs through the device plugin rather than mounting /dev by hand; running CPU-only"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVML library and NVIDIA kernel driver versions differ (driver upgraded without a reboot, or a mismatched " +
			libPath + " in the image); running CPU-only"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "NVML library " + libPath + " is too old for this program (a symbol is missing); upgrade the NVIDIA driver; running CPU-only"
	}
	return fmt.Sprintf("NVML initialisation failed: %v; running CPU-only", ret)
}
