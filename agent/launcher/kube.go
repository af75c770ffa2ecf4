package launcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/postmortem"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/version"
)

// What the launcher does with the Kubernetes API (package kube), when its
// pod may use it: it records Events on the TrainJob or MPIJob and on its
// own pod (a Warning for every failure, with the termination message's
// first line; a Warning while it waits for a worker Kubernetes says is not
// coming, with Kubernetes' reason; a Normal one when init is done), it
// names Kubernetes' reason in its waits' progress and their deadline
// failures, and while mpirun runs it takes the API's word that a worker's
// pod is gone. None of it is on the way to mpirun: the lookups run in the
// background and every request has a deadline.

const (
	// podPoll is how often the job's pods are listed while the launcher
	// waits for its workers and while mpirun runs.
	podPoll = 5 * time.Second
	// endEventTimeout bounds writing the last Event before the launcher
	// exits.
	endEventTimeout = 5 * time.Second
	// resolveAttempts bounds the attempts to learn the launcher's pod and
	// job from an API that does not answer (kube.Transient), resolveBackoff
	// spaces them: 1 s doubling to 30 s, jittered, about 2 minutes in
	// all.
	resolveAttempts = 8
	// maxWaitEvents bounds the WorkerNotReady Events of a run (each
	// worker's trouble is told once): below client-go's aggregation of
	// similar Events (ten in ten minutes) and well within its 25 Warnings
	// per object, so that the other Warnings of the run still land. The
	// log tells every one.
	maxWaitEvents = 10
)

