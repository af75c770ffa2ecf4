package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    SlotPolicy
		wantErr string
	}{
		{in: "auto", want: SlotPolicy{Mode: SlotsAuto}},
		{in: "AUTO", want: SlotPolicy{Mode: SlotsAuto}},
		{in: " gpu ", want: SlotPolicy{Mode: SlotsGPU}},
		{in: "cpu", want: SlotPolicy{Mode: SlotsCPU}},
		{in: "1", want: SlotPolicy{Mode: SlotsFixed, N: 1}},
		{in: "8", want: SlotPolicy{Mode: SlotsFixed, N: 8}},
		{in: "007", want: SlotPolicy{Mode: SlotsFixed, N: 7}},
		{in: "65536", want: SlotPolicy{Mode: SlotsFixed, N: MaxSlots}},
		{in: "", wantErr: "empty"},
		{in: "0", wantErr: "at least 1"},
		{in: "-2", wantErr: "positive integer"},
		{in: "+2", wantErr: "positive integer"},
		{in: "1.5", wantErr: "positive integer"},
		{in: "4 slots", wantErr: "positive integer"},
		{in: "fixed", wantErr: "positive integer"},
		{in: "65537", wantErr: "at most"},
		{in: "99999999999999999999999", wantErr: "at most"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSlots(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--slots") {
					t.Fatalf("ParseSlots(%q) = %+v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseSlots(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// fixedCPUs is a CPUQuota with a set answer.
type fixedCPUs struct {
	n   float64
	err error
}

func (f fixedCPUs) CPUs() (float64, error) { return f.n, f.err }

func TestResolve(t *testing.T) {
	t.Parallel()
	gpus := Inventory{Source: SourceNVML, Devices: []Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"},
		{Index: 2, UUID: "MIG-c", MIG: true, Parent: "GPU-x"}}}
	cpuOnly := Inventory{Source: SourceNone, Reason: "NVML library libnvidia-ml.so.1 not found"}
	tests := []struct {
		name       string
		policy     string
		inv        Inventory
		cpus       CPUQuota
		want       Slots
		wantErr    string
		wantReason string
	}{
		{name: "auto with GPUs", policy: "auto", inv: gpus, want: Slots{N: 3, Source: SlotSourceGPU}, wantReason: "1 of them MIG"},
		{name: "auto without GPUs", policy: "auto", inv: cpuOnly, want: Slots{N: 1, Source: SlotSourceDefault}, wantReason: "libnvidia-ml.so.1"},
		{name: "gpu with GPUs", policy: "gpu", inv: gpus, want: Slots{N: 3, Source: SlotSourceGPU}},
		{name: "gpu without GPUs", policy: "gpu", inv: cpuOnly, wantErr: "libnvidia-ml.so.1 not found"},
		{name: "cpu 1.5 rounds down", policy: "cpu", inv: gpus, cpus: fixedCPUs{n: 1.5}, want: Slots{N: 1, Source: SlotSourceCPU}},
		{name: "cpu 0.5 is at least 1", policy: "cpu", inv: gpus, cpus: fixedCPUs{n: 0.5}, want: Slots{N: 1, Source: SlotSourceCPU}},
		{name: "cpu 6.99", policy: "cpu", inv: gpus, cpus: fixedCPUs{n: 6.99}, want: Slots{N: 6, Source: SlotSourceCPU}},
		{name: "cpu error", policy: "cpu", inv: gpus, cpus: fixedCPUs{err: errors.New("boom")}, wantErr: "boom"},
		{name: "fixed", policy: "5", inv: cpuOnly, want: Slots{N: 5, Source: SlotSourceFixed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseSlots(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Resolve(tc.inv, tc.cpus)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve = %+v, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.N != tc.want.N || got.Source != tc.want.Source || got.Reason == "" {
				t.Fatalf("Resolve = %+v, %v; want %+v with a reason", got, err, tc.want)
			}
			if !strings.Contains(got.Reason, tc.wantReason) {
				t.Errorf("Reason %q lacks %q", got.Reason, tc.wantReason)
			}
		})
	}
	if _, err := (SlotPolicy{Mode: "bogus"}).Resolve(gpus, nil); err == nil {
		t.Error("Resolve with an unknown mode succeeded")
	}
	if _, err := (SlotPolicy{Mode: SlotsFixed}).Resolve(gpus, nil); err == nil {
		t.Error("Resolve with fixed N=0 succeeded")
	}
	if got, err := (SlotPolicy{}).Resolve(gpus, nil); err != nil || got.N != 3 {
		t.Errorf("zero SlotPolicy = %+v, %v; want auto (3)", got, err)
	}
}

// FuzzParseSlots: no panic, a policy that parses resolves (for fixed) to
// its own N and round-trips through String.
func FuzzParseSlots(f *testing.F) {
	for _, s := range []string{"auto", "gpu", "cpu", "1", "8", "0", "-1", "+2", "", " 4 ", "65537", "1e3", "GPU", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseSlots(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		back, err := ParseSlots(p.String())
		if err != nil || back != p {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, p, p.String(), back, err)
		}
		if p.Mode == SlotsFixed {
			got, err := p.Resolve(Inventory{}, fixedCPUs{n: 1})
			if err != nil || got.N != p.N || got.N < 1 || got.N > MaxSlots {
				t.Fatalf("Resolve(%+v) = %+v, %v", p, got, err)
			}
		}
	})
}
