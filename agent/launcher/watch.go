package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/launcher/mpirun"
	"github.com/podmpi/podmpi/agent/launcher/postmortem"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/worker/account"
	"github.com/podmpi/podmpi/agent/worker/api"
)

// What happens after mpirun started: while it runs, the launcher watches
// the records podmpi-rsh leaves when it cannot start a daemon (and stops an
// mpirun that would wait for that daemon for ever) and asks every
// worker-agent for its account of the pod now and then (and stops an mpirun
// that goes on after a worker's pod is gone: a deleted pod can vanish
// without closing mpirun's connections, and MPI cannot go on without its
// ranks); when mpirun fails,
// it asks them all once more and names the root cause (package postmortem)
// first in its log, its report and the termination message.

// Defaults of the diagnosis settings.
const (
	DefaultDiagnosisTimeout = 5 * time.Second
	DefaultDiagnosisWatch   = 5 * time.Second
	DefaultLaunchGrace      = 5 * time.Second
)

// Bounds of the diagnosis settings (Validate).
const (
	maxDiagnosisTimeout = 2 * time.Minute
	maxDiagnosisWatch   = time.Hour
	maxLaunchGrace      = 5 * time.Minute
)

// Timing of the watch while mpirun runs.
const (
	// recordPoll is how often the rsh failure records are looked at.
	recordPoll = 250 * time.Millisecond
	// askTimeout bounds one /events request while mpirun runs; after it
	// failed, a request may take what is left of --diagnosis.timeout.
	askTimeout = 2 * time.Second
	// reaskPause is the pause between two rounds of the final questions
	// to the worker-agents that have not answered them yet.
	reaskPause = 250 * time.Millisecond
	// sinceSlack moves the start of the window asked for back, for clocks
	// of different nodes that do not quite agree.
	sinceSlack = 2 * time.Second
	// replacedMargin is added to an agent's uptime (besides the request's
	// own duration) before it is found younger than the run.
	replacedMargin = 100 * time.Millisecond
	// lostAfter is how many rounds in a row a worker must fail to answer
	// before it is logged as not answering, and how many rounds in a row
	// its name must be missing from DNS before that is logged.
	lostAfter = 2
	// maxRecords bounds the rsh failure records read.
	maxRecords = 64
	// maxEventsPerWorker bounds the events kept of one worker-agent.
	maxEventsPerWorker = 2048
	// lookupBudget is how long a worker's name may take to resolve before
	// the watch asks the address it last resolved to instead.
	lookupBudget = time.Second
)

// errLaunchStopped and errWorkerGone are the causes of the context that
// stops mpirun after a daemon could not be started, or a worker was gone.
var (
	errLaunchStopped = errors.New("podmpi-rsh could not start an MPI daemon and mpirun did not exit on its own")
	errWorkerGone    = errors.New("a worker's pod is gone and mpirun did not exit on its own")
)

// workerState is what the launcher knows of one worker-agent.
type workerState struct {
	host       string
	events     *api.Events       // the account so far, events merged
	seen       map[eventKey]bool // events already in it
	lastSeq    uint64            // the highest Seq its agent had recorded at its last answer
	pagedBy    time.Time         // the start of the agent whose numbers lastSeq is
	err        error             // the last failure to answer
	fails      int               // rounds in a row without an answer
	nameGone   int               // rounds in a row its name did not exist (it was asked at the address the name had)
	nameWarned bool              // its name's absence was logged
	lostAt     time.Time         // first failure of the current run of failures
	logged     bool              // its loss was logged
	noAccount  bool              // it answered 404: it keeps no account
	started    time.Time         // its agent's start (the agent's clock), from its first answer
	asked      time.Time         // when it was last asked (the launcher's clock)
	answered   time.Time         // its last answer of any kind (the launcher's clock)
	// replacedAt is when a worker-agent younger than the run started
	// (the launcher's clock): the pod that ran the job's daemon is gone
	// and another answers under its name. Zero when not seen.
	replacedAt time.Time
	// daemonSeen: the agent followed (started) said it ran an MPI daemon
	// of this launcher instance (api.Events.Launchers).
	daemonSeen bool
	// unsure is the start (the agent's clock) of an agent younger than
	// the run, or other than the one followed, that runs no MPI daemon of
	// this launcher yet while nothing says the one before it did: it may
	// have restarted before the daemon reached it. Its answers wait until
	// it runs one (it is then followed) or mpirun has ended (it is then a
	// replacement). Zero when none.
	unsure time.Time
	// pod is its pod as the Kubernetes API last showed it: the one it
	// first showed while mpirun ran (kube.go), the same uid; podListedAt
	// is when the list that first showed it was made (the launcher's
	// clock), which may be a little before mpirun started. podEnded says
	// how the API shows that pod ended since (deleted, replaced, evicted,
	// failed), "" while it does not.
	pod         *kube.PodState
	podListedAt time.Time
	podEnded    string
}

