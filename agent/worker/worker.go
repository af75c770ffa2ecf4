// Package worker wires the pieces of the worker-agent together: the embedded
// SSH server (package sshd), GPU detection and slot resolution (package gpu),
// and the agent's HTTP face.
//
// The HTTP face serves
//
//	/healthz  200 "ok" while the process runs (liveness)
//	/readyz   200 "ready" only when the SSH listener accepts connections, the
//	          host key and authorized keys are loaded (and match the auth
//	          dir as it is now: a rotated Secret that does not load makes it
//	          503) and GPU detection has finished; otherwise 503 with the
//	          reasons. It turns 503 ("shutting down") as soon as a graceful
//	          shutdown begins.
//	/info     JSON: hostname, slots, GPUs, which MPI daemons are on the PATH
//	          SSH sessions get, uid/gid, auth dir, host key and derived host
//	          key fingerprints, SSH address and build version (see [Info];
//	          the launcher reads these keys)
//	/events   JSON: the account of the pod (package account): OOM kills
//	          with the memory limit and usage, rank and session exits, GPU
//	          errors, recorded after ?after=<seq> (see [api.EventsQuery];
//	          the launcher reads it while mpirun runs and after a failed
//	          job); at most 4 requests at once, and 4 more for requests
//	          that prove they come from the job's launcher (api.ProofHeader,
//	          proof.go), each answered within 5 s from a reading the
//	          account shares (account.Account.Snapshot)
//	/metrics  Prometheus exposition of a dedicated registry
//
// The HTTP server is unauthenticated, so it is bounded: at most
// Config.WebMaxConnections connections at once (the oldest idle one is
// closed to make room for a new one, so a flood of idle connections cannot
// keep the kubelet's probes out), header, read, write and idle timeouts,
// and 16 KiB of request headers.
//
// [Worker.Run] owns the lifecycle: listen (SSH, then HTTP), serve, detect
// GPUs in the background, and on cancellation mark the worker not ready,
// shut the SSH server down within the grace period, then stop HTTP.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/agent/worker/account"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
)

// SSHState is the read-only view of the SSH server that readiness and /info
// need. *sshd.Server implements it.
type SSHState interface {
	// Addr is the bound address; nil before Listen.
	Addr() net.Addr
	// Listening reports whether the listener accepts connections.
	Listening() bool
	// HostKeyFingerprint is the SHA256 fingerprint of the host key.
	HostKeyFingerprint() string
	// HostKeyPinned reports whether the host key is the job key (so clients
	// can pin it to id_rsa.pub) rather than a generated one.
	HostKeyPinned() bool
	// AuthorizedKeyCount is the number of keys accepted for login.
	AuthorizedKeyCount() int
}

// KeyState is what an SSHState that follows the job's key files also
// reports (*sshd.Server does); the worker uses it when present.
type KeyState interface {
	// DerivedKeyFingerprint is the SHA256 fingerprint of the ed25519 key
	// derived from the job key, served as a second host key; "" when none.
	DerivedKeyFingerprint() string
	// KeyError says why the keys in use are not what the auth dir holds
	// now (a rotated Secret that does not load), or nil.
	KeyError() error
}

// SSHServer is the SSH server the worker runs. *sshd.Server implements it.
type SSHServer interface {
	SSHState
	// Listen binds the listen address.
	Listen() (net.Addr, error)
	// Serve accepts connections until Shutdown or until ctx ends.
	Serve(ctx context.Context) error
	// Shutdown stops accepting, lets sessions finish until ctx ends, then
	// ends them.
	Shutdown(ctx context.Context) error
}

// Defaults for Config fields left zero.
const (
	DefaultShutdownGrace     = 25 * time.Second
	DefaultDetectTimeout     = 2 * time.Minute
	DefaultWebMaxConnections = 128
	// HTTPShutdownTimeout bounds the HTTP server's shutdown after SSH is done.
	HTTPShutdownTimeout = 3 * time.Second
)

