//go:build cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// envMap is an injected environment.
func envMap(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

// countingServer wraps a whole-machine fake and counts Init/Shutdown.
type countingServer struct {
	*server.Server
	inits, shutdowns atomic.Int32
}

func newCounting(s *server.Server) *countingServer {
	c := &countingServer{Server: s}
	init, shutdown := s.InitFunc, s.ShutdownFunc
	s.InitFunc = func() nvml.Return { c.inits.Add(1); return init() }
	s.ShutdownFunc = func() nvml.Return { c.shutdowns.Add(1); return shutdown() }
	return c
}

func detect(t *testing.T, lib nvml.Interface, env map[string]string, opts ...Option) Inventory {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv, err := newNVMLDetector(lib, append([]Option{WithEnv(envMap(env))}, opts...)...).Detect(ctx)
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	return inv
}

func gpuUUID(s *server.Server, i int) string { return s.Devices[i].(*server.Device).UUID }

func TestNVMLDGXH100AllGPUs(t *testing.T) {
	t.Parallel()
	s := newCounting(dgxh100.New())
	inv := detect(t, s, nil)
	if inv.Count() != 8 || inv.Source != SourceNVML || inv.Reason != "" {
		t.Fatalf("inventory = %d devices, source %q, reason %q; want 8, nvml, no reason", inv.Count(), inv.Source, inv.Reason)
	}
	if inv.DriverVersion != "550.54.15" {
		t.Errorf("DriverVersion = %q, want 550.54.15", inv.DriverVersion)
	}
	for i, d := range inv.Devices {
		want := s.Devices[i].(*server.Device)
		if d.Index != i || d.UUID != want.UUID || d.Model != "NVIDIA H100 80GB HBM3" || d.MemoryBytes != 80<<30 || d.MIG || d.Parent != "" {
			t.Errorf("device %d = %+v; want index %d, uuid %s, H100 80GB HBM3, 80 GiB, not MIG", i, d, i, want.UUID)
		}
	}
	if s.inits.Load() != 1 || s.shutdowns.Load() != 1 {
		t.Errorf("Init called %d times, Shutdown %d times; want 1 and 1", s.inits.Load(), s.shutdowns.Load())
	}
}

func TestNVMLVisibility(t *testing.T) {
	t.Parallel()
	s := dgxh100.New()
	u := func(i int) string { return gpuUUID(s, i) }
	tests := []struct {
		name       string
		env        map[string]string
		want       []string
		wantReason string // substring; "" means Count() > 0
		wantNote   string
	}{
		{name: "unset", env: nil, want: []string{u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7)}},
		{name: "cuda indices keep CUDA order", env: map[string]string{EnvCUDAVisibleDevices: "3,1"}, want: []string{u(3), u(1)}},
		{name: "cuda uuid", env: map[string]string{EnvCUDAVisibleDevices: u(5) + "," + u(2)}, want: []string{u(5), u(2)}},
		{name: "cuda uuid prefix", env: map[string]string{EnvCUDAVisibleDevices: u(6)[:14]}, want: []string{u(6)}},
		{name: "cuda uuid lower case", env: map[string]string{EnvCUDAVisibleDevices: strings.ToLower(u(4))}, want: []string{u(4)}},
		{name: "cuda invalid entry truncates", env: map[string]string{EnvCUDAVisibleDevices: "0,2,-1,1"}, want: []string{u(0), u(2)},
			wantNote: `"-1"`},
		{name: "cuda out of range truncates", env: map[string]string{EnvCUDAVisibleDevices: "1,8,2"}, want: []string{u(1)}, wantNote: `"8"`},
		{name: "cuda duplicate truncates", env: map[string]string{EnvCUDAVisibleDevices: "1,1,2"}, want: []string{u(1)}, wantNote: `"1"`},
		{name: "cuda unknown uuid truncates", env: map[string]string{EnvCUDAVisibleDevices: "0,GPU-deadbeef,1"}, want: []string{u(0)}},
		{name: "cuda empty hides all", env: map[string]string{EnvCUDAVisibleDevices: ""}, wantReason: "empty string"},
		{name: "cuda all is invalid for CUDA", env: map[string]string{EnvCUDAVisibleDevices: "all"}, wantReason: `first entry "all"`},
		{name: "cuda none", env: map[string]string{EnvCUDAVisibleDevices: "none"}, wantReason: `first entry "none"`},
		{name: "nvidia all", env: map[string]string{EnvNVIDIAVisibleDevices: "all"}, want: []string{u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7)}},
		{name: "nvidia none", env: map[string]string{EnvNVIDIAVisibleDevices: "none"}, wantReason: "expose no GPUs"},
		{name: "nvidia void", env: map[string]string{EnvNVIDIAVisibleDevices: "void"}, wantReason: "expose no GPUs"},
		{name: "nvidia empty", env: map[string]string{EnvNVIDIAVisibleDevices: ""}, wantReason: "expose no GPUs"},
		{name: "nvidia indices in host order (privileged pod)", env: map[string]string{EnvNVIDIAVisibleDevices: "6,2"}, want: []string{u(2), u(6)}},
		{name: "nvidia uuids", env: map[string]string{EnvNVIDIAVisibleDevices: u(7) + "," + u(0)}, want: []string{u(0), u(7)}},
		{name: "nvidia list already applied by runtime", env: map[string]string{
			EnvNVIDIAVisibleDevices: "8,9,10,11,12,13,14,15"}, want: []string{u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7)}},
		{name: "nvidia volume-mounts placeholder", env: map[string]string{EnvNVIDIAVisibleDevices: "/var/run/nvidia-container-devices"},
			want: []string{u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7)}},
		{name: "nvidia then cuda indexes the remaining GPUs", env: map[string]string{
			EnvNVIDIAVisibleDevices: "2,4,6", EnvCUDAVisibleDevices: "1"}, want: []string{u(4)}},
		{name: "cuda uuid outside nvidia list truncates", env: map[string]string{
			EnvNVIDIAVisibleDevices: "2,4", EnvCUDAVisibleDevices: u(4) + "," + u(5)}, want: []string{u(4)}, wantNote: u(5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv := detect(t, s, tc.env)
			if tc.wantReason != "" {
				if inv.Count() != 0 || !strings.Contains(inv.Reason, tc.wantReason) {
					t.Fatalf("got %d devices, reason %q; want none with reason containing %q", inv.Count(), inv.Reason, tc.wantReason)
				}
				return
			}
			if got := uuids(inv.Devices); !slices.Equal(got, tc.want) {
				t.Fatalf("devices = %v\nwant      %v (notes %q)", got, tc.want, inv.Notes)
			}
			if inv.Reason != "" {
				t.Errorf("Reason = %q with %d devices", inv.Reason, inv.Count())
			}
			if tc.wantNote != "" && !slices.ContainsFunc(inv.Notes, func(n string) bool { return strings.Contains(n, tc.wantNote) }) {
				t.Errorf("notes %q lack %q", inv.Notes, tc.wantNote)
			}
		})
	}
}