// gone reports whether the worker's pod is gone for sure, by proof about
// the pod or its agent: another worker-agent, younger than the run,
// answers under its name or at the address it had (the pod, or the agent's
// container, was recreated; or the address went to another pod), or the
// Kubernetes API shows the pod deleted, replaced, evicted or failed.
// Anything else is no proof: a timeout, a refused connection, no route
// (what a network partition gives once the pod bridge forgets the pod's
// address), and a name missing from DNS, which is what a pod that is only
// not Ready gives under a headless Service without
// publishNotReadyAddresses (mpi-operator's default): the worker may be
// slow, restarting or cut off for a while, and the job may well go on.
func (s *workerState) gone() bool {
	return !s.replacedAt.IsZero() || s.podEnded != ""
}

// settledSince reports whether the worker was asked after t and either
// answered or was found with nothing at its address.
func (s *workerState) settledSince(t time.Time) bool {
	return s.asked.After(t) && (s.answered.After(t) || nothingThere(s.err))
}

// nothingThere reports whether err says that nothing is at the address:
// the name does not resolve, the port is closed, or there is no route.
// Asking again soon will not help; it is not proof that the pod is gone.
func nothingThere(err error) bool {
	return nameNotFound(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// nameNotFound reports whether err is an authoritative "no such name".
func nameNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// lookupNote is what dial's lookup of a worker's name found for one
// request (ask puts one in the request's context).
type lookupNote struct {
	mu sync.Mutex
	lookup
}

// lookup is what a lookup of a worker's name found: that the name
// resolved, or that it did not exist and the addresses it had were asked
// instead.
type lookup struct {
	resolved  bool
	notFound  error    // the lookup's "no such host"
	lastAddrs []string // the addresses the name had, asked instead
}

type lookupNoteKey struct{}

func (n *lookupNote) set(l lookup) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookup = l
}

func (n *lookupNote) get() lookup {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lookup
}

// nameGoneError is a worker whose name no longer exists and that did not
// answer at the addresses the name had either.
type nameGoneError struct {
	lookup error    // the "no such host"
	addrs  []string // where it was asked instead
	err    error    // how that failed
}

func (e *nameGoneError) Error() string {
	return fmt.Sprintf("%v; nothing answers at the address it had (%s) either: %v", e.lookup, strings.Join(e.addrs, ", "), e.err)
}

func (e *nameGoneError) Unwrap() []error { return []error{e.lookup, e.err} }

type eventKey struct {
	seq  uint64
	time int64
}

// watch is the diagnosis machinery of one mpirun run.
type watch struct {
	l         *Launcher
	since     time.Time
	failDir   string
	collector *postmortem.Collector
	stdout    io.Writer
	stderr    io.Writer
	client    *http.Client
	// lookupHost resolves a worker's name (Config.Resolver's, else
	// net.DefaultResolver's).
	lookupHost func(ctx context.Context, host string) ([]string, error)

	// self is the launcher's own hostfile entry when it runs ranks too
	// (runLauncherAsNode), "" otherwise; own is then its account of its
	// own pod (its processes and memory cgroup, as a worker-agent keeps
	// one), nil when it could not keep one.
	self string
	own  *account.Account

	// setup is what exec knows of how it started mpirun (settings that
	// override the wiring).
	setup postmortem.Setup

	// upBefore is a time every worker-agent is known to have been up at:
	// mpirun's start when the probe ran (it reached every agent before);
	// zero when it did not.
	upBefore time.Time

	runCtx     context.Context // mpirun's context: cancelled to stop it
	cancel     context.CancelCauseFunc
	stopWg     sync.WaitGroup
	stopOnce   sync.Once
	quit       context.CancelFunc
	unwatchCtx func() bool

	mu            sync.Mutex
	ended         bool // mpirun has ended: an unsure agent is judged (counts)
	workers       []*workerState
	known         map[string][]string // each worker's addresses, last resolved
	records       []rsh.FailureRecord
	read          map[string]bool
	launchStopped bool
	goneStopped   bool
	stoppedAt     time.Time
}

// newWatch prepares the diagnosis of a run: the directory podmpi-rsh
// leaves its failure records in (inside dir, the launcher's private one),
// the workers to ask and mpirun's output streams, scanned as they pass.
func (l *Launcher) newWatch(ctx context.Context, p *Prepared, dir string) *watch {
	cfg := l.cfg
	w := &watch{l: l, collector: postmortem.NewCollector(nil), read: make(map[string]bool)}
	w.failDir = filepath.Join(dir, rsh.FailureDirName)
	if err := os.Mkdir(w.failDir, 0o700); err != nil {
		l.log.Warn("podmpi-rsh failures will not be watched while mpirun runs", "dir", w.failDir, "err", err)
		w.failDir = ""
	}
	for _, h := range workerNames(p.Hosts, p.Plan.SelfIndex) {
		w.workers = append(w.workers, &workerState{host: h})
	}
	if i := p.Plan.SelfIndex; i >= 0 && i < len(p.Hosts) {
		// The launcher's pod runs ranks: it keeps the account of its own
		// pod that no worker-agent keeps there.
		w.self = p.Hosts[i].Name
		own, err := account.New(account.Config{Hostname: w.self, Logger: l.log.With("component", "account")})
		if err != nil {
			l.log.Warn("the launcher keeps no account of its own pod: a rank that fails here is named from mpirun's output only", "host", w.self, "err", err)
		} else {
			w.own = own
		}
	}
	w.stdout = w.collector.Writer(cfg.Stdout)
	w.stderr = w.stdout
	if !mpirun.SameWriter(cfg.Stdout, cfg.Stderr) {
		w.stderr = w.collector.Writer(cfg.Stderr)
	}
	w.known = make(map[string][]string, len(p.Addrs))
	for name, addrs := range p.Addrs {
		if len(addrs) > 0 {
			w.known[name] = addrs
		}
	}
	w.lookupHost = net.DefaultResolver.LookupHost
	if cfg.Resolver != nil {
		w.lookupHost = cfg.Resolver.LookupHost
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true // one request per worker now and then: no idle descriptor per worker
	tr.Proxy = nil
	tr.DialContext = w.dial
	w.client = &http.Client{Transport: w.l.proveRequests(tr)}
	w.runCtx, w.cancel = context.WithCancelCause(ctx)
	w.unwatchCtx = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.stoppedAt = time.Now()
		w.mu.Unlock()
	})
	return w
}

