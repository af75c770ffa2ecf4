package gpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseCUDAVisible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value   string
		set     bool
		mode    visMode
		raws    []string
		invalid string
	}{
		{value: "", set: false, mode: visAll},
		{value: "", set: true, mode: visNone},
		{value: "  ", set: true, mode: visNone},
		{value: "0,1,2", set: true, mode: visList, raws: []string{"0", "1", "2"}},
		{value: " 3 , 1 ", set: true, mode: visList, raws: []string{"3", "1"}},
		{value: "0,2,-1,1", set: true, mode: visList, raws: []string{"0", "2"}, invalid: "-1"},
		{value: "all", set: true, mode: visList, invalid: "all"},
		{value: "none", set: true, mode: visList, invalid: "none"},
		{value: "void", set: true, mode: visList, invalid: "void"},
		{value: "0,,1", set: true, mode: visList, raws: []string{"0"}, invalid: "(empty entry)"},
		{value: "GPU-8f3c1d2e-aaaa-bbbb-cccc-0123456789ab,1", set: true, mode: visList,
			raws: []string{"GPU-8f3c1d2e-aaaa-bbbb-cccc-0123456789ab", "1"}},
		{value: "GPU-", set: true, mode: visList, invalid: "GPU-"},
		{value: "GPU-xyz", set: true, mode: visList, invalid: "GPU-xyz"},
		{value: "MIG-4b1e0f8a-1111-2222-3333-444455556666", set: true, mode: visList, raws: []string{"MIG-4b1e0f8a-1111-2222-3333-444455556666"}},
		{value: "MIG-GPU-8f3c1d2e/1/0", set: true, mode: visList, raws: []string{"MIG-GPU-8f3c1d2e/1/0"}},
		{value: "MIG-GPU-8f3c1d2e/1", set: true, mode: visList, invalid: "MIG-GPU-8f3c1d2e/1"},
		{value: "0:1", set: true, mode: visList, invalid: "0:1"}, // gpu:mig pairs are NVIDIA_VISIBLE_DEVICES only
		{value: "99999999999999999999", set: true, mode: visList, invalid: "99999999999999999999"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q/%v", tc.value, tc.set), func(t *testing.T) {
			sp := parseCUDAVisible(tc.value, tc.set)
			var raws []string
			for _, tk := range sp.Tokens {
				raws = append(raws, tk.Raw)
			}
			if sp.Mode != tc.mode || !slices.Equal(raws, tc.raws) || sp.Invalid != tc.invalid {
				t.Fatalf("parse = mode %d tokens %q invalid %q; want mode %d tokens %q invalid %q",
					sp.Mode, raws, sp.Invalid, tc.mode, tc.raws, tc.invalid)
			}
		})
	}
}

func TestParseNVIDIAVisible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value   string
		set     bool
		mode    visMode
		kinds   []tokenKind
		invalid string
	}{
		{value: "", set: false, mode: visAll},
		{value: "all", set: true, mode: visAll},
		{value: "ALL", set: true, mode: visAll},
		{value: "", set: true, mode: visNone},
		{value: "none", set: true, mode: visNone},
		{value: "void", set: true, mode: visNone},
		{value: "/var/run/nvidia-container-devices", set: true, mode: visRuntime},
		{value: "nvidia.com/gpu=0", set: true, mode: visRuntime},
		{value: "0,GPU-abc,MIG-def,0:3,MIG-GPU-abc/2/0", set: true, mode: visList,
			kinds: []tokenKind{tokIndex, tokGPUUUID, tokMIGUUID, tokMIGIndex, tokMIGLegacy}},
		{value: "0,bogus,1", set: true, mode: visList, kinds: []tokenKind{tokIndex, tokIndex}, invalid: "bogus"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q/%v", tc.value, tc.set), func(t *testing.T) {
			sp := parseNVIDIAVisible(tc.value, tc.set)
			var kinds []tokenKind
			for _, tk := range sp.Tokens {
				kinds = append(kinds, tk.Kind)
			}
			if sp.Mode != tc.mode || !slices.Equal(kinds, tc.kinds) || sp.Invalid != tc.invalid {
				t.Fatalf("parse = mode %d kinds %v invalid %q; want mode %d kinds %v invalid %q",
					sp.Mode, kinds, sp.Invalid, tc.mode, tc.kinds, tc.invalid)
			}
		})
	}
}

// fakeGPUs builds n GPUs; GPU m (if m >= 0) has MIG enabled with k MIG devices.
func fakeGPUs(n, m, k int) []gpuInfo {
	gpus := make([]gpuInfo, n)
	for i := range gpus {
		gpus[i] = gpuInfo{Index: i, UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i+0xa0, i), Model: "Fake GPU", MemoryBytes: 16 << 30}
	}
	if m >= 0 && m < n {
		gpus[m].MIGEnabled = true
		for j := 0; j < k; j++ {
			gpus[m].MIG = append(gpus[m].MIG, migInfo{Slot: j, UUID: fmt.Sprintf("MIG-%08x-1111-1111-1111-%012x", m, j),
				MemoryBytes: 4 << 30, GI: j + 1, CI: 0})
		}
	}
	return gpus
}