// migDev describes one MIG device created through the fake's MIG API.
type migDev struct {
	uuid   string
	gi, ci int
}

// enableMIG turns MIG on for GPU i of s, creates one GPU instance and one
// full compute instance per given GPU-instance profile through the fake's
// MIG API, and wires the MIG-device calls the fake lacks
// (GetMaxMigDeviceCount, GetMigDeviceHandleByIndex) from those instances.
func enableMIG(t *testing.T, s *server.Server, i int, giProfiles ...int) []migDev {
	t.Helper()
	d := s.Devices[i].(*server.Device)
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	type inst struct {
		dev  *mock.Device
		info migDev
	}
	var insts []inst
	for _, p := range giProfiles {
		giInfo, ret := d.GetGpuInstanceProfileInfo(p)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", p, ret)
		}
		gi, ret := d.CreateGpuInstance(&giInfo)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateGpuInstance: %v", ret)
		}
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(p, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetComputeInstanceProfileInfo(%d): %v", p, ret)
		}
		ci, ret := gi.CreateComputeInstance(&ciInfo)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateComputeInstance: %v", ret)
		}
		gii, _ := gi.GetInfo()
		cii, _ := ci.GetInfo()
		md := migDev{uuid: fmt.Sprintf("MIG-%s-%d-%d", strings.TrimPrefix(d.UUID, "GPU-")[:8], gii.Id, cii.Id), gi: int(gii.Id), ci: int(cii.Id)}
		name := fmt.Sprintf("%s MIG %dg.%dgb", d.Config.Name, giInfo.SliceCount, giInfo.MemorySizeMB/1024)
		mem := giInfo.MemorySizeMB << 20
		insts = append(insts, inst{info: md, dev: &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return md.uuid, nvml.SUCCESS },
			GetNameFunc:              func() (string, nvml.Return) { return name, nvml.SUCCESS },
			GetMemoryInfoFunc:        func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: mem}, nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return md.gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return md.ci, nvml.SUCCESS },
		}})
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(n int) (nvml.Device, nvml.Return) {
		if n < 0 || n >= 7 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if n >= len(insts) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return insts[n].dev, nvml.SUCCESS
	}
	var out []migDev
	for _, in := range insts {
		out = append(out, in.info)
	}
	return out
}

