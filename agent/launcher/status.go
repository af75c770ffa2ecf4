package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/postmortem"
	"github.com/podmpi/podmpi/agent/launcher/trainerstatus"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

// What the launcher puts into its TrainJob's status (package
// trainerstatus), when Trainer gives it the status API's variables (the
// gate TrainJobStatus is on): its phase and counts while it starts, the
// end and, after a failure, the root cause, as metrics named podmpi_*;
// and an endpoint of its own for the ranks, whose requests it carries to
// Trainer with its token. Without the variables none of this exists and
// nothing is logged above INFO.

// StatusDirName is the local endpoint's directory (token, CA) inside the
// launcher's private one.
const StatusDirName = "trainer-status"

// statusFinalTimeout bounds the last status request, made before the
// launcher exits; statusUnheardTimeout bounds it when Trainer answered no
// request before (its endpoint is likely out of reach): the launcher's
// end is not held up for a report.
const (
	statusFinalTimeout   = 5 * time.Second
	statusUnheardTimeout = time.Second
)

// statusView is the launcher's side of the status API.
type statusView struct {
	ep   trainerstatus.Endpoint
	rep  *trainerstatus.Reporter
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	phase  string // the phase running, or how the launcher ended
	slots  int    // the world size, once decided
	probed int    // the workers the SSH probe asked (never the launcher's own pod)
}

// connectStatus starts reporting when Trainer gave the variables.
func (l *Launcher) connectStatus(ctx context.Context) {
	getenv := l.cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ep, ok, err := trainerstatus.FromEnv(getenv)
	switch {
	case !ok:
		return
	case err != nil:
		l.log.Warn("the TrainJob's status will not be updated: Trainer's status variables are not usable (the ranks get none of them)",
			"err", err, "component", "trainer-status")
		return
	}
	sv := &statusView{ep: ep, rep: trainerstatus.NewReporter(trainerstatus.NewClient(ep), l.log.With("component", "trainer-status"))}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	sv.stop = stop
	sv.wg.Go(func() { sv.rep.Run(rctx) })
	l.status = sv
	l.log.Info("reporting the launcher's state to the TrainJob's status (Trainer's status API)", "endpoint", ep.URL.Host, "component", "trainer-status")
	l.reportStatus("")
}

// reportStatus records the phase now running ("" keeps the last) and
// sends the launcher's state, paced.
func (l *Launcher) reportStatus(phase string) {
	sv := l.status
	if sv == nil {
		return
	}
	sv.mu.Lock()
	if phase != "" {
		sv.phase = phase
	}
	own := l.statusMetrics(sv)
	sv.mu.Unlock()
	sv.rep.Set(own)
}

// setStatusSlots records the world size.
func (l *Launcher) setStatusSlots(n int) {
	if sv := l.status; sv != nil {
		sv.mu.Lock()
		sv.slots = n
		sv.mu.Unlock()
	}
}

// setStatusProbed records how many workers the SSH probe asked: beside
// the reachable count it tells a worker that failed the probe from the
// launcher's own pod, which is expected but never probed.
func (l *Launcher) setStatusProbed(n int) {
	if sv := l.status; sv != nil {
		sv.mu.Lock()
		sv.probed = n
		sv.mu.Unlock()
	}
}

