package gpu

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Inventory sources.
const (
	// SourceNVML means the devices were enumerated through NVML.
	SourceNVML = "nvml"
	// SourceNone means no GPU library was used; the Inventory is CPU-only.
	SourceNone = "none"
)

// Detection modes accepted by [New] (the --gpu.detect flag).
const (
	ModeAuto = "auto" // NVML, falling back to CPU-only with a reason
	ModeNVML = "nvml" // NVML, failing when it cannot be initialised
	ModeNone = "none" // CPU-only, no NVML
)

// ReasonNoCgo is the Reason of every Inventory from [NewNVML] in a binary
// built without cgo.
const ReasonNoCgo = "built without cgo: NVML unavailable"

// Device is one GPU, or one MIG device, that this container may use.
type Device struct {
	// Index is the NVML index of the physical GPU; for a MIG device it is
	// the index of its parent GPU.
	Index int `json:"index"`
	// UUID is "GPU-..." for a GPU and "MIG-..." for a MIG device.
	UUID string `json:"uuid"`
	// Model is the NVML product name, e.g. "NVIDIA H100 80GB HBM3".
	Model string `json:"model"`
	// MemoryBytes is the total framebuffer memory (of the MIG slice for a
	// MIG device); 0 when the driver does not report it.
	MemoryBytes uint64 `json:"memoryBytes"`
	// MIG is true for a MIG device.
	MIG bool `json:"mig"`
	// Parent is the UUID of the GPU a MIG device lives on.
	Parent string `json:"parent,omitempty"`
}

// Inventory is the result of a detection: the usable devices, or none and
// the reason why.
type Inventory struct {
	Devices []Device `json:"devices"`
	// Source is SourceNVML or SourceNone.
	Source string `json:"source"`
	// Reason says why the Inventory is CPU-only; empty when Count() > 0.
	Reason string `json:"reason,omitempty"`
	// DriverVersion is the NVIDIA driver version reported by NVML.
	DriverVersion string `json:"driverVersion,omitempty"`
	// Notes are non-fatal findings (a skipped device, a truncated
	// CUDA_VISIBLE_DEVICES, a MIG GPU without MIG devices).
	Notes []string `json:"notes,omitempty"`
}

// Count returns the number of usable devices.
func (inv Inventory) Count() int { return len(inv.Devices) }

// Detector finds the GPUs this container may use.
type Detector interface {
	// Detect enumerates the devices. A CPU-only machine is not an error:
	// it yields an Inventory with no devices and a Reason.
	Detect(ctx context.Context) (Inventory, error)
}

// Option configures [NewNVML].
type Option func(*options)

type options struct {
	env             func(string) (string, bool)
	libraryPath     string
	failOnInitError bool
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.env == nil {
		o.env = os.LookupEnv
	}
	return o
}

// WithEnv sets the environment lookup used for CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES. The default is os.LookupEnv.
func WithEnv(env func(string) (string, bool)) Option {
	return func(o *options) { o.env = env }
}

// WithLibraryPath loads NVML from path instead of libnvidia-ml.so.1 found
// through the dynamic loader's search path.
func WithLibraryPath(path string) Option {
	return func(o *options) { o.libraryPath = path }
}

// WithFailOnInitError makes Detect return an *InitError when NVML cannot be
// initialised (library missing, driver not loaded, ...) instead of a
// CPU-only Inventory with a Reason.
func WithFailOnInitError(fail bool) Option {
	return func(o *options) { o.failOnInitError = fail }
}

// InitError reports that NVML could not be initialised.
type InitError struct {
	// Reason is the operator-facing explanation (what, likely cause, fix).
	Reason string
	// Err is the underlying NVML return code, or nil.
	Err error
}

func (e *InitError) Error() string { return e.Reason }

// Unwrap returns the NVML return code.
func (e *InitError) Unwrap() error { return e.Err }

type nullDetector struct{ reason string }

var _ Detector = nullDetector{}

// NewNull returns a Detector that always reports a CPU-only Inventory with
// the given reason.
func NewNull(reason string) Detector {
	if strings.TrimSpace(reason) == "" {
		reason = "GPU detection disabled"
	}
	return nullDetector{reason: reason}
}

func (n nullDetector) Detect(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, fmt.Errorf("detecting GPUs: %w", err)
	}
	return Inventory{Devices: []Device{}, Source: SourceNone, Reason: n.reason}, nil
}

// New returns the Detector for a --gpu.detect mode: "auto" (or "") uses
// NVML and falls back to CPU-only with a reason when NVML cannot be
// initialised (a missing libnvidia-ml.so.1 is not an error); "nvml" requires
// NVML and makes Detect fail when it cannot be initialised; "none" never
// touches NVML. env looks up CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES;
// nil means os.LookupEnv.
func New(mode string, env func(string) (string, bool)) (Detector, error) {
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case ModeAuto, "":
		return NewNVML(WithEnv(env)), nil
	case ModeNVML:
		if !cgoEnabled {
			return nil, fmt.Errorf("gpu detection mode %q needs NVML, but this binary was built without cgo (CGO_ENABLED=0); "+
				"use --gpu.detect=auto or --gpu.detect=none, or use a worker-agent built with CGO_ENABLED=1", ModeNVML)
		}
		return NewNVML(WithEnv(env), WithFailOnInitError(true)), nil
	case ModeNone:
		return NewNull("GPU detection disabled (--gpu.detect=none)"), nil
	default:
		return nil, fmt.Errorf("invalid gpu detection mode %q: want %s, %s or %s", clip(mode), ModeAuto, ModeNVML, ModeNone)
	}
}

// clip shortens s for inclusion in a message.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