func TestSelectDevices(t *testing.T) {
	t.Parallel()
	gpus := fakeGPUs(4, 2, 2) // GPUs 0,1,3 whole; GPU 2 has MIG 0 and MIG 1
	g := func(i int) string { return gpus[i].UUID }
	m := func(j int) string { return gpus[2].MIG[j].UUID }
	all := []string{g(0), g(1), m(0), m(1), g(3)}
	tests := []struct {
		name       string
		nv, cuda   string
		nvSet      bool
		cudaSet    bool
		want       []string
		wantReason string
	}{
		{name: "all", want: all},
		{name: "cuda index of MIG GPU", cuda: "2", cudaSet: true, want: []string{m(0), m(1)}},
		{name: "cuda MIG uuid then GPU", cuda: m(1) + ",0", cudaSet: true, want: []string{m(1), g(0)}},
		{name: "cuda GPU and its own MIG device are not counted twice", cuda: "2," + m(0), cudaSet: true, want: []string{m(0), m(1)}},
		{name: "cuda legacy MIG", cuda: "MIG-" + g(2) + "/2/0", cudaSet: true, want: []string{m(1)}},
		{name: "cuda ambiguous uuid prefix truncates", cuda: "GPU-000000", cudaSet: true, wantReason: "first entry"},
		{name: "nvidia MIG uuid only (privileged)", nv: m(1) + "," + g(3), nvSet: true, want: []string{m(1), g(3)}},
		{name: "cuda index counts over nvidia selection", nv: m(1) + "," + g(3), nvSet: true, cuda: "0", cudaSet: true, want: []string{m(1)}},
		{name: "cuda MIG uuid hidden by nvidia", nv: m(1) + "," + g(3), nvSet: true, cuda: m(0), cudaSet: true, wantReason: "first entry"},
		{name: "nvidia runtime-applied list", nv: "4,5,6,7,8", nvSet: true, want: all},
		{name: "nvidia list naming nothing here", nv: "GPU-ffff", nvSet: true, wantReason: "matches none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := selectDevices(gpus, parseNVIDIAVisible(tc.nv, tc.nvSet), parseCUDAVisible(tc.cuda, tc.cudaSet))
			if tc.wantReason != "" {
				if len(sel.Devices) != 0 || !strings.Contains(sel.Reason, tc.wantReason) {
					t.Fatalf("got %v reason %q; want none with %q", uuids(sel.Devices), sel.Reason, tc.wantReason)
				}
				return
			}
			if got := uuids(sel.Devices); !slices.Equal(got, tc.want) {
				t.Fatalf("devices = %v\nwant      %v (notes %q)", got, tc.want, sel.Notes)
			}
		})
	}
	if sel := selectDevices(nil, parseNVIDIAVisible("", false), parseCUDAVisible("", false)); len(sel.Devices) != 0 || sel.Reason == "" {
		t.Errorf("no GPUs: %+v, want a reason", sel)
	}
}

func uuids(devs []Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.UUID)
	}
	return out
}

// FuzzVisibleDevices feeds arbitrary CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES values through the parsers and the selection:
// never a panic, never more devices than exist, never a duplicate, and a
// reason exactly when nothing is left.
func FuzzVisibleDevices(f *testing.F) {
	gpus := fakeGPUs(4, 2, 3)
	for _, s := range []string{"", "all", "none", "void", "0", "0,1", "0,2,-1,1", "3,3", "GPU-000000a0", gpus[1].UUID,
		gpus[2].MIG[1].UUID, "MIG-" + gpus[2].UUID + "/2/0", "2:1", "/var/run/nvidia-container-devices", "0,,1", " 1 , 0 "} {
		f.Add(s, true, "", false)
		f.Add("", false, s, true)
		f.Add(s, true, s, true)
	}
	f.Fuzz(func(t *testing.T, cuda string, cudaSet bool, nv string, nvSet bool) {
		sel := selectDevices(gpus, parseNVIDIAVisible(nv, nvSet), parseCUDAVisible(cuda, cudaSet))
		if len(sel.Devices) > 6 { // 3 whole GPUs + 3 MIG devices
			t.Fatalf("%d devices from 6 usable", len(sel.Devices))
		}
		seen := map[string]bool{}
		for _, d := range sel.Devices {
			if seen[d.UUID] {
				t.Fatalf("device %s listed twice", d.UUID)
			}
			seen[d.UUID] = true
			if d.UUID == gpus[2].UUID {
				t.Fatalf("MIG-enabled parent counted")
			}
		}
		if (len(sel.Devices) == 0) != (sel.Reason != "") {
			t.Fatalf("devices %d with reason %q", len(sel.Devices), sel.Reason)
		}
		if !cudaSet && !nvSet && len(sel.Devices) != 6 {
			t.Fatalf("unset variables gave %d devices, want 6", len(sel.Devices))
		}
	})
}