// startListTimeout bounds the list of the job's pods the watch makes as
// mpirun starts.
const startListTimeout = 2 * time.Second

// start begins watching, with mpirun about to start now.
func (w *watch) start() {
	now := time.Now()
	w.since = now.Add(-sinceSlack)
	if !w.l.cfg.SkipProbe {
		w.upBefore = now
	}
	ctx, quit := context.WithCancel(context.Background())
	w.quit = quit
	// Each worker's pod as the API shows it now, listed now (bounded)
	// rather than as the last poll saw it: a pod known at mpirun's start is
	// one whose replacement is proof that it went; one first seen only
	// after mpirun failed may already run its replacement's containers,
	// and then nothing tells the two apart.
	if w.l.kubeClient() != nil {
		lctx, cancel := context.WithTimeout(ctx, startListTimeout)
		w.l.refreshPods(lctx)
		cancel()
	}
	w.checkPods(ctx)
	if w.failDir != "" {
		w.stopWg.Go(func() { w.watchRecords(ctx) })
	}
	if w.l.cfg.DiagnosisWatch > 0 && len(w.workers) > 0 {
		w.stopWg.Go(func() { w.watchWorkers(ctx) })
	}
	if w.own != nil {
		w.stopWg.Go(func() { w.own.Run(ctx) })
	}
}

// stop ends the watch; mpirun has exited.
func (w *watch) stop() {
	if w.quit != nil {
		w.quit()
	}
	w.stopWg.Wait()
	w.cancel(nil)
	w.unwatchCtx()
	w.collector.Flush(w.stdout)
	if w.stderr != w.stdout {
		w.collector.Flush(w.stderr)
	}
}

// watchRecords reads podmpi-rsh's failure records while mpirun runs: each
// is logged at once, and when mpirun has not exited LaunchGrace after the
// first one, it is stopped.
func (w *watch) watchRecords(ctx context.Context) {
	t := time.NewTicker(recordPoll)
	defer t.Stop()
	logged := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Only a daemon that never started makes mpirun wait for ever;
			// another command's failure is the command's to report.
			if n := w.readRecords(); n > 0 && !logged {
				logged = true
				w.l.log.Error("an MPI daemon could not be started; mpirun is stopped unless it exits on its own",
					"grace", w.l.cfg.LaunchGrace, "kill_grace", w.l.cfg.KillGrace)
				w.stopAfterGrace(ctx, &w.launchStopped, errLaunchStopped,
					"mpirun did not exit after its daemon failed to start; stopping it (SIGTERM, then SIGKILL of its process tree)")
			}
		}
	}
}

