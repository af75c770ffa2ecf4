package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/agent/worker/api"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/gpu"
)

// fakeSSH is an SSHServer with a real loopback listener that accepts and
// closes connections; its state getters are settable.
type fakeSSH struct {
	mu          sync.Mutex
	ln          net.Listener
	listening   bool
	fingerprint string
	derived     string
	keyErr      error
	pinned      bool
	keys        int
	listenErr   error
	serveErr    error
	onShutdown  func()
	shutdowns   int
	requestKey  []byte
}

var (
	_ SSHServer = (*fakeSSH)(nil)
	_ KeyState  = (*fakeSSH)(nil)
)

func (f *fakeSSH) Addr() net.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln == nil {
		return nil
	}
	return f.ln.Addr()
}

func (f *fakeSSH) Listening() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listening
}

func (f *fakeSSH) HostKeyFingerprint() string { f.mu.Lock(); defer f.mu.Unlock(); return f.fingerprint }
func (f *fakeSSH) HostKeyPinned() bool        { f.mu.Lock(); defer f.mu.Unlock(); return f.pinned }
func (f *fakeSSH) DerivedKeyFingerprint() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.derived
}
func (f *fakeSSH) RequestKey() []byte      { f.mu.Lock(); defer f.mu.Unlock(); return f.requestKey }
func (f *fakeSSH) KeyError() error         { f.mu.Lock(); defer f.mu.Unlock(); return f.keyErr }
func (f *fakeSSH) AuthorizedKeyCount() int { f.mu.Lock(); defer f.mu.Unlock(); return f.keys }

func (f *fakeSSH) Listen() (net.Addr, error) {
	if f.listenErr != nil {
		return nil, f.listenErr
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	return ln.Addr(), nil
}

func (f *fakeSSH) Serve(ctx context.Context) error {
	f.mu.Lock()
	ln, serr := f.ln, f.serveErr
	f.listening = serr == nil
	f.mu.Unlock()
	if serr != nil {
		return serr
	}
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}

func (f *fakeSSH) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.shutdowns++
	hook := f.onShutdown
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	f.listening = false
	ln := f.ln
	f.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	return nil
}

func readySSH() *fakeSSH {
	return &fakeSSH{listening: true, fingerprint: "SHA256:abc", derived: "SHA256:ed", pinned: true, keys: 1}
}

// fakeDetector returns a fixed inventory or error, optionally after a gate.
type fakeDetector struct {
	inv  gpu.Inventory
	err  error
	gate chan struct{}
}

func (d fakeDetector) Detect(ctx context.Context) (gpu.Inventory, error) {
	if d.gate != nil {
		select {
		case <-d.gate:
		case <-ctx.Done():
			return gpu.Inventory{}, ctx.Err()
		}
	}
	return d.inv, d.err
}

func twoGPUs() gpu.Inventory {
	return gpu.Inventory{Source: gpu.SourceNVML, DriverVersion: "550.54", Devices: []gpu.Device{
		{Index: 0, UUID: "GPU-aaaa", Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30},
		{Index: 1, UUID: "GPU-bbbb", Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30},
	}}
}