// statusMetrics is the launcher's state as status metrics; sv.mu is held.
func (l *Launcher) statusMetrics(sv *statusView) []trainerstatus.Metric {
	phase := sv.phase
	if phase == "" {
		phase = "starting"
	}
	ms := []trainerstatus.Metric{{Name: "podmpi_phase", Value: phase}}
	add := func(name string, v float64, ok bool) {
		if ok {
			ms = append(ms, trainerstatus.Metric{Name: name, Value: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	expected, ok := gaugeValue(l.m.WorkersExpected)
	add("podmpi_workers_expected", expected, ok && expected > 0)
	if v, ok := gaugeValue(l.m.WorkersResolved); ok && expected > 0 {
		add("podmpi_workers_resolved", v, true)
	}
	if v, ok := gaugeValue(l.m.WorkersReach); ok && expected > 0 && sv.probed > 0 {
		add("podmpi_workers_probed", float64(sv.probed), true)
		add("podmpi_workers_reachable", v, true)
	}
	add("podmpi_slots", float64(sv.slots), sv.slots > 0)
	if v, ok := gaugeValue(l.m.InitDuration); ok && v > 0 {
		add("podmpi_init_seconds", float64(time.Duration(v*float64(time.Second)).Round(time.Millisecond))/float64(time.Second), true)
	}
	return ms
}

// gaugeValue reads a gauge's value.
func gaugeValue(g prometheus.Gauge) (float64, bool) {
	var m dto.Metric
	if g == nil || g.Write(&m) != nil || m.Gauge == nil {
		return 0, false
	}
	return m.Gauge.GetValue(), true
}

// closeStatus sends the launcher's end, whatever the paced reports are
// doing (within statusFinalTimeout, or statusUnheardTimeout when Trainer
// never answered: the process exits next), and stops reporting; a WARN
// says when it did not land. On success the phase "succeeded" and exit
// code 0; on failure the phase "failed", the exit code, the reason of the
// failure Event, its first line, and the root cause's host and rank when
// the diagnosis named them. These go first when the status has no room
// for every metric.
func (l *Launcher) closeStatus(code exitcode.Code, err error) {
	sv := l.status
	if sv == nil {
		return
	}
	sv.mu.Lock()
	failed := err != nil || code != exitcode.OK
	sv.phase = "succeeded"
	if failed {
		sv.phase = "failed"
	}
	phase := sv.phase
	state := l.statusMetrics(sv)
	sv.mu.Unlock()
	end := []trainerstatus.Metric{{Name: "podmpi_exit_code", Value: strconv.Itoa(int(code))}}
	if !failed {
		sv.rep.Set(append(state, end...))
	} else {
		end = append(end,
			trainerstatus.Metric{Name: "podmpi_reason", Value: trainerstatus.Clip(EventReason(code, err))},
			trainerstatus.Metric{Name: "podmpi_root_cause", Value: trainerstatus.Clip(rootCauseLine(err))})
		var f *Failure
		// A rank that only ended with the job (its status unseen, the first
		// an agent saw end) is no root cause: its host and rank are not
		// given as one, whatever the sentence says of it.
		if errors.As(err, &f) && f.Diagnosis != nil && f.Diagnosis.Root != nil && f.Diagnosis.Root.Cause != postmortem.CauseCascade {
			if h := f.Diagnosis.Root.Host; h != "" {
				end = append(end, trainerstatus.Metric{Name: "podmpi_root_cause_host", Value: trainerstatus.Clip(h)})
			}
			if r := f.Diagnosis.Root.Rank; r >= 0 {
				end = append(end, trainerstatus.Metric{Name: "podmpi_root_cause_rank", Value: strconv.Itoa(r)})
			}
		}
		// The failure first: the status may lack room for every metric.
		sv.rep.SetFailure(append(end, state...))
	}
	// The end goes now, after a request still under way (Trainer applies
	// them in order); what is still under way once the wait is over is
	// given up: the process exits next.
	wait := statusFinalTimeout
	if !sv.rep.Heard() {
		wait = statusUnheardTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	endErr := sv.rep.Final(ctx)
	cancel()
	sv.stop()
	sv.wg.Wait()
	var refused *trainerstatus.Refusal
	switch {
	case endErr == nil:
		l.log.Debug("the TrainJob's status has the launcher's end", "phase", phase, "requests", sv.rep.Sent(), "component", "trainer-status")
	case errors.As(endErr, &refused):
		// Said at WARN when Trainer refused.
		l.log.Debug("the launcher's end did not reach the TrainJob's status", "err", endErr, "requests", sv.rep.Sent(), "component", "trainer-status")
	default:
		l.log.Warn("the launcher's end did not reach the TrainJob's status: it keeps the last state Trainer took (the job's own result is not affected)",
			"phase", phase, "endpoint", sv.ep.URL.Host, "err", endErr, "waited", wait, "requests", sv.rep.Sent(), "component", "trainer-status",
			"hint", "Trainer's status endpoint did not take a request in the launcher's last seconds (a controller restarting or overloaded, "+
				"a NetworkPolicy): the TrainJob's conditions still say how the job ended")
	}
}

// rootCauseLine is a failure in one line, what it is first: the root
// cause the diagnosis named ("OOM: rank 1 on tj-node-0-1.tj was killed
// ..."), else the failure's summary ("probe: tj-node-0-1.tj:2222: auth:
// ...", "mpirun: mpirun exited with 3").
func rootCauseLine(err error) string {
	var f *Failure
	switch {
	case errors.As(err, &f) && f.Diagnosis != nil && f.Diagnosis.Root != nil:
		return f.Diagnosis.Root.Sentence
	case f != nil:
		return f.Summary()
	case err != nil:
		first, _, _ := strings.Cut(err.Error(), "\n")
		return first
	}
	return ""
}

// statusEndpoint is the ranks' endpoint: on the launcher's pod (a rank
// that runs here under runLauncherAsNode, a script mpirun starts here) it
// serves it on loopback, and the worker-agents carry it to the ranks on
// theirs (status_workers.go). It returns mpirun's environment with the
// three variables pointing at it, and a func that stops it. Without the
// status API (no variables, or variables the launcher cannot use) it
// returns env without them: Trainer's token never reaches a rank.
func (l *Launcher) statusEndpoint(env []string, dir string) ([]string, func()) {
	sv := l.status
	if sv == nil {
		return dropStatusEnv(env), func() {}
	}
	local, err := trainerstatus.NewLocal(filepath.Join(dir, StatusDirName))
	if err != nil {
		l.log.Warn("the ranks cannot report to the TrainJob's status (the job goes on)", "err", err, "component", "trainer-status")
		return dropStatusEnv(env), func() {}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.log.Warn("the ranks cannot report to the TrainJob's status (the job goes on)", "err", err, "component", "trainer-status")
		return dropStatusEnv(env), func() {}
	}
	srv := local.Server(trainerstatus.Proxy(sv.rep, sv.ep.URL.Path, local.Token))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.log.Debug("the ranks' status endpoint stopped", "err", err, "component", "trainer-status")
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	stopForward := l.endpointOnWorkers(srv, local, port, sv.ep.URL.Path)
	for _, kv := range statusfwd.Env(port, sv.ep.URL.Path, local.Dir) {
		name, value, _ := strings.Cut(kv, "=")
		env = environ.Set(env, name, value)
	}
	l.log.Info("the ranks report the TrainJob's status through the launcher", "endpoint", fmt.Sprintf("127.0.0.1:%d", port), "component", "trainer-status")
	return env, func() {
		stopForward()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

// dropStatusEnv removes Trainer's three variables: what mpirun starts
// reports through podmpi's endpoint or not at all, never with Trainer's
// token.
func dropStatusEnv(env []string) []string {
	for _, name := range statusfwd.Variables {
		env = environ.Unset(env, name)
	}
	return env
}