// Config configures a Worker.
type Config struct {
	// SSH is the SSH server. Required.
	SSH SSHServer
	// SSHAddress is the configured SSH listen address (--ssh.listen-address).
	SSHAddress string
	// WebAddress is the HTTP listen address; "" disables HTTP.
	WebAddress string
	// WebMaxConnections bounds the HTTP connections open at once; 0 means
	// DefaultWebMaxConnections. At the bound the oldest idle connection is
	// closed for a new one (see limitListener).
	WebMaxConnections int
	// AuthDir is the directory the SSH keys came from.
	AuthDir string
	// Detector finds the GPUs. Required.
	Detector gpu.Detector
	// Slots is the --slots policy.
	Slots gpu.SlotPolicy
	// CPUs is read by the cpu slot policy; nil means the cgroup quota.
	CPUs gpu.CPUQuota
	// DetectTimeout bounds GPU detection; 0 means DefaultDetectTimeout.
	DetectTimeout time.Duration
	// ShutdownGrace bounds the SSH shutdown; 0 means DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Hostname is reported by /info.
	Hostname string
	// UID, GID and User are reported by /info (User may be empty: an
	// arbitrary UID has no passwd entry).
	UID, GID int
	User     string
	// Path is the PATH SSH sessions get; MPI daemons are looked up in it.
	Path string
	// Version is the build identity.
	Version version.Info
	// Registry receives the worker's metrics and is served on /metrics.
	// nil means a new empty registry.
	Registry *prometheus.Registry
	// Logger; nil discards.
	Logger *slog.Logger
	// Listening, when set, is called once by Run after the SSH and HTTP
	// addresses are bound and before serving starts: the end of startup.
	Listening func()
	// Account is the account of the pod served on /events; Run keeps it
	// up to date while it serves. nil serves 404 there.
	Account *account.Account
	// GPUEvents, when set, watches the detected GPUs for Xid and
	// double-bit ECC errors into Account once detection found some.
	GPUEvents gpu.EventWatcher
	// Launchers, when set, lists the launcher instances that started
	// sessions on the SSH server, for /events (api.Events.Launchers).
	Launchers func() []api.LauncherSessions
}

// Worker is a running worker-agent: readiness state, /info and /metrics.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	handler http.Handler
	gate    *launcherGate // tells the job's launcher's /events requests apart
	// eventsWrite bounds one /events answer: eventsWriteTimeout (tests
	// set their own).
	eventsWrite time.Duration

	shuttingDown atomic.Bool
	webAddr      atomic.Pointer[net.Addr]
	httpLn       atomic.Pointer[limitListener]

	mu        sync.Mutex
	detected  bool
	detectErr error
	inv       gpu.Inventory
	slots     gpu.Slots
}