func newWorker(t *testing.T, ssh SSHServer, det gpu.Detector, mod func(*Config)) *Worker {
	t.Helper()
	cfg := Config{
		SSH:        ssh,
		SSHAddress: ":2222",
		AuthDir:    "/home/mpiuser/.ssh",
		Detector:   det,
		Slots:      gpu.SlotPolicy{Mode: gpu.SlotsAuto},
		Hostname:   "tj-node-0-1",
		UID:        1000680000,
		GID:        0,
		Path:       "/nonexistent",
		Version:    version.Info{Version: "v0.0.0-test", Commit: "abc123", GoVersion: "go1.26", Platform: "linux/amd64"},
	}
	if mod != nil {
		mod(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	w := newWorker(t, &fakeSSH{}, gpu.NewNull(""), nil)
	code, body := get(t, w.Handler(), "/healthz")
	if code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q, want 200 \"ok\\n\" even when not ready", code, body)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ssh      *fakeSSH
		det      gpu.Detector
		detect   bool
		shutdown bool
		want     int
		reasons  []string
	}{
		{name: "ready", ssh: readySSH(), det: gpu.NewNull(""), detect: true, want: 200},
		{name: "before detection", ssh: readySSH(), det: gpu.NewNull(""), want: 503,
			reasons: []string{"gpu detection in progress"}},
		{name: "listener not accepting", ssh: &fakeSSH{fingerprint: "SHA256:x", keys: 1}, det: gpu.NewNull(""), detect: true, want: 503,
			reasons: []string{"ssh listener on :2222 is not accepting connections"}},
		{name: "no keys", ssh: &fakeSSH{listening: true}, det: gpu.NewNull(""), detect: true, want: 503,
			reasons: []string{"ssh host key is not loaded", "no authorized keys loaded from /home/mpiuser/.ssh"}},
		{name: "rotated Secret does not load", ssh: &fakeSSH{listening: true, fingerprint: "SHA256:x", keys: 1,
			keyErr: errors.New("still serving the previous host key SHA256:x: parse private key")}, det: gpu.NewNull(""), detect: true, want: 503,
			reasons: []string{"ssh keys: still serving the previous host key SHA256:x"}},
		{name: "detection failed", ssh: readySSH(), det: fakeDetector{err: errors.New("nvml: driver not loaded")}, detect: true, want: 503,
			reasons: []string{"gpu detection: nvml: driver not loaded"}},
		{name: "gpu slots without gpus", ssh: readySSH(), det: gpu.NewNull("no NVML here"), detect: true, want: 503,
			reasons: []string{"--slots=gpu but no GPU is usable: no NVML here"}},
		{name: "shutting down", ssh: readySSH(), det: gpu.NewNull(""), detect: true, shutdown: true, want: 503,
			reasons: []string{"shutting down"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorker(t, tc.ssh, tc.det, func(c *Config) {
				if tc.name == "gpu slots without gpus" {
					c.Slots = gpu.SlotPolicy{Mode: gpu.SlotsGPU}
				}
			})
			if tc.detect {
				_ = w.Detect(context.Background())
			}
			if tc.shutdown {
				w.BeginShutdown()
			}
			code, body := get(t, w.Handler(), "/readyz")
			if code != tc.want {
				t.Fatalf("/readyz = %d %q, want %d", code, body, tc.want)
			}
			if tc.want == 200 {
				if body != "ready\n" {
					t.Fatalf("/readyz body = %q, want \"ready\\n\"", body)
				}
				return
			}
			if !strings.HasPrefix(body, "not ready: ") {
				t.Fatalf("/readyz body = %q, want a \"not ready: \" reason", body)
			}
			for _, r := range tc.reasons {
				if !strings.Contains(body, r) {
					t.Errorf("/readyz body = %q, want it to contain %q", body, r)
				}
			}
		})
	}
}

func TestInfoShape(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	writeExec(t, filepath.Join(bin, "orted"), 0o755)
	writeExec(t, filepath.Join(bin, "prted"), 0o644) // not executable
	if err := os.Mkdir(filepath.Join(bin, "hydra_pmi_proxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin2 := t.TempDir()
	writeExec(t, filepath.Join(bin2, "hydra_pmi_proxy"), 0o755)
	writeExec(t, filepath.Join(bin2, "orted"), 0o755) // shadowed by bin

	ssh := readySSH()
	if _, err := ssh.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ssh.Shutdown(context.Background()) })
	w := newWorker(t, ssh, fakeDetector{inv: twoGPUs()}, func(c *Config) {
		c.Path = bin + "::relative/dir:" + bin2
		c.SSHAddress = ":0"
	})
	if err := w.Detect(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, w.Handler(), "/info")
	if code != 200 {
		t.Fatalf("/info = %d %s", code, body)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/info is not JSON: %v\n%s", err, body)
	}
	assertKeys(t, "info", doc, "role", "hostname", "slots", "gpus", "daemons", "uid", "gid", "user", "authDir", "hostKey", "sshAddress", "version")
	assertKeys(t, "slots", doc["slots"], "n", "source", "reason")
	assertKeys(t, "gpus", doc["gpus"], "count", "source", "reason", "devices")
	assertKeys(t, "daemons", doc["daemons"], "orted", "prted", "hydra_pmi_proxy", "hydra_bstrap_proxy")
	assertKeys(t, "hostKey", doc["hostKey"], "fingerprint", "derivedFingerprint", "pinned")
	assertKeys(t, "version", doc["version"], "version", "commit", "goVersion", "platform")
	dev := doc["gpus"].(map[string]any)["devices"].([]any)
	if len(dev) != 2 {
		t.Fatalf("devices = %v, want 2", dev)
	}
	assertKeys(t, "device", dev[0], "index", "uuid", "model", "memoryBytes", "mig")

	var info api.Info
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ssh.Addr().String())
	want := api.Info{
		Role:     api.RoleWorker,
		Hostname: "tj-node-0-1",
		Slots:    api.Slots{N: 2, Source: "gpu", Reason: "one slot per usable GPU: 2"},
		GPUs:     api.GPUs{Count: 2, Source: "nvml", Devices: twoGPUs().Devices},
		Daemons: map[string]string{
			"orted":              filepath.Join(bin, "orted"),
			"prted":              "",
			"hydra_pmi_proxy":    filepath.Join(bin2, "hydra_pmi_proxy"),
			"hydra_bstrap_proxy": "",
		},
		UID: 1000680000, GID: 0, AuthDir: "/home/mpiuser/.ssh",
		HostKey:    api.HostKey{Fingerprint: "SHA256:abc", DerivedFingerprint: "SHA256:ed", Pinned: true},
		SSHAddress: ":" + port,
		Version:    version.Info{Version: "v0.0.0-test", Commit: "abc123", GoVersion: "go1.26", Platform: "linux/amd64"},
	}
	if got, wantJ := mustJSON(t, info), mustJSON(t, want); got != wantJ {
		t.Fatalf("/info =\n%s\nwant\n%s", got, wantJ)
	}
}