// stopAfterGrace stops mpirun LaunchGrace from now unless the watch ends
// first (mpirun exited on its own): it sets *flag, logs msg and cancels
// mpirun's context with cause. Only the first call counts.
func (w *watch) stopAfterGrace(ctx context.Context, flag *bool, cause error, msg string) {
	w.stopOnce.Do(func() {
		w.stopWg.Go(func() {
			t := time.NewTimer(w.l.cfg.LaunchGrace)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			w.mu.Lock()
			*flag = true
			w.mu.Unlock()
			w.l.log.Error(msg, "grace", w.l.cfg.LaunchGrace, "kill_grace", w.l.cfg.KillGrace)
			w.cancel(cause)
		})
	})
}

// readRecords reads the records not read yet, logs each, and returns how
// many of them are about an MPI daemon.
func (w *watch) readRecords() int {
	recs, names, err := rsh.ReadFailureRecords(w.failDir, maxRecords, w.snapshotRead())
	if err != nil {
		w.l.log.Warn("reading podmpi-rsh failure records", "dir", w.failDir, "err", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range names {
		w.read[n] = true
	}
	room := maxRecords - len(w.records)
	daemons := 0
	for i, r := range recs {
		msg, level := "podmpi-rsh could not run a remote command (not an MPI daemon: its caller reports it)", slog.LevelWarn
		if r.Launch {
			msg, level = "podmpi-rsh could not start an MPI daemon", slog.LevelError
			daemons++
		}
		w.l.log.Log(context.Background(), level, msg, "host", r.Host, "port", r.Port, "phase", r.Phase, "daemon", r.Daemon, "cause", r.Cause, "hint", r.Hint)
		if i < room {
			w.records = append(w.records, r)
		}
	}
	return daemons
}

func (w *watch) snapshotRead() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]bool, len(w.read))
	for k := range w.read {
		m[k] = true
	}
	return m
}

// watchWorkers asks every worker-agent for its account every
// DiagnosisWatch while mpirun runs, so that a worker that stops answering
// is seen (and logged) when it happens, and what it said before is kept.
// When a worker is gone for sure and mpirun has not exited LaunchGrace
// later, it is stopped.
func (w *watch) watchWorkers(ctx context.Context) {
	t := time.NewTicker(w.l.cfg.DiagnosisWatch)
	defer t.Stop()
	logged := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.askAll(ctx, w.l.cfg.DiagnosisWatch, askTimeout, time.Time{})
			w.checkPods(ctx)
			var gone []string
			w.mu.Lock()
			for _, s := range w.workers {
				if s.fails >= lostAfter && !s.logged {
					s.logged = true
					w.l.log.Warn("a worker-agent stopped answering while mpirun runs; it may be slow, restarting or cut off for a while, "+
						"and the job goes on unless its pod is gone for sure (the Kubernetes API shows it deleted, or a younger worker-agent answers under its name or at its address)",
						"host", s.host, "since", s.lostAt.UTC().Format(time.RFC3339), "err", s.err)
				}
				if s.gone() {
					gone = append(gone, s.host)
				}
			}
			w.mu.Unlock()
			if len(gone) > 0 && !logged {
				logged = true
				w.l.log.Error("a worker's pod is gone while mpirun runs; mpirun is stopped unless it exits on its own",
					"hosts", gone, "grace", w.l.cfg.LaunchGrace, "kill_grace", w.l.cfg.KillGrace)
				w.stopAfterGrace(ctx, &w.goneStopped, errWorkerGone,
					"mpirun did not exit after a worker's pod was gone; stopping it (SIGTERM, then SIGKILL of its process tree)")
			}
		}
	}
}

