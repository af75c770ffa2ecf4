//go:build !cgo

package gpu

const cgoEnabled = false

// NewNVML returns the NVML detector. This binary was built without cgo, so
// NVML cannot be loaded: the detector always reports a CPU-only Inventory
// with Reason [ReasonNoCgo]. Options are accepted and ignored.
func NewNVML(opts ...Option) Detector {
	_ = newOptions(opts)
	return NewNull(ReasonNoCgo)
}