func TestInfoBeforeDetection(t *testing.T) {
	t.Parallel()
	w := newWorker(t, readySSH(), fakeDetector{gate: make(chan struct{})}, nil)
	_, body := get(t, w.Handler(), "/info")
	var doc struct {
		Slots      map[string]any `json:"slots"`
		GPUs       map[string]any `json:"gpus"`
		SSHAddress string         `json:"sshAddress"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Slots["n"] != float64(0) || doc.Slots["reason"] != "gpu detection in progress" {
		t.Errorf("slots = %v, want n 0 and the in-progress reason", doc.Slots)
	}
	if d, ok := doc.GPUs["devices"].([]any); !ok || len(d) != 0 {
		t.Errorf("gpus.devices = %#v, want [] (never null)", doc.GPUs["devices"])
	}
	if doc.SSHAddress != ":2222" {
		t.Errorf("sshAddress = %q, want the configured :2222 before listening", doc.SSHAddress)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	ssh := readySSH()
	w := newWorker(t, ssh, fakeDetector{inv: twoGPUs()}, func(c *Config) { c.Registry = reg })
	if v := gaugeValue(t, reg, "podmpi_worker_ready"); v != 0 {
		t.Fatalf("podmpi_worker_ready = %v before detection, want 0", v)
	}
	if err := w.Detect(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"podmpi_worker_ready": 1, "podmpi_worker_gpus": 2, "podmpi_worker_slots": 2, "podmpi_worker_build_info": 1} {
		if v := gaugeValue(t, reg, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	mf := family(t, reg, "podmpi_worker_build_info")
	labels := map[string]string{}
	for _, l := range mf.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "v0.0.0-test" || labels["commit"] != "abc123" || labels["goversion"] != "go1.26" {
		t.Errorf("build_info labels = %v", labels)
	}
	w.BeginShutdown()
	if v := gaugeValue(t, reg, "podmpi_worker_ready"); v != 0 {
		t.Errorf("podmpi_worker_ready = %v after shutdown began, want 0", v)
	}
	code, body := get(t, w.Handler(), "/metrics")
	if code != 200 || !strings.Contains(body, "podmpi_worker_slots 2") {
		t.Errorf("/metrics = %d, want podmpi_worker_slots 2 in:\n%s", code, body)
	}
}

func TestNewTwiceOnOneRegistryFails(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	newWorker(t, readySSH(), gpu.NewNull(""), func(c *Config) { c.Registry = reg })
	_, err := New(Config{SSH: readySSH(), Detector: gpu.NewNull(""), Registry: reg})
	if err == nil || !strings.Contains(err.Error(), "registering worker metrics") {
		t.Fatalf("second New on the same registry: err = %v, want a registration error", err)
	}
}

func TestNewRequiresSSHAndDetector(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Detector: gpu.NewNull("")}); err == nil {
		t.Error("New without SSH: want an error")
	}
	if _, err := New(Config{SSH: readySSH()}); err == nil {
		t.Error("New without Detector: want an error")
	}
}

// TestRunLifecycle runs the worker with HTTP on loopback, waits for
// readiness, cancels, and checks that /readyz was already 503 when the SSH
// shutdown began and that Run returns nil.
func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	ssh := &fakeSSH{fingerprint: "SHA256:abc", pinned: true, keys: 1}
	w := newWorker(t, ssh, fakeDetector{inv: twoGPUs(), gate: gate}, func(c *Config) {
		c.WebAddress = "127.0.0.1:0"
		c.SSHAddress = "127.0.0.1:0"
		c.ShutdownGrace = 2 * time.Second
	})
	var duringShutdown struct {
		code int
		body string
	}
	var listeningCalls atomic.Int32
	w.cfg.Listening = func() {
		if w.WebAddr() == nil || ssh.Addr() == nil {
			t.Error("Listening hook called before both addresses were bound")
		}
		listeningCalls.Add(1)
	}
	ssh.onShutdown = func() {
		duringShutdown.code, duringShutdown.body = httpGet(t, w.WebAddr(), "/readyz")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	addr := waitFor(t, func() net.Addr { return w.WebAddr() })
	code, body := httpGet(t, addr, "/readyz")
	if code != 503 || !strings.Contains(body, "gpu detection in progress") {
		t.Fatalf("/readyz before detection = %d %q, want 503 gpu detection in progress", code, body)
	}
	close(gate)
	waitFor(t, func() net.Addr {
		if c, _ := httpGet(t, addr, "/readyz"); c == 200 {
			return addr
		}
		return nil
	})
	if c, b := httpGet(t, addr, "/info"); c != 200 || !strings.Contains(b, `"sshAddress": "127.0.0.1:`) {
		t.Fatalf("/info = %d %s", c, b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	if duringShutdown.code != 503 || !strings.Contains(duringShutdown.body, "shutting down") {
		t.Fatalf("/readyz while SSH shut down = %d %q, want 503 shutting down", duringShutdown.code, duringShutdown.body)
	}
	if ssh.shutdowns != 1 {
		t.Fatalf("SSH Shutdown called %d times, want 1", ssh.shutdowns)
	}
	if n := listeningCalls.Load(); n != 1 {
		t.Fatalf("Listening hook called %d times, want 1", n)
	}
	if _, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		t.Fatal("HTTP still accepting after Run returned")
	}
}

func TestRunListenErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() }) // not defer: the parallel subtests run after this function returns

	t.Run("ssh", func(t *testing.T) {
		t.Parallel()
		ssh := &fakeSSH{listenErr: fmt.Errorf("sshd listen: %w", &net.OpError{Op: "listen", Net: "tcp",
			Err: os.NewSyscallError("bind", syscall.EADDRINUSE)})}
		w := newWorker(t, ssh, gpu.NewNull(""), func(c *Config) { c.SSHAddress = busy.Addr().String() })
		err := w.Run(context.Background())
		var le *ListenError
		if !errors.As(err, &le) || le.Service != "ssh" || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("Run = %v, want *ListenError for ssh wrapping EADDRINUSE", err)
		}
		want := "listen ssh on " + busy.Addr().String() + ": address already in use"
		if err.Error() != want {
			t.Errorf("message = %q, want %q", err.Error(), want)
		}
		if !strings.Contains(le.Hint(), "--ssh.listen-address") {
			t.Errorf("hint = %q, want it to name --ssh.listen-address", le.Hint())
		}
	})
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		ssh := readySSH()
		w := newWorker(t, ssh, gpu.NewNull(""), func(c *Config) { c.WebAddress = busy.Addr().String() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := w.Run(ctx)
		var le *ListenError
		if !errors.As(err, &le) || le.Service != "http" || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("Run = %v, want *ListenError for http wrapping EADDRINUSE", err)
		}
		if !strings.Contains(le.Hint(), "--web.listen-address") || !strings.Contains(le.Hint(), busy.Addr().String()) {
			t.Errorf("hint = %q, want it to name the address and --web.listen-address", le.Hint())
		}
		if ssh.shutdowns != 1 {
			t.Errorf("SSH listener not released after the HTTP listen failure (Shutdown calls %d)", ssh.shutdowns)
		}
	})
}