// checkPods compares what the Kubernetes API last listed of each worker's
// pod with what it showed first while mpirun ran: a pod deleted, replaced,
// evicted or failed has ended (kube.PodEnded), and is logged once with the
// API's words. A container of the pod that restarted is logged at WARN
// (the agent's own container with the kubelet's reason: a failed liveness
// probe, say) and is no verdict: a sidecar restarts alone, and a
// worker-agent that restarted answers younger than the run (replaced).
func (w *watch) checkPods(ctx context.Context) {
	ps, ok := w.l.podsNow()
	if !ok {
		return
	}
	type restart struct {
		host, pod string
		since     time.Time
		kube.Restart
	}
	var restarts []restart
	w.mu.Lock()
	for _, s := range w.workers {
		cur, ok := ps.For(s.host)
		switch {
		case s.pod == nil:
			if !ok {
				break
			}
			s.pod, s.podListedAt = &cur, ps.At
			// A list made before the probe found the agent up may show a
			// late worker Pending: only a later one is proof.
			up := !w.upBefore.IsZero() && ps.At.After(w.upBefore)
			if why, ended := kube.PodEndedAtFirstList(cur, up); ended {
				s.podEnded = why
				w.l.log.Error("Kubernetes says a worker's pod is gone while mpirun runs", "host", s.host, "why", why)
			}
		case s.podEnded == "":
			if why, ended := kube.PodEnded(*s.pod, ps); ended {
				s.podEnded = why
				w.l.log.Error("Kubernetes says a worker's pod is gone while mpirun runs", "host", s.host, "why", why)
				break
			}
			for _, r := range kube.RestartedSince(*s.pod, ps) {
				restarts = append(restarts, restart{host: s.host, pod: cur.Name, since: s.podListedAt, Restart: r})
			}
			s.pod = &cur // each restart is told once
		}
	}
	w.mu.Unlock()
	for _, r := range restarts {
		attrs := []any{"host", r.host, "pod", r.pod, "container", r.Container, "restarts", r.Count, "last", r.LastEnd,
			"since", r.since.UTC().Format(time.RFC3339)}
		if !r.Agent {
			w.l.log.Warn("a container beside a worker's worker-agent restarted while mpirun runs (a sidecar); the job goes on", attrs...)
			continue
		}
		if why := w.l.kv.c.WhyRestarted(ctx, r.pod); why != "" {
			attrs = append(attrs, "kubelet", why)
		}
		w.l.log.Warn("the container that runs a worker's worker-agent restarted while mpirun runs; the job goes on unless its "+
			"worker-agent answers younger than the run (the MPI daemon went with it) or mpirun fails", attrs...)
	}
}

// askAll asks every worker-agent (at most ProbeParallel at once) that
// has not answered since after for its account since the run started,
// within d, each request within perAsk.
func (w *watch) askAll(ctx context.Context, d, perAsk time.Duration, after time.Time) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sem := make(chan struct{}, max(w.l.cfg.ProbeParallel, 1))
	var wg sync.WaitGroup
	for _, s := range w.workers {
		w.mu.Lock()
		skip := s.noAccount || !after.IsZero() && s.settledSince(after)
		w.mu.Unlock()
		if skip {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			w.mu.Lock()
			if s.events == nil && s.err == nil {
				s.err = fmt.Errorf("not asked within %s", d)
			}
			w.mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			w.ask(ctx, s, perAsk)
		})
	}
	wg.Wait()
}

// askUntilAnswered asks the worker-agents once more, within d. One that
// does not answer in time (a busy pod: its rank may have just used all its
// memory) is asked again until d is spent, each request within what is
// left of it: a slow answer is not a gone worker, and its account is what
// names the cause. One with nothing at its address (no such name, port
// closed, no route) is not asked again: an agent started anew there would
// not know what the old one saw.
func (w *watch) askUntilAnswered(d time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		left := time.Until(start.Add(d))
		w.askAll(ctx, left, left, start)
		if w.allAnswered(start) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(reaskPause):
		}
	}
}

// allAnswered reports whether every worker-agent has settled since t.
func (w *watch) allAnswered(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.workers {
		if !s.noAccount && !s.settledSince(t) {
			return false
		}
	}
	return true
}

// ask asks one worker-agent, within timeout, and merges its answer.
func (w *watch) ask(ctx context.Context, s *workerState, timeout time.Duration) {
	end := time.Now().Add(timeout)
	for range 2 { // the second time from the first event of an agent followed anew
		if !w.askOnce(ctx, s, time.Until(end)) {
			return
		}
	}
}