func TestNVMLMIG(t *testing.T) {
	t.Parallel()
	s := dgxa100.New()
	// GPU 1: three 1g instances and one 2g; GPU 3: MIG on but no instances.
	migs := enableMIG(t, s, 1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE,
		nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE)
	enableMIG(t, s, 3)
	parent := gpuUUID(s, 1)

	inv := detect(t, s, nil)
	// 8 GPUs: GPU 1 becomes 4 MIG devices, GPU 3 contributes none.
	if inv.Count() != 6+4 {
		t.Fatalf("Count() = %d, want 10 (6 full GPUs + 4 MIG devices); devices %v", inv.Count(), uuids(inv.Devices))
	}
	var got []Device
	for _, d := range inv.Devices {
		if d.MIG {
			got = append(got, d)
		}
		if d.UUID == parent || d.UUID == gpuUUID(s, 3) {
			t.Errorf("MIG-enabled parent %s counted as a device", d.UUID)
		}
	}
	if len(got) != 4 {
		t.Fatalf("MIG devices = %d, want 4", len(got))
	}
	for i, d := range got {
		if d.UUID != migs[i].uuid || d.Parent != parent || d.Index != 1 {
			t.Errorf("MIG device %d = %+v, want uuid %s parent %s index 1", i, d, migs[i].uuid, parent)
		}
	}
	if got[0].MemoryBytes != 4864<<20 || !strings.Contains(got[0].Model, "MIG 1g.4gb") {
		t.Errorf("1g MIG device = %q %d bytes, want 1g.4gb with 4864 MiB", got[0].Model, got[0].MemoryBytes)
	}
	if got[3].MemoryBytes != 9856<<20 || !strings.Contains(got[3].Model, "MIG 2g.9gb") {
		t.Errorf("2g MIG device = %q %d bytes, want 2g.9gb with 9856 MiB", got[3].Model, got[3].MemoryBytes)
	}
	if !slices.ContainsFunc(inv.Notes, func(n string) bool { return strings.Contains(n, "GPU 3") && strings.Contains(n, "no MIG devices") }) {
		t.Errorf("notes %q lack the MIG-without-instances note for GPU 3", inv.Notes)
	}

	t.Run("select by MIG UUID", func(t *testing.T) {
		inv := detect(t, s, map[string]string{EnvCUDAVisibleDevices: migs[2].uuid + "," + migs[0].uuid})
		if g := uuids(inv.Devices); !slices.Equal(g, []string{migs[2].uuid, migs[0].uuid}) {
			t.Fatalf("devices = %v, want [%s %s]", g, migs[2].uuid, migs[0].uuid)
		}
	})
	t.Run("select by legacy MIG name", func(t *testing.T) {
		name := fmt.Sprintf("MIG-%s/%d/%d", parent, migs[1].gi, migs[1].ci)
		inv := detect(t, s, map[string]string{EnvCUDAVisibleDevices: name})
		if g := uuids(inv.Devices); !slices.Equal(g, []string{migs[1].uuid}) {
			t.Fatalf("devices = %v, want [%s]", g, migs[1].uuid)
		}
	})
	t.Run("index selects all MIG devices of the GPU", func(t *testing.T) {
		inv := detect(t, s, map[string]string{EnvCUDAVisibleDevices: "1"})
		if inv.Count() != 4 {
			t.Fatalf("Count() = %d, want 4", inv.Count())
		}
	})
	t.Run("nvidia gpu:mig pair in a privileged pod", func(t *testing.T) {
		inv := detect(t, s, map[string]string{EnvNVIDIAVisibleDevices: "1:3,0"})
		if g := uuids(inv.Devices); !slices.Equal(g, []string{gpuUUID(s, 0), migs[3].uuid}) {
			t.Fatalf("devices = %v, want [%s %s]", g, gpuUUID(s, 0), migs[3].uuid)
		}
	})
	t.Run("only MIG GPU without instances", func(t *testing.T) {
		inv := detect(t, s, map[string]string{EnvCUDAVisibleDevices: "3"})
		if inv.Count() != 0 || !strings.Contains(inv.Reason, "MIG") {
			t.Fatalf("got %d devices, reason %q; want none with a MIG reason", inv.Count(), inv.Reason)
		}
	})
}

func TestNVMLInitFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"},
		{nvml.ERROR_NO_PERMISSION, "permission denied"},
		{nvml.ERROR_UNKNOWN, "ERROR_UNKNOWN"},
	} {
		t.Run(tc.ret.Error(), func(t *testing.T) {
			t.Parallel()
			var shutdowns atomic.Int32
			lib := &mock.Interface{
				InitFunc:     func() nvml.Return { return tc.ret },
				ShutdownFunc: func() nvml.Return { shutdowns.Add(1); return nvml.SUCCESS },
			}
			inv := detect(t, lib, nil)
			if inv.Count() != 0 || inv.Source != SourceNone || !strings.Contains(inv.Reason, tc.want) {
				t.Fatalf("inventory = %+v; want CPU-only, source none, reason containing %q", inv, tc.want)
			}
			if shutdowns.Load() != 0 {
				t.Errorf("Shutdown called after a failed Init")
			}
			// Strict mode turns the same failure into an *InitError.
			_, err := newNVMLDetector(lib, WithEnv(envMap(nil)), WithFailOnInitError(true)).Detect(context.Background())
			var ie *InitError
			if !errors.As(err, &ie) || !errors.Is(err, tc.ret) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("strict Detect error = %v; want *InitError wrapping %v", err, tc.ret)
			}
		})
	}
}

func TestNVMLPanicRecoveredAndShutdown(t *testing.T) {
	t.Parallel()
	s := newCounting(dgxh100.New())
	s.Devices[2].(*server.Device).GetNameFunc = func() (string, nvml.Return) { panic("driver exploded") }
	_, err := newNVMLDetector(s, WithEnv(envMap(nil))).Detect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "panic") || !strings.Contains(err.Error(), "driver exploded") {
		t.Fatalf("Detect error = %v; want a recovered panic", err)
	}
	if s.inits.Load() != 1 || s.shutdowns.Load() != 1 {
		t.Errorf("Init %d, Shutdown %d; want Shutdown after the panic too", s.inits.Load(), s.shutdowns.Load())
	}
}

