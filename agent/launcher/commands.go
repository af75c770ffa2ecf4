package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/hostfile"
)

// The launcher's commands, one function each, so that cmd/launcher only
// parses flags into a Config and calls one of them. Each returns the exit
// code the process ends with; a non-nil error is what to print (nil when
// nothing more needs saying).

// RunJob is `launcher -- <command>`: every phase, then the command, with
// /metrics served meanwhile (Config.WebAddr), the root cause written to
// Config.TerminationLog and the metrics pushed to Config.PushURL at the end.
// When the command itself fails (mpirun's own exit code), the returned
// error is one line naming the code: mpirun's output already said why.
func RunJob(ctx context.Context, cfg Config) (exitcode.Code, error) {
	l, err := New(cfg)
	if err != nil {
		return exitcode.Internal, err
	}
	stop := l.ServeMetrics(cfg.WebAddr)
	defer stop()
	l.connectKube(ctx)
	defer l.closeKube()
	l.connectStatus(ctx)
	code, runErr := l.Run(ctx)
	l.WriteTerminationLog(cfg.TerminationLog, TerminationMessage(code, runErr))
	l.recordEnd(code, runErr)
	l.closeStatus(code, runErr)
	if err := l.Push(context.Background(), code == exitcode.OK && runErr == nil); err != nil {
		l.log.Warn("metrics push failed", "err", err)
	}
	var f *Failure
	if errors.As(runErr, &f) && f.Phase == PhaseMPIRun && f.Code != exitcode.MPIRunNotFound && f.Code != exitcode.MPIRunTimeout &&
		f.Code != exitcode.Internal && f.Code != exitcode.LaunchFailed {
		if f.Diagnosis != nil {
			return code, fmt.Errorf("%s exited with %d; %s", cfg.Command[0], code, f.Diagnosis.Summary())
		}
		return code, fmt.Errorf("%s exited with %d", cfg.Command[0], code)
	}
	return code, runErr
}

// Probe is `launcher probe`: the phases up to the SSH probe, with the
// report on cfg.Report; nothing is run.
func Probe(ctx context.Context, cfg Config, out io.Writer) (exitcode.Code, error) {
	cfg.Report = out
	l, err := New(cfg)
	if err != nil {
		return exitcode.Internal, err
	}
	if _, err := l.Prepare(ctx, true); err != nil {
		return codeOf(err), err
	}
	fmt.Fprintln(out, "all workers passed the probe")
	return exitcode.OK, nil
}

// PrintHostfile is `launcher hostfile`: the phases up to the hostfile (DNS
// wait, slots), then the hostfile on out.
func PrintHostfile(ctx context.Context, cfg Config, out io.Writer) (exitcode.Code, error) {
	cfg.Report = nil
	l, err := New(cfg)
	if err != nil {
		return exitcode.Internal, err
	}
	p, err := l.Prepare(ctx, false)
	if err != nil {
		return codeOf(err), err
	}
	if err := hostfile.Render(out, p.Impl.HostfileFormat(), p.Hosts); err != nil {
		return exitcode.Internal, err
	}
	return exitcode.OK, nil
}

// discoverNowTimeout bounds `launcher discover-hosts`: Horovod runs it
// periodically and wants an answer, not a wait.
const discoverNowTimeout = 30 * time.Second

// DiscoverHosts is `launcher discover-hosts`, Horovod's
// --host-discovery-script: one host:slots line per worker that resolves now
// (slots from the source, else --discovery.default-slots); the others are
// left out and logged.
func DiscoverHosts(ctx context.Context, cfg Config, out io.Writer) (exitcode.Code, error) {
	l, err := New(cfg)
	if err != nil {
		return exitcode.Internal, err
	}
	spec, err := l.cfg.spec()
	if err != nil {
		return codeOf(err), err
	}
	plan, err := discovery.Resolve(spec)
	if err != nil {
		return exitcode.Config, &Failure{Phase: PhaseDiscovery, Code: exitcode.Config, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, discoverNowTimeout)
	defer cancel()
	found, missing, err := discovery.DiscoverNow(ctx, spec, plan, l.cfg.Resolver)
	if err != nil {
		return exitcode.DiscoveryTimeout, &Failure{Phase: PhaseDiscovery, Code: exitcode.DiscoveryTimeout, Err: err}
	}
	if len(missing) > 0 {
		l.log.Info("not resolvable yet; left out", "hosts", strings.Join(missing, ","))
	}
	hosts := make([]hostfile.Host, len(found))
	for i, r := range found {
		hosts[i] = r.Host
	}
	for _, h := range hostfile.WithDefaultSlots(hosts, l.cfg.DefaultSlots) {
		fmt.Fprintf(out, "%s:%d\n", h.Name, h.Slots)
	}
	return exitcode.OK, nil
}

// ServeMetrics serves /metrics and /healthz on addr while the launcher
// runs ("" serves nothing) and returns the function that stops it. A port
// that cannot be had is logged, not fatal: the job matters more.
func (l *Launcher) ServeMetrics(addr string) (stop func()) {
	if addr == "" {
		return func() {}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		l.log.Warn("metrics endpoint disabled: cannot listen", "address", addr, "err", err)
		return func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(l.m.Scrape, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// A launcher's /info says only that it is one: a launcher whose hostfile
	// lists this pod then names it instead of waiting for a worker-agent.
	hostname, _ := os.Hostname()
	mux.HandleFunc(api.InfoPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.Info{Role: api.RoleLauncher, Hostname: hostname})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}