// kubeView is the launcher's view of the API: the client (nil without
// one), the last list of the job's pods, and what it has warned about.
type kubeView struct {
	c *kube.Client

	mu      sync.Mutex
	pods    kube.Pods
	listed  bool
	waiting bool            // the launcher waits for its workers (before mpirun)
	workers []string        // the hostfile's workers (never the launcher's own entry)
	warned  map[string]bool // worker and kube.PodState.Reason, warned about
	// warnings counts the workers' troubles warned about; the first
	// maxWaitEvents are also Events.
	warnings int
	kick     chan struct{} // a list now, not at the next tick
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// setWaiting says whether the launcher now waits for its workers (from
// dns-wait to the probe's end), and which: the hostfile's entries but the
// launcher's own.
func (l *Launcher) setWaiting(on bool, workers []string) {
	l.kv.mu.Lock()
	l.kv.waiting, l.kv.workers = on, workers
	kick := l.kv.kick
	l.kv.mu.Unlock()
	if on && kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// connectKube connects to the API when the pod may use it, or says once at
// INFO why it cannot; it starts learning the job's owner and its pods in
// the background.
func (l *Launcher) connectKube(ctx context.Context) {
	c := l.cfg.Kube
	if c == nil {
		var why string
		c, why = kube.Connect(kube.Options{Mode: l.cfg.KubeAPI, PodName: l.cfg.KubePodName, PodUID: l.cfg.KubePodUID,
			UserAgent: "podmpi-launcher/" + version.Get().Version, Logger: l.log})
		if c == nil {
			l.log.Info("the Kubernetes API is not used: "+why, "component", "kube")
			return
		}
	}
	l.kv.mu.Lock()
	l.kv.c = c
	l.kv.kick = make(chan struct{}, 1)
	l.kv.mu.Unlock()
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.kv.stop = stop
	l.kv.wg.Go(func() {
		if err := l.resolveKube(pctx, c); err != nil {
			if pctx.Err() == nil {
				l.log.Info("the launcher cannot see its own pod in the API; Events and pod states are not available", "err", err, "component", "kube")
			}
			return
		}
		if j := c.Job(); j != nil {
			l.log.Debug("Events go on the job's object", "kind", j.Kind, "name", j.Name, "uid", string(j.UID))
		}
		l.pollPods(pctx)
	})
}

// resolveBackoff is the wait before Resolve's attempt n+1.
var resolveBackoff = discovery.Backoff{Base: time.Second, Max: 30 * time.Second}

// resolveKube learns the launcher's pod and job (c.Resolve), asking again
// with backoff while the API's answer is a transient failure (an API
// server restarting, a timeout: kube.Transient), at most resolveAttempts
// times: one failure at the start must not turn the API off for the whole
// run. It runs in the background: nothing waits for it but the Events and
// pod states it makes possible.
func (l *Launcher) resolveKube(ctx context.Context, c *kube.Client) error {
	for attempt := 1; ; attempt++ {
		err := c.Resolve(ctx)
		switch {
		case err == nil || !kube.Transient(err):
			return err
		case attempt == resolveAttempts:
			return fmt.Errorf("giving up after %d attempts: %w", attempt, err)
		}
		wait := resolveBackoff.Delay(attempt - 1)
		l.log.Info("the Kubernetes API did not answer the launcher's first questions; asking again", "err", err,
			"in", wait.Round(time.Millisecond), "attempts_left", resolveAttempts-attempt, "component", "kube")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// kubeClient is the API client, nil without one.
func (l *Launcher) kubeClient() *kube.Client {
	l.kv.mu.Lock()
	defer l.kv.mu.Unlock()
	return l.kv.c
}

// closeKube stops the background lookups.
func (l *Launcher) closeKube() {
	if l.kv.stop != nil {
		l.kv.stop()
	}
	l.kv.wg.Wait()
}

// pollPods lists the job's pods every podPoll until ctx ends, and warns
// (log and Event) once per reason about a worker Kubernetes says is not
// running: one of the hostfile's workers, not any pod of the job (a
// Trainer initializer that has Succeeded is none).
func (l *Launcher) pollPods(ctx context.Context) {
	every := podPoll
	if w := l.cfg.DiagnosisWatch; w > 0 && w < every {
		every = w // as often as the watch asks the worker-agents
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		l.refreshPods(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kv.kick:
		}
	}
}

// refreshPods lists the job's pods once.
func (l *Launcher) refreshPods(ctx context.Context) {
	ps, ok := l.kv.c.Pods(ctx)
	if !ok {
		return
	}
	l.kv.mu.Lock()
	l.kv.pods, l.kv.listed = ps, true
	waiting, workers := l.kv.waiting, l.kv.workers
	l.kv.mu.Unlock()
	if !waiting {
		return
	}
	for _, host := range workers {
		s, ok := ps.For(host)
		if !ok || s.Why == "" || l.kv.c.IsSelf(s) {
			continue
		}
		warn, event, capped := l.kv.claimWarning(host, s.Reason)
		if !warn {
			continue
		}
		msg := fmt.Sprintf("the launcher waits for worker %s: pod %s %s", host, s.Name, s.Why)
		if s.Hint != "" {
			msg += "; hint: " + s.Hint
		}
		l.log.Warn(msg, "host", host, "pod", s.Name, "reason", s.Reason, "component", "kube")
		if capped {
			l.log.Info("further WorkerNotReady Events are not written; the log says what Kubernetes says of every worker", "events", maxWaitEvents,
				"component", "kube")
		}
		if event {
			l.kv.c.Event(ctx, kube.Warning, "WorkerNotReady", msg)
		}
	}
}

// claimWarning reports whether the trouble reason of host's pod is new in
// this run (warn), whether an Event may still tell it (event, counted: at
// most maxWaitEvents), and whether it is the first one past that bound
// (capped).
func (kv *kubeView) claimWarning(host, reason string) (warn, event, capped bool) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	key := host + "\x00" + reason
	if kv.warned[key] {
		return false, false, false
	}
	if kv.warned == nil {
		kv.warned = map[string]bool{}
	}
	kv.warned[key] = true
	kv.warnings++
	return true, kv.warnings <= maxWaitEvents, kv.warnings == maxWaitEvents+1
}

// explain is what Kubernetes last said about host's pod, "" when nothing
// (no API, no such pod, or it runs and is ready): the waits' progress lines
// add it.
func (l *Launcher) explain(host string) string {
	n, ok := l.kubeNote(host)
	if !ok {
		return ""
	}
	return strings.TrimPrefix(n.String(), n.Host+": ")
}

// kubeNote is what Kubernetes last said about host's pod, if anything.
func (l *Launcher) kubeNote(host string) (KubeNote, bool) {
	l.kv.mu.Lock()
	defer l.kv.mu.Unlock()
	if !l.kv.listed {
		return KubeNote{}, false
	}
	s, ok := l.kv.pods.For(host)
	if !ok || s.Why == "" {
		return KubeNote{}, false
	}
	return KubeNote{Host: host, Pod: s.Name, Why: s.Why, Hint: s.Hint}, true
}

// podsNow is the last list of the job's pods, and whether there is one.
func (l *Launcher) podsNow() (kube.Pods, bool) {
	l.kv.mu.Lock()
	defer l.kv.mu.Unlock()
	return l.kv.pods, l.kv.listed
}

// kubeNotes lists what Kubernetes says about the hosts that it has
// something to say about, for a deadline failure.
func (l *Launcher) kubeNotes(hosts []string) []KubeNote {
	var notes []KubeNote
	for _, h := range hosts {
		if n, ok := l.kubeNote(h); ok {
			notes = append(notes, n)
		}
	}
	return notes
}

// event records an Event in the background (init done, a warning while
// waiting): it never delays the job. closeKube waits for it.
func (l *Launcher) event(typ, reason, msg string) {
	c := l.kv.c
	if c == nil {
		return
	}
	l.kv.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), endEventTimeout)
		defer cancel()
		c.Event(ctx, typ, reason, msg)
	})
}

// recordEnd records the Event of the launcher's end: a Warning with the
// termination message's first line and a reason for its cause, or a
// Normal one when the job succeeded, with a rate budget of its own
// (kube.Client.EndEvent): the Warnings before it cannot use it up. It
// waits for the write (bounded): the process exits next.
func (l *Launcher) recordEnd(code exitcode.Code, err error) {
	c := l.kv.c
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endEventTimeout)
	defer cancel()
	if err == nil && code == exitcode.OK {
		c.EndEvent(ctx, kube.Normal, "Completed", fmt.Sprintf("%s finished with exit code 0 after %s", l.commandName(),
			time.Since(l.start).Round(time.Second)))
		return
	}
	first, _, _ := strings.Cut(TerminationMessage(code, err), "\n")
	c.EndEvent(ctx, kube.Warning, EventReason(code, err), first)
}