func TestRunDetectErrorStops(t *testing.T) {
	t.Parallel()
	ssh := readySSH()
	w := newWorker(t, ssh, gpu.NewNull("no GPU in this pod"), func(c *Config) {
		c.Slots = gpu.SlotPolicy{Mode: gpu.SlotsGPU}
		c.ShutdownGrace = time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.Run(ctx)
	var de *DetectError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "no GPU in this pod") {
		t.Fatalf("Run = %v, want *DetectError carrying the inventory reason", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for the context instead of stopping on the detection error")
	}
	if de.Hint() == "" {
		t.Error("DetectError has no hint")
	}
}

func TestRunSSHServeError(t *testing.T) {
	t.Parallel()
	ssh := readySSH()
	ssh.serveErr = errors.New("accept: too many open files")
	w := newWorker(t, ssh, gpu.NewNull(""), func(c *Config) { c.ShutdownGrace = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "serving ssh on 127.0.0.1:") || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("Run = %v, want the serve error with the address", err)
	}
}

func writeExec(t testing.TB, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func assertKeys(t *testing.T, what string, v any, want ...string) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", what, v)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s keys = %v, want exactly %v", what, got, want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return nil
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return family(t, reg, name).GetMetric()[0].GetGauge().GetValue()
}

func httpGet(t *testing.T, addr net.Addr, path string) (int, string) {
	t.Helper()
	if addr == nil {
		return 0, "no address"
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr.String() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, f func() net.Addr) net.Addr {
	t.Helper()
	var a net.Addr
	sshtest.Eventually(t, 10*time.Second, "address", func() bool { a = f(); return a != nil })
	return a
}