// New validates cfg, registers the worker's metrics and builds the handler.
func New(cfg Config) (*Worker, error) {
	if cfg.SSH == nil {
		return nil, errors.New("worker config: SSH server is nil")
	}
	if cfg.Detector == nil {
		return nil, errors.New("worker config: GPU detector is nil")
	}
	if cfg.DetectTimeout <= 0 {
		cfg.DetectTimeout = DefaultDetectTimeout
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.WebMaxConnections <= 0 {
		cfg.WebMaxConnections = DefaultWebMaxConnections
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{cfg: cfg, log: log, reg: cfg.Registry, gate: newLauncherGate(cfg.SSH), eventsWrite: eventsWriteTimeout}
	m, err := newMetrics(cfg.Registry, cfg.Version, w.readyGauge)
	if err != nil {
		return nil, err
	}
	w.metrics = m
	w.handler = w.newMux()
	return w, nil
}

// Handler returns the HTTP handler (/healthz, /readyz, /info, /metrics).
func (w *Worker) Handler() http.Handler { return w.handler }

// WebAddr is the bound HTTP address; nil before Run listens or when HTTP
// is disabled.
func (w *Worker) WebAddr() net.Addr {
	if a := w.webAddr.Load(); a != nil {
		return *a
	}
	return nil
}

// BeginShutdown makes /readyz answer 503 "shutting down" from now on.
func (w *Worker) BeginShutdown() { w.shuttingDown.Store(true) }

// ListenError reports an address the worker could not listen on.
type ListenError struct {
	Service string // "ssh" or "http"
	Addr    string
	Err     error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("listen %s on %s: %v", e.Service, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// Hint is the operator's fix for the failure.
func (e *ListenError) Hint() string {
	flag := "--ssh.listen-address"
	if e.Service == "http" {
		flag = "--web.listen-address"
	}
	switch {
	case errors.Is(e.Err, syscall.EADDRINUSE):
		return fmt.Sprintf("another process already listens on %s; stop it or pick a free port with %s", e.Addr, flag)
	case errors.Is(e.Err, syscall.EACCES):
		return fmt.Sprintf("ports below 1024 need privileges a non-root pod does not have; use a port above 1024 with %s", flag)
	case errors.Is(e.Err, syscall.EADDRNOTAVAIL):
		return fmt.Sprintf("no local interface has that IP; use :PORT to listen on all interfaces (%s)", flag)
	}
	return fmt.Sprintf("fix %s (host:port, e.g. :2222)", flag)
}

// DetectError reports a failed GPU detection or slot resolution.
type DetectError struct{ Err error }

func (e *DetectError) Error() string { return "gpu detection: " + e.Err.Error() }

func (e *DetectError) Unwrap() error { return e.Err }

// Hint is the operator's fix for the failure.
func (e *DetectError) Hint() string {
	return "check the node's NVIDIA driver (nvidia-smi) and the pod's GPU request, or use --gpu.detect=auto|none and --slots=auto|cpu|N"
}

// Run listens on the SSH and HTTP addresses, serves both, detects GPUs in
// the background and runs until ctx ends or something fails. On ctx's end
// it shuts down gracefully and returns nil. Listen failures are
// *ListenError; detection failures are *DetectError.
func (w *Worker) Run(ctx context.Context) error {
	addr, err := w.cfg.SSH.Listen()
	if err != nil {
		return &ListenError{Service: "ssh", Addr: w.cfg.SSHAddress, Err: unwrapOpError(err)}
	}
	w.log.Info("ssh listening", "addr", addr.String(), "hostKey", w.cfg.SSH.HostKeyFingerprint(),
		"derivedHostKey", w.derivedFingerprint(),
		"hostKeyPinned", w.cfg.SSH.HostKeyPinned(), "authorizedKeys", w.cfg.SSH.AuthorizedKeyCount())

	var httpLn *limitListener
	if w.cfg.WebAddress != "" {
		ln, err := net.Listen("tcp", w.cfg.WebAddress)
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = w.cfg.SSH.Shutdown(sctx)
			cancel()
			return &ListenError{Service: "http", Addr: w.cfg.WebAddress, Err: unwrapOpError(err)}
		}
		httpLn = newLimitListener(ln, w.cfg.WebMaxConnections, w.log)
		w.httpLn.Store(httpLn)
		a := ln.Addr()
		w.webAddr.Store(&a)
		w.log.Info("http listening", "addr", a.String(), "maxConnections", w.cfg.WebMaxConnections)
	}

	if w.cfg.Listening != nil {
		w.cfg.Listening()
	}

	// serveCtx outlives ctx: cancelling it aborts serving, which must only
	// happen after the graceful SSH shutdown.
	serveCtx, cancelServe := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelServe()

	var wg sync.WaitGroup
	errc := make(chan error, 3)

	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.cfg.SSH.Serve(serveCtx); err != nil && serveCtx.Err() == nil && !w.shuttingDown.Load() {
			errc <- fmt.Errorf("serving ssh on %s: %w", addr, err)
		}
	}()

	var srv *http.Server
	if httpLn != nil {
		srv = newHTTPServer(w.handler, httpLn, w.log)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving http on %s: %w", httpLn.Addr(), err)
			}
		}()
	}

	if acct := w.cfg.Account; acct != nil {
		wg.Go(func() { acct.Run(serveCtx) })
	}
	detectCtx, cancelDetect := context.WithTimeout(ctx, w.cfg.DetectTimeout)
	defer cancelDetect()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Detect(detectCtx); err != nil && ctx.Err() == nil {
			errc <- err
			return
		}
		w.watchGPUs(serveCtx)
	}()

	var runErr error
	select {
	case <-ctx.Done():
		w.log.Info("shutting down", "cause", context.Cause(ctx), "grace", w.cfg.ShutdownGrace)
	case runErr = <-errc:
	}
	cancelDetect()
	w.shutdown(srv)
	cancelServe()
	wg.Wait()
	return runErr
}

// shutdown marks the worker not ready, drains SSH within the grace and then
// stops HTTP.
func (w *Worker) shutdown(srv *http.Server) {
	w.BeginShutdown()
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownGrace)
	if err := w.cfg.SSH.Shutdown(sctx); err != nil {
		w.log.Warn("ssh shutdown did not finish cleanly; remaining sessions were ended", "err", err, "grace", w.cfg.ShutdownGrace)
	} else {
		w.log.Info("ssh shut down", "took", time.Since(start).Round(time.Millisecond))
	}
	cancel()
	if srv != nil {
		hctx, cancel := context.WithTimeout(context.Background(), HTTPShutdownTimeout)
		if err := srv.Shutdown(hctx); err != nil {
			w.log.Warn("http shutdown", "err", err)
			_ = srv.Close()
		}
		cancel()
	}
}

