package gpu

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Slot policy modes.
const (
	SlotsAuto  = "auto"  // one slot per GPU, or 1 without GPUs
	SlotsGPU   = "gpu"   // one slot per GPU; no GPU is an error
	SlotsCPU   = "cpu"   // the CPU quota, rounded down, at least 1
	SlotsFixed = "fixed" // exactly N
)

// Slot sources reported in Slots.Source.
const (
	SlotSourceGPU     = "gpu"
	SlotSourceCPU     = "cpu"
	SlotSourceFixed   = "fixed"
	SlotSourceDefault = "default"
)

// MaxSlots is the largest slot count ParseSlots accepts.
const MaxSlots = 65536

// SlotPolicy is a parsed --slots value.
type SlotPolicy struct {
	// Mode is SlotsAuto, SlotsGPU, SlotsCPU or SlotsFixed; "" means auto.
	Mode string
	// N is the slot count for SlotsFixed.
	N int
}

// Slots is the number of MPI slots this worker offers and where it came from.
type Slots struct {
	N      int    `json:"n"`
	Source string `json:"source"` // gpu|cpu|fixed|default
	Reason string `json:"reason,omitempty"`
}

// ParseSlots parses a --slots value: "auto", "gpu", "cpu" (any case) or a
// positive decimal integer up to MaxSlots.
func ParseSlots(s string) (SlotPolicy, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case SlotsAuto, SlotsGPU, SlotsCPU:
		return SlotPolicy{Mode: v}, nil
	case "":
		return SlotPolicy{}, fmt.Errorf("invalid --slots value %q: empty; want auto, gpu, cpu or a positive integer", clip(s))
	}
	if !isDigits(v) {
		return SlotPolicy{}, fmt.Errorf("invalid --slots value %q: want auto, gpu, cpu or a positive integer (e.g. --slots=4)", clip(s))
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > MaxSlots {
		return SlotPolicy{}, fmt.Errorf("invalid --slots value %q: at most %d slots are supported", clip(s), MaxSlots)
	}
	if n == 0 {
		return SlotPolicy{}, fmt.Errorf("invalid --slots value %q: must be at least 1", clip(s))
	}
	return SlotPolicy{Mode: SlotsFixed, N: n}, nil
}

// String returns the policy as a --slots value.
func (p SlotPolicy) String() string {
	if p.Mode == SlotsFixed {
		return strconv.Itoa(p.N)
	}
	if p.Mode == "" {
		return SlotsAuto
	}
	return p.Mode
}

// Resolve computes the slots for inv and the CPU quota. cpus is read only in
// cpu mode; nil means NewCgroupCPUQuota(). gpu mode with no GPU is an error
// that carries inv.Reason.
func (p SlotPolicy) Resolve(inv Inventory, cpus CPUQuota) (Slots, error) {
	switch p.Mode {
	case SlotsFixed:
		if p.N < 1 || p.N > MaxSlots {
			return Slots{}, fmt.Errorf("invalid fixed slot count %d: want 1..%d", p.N, MaxSlots)
		}
		return Slots{N: p.N, Source: SlotSourceFixed, Reason: fmt.Sprintf("--slots=%d", p.N)}, nil
	case SlotsGPU:
		if n := inv.Count(); n > 0 {
			return Slots{N: n, Source: SlotSourceGPU, Reason: gpuReason(inv)}, nil
		}
		return Slots{}, fmt.Errorf("--slots=gpu but no GPU is usable: %s; "+
			"request GPUs for the pod, or use --slots=auto, --slots=cpu or --slots=N", noGPUReason(inv))
	case SlotsCPU:
		return cpuSlots(cpus)
	case SlotsAuto, "":
		if n := inv.Count(); n > 0 {
			return Slots{N: n, Source: SlotSourceGPU, Reason: gpuReason(inv)}, nil
		}
		return Slots{N: 1, Source: SlotSourceDefault, Reason: fmt.Sprintf("no GPU (%s); using 1 slot "+
			"(use --slots=cpu for the CPU quota or --slots=N)", noGPUReason(inv))}, nil
	}
	return Slots{}, fmt.Errorf("invalid slot policy mode %q: want %s, %s, %s or %s", clip(p.Mode), SlotsAuto, SlotsGPU, SlotsCPU, SlotsFixed)
}

func gpuReason(inv Inventory) string {
	migs := 0
	for _, d := range inv.Devices {
		if d.MIG {
			migs++
		}
	}
	if migs > 0 {
		return fmt.Sprintf("one slot per usable GPU: %d devices, %d of them MIG", inv.Count(), migs)
	}
	return fmt.Sprintf("one slot per usable GPU: %d", inv.Count())
}

func noGPUReason(inv Inventory) string {
	if inv.Reason != "" {
		return inv.Reason
	}
	return "the detector reported no devices"
}

func cpuSlots(cpus CPUQuota) (Slots, error) {
	if cpus == nil {
		cpus = NewCgroupCPUQuota()
	}
	var (
		n    float64
		from string
	)
	if l, ok := cpus.(interface{ Limit() (CPULimit, error) }); ok {
		lim, err := l.Limit()
		if err != nil {
			return Slots{}, fmt.Errorf("--slots=cpu: %w", err)
		}
		n, from = lim.CPUs, lim.Source
	} else {
		v, err := cpus.CPUs()
		if err != nil {
			return Slots{}, fmt.Errorf("--slots=cpu: reading the CPU quota: %w", err)
		}
		n, from = v, "CPU quota"
	}
	if math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return Slots{}, fmt.Errorf("--slots=cpu: implausible CPU count %v from %s", n, from)
	}
	s := int(math.Min(math.Floor(n), MaxSlots))
	if s < 1 {
		s = 1
	}
	return Slots{N: s, Source: SlotSourceCPU,
		Reason: fmt.Sprintf("%s CPUs (%s), rounded down, at least 1", strconv.FormatFloat(n, 'f', -1, 64), from)}, nil
}