func TestNVMLDeviceErrorsAreNotes(t *testing.T) {
	t.Parallel()
	s := dgxh100.New()
	get := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 5 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return get(i)
	}
	s.Devices[0].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
	inv := detect(t, s, nil)
	if inv.Count() != 7 {
		t.Fatalf("Count() = %d, want 7 (GPU 5 lost)", inv.Count())
	}
	if inv.Devices[0].MemoryBytes != 0 {
		t.Errorf("GPU 0 memory = %d, want 0 when not supported", inv.Devices[0].MemoryBytes)
	}
	if !slices.ContainsFunc(inv.Notes, func(n string) bool { return strings.Contains(n, "GPU 5 skipped") && strings.Contains(n, "GPU_IS_LOST") }) {
		t.Errorf("notes %q lack GPU 5", inv.Notes)
	}

	s2 := dgxh100.New()
	s2.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if _, err := newNVMLDetector(s2, WithEnv(envMap(nil))).Detect(context.Background()); err == nil || !strings.Contains(err.Error(), "counting GPUs") {
		t.Errorf("Detect with failing DeviceGetCount: err = %v, want counting error", err)
	}
}

func TestNVMLNoGPUs(t *testing.T) {
	t.Parallel()
	s := dgxh100.NewWithGPUs()
	inv := detect(t, s, nil)
	if inv.Count() != 0 || inv.Source != SourceNVML || !strings.Contains(inv.Reason, "reports no GPUs") {
		t.Fatalf("inventory = %+v; want no devices with a reason", inv)
	}
	_, err := SlotPolicy{Mode: SlotsGPU}.Resolve(inv, nil)
	if err == nil || !strings.Contains(err.Error(), "reports no GPUs") {
		t.Fatalf("Resolve(gpu) = %v; want an error naming the reason", err)
	}
}

func TestNVMLDetectHonoursContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var shutdowns atomic.Int32
	lib := &mock.Interface{
		InitFunc:     func() nvml.Return { <-release; return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { shutdowns.Add(1); return nvml.SUCCESS },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := newNVMLDetector(lib, WithEnv(envMap(nil))).Detect(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Detect error = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Detect returned after %v", d)
	}
	// When the hung call returns, the abandoned detection sees the
	// cancelled context and still shuts NVML down.
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for shutdowns.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Shutdown not called after the hung Init returned")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGoNVMLWithoutLibrary checks go-nvml's own behaviour that the fallback
// relies on: with no library, Init reports ERROR_LIBRARY_NOT_FOUND (dlopen
// fails) instead of crashing, and Shutdown reports ERROR_UNINITIALIZED.
func TestGoNVMLWithoutLibrary(t *testing.T) {
	t.Parallel()
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(t.TempDir(), "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.ERROR_LIBRARY_NOT_FOUND {
		t.Fatalf("Init() = %v, want ERROR_LIBRARY_NOT_FOUND", ret)
	}
	if ret := lib.Shutdown(); ret != nvml.ERROR_UNINITIALIZED {
		t.Fatalf("Shutdown() = %v, want ERROR_UNINITIALIZED", ret)
	}
}

func TestNewNVMLMissingLibrary(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	inv, err := NewNVML(WithLibraryPath(path), WithEnv(envMap(nil))).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if inv.Count() != 0 || inv.Source != SourceNone || !strings.Contains(inv.Reason, path+" not found") {
		t.Fatalf("inventory = %+v; want CPU-only naming %s", inv, path)
	}
	_, err = NewNVML(WithLibraryPath(path), WithFailOnInitError(true)).Detect(context.Background())
	if !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Fatalf("strict Detect error = %v, want ERROR_LIBRARY_NOT_FOUND", err)
	}
}

// TestNewAutoOnThisMachine runs the real NVML path. On machines without
// libnvidia-ml.so.1 (ours) it must be CPU-only with a reason, not an error.
func TestNewAutoOnThisMachine(t *testing.T) {
	t.Parallel()
	d, err := New(ModeAuto, envMap(nil))
	if err != nil {
		t.Fatalf("New(auto): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv, err := d.Detect(ctx)
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if inv.Count() == 0 && inv.Reason == "" {
		t.Fatalf("CPU-only inventory without a reason: %+v", inv)
	}
	if inv.Source == SourceNone && !strings.Contains(inv.Reason, "libnvidia-ml.so.1") {
		t.Errorf("reason %q does not name the library", inv.Reason)
	}
	t.Logf("this machine: source=%s count=%d reason=%q", inv.Source, inv.Count(), inv.Reason)
}