// Detect runs GPU detection and resolves the slots. The worker becomes
// ready (for this part) whether or not it succeeds; a failure is returned as
// a *DetectError and kept for /readyz.
func (w *Worker) Detect(ctx context.Context) error {
	start := time.Now()
	inv, err := w.cfg.Detector.Detect(ctx)
	var slots gpu.Slots
	if err == nil {
		slots, err = w.cfg.Slots.Resolve(inv, w.cfg.CPUs)
	}
	if inv.Devices == nil {
		inv.Devices = []gpu.Device{}
	}
	w.mu.Lock()
	w.detected = true
	if err != nil {
		w.detectErr = &DetectError{Err: err}
	} else {
		w.inv, w.slots = inv, slots
	}
	w.mu.Unlock()
	if err != nil {
		return &DetectError{Err: err}
	}
	w.metrics.gpus.Set(float64(inv.Count()))
	w.metrics.slots.Set(float64(slots.N))
	w.log.Info("gpu detection done", "gpus", inv.Count(), "source", inv.Source, "reason", inv.Reason,
		"slots", slots.N, "slotSource", slots.Source, "took", time.Since(start).Round(time.Millisecond))
	for _, n := range inv.Notes {
		w.log.Info("gpu detection note", "note", n)
	}
	return nil
}

// watchGPUs records the GPU errors of the detected GPUs into the account
// until ctx ends, when there are GPUs, an account and a watcher.
func (w *Worker) watchGPUs(ctx context.Context) {
	w.mu.Lock()
	inv := w.inv
	w.mu.Unlock()
	if w.cfg.Account == nil || w.cfg.GPUEvents == nil || inv.Count() == 0 || inv.Source != gpu.SourceNVML {
		return
	}
	w.log.Info("watching GPU errors (Xid, double-bit ECC)", "gpus", inv.Count())
	if err := w.cfg.GPUEvents.Watch(ctx, inv.Devices, w.cfg.Account.GPU); err != nil && ctx.Err() == nil {
		w.log.Warn("GPU errors are not watched; the account will not name a failing GPU", "err", err)
	}
}

// Readiness returns whether the worker is ready and, if not, why.
func (w *Worker) Readiness() (bool, []string) {
	if w.shuttingDown.Load() {
		return false, []string{"shutting down"}
	}
	var why []string
	s := w.cfg.SSH
	if !s.Listening() {
		why = append(why, fmt.Sprintf("ssh listener on %s is not accepting connections", w.sshAddress()))
	}
	if s.HostKeyFingerprint() == "" {
		why = append(why, "ssh host key is not loaded")
	}
	if s.AuthorizedKeyCount() == 0 {
		why = append(why, fmt.Sprintf("no authorized keys loaded from %s", orNone(w.cfg.AuthDir)))
	}
	if ks, ok := s.(KeyState); ok {
		if err := ks.KeyError(); err != nil {
			why = append(why, "ssh keys: "+err.Error())
		}
	}
	w.mu.Lock()
	detected, derr := w.detected, w.detectErr
	w.mu.Unlock()
	switch {
	case !detected:
		why = append(why, "gpu detection in progress")
	case derr != nil:
		why = append(why, derr.Error())
	}
	return len(why) == 0, why
}

// derivedFingerprint is the derived host key's fingerprint, "" when the SSH
// server does not report one.
func (w *Worker) derivedFingerprint() string {
	if ks, ok := w.cfg.SSH.(KeyState); ok {
		return ks.DerivedKeyFingerprint()
	}
	return ""
}

func (w *Worker) readyGauge() float64 {
	if ok, _ := w.Readiness(); ok {
		return 1
	}
	return 0
}

// sshAddress is the configured address with the bound port, so ":0" shows
// the port actually chosen while ":2222" stays ":2222".
func (w *Worker) sshAddress() string {
	conf := w.cfg.SSHAddress
	a := w.cfg.SSH.Addr()
	if a == nil {
		return conf
	}
	host, _, err := net.SplitHostPort(conf)
	if err != nil {
		return a.String()
	}
	_, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return net.JoinHostPort(host, port)
}

func orNone(s string) string {
	if s == "" {
		return "(no auth dir)"
	}
	return s
}

// unwrapOpError drops net.OpError's "listen tcp :x:" prefix, which the
// ListenError message already carries.
func unwrapOpError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}