// askOnce is one question of ask; it reports whether to ask again.
func (w *watch) askOnce(ctx context.Context, s *workerState, timeout time.Duration) (again bool) {
	// What is new is what the agent recorded after its last answer, by
	// its sequence numbers: an event may carry a time before that answer
	// (an OOM kill is recorded when its victim is named). Since keeps out
	// what an earlier job left in the account.
	w.mu.Lock()
	q := api.EventsQuery{After: s.lastSeq, Since: w.since}
	w.mu.Unlock()
	u := "http://" + net.JoinHostPort(s.host, strconv.Itoa(w.l.cfg.WorkerWebPort)) + api.EventsPath + "?" + q.Encode()
	asked := time.Now()
	w.mu.Lock()
	s.asked = asked
	w.mu.Unlock()
	note := &lookupNote{}
	ev, noAccount, err := w.get(context.WithValue(ctx, lookupNoteKey{}, note), u, timeout)
	found := note.get()
	if err != nil && found.notFound != nil {
		err = &nameGoneError{lookup: found.notFound, addrs: found.lastAddrs, err: err}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		s.answered = now
	}
	switch {
	case found.notFound != nil || nameNotFound(err):
		s.nameGone++
	case found.resolved:
		if s.nameWarned {
			w.l.log.Info("a worker's name resolves again", "host", s.host)
		}
		s.nameGone, s.nameWarned = 0, false
	}
	switch {
	case noAccount:
		s.noAccount = true
	case err != nil:
		if s.fails == 0 {
			s.lostAt = now
		}
		s.fails++
		s.err = err
	case !w.counts(s, ev, now, now.Sub(asked)):
		// Another pod answers under the worker's name, or an agent that
		// may be another: what it says is not about this job (yet). Keep
		// what the one followed said.
		s.fails, s.err = 0, nil
	case q.After > 0 && !ev.Started.Equal(s.pagedBy):
		// The agent followed from now on is not the one whose sequence
		// numbers the question paged by: ask it again from its first.
		s.fails, s.err = 0, nil
		s.lastSeq = 0
		return true
	default:
		if s.fails >= lostAfter && s.logged {
			w.l.log.Info("a worker-agent answers again", "host", s.host, "after", now.Sub(s.lostAt).Round(time.Millisecond))
		}
		if s.nameGone >= lostAfter && !s.nameWarned {
			s.nameWarned = true
			w.l.log.Warn("a worker's name is missing from DNS, but its worker-agent, the same one, answers at the address the name had: "+
				"its pod is probably not Ready (a headless Service without publishNotReadyAddresses leaves out a pod that is not Ready); "+
				"the job goes on", "host", s.host, "addrs", found.lastAddrs, "rounds", s.nameGone)
		}
		s.fails, s.err, s.lostAt, s.logged = 0, nil, time.Time{}, false
		s.lastSeq, s.pagedBy = ev.LastSeq, ev.Started
		if s.events == nil {
			s.seen = make(map[eventKey]bool)
			s.events = &api.Events{Hostname: ev.Hostname, Since: w.since, Events: []api.Event{}}
		}
		s.events.Now, s.events.Memory, s.events.Dropped = ev.Now, ev.Memory, ev.Dropped
		// What the agent had not recorded yet is replaced by its new answer.
		s.events.Events = slices.DeleteFunc(s.events.Events, func(e api.Event) bool { return e.Provisional })
		for _, e := range ev.Events {
			if len(s.events.Events) >= maxEventsPerWorker {
				break
			}
			if e.Provisional {
				s.events.Events = append(s.events.Events, e)
				continue
			}
			if k := (eventKey{e.Seq, e.Time.UnixNano()}); !s.seen[k] {
				s.seen[k] = true
				s.events.Events = append(s.events.Events, e)
			}
		}
	}
	return false
}

// counts reports whether the answer of the agent that answered at now,
// within took, is about the job: it is the agent that ran (or runs) the
// job's daemon. An agent older than the fields, the one that answered
// first when it has been up since every agent was known to be up, and
// one that runs an MPI daemon of this launcher instance (it restarted
// before the daemon reached it) are followed. Another one, or one
// younger than that, that runs none is a replacement (the pod that ran
// the daemon is gone; recorded, logged once) when the one before it ran
// this launcher's daemon or mpirun has ended; until then it may have
// restarted before the daemon reached it, and its answer waits (unsure).
// Its uptime (its own monotonic clock) is weighed against the
// launcher's, so the two clocks need not agree; took bounds how stale
// its answer is. w.mu is held.
func (w *watch) counts(s *workerState, ev api.Events, now time.Time, took time.Duration) bool {
	if !s.replacedAt.IsZero() {
		return false
	}
	if ev.Started.IsZero() || ev.UptimeSeconds <= 0 {
		return true // an agent older than the fields
	}
	uptime := time.Duration(ev.UptimeSeconds * float64(time.Second))
	ours := w.runsDaemon(ev)
	switch {
	case s.started.IsZero() && (w.upBefore.IsZero() || uptime+took+replacedMargin >= now.Sub(w.upBefore)),
		ev.Started.Equal(s.started):
		s.started = ev.Started
		s.daemonSeen = s.daemonSeen || ours
		return true
	case ours:
		w.l.log.Info("a worker-agent younger than the run, or another than the one that answered before, runs this launcher's MPI daemon: "+
			"it restarted before the daemon reached it, and the job goes on", "host", s.host, "agent_uptime", uptime.Round(time.Millisecond),
			"mpirun_ran", now.Sub(w.since.Add(sinceSlack)).Round(time.Millisecond))
		s.started, s.unsure, s.daemonSeen = ev.Started, time.Time{}, true
		return true
	case !s.daemonSeen && !w.ended:
		if !s.unsure.Equal(ev.Started) {
			s.unsure = ev.Started
			w.l.log.Info("a worker-agent younger than the run, or another than the one that answered before, answers under a worker's name "+
				"and runs no MPI daemon of this launcher yet: it may have restarted before the daemon reached it; the job goes on",
				"host", s.host, "agent_uptime", uptime.Round(time.Millisecond), "mpirun_ran", now.Sub(w.since.Add(sinceSlack)).Round(time.Millisecond))
		}
		return false
	}
	s.replacedAt = now.Add(-uptime)
	why := "the agent before it ran this launcher's MPI daemon, and this one runs none"
	if !s.daemonSeen {
		why = "mpirun has ended and this agent never ran its MPI daemon"
	}
	w.l.log.Error("another worker-agent answers under a worker's name: the pod that ran the job's daemon is gone (deleted, evicted or restarted)",
		"host", s.host, "why", why, "agent_uptime", uptime.Round(time.Millisecond), "mpirun_ran", now.Sub(w.since.Add(sinceSlack)).Round(time.Millisecond))
	return false
}

