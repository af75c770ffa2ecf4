package gpu

import (
	"context"
	"fmt"
	"time"
)

// GPU error kinds an [EventWatcher] reports.
const (
	// EventXid is a critical Xid error (NVML EventTypeXidCriticalError).
	EventXid = "xid"
	// EventDoubleBitECC is an uncorrectable (double-bit) ECC memory error
	// (NVML EventTypeDoubleBitEccError).
	EventDoubleBitECC = "ecc-dbe"
)

// Event is one GPU error.
type Event struct {
	Time time.Time
	// Kind is EventXid or EventDoubleBitECC.
	Kind string
	// Index and UUID name the physical GPU.
	Index int
	UUID  string
	// Xid is the Xid code of an EventXid.
	Xid uint64
	// GPUInstance and ComputeInstance name the MIG device the error
	// belongs to; -1 when it is not a MIG device's.
	GPUInstance     int
	ComputeInstance int
}

// Message is the event as one sentence, with what it usually means.
func (e Event) Message() string {
	dev := fmt.Sprintf("GPU %d (%s)", e.Index, e.UUID)
	if e.GPUInstance >= 0 {
		dev += fmt.Sprintf(" MIG instance %d/%d", e.GPUInstance, e.ComputeInstance)
	}
	if e.Kind == EventDoubleBitECC {
		return dev + " reported a double-bit ECC error: its memory returned data it could not correct"
	}
	s := fmt.Sprintf("%s reported Xid %d", dev, e.Xid)
	if m := XidMeaning(e.Xid); m != "" {
		s += " (" + m + ")"
	}
	return s
}

// xidMeanings are the Xids seen most often in training jobs, as NVIDIA's
// Xid catalogue describes them.
var xidMeanings = map[uint64]string{
	13:  "graphics engine exception: usually the program (an out-of-range access in a kernel)",
	31:  "GPU memory page fault: usually the program (an illegal address in a kernel)",
	43:  "GPU stopped processing: the program was stopped after an error",
	45:  "preemptive cleanup after a previous error",
	48:  "double-bit ECC error",
	61:  "internal micro-controller breakpoint or warning",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapping failed",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	109: "context switch timeout",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// XidMeaning returns what an Xid usually means, "" for an Xid not listed.
func XidMeaning(xid uint64) string { return xidMeanings[xid] }

// XidFromProgram reports whether an Xid usually comes from the program
// itself (a fault in its kernels) rather than from the GPU or the node.
func XidFromProgram(xid uint64) bool {
	switch xid {
	case 13, 31, 43, 45:
		return true
	}
	return false
}

// EventWatcher reports the GPU errors of a set of devices as they happen.
type EventWatcher interface {
	// Watch registers for Xid and double-bit ECC events on devices and
	// calls fn for each until ctx ends. It returns nil when ctx ends, and
	// an error when it cannot watch at all (NVML missing, no device
	// supports the events).
	Watch(ctx context.Context, devices []Device, fn func(Event)) error
}
