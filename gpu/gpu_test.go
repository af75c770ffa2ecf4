package gpu

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewModes(t *testing.T) {
	t.Parallel()
	env := func(string) (string, bool) { return "", false }
	for _, mode := range []string{"auto", "", "AUTO", "none"} {
		if d, err := New(mode, env); err != nil || d == nil {
			t.Errorf("New(%q) = %v, %v", mode, d, err)
		}
	}
	d, err := New("nvml", env)
	if cgoEnabled && (err != nil || d == nil) {
		t.Errorf("New(nvml) with cgo = %v, %v", d, err)
	}
	if !cgoEnabled && (err == nil || !strings.Contains(err.Error(), "without cgo")) {
		t.Errorf("New(nvml) without cgo: err = %v, want a cgo error", err)
	}
	if _, err := New("cuda", env); err == nil || !strings.Contains(err.Error(), `"cuda"`) {
		t.Errorf("New(cuda) err = %v, want invalid mode", err)
	}
}

func TestNullDetector(t *testing.T) {
	t.Parallel()
	d, err := New("none", nil)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := d.Detect(context.Background())
	if err != nil || inv.Count() != 0 || inv.Source != SourceNone || !strings.Contains(inv.Reason, "--gpu.detect=none") {
		t.Fatalf("Detect = %+v, %v", inv, err)
	}
	// Devices is [] (not null) in JSON so /info consumers can range over it.
	b, _ := json.Marshal(inv)
	if !strings.Contains(string(b), `"devices":[]`) {
		t.Errorf("JSON %s lacks an empty devices array", b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewNull("x").Detect(ctx); err == nil {
		t.Error("Detect with a cancelled context succeeded")
	}
}

// TestNVMLWithoutCgo checks the CGO_ENABLED=0 build's NVML detector.
func TestNVMLWithoutCgo(t *testing.T) {
	t.Parallel()
	if cgoEnabled {
		t.Skip("cgo build: NVML is real (see nvml_test.go); run with CGO_ENABLED=0 to test the stub")
	}
	inv, err := NewNVML().Detect(context.Background())
	if err != nil || inv.Count() != 0 || inv.Reason != ReasonNoCgo {
		t.Fatalf("Detect = %+v, %v; want CPU-only with %q", inv, err, ReasonNoCgo)
	}
	d, err := New("auto", nil)
	if err != nil {
		t.Fatal(err)
	}
	if inv, _ := d.Detect(context.Background()); inv.Reason != ReasonNoCgo {
		t.Fatalf("New(auto) reason = %q", inv.Reason)
	}
	err = NewNVMLEventWatcher().Watch(context.Background(), []Device{{UUID: "GPU-x"}}, func(Event) { t.Error("event without NVML") })
	if err == nil || !strings.Contains(err.Error(), ReasonNoCgo) {
		t.Fatalf("Watch = %v; want %q", err, ReasonNoCgo)
	}
}