// runsDaemon reports whether the agent's answer says that it started an
// MPI daemon for this launcher instance.
func (w *watch) runsDaemon(ev api.Events) bool {
	id := w.l.instance.ID
	return id != "" && slices.ContainsFunc(ev.Launchers, func(l api.LauncherSessions) bool { return l.Instance == id && l.Daemons > 0 })
}

// dial connects to a worker-agent. Its name is resolved anew, so that a
// pod replaced under it is found; but a lookup that has not finished
// within lookupBudget (one lost DNS packet costs the resolver's 5 s
// timeout) falls back on the addresses the name last resolved to, which
// are the pod that ran the job, and so does a name that no longer exists:
// a headless Service without publishNotReadyAddresses leaves out a pod
// that is merely not Ready, and the agent that answers there, the same
// one, is alive (another one there is the proof that the pod is gone).
// Without a known address a name that does not exist is nothing there.
func (w *watch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) != nil {
		return d.DialContext(ctx, network, addr)
	}
	ips, err := w.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var first error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip, port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// resolve is dial's lookup: see dial. What it found goes in the request's
// lookupNote, when it has one.
func (w *watch) resolve(ctx context.Context, host string) ([]string, error) {
	type result struct {
		ips []string
		err error
	}
	note, _ := ctx.Value(lookupNoteKey{}).(*lookupNote)
	if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.DNSStart != nil {
		tr.DNSStart(httptrace.DNSStartInfo{Host: host})
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		ips, err := w.lookupHost(lctx, host)
		done <- result{ips, err}
	}()
	known := func() []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.known[host]
	}
	timer := time.NewTimer(lookupBudget)
	defer timer.Stop()
	var r result
	select {
	case r = <-done:
	case <-timer.C:
		if ips := known(); len(ips) > 0 {
			w.l.log.Debug("a worker's name did not resolve in time; asking the address it resolved to before", "host", host, "addrs", ips, "after", lookupBudget)
			return ips, nil
		}
		r = <-done
	}
	if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.DNSDone != nil {
		tr.DNSDone(httptrace.DNSDoneInfo{Err: r.err})
	}
	if r.err == nil && len(r.ips) == 0 {
		r.err = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	switch {
	case r.err == nil:
		w.mu.Lock()
		if w.known == nil {
			w.known = make(map[string][]string)
		}
		w.known[host] = r.ips
		w.mu.Unlock()
		note.set(lookup{resolved: true})
		return r.ips, nil
	case nameNotFound(r.err):
		ips := known()
		if len(ips) == 0 {
			return nil, r.err
		}
		w.l.log.Debug("a worker's name does not exist; asking the address it resolved to before", "host", host, "addrs", ips)
		note.set(lookup{notFound: r.err, lastAddrs: ips})
		return ips, nil
	}
	if ips := known(); len(ips) > 0 {
		return ips, nil
	}
	return nil, r.err
}

// get fetches one /events document within timeout.
func (w *watch) get(ctx context.Context, u string, timeout time.Duration) (api.Events, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var st requestStage
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, st.trace()), http.MethodGet, u, nil)
	if err != nil {
		return api.Events{}, false, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s (%s)", timeout.Round(time.Millisecond), st.String())
		}
		return api.Events{}, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return api.Events{}, true, nil
	default:
		return api.Events{}, false, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	ev, err := api.DecodeEvents(resp.Body)
	return ev, false, err
}