func (l *Launcher) commandName() string {
	if len(l.cfg.Command) > 0 {
		return l.cfg.Command[0]
	}
	return "the command"
}

// EventReason is the reason of the failure Event: what failed, in one
// CamelCase word per cause (docs/troubleshooting.md lists them).
func EventReason(code exitcode.Code, err error) string {
	var f *Failure
	if !errors.As(err, &f) {
		if errors.Is(err, context.Canceled) {
			return "LauncherStopped"
		}
		return "LauncherFailed"
	}
	if f.Diagnosis != nil && f.Diagnosis.Root != nil {
		if r, ok := causeReasons[f.Diagnosis.Cause()]; ok {
			return r
		}
	}
	switch f.Phase {
	case PhaseDiscovery:
		return "DiscoveryFailed"
	case PhaseMPI:
		return "MPINotFound"
	case PhaseDNSWait:
		return "WorkersNotResolved"
	case PhaseSlots:
		return "SlotsUnknown"
	case PhaseHostfile:
		return "HostfileNotWritten"
	case PhaseProbe:
		if f.Code == exitcode.ProbeFailed {
			return "ProbeFailed" + probeReason(f.Phases)
		}
		return "ProbeFailed"
	case PhaseMPIRun:
		switch f.Code {
		case exitcode.MPIRunTimeout:
			return "MPIRunTimeout"
		case exitcode.MPIRunNotFound:
			return "MPIRunNotFound"
		case exitcode.LaunchFailed:
			return "DaemonLaunchFailed"
		case exitcode.WorkerGone:
			return "WorkerGone"
		}
		return "MPIRunFailed"
	}
	if code == exitcode.Usage {
		return "UsageError"
	}
	return "LauncherFailed"
}

// causeReasons are the Event reasons of the diagnosis' root causes.
var causeReasons = map[string]string{
	postmortem.CauseOOM:         "OOMKilled",
	postmortem.CauseGPU:         "GPUError",
	postmortem.CauseLaunch:      "DaemonLaunchFailed",
	postmortem.CauseGone:        "WorkerGone",
	postmortem.CauseUnreachable: "WorkerUnreachable",
	postmortem.CauseCrash:       "RankCrashed",
	postmortem.CauseKilled:      "RankKilled",
	postmortem.CauseExit:        "RankFailed",
	postmortem.CauseDaemon:      "MPIDaemonLost",
	postmortem.CauseStopped:     "LauncherStopped",
	postmortem.CauseSetting:     "MPISettingOverridesWiring",
}

// probeReasons are the Event reason suffixes of the probe's phases
// ("Auth" for ProbeFailedAuth), in the order a tie between two goes: the
// phase met later in a connection first. A worker that got as far as
// authentication and failed there shows a fault of the job's own setup
// (the key, the host key, the image), which the workers that did not
// answer yet will meet too once they do.
var probeReasons = []struct {
	suffix string
	phases []sshclient.Phase
}{
	{"Auth", []sshclient.Phase{sshclient.PhaseAuth}},
	{"HostKey", []sshclient.Phase{sshclient.PhaseHostKey}},
	{"NotWorkerAgent", []sshclient.Phase{sshclient.PhaseNotWorkerAgent}},
	{"RemoteCommand", []sshclient.Phase{sshclient.PhaseRemoteCommand}},
	{"Handshake", []sshclient.Phase{sshclient.PhaseHandshake}},
	{"Unreachable", []sshclient.Phase{sshclient.PhaseTCPRefused, sshclient.PhaseTCPTimeout, sshclient.PhaseTCP, sshclient.PhaseDNS}},
}

// probeReasonOf is the reason suffix of phase and its place in
// probeReasons; "" and len(probeReasons) for a phase that has none.
func probeReasonOf(phase sshclient.Phase) (string, int) {
	for i, r := range probeReasons {
		if slices.Contains(r.phases, phase) {
			return r.suffix, i
		}
	}
	return "", len(probeReasons)
}

// probeReason is the reason suffix of a probe that failed in phases (one
// per worker that failed): the one most of them share, a tie going to the
// first in probeReasons; "" when none has one. 63 workers refused and 1
// rejected key is Unreachable: most workers are not up, whatever one says.
func probeReason(phases []sshclient.Phase) string {
	counts := make([]int, len(probeReasons)+1)
	for _, p := range phases {
		_, i := probeReasonOf(p)
		counts[i]++
	}
	best := len(probeReasons)
	for i, n := range counts[:len(probeReasons)] {
		if n > 0 && (best == len(probeReasons) || n > counts[best]) {
			best = i
		}
	}
	if best == len(probeReasons) {
		return ""
	}
	return probeReasons[best].suffix
}