// diagnose decides the root cause of a failed run: the last records, one
// more round of questions to every worker-agent (DiagnosisTimeout), and
// postmortem.Decide. It logs and reports the result and sets the
// root-cause metric.
func (w *watch) diagnose(res mpirun.RunResult, program string) *postmortem.Diagnosis {
	if w.failDir != "" {
		w.readRecords()
	}
	timeout := w.l.cfg.DiagnosisTimeout
	start := time.Now()
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	// The API's word on each worker's pod as it is now, not as the last
	// poll saw it: a pod deleted a moment before mpirun failed is gone, not
	// only silent. It runs beside the questions, within the same bound.
	var fresh sync.WaitGroup
	if w.l.kubeClient() != nil {
		fresh.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			w.l.refreshPods(ctx)
			w.checkPods(ctx)
		})
	}
	w.askUntilAnswered(timeout)
	fresh.Wait()
	w.mu.Lock()
	in := postmortem.Input{
		Outcome: postmortem.Outcome{Program: program, ExitCode: res.ExitCode, TimedOut: res.TimedOut, LaunchStopped: w.launchStopped,
			WebPort: w.l.cfg.WorkerWebPort, Started: w.since.Add(sinceSlack)},
		Reports:  w.collector.Reports(),
		Placed:   w.collector.Placed(),
		Launches: append([]rsh.FailureRecord(nil), w.records...),
		Self:     w.self,
		Setup:    w.setup,
		Launcher: w.l.instance.ID,
	}
	if !w.stoppedAt.IsZero() && !w.launchStopped {
		in.Outcome.Stopped, in.Outcome.StoppedAt = true, w.stoppedAt
	}
	for _, s := range w.workers {
		wk := postmortem.Worker{Host: s.host, NoAccount: s.noAccount, ReplacedAt: s.replacedAt, NameGone: nameNotFound(s.err),
			APIGone: s.podEnded, Kube: w.l.explain(s.host)}
		if s.events != nil && s.fails == 0 {
			wk.Events = s.events
		} else if !s.noAccount {
			wk.Err = s.err
			if s.err == nil {
				wk.Err = errors.New("no answer")
			}
			if s.logged {
				wk.LostAt = s.lostAt
			}
			wk.AnsweredAt = s.answered
			if s.events != nil {
				// What it said before it went quiet still counts.
				wk.Events = s.events
			}
		}
		in.Workers = append(in.Workers, wk)
	}
	w.mu.Unlock()
	if w.own != nil {
		own := w.own.Snapshot(context.Background(), api.EventsQuery{Since: w.since})
		in.SelfEvents = &own
	}
	d := postmortem.Decide(in)
	log := w.l.log
	for host, n := range d.Ignored {
		log.Debug("the diagnosis left out a worker-agent's events of another launcher instance (an earlier run's daemons and ranks)",
			"host", host, "events", n, "instance", w.l.instance.String())
	}
	attrs := []any{"cause", d.Cause(), "answered", d.Answered, "silent", d.Silent, "asked_in", time.Since(start).Round(time.Millisecond)}
	if d.Root != nil {
		attrs = append(attrs, "host", d.Root.Host, "rank", d.Root.Rank)
	}
	log.Error(d.Summary(), attrs...)
	lines := d.Lines()
	for _, line := range lines {
		log.Warn(line)
	}
	w.l.report("== %s\n", d.Summary())
	for _, line := range lines {
		w.l.report("   %s\n", line)
	}
	for _, c := range postmortem.Causes {
		v := 0.0
		if c == d.Cause() {
			v = 1
		}
		w.l.m.RootCause.WithLabelValues(c).Set(v)
	}
	return &d
}

// stoppedForLaunch reports whether the launcher stopped mpirun after a
// failed daemon launch.
func (w *watch) stoppedForLaunch() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.launchStopped
}

// stoppedForGone reports whether the launcher stopped mpirun after a
// worker's pod was gone.
func (w *watch) stoppedForGone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.goneStopped
}

// requestStage is how far one HTTP request got, for the message of one
// that timed out: a name that did not resolve, a connection that did not
// open, or an agent that took the request and did not answer are
// different faults.
type requestStage struct {
	mu    sync.Mutex
	stage string
}

func (r *requestStage) set(s string) {
	r.mu.Lock()
	r.stage = s
	r.mu.Unlock()
}

func (r *requestStage) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stage == "" {
		return "not started"
	}
	return r.stage
}

func (r *requestStage) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSStart: func(i httptrace.DNSStartInfo) { r.set("looking up " + i.Host) },
		DNSDone: func(i httptrace.DNSDoneInfo) {
			if i.Err != nil {
				r.set("name lookup failed: " + i.Err.Error())
				return
			}
			r.set("name resolved")
		},
		ConnectStart: func(_, addr string) { r.set("connecting to " + addr) },
		ConnectDone: func(_, addr string, err error) {
			if err != nil {
				r.set("connecting to " + addr + ": " + err.Error())
				return
			}
			r.set("connected to " + addr)
		},
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				r.set(r.String() + ", request sent, no response")
			}
		},
		GotFirstResponseByte: func() { r.set("answer started") },
	}
}
