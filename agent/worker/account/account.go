// Package account is worker-agent's account of its pod: what happened to
// the processes it started, kept so that the launcher can name what killed
// a job after mpirun started.
//
// Its sources need no privileges:
//
//   - the pod's memory cgroup (cgroup v2 memory.events oom_kill and oom,
//     memory.current, memory.max, memory.peak; cgroup v1
//     memory.oom_control oom_kill, memory.usage_in_bytes,
//     memory.limit_in_bytes, memory.max_usage_in_bytes, memory.failcnt),
//     read every Config.Interval;
//   - a snapshot of the processes below the agent, taken at the same time:
//     each one's rank (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK in its
//     environment, read once), resident memory, and, when it is caught as
//     a zombie before its parent reaps it, its exit status;
//   - the exit status of each SSH session's command, which the SSH server
//     knows exactly (SessionExited), and the sessions it ended because a
//     newer launcher of the job connected (LauncherReplaced);
//   - the launcher instance each session's connection declared, which the
//     SSH server gives as the session starts (SessionStarted) and ends: a
//     process is attributed to it when the account first sees it below
//     that session's command, and its rank's exit event names it, so that
//     a launcher can leave out what an earlier instance's run left;
//   - GPU Xid and double-bit ECC events from NVML (GPU).
//
// When the OOM counter rises, the process that vanished around then with
// the most resident memory is named as the victim (the OOM killer picks
// the largest); a rank that vanished without an OOM kill is recorded as a
// rank exit, with its signal when it was seen. Events go to a ring of the
// last Config.Capacity entries (so memory stays bounded), to the log (an
// OOM kill, a crashed rank or a GPU error at ERROR level), and to metrics
// whose labels come from fixed lists. /events serves them (Snapshot).
//
// Whether an OOM kill came from the cgroup's own limit or from the node
// running out of memory is decided from the counters that rose with it,
// never from the lifetime peak: cgroup v2's memory.events "oom" counts the
// cgroup's OOM killer invoked at its limit (a node-wide OOM kill raises
// "oom_kill" alone; "max", reclaim at the limit, happens without any OOM
// and is not evidence); cgroup v1 has no such counter, and memory.failcnt
// (charges refused at the limit, which precede every OOM at the limit and
// which a node-wide OOM does not raise) stands in for it. The limit that
// holds may be the pod's, one level up, whose counters a container cannot
// read: then the peak usage rising to the limit with the kill is the
// evidence (never a peak that reached it long before).
//
// A reading (the cgroup, then /proc) is taken every Config.Interval, and
// never more often: a /events request waits for the next one rather than
// scanning /proc itself, and requests that arrive together share it. The
// files are read without the lock that recording an event (a session's
// exit, a GPU error) takes.
package account

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/signals"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/mpi"
	"github.com/podmpi/podmpi/proc"
)

// Defaults for Config fields left zero.
const (
	DefaultInterval = 500 * time.Millisecond
	DefaultCapacity = 512
	// MinInterval bounds --account.interval from below.
	MinInterval = 50 * time.Millisecond
)

// maxFreshWait bounds how long a /events request waits for a reading
// that started after it arrived; past it, the last reading is served (only
// an --account.interval longer than it makes that happen).
const maxFreshWait = time.Second

// oomVictimWait is how long an OOM kill waits for its victim to vanish
// before it is recorded without one (a large process takes a while to
// free its memory and be reaped).
const oomVictimWait = 2 * time.Second

// maxCommand bounds the program name kept in a session's event.
const maxCommand = 80

// Config configures an Account.
type Config struct {
	// CgroupRoot is the cgroup mount point; "" means DefaultCgroupRoot.
	CgroupRoot string
	// ProcSelfCgroup lists this process's cgroups; "" means
	// /proc/self/cgroup.
	ProcSelfCgroup string
	// Proc is the proc file system; "" means DefaultProc.
	Proc string
	// RootPID is the process whose descendants are watched; 0 means this
	// process.
	RootPID int
	// Interval between two readings; 0 means DefaultInterval.
	Interval time.Duration
	// Capacity is the number of events kept; 0 means DefaultCapacity.
	Capacity int
	// Hostname is reported by Events.
	Hostname string
	// Logger; nil discards.
	Logger *slog.Logger
	// Registry receives the metrics; nil registers none.
	Registry prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// SessionExit is the end of one SSH session's command.
type SessionExit struct {
	Session string
	Command string
	PID     int
	// ExitCode is the exit status, -1 when Signal ended it.
	ExitCode   int
	Signal     syscall.Signal
	CoreDumped bool
	// Aborted is true when the agent ended the session itself (its client
	// went away, a newer launcher of the job connected, or the agent is
	// shutting down); Replaced when a newer launcher was the reason.
	Aborted  bool
	Replaced bool
	// Launcher is the launcher instance the session's connection declared
	// (launcherid.Instance.ID), "" when none.
	Launcher string
}

// SessionStart is the start of one SSH session's command.
type SessionStart struct {
	Session string
	// PID is the command's process (the shell that runs it).
	PID int
	// Launcher is the launcher instance the session's connection declared
	// (launcherid.Instance.ID), "" when none.
	Launcher string
}

// Account is the pod's account. Its methods are safe for concurrent use.
type Account struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	now func() time.Time
	// cg is the memory cgroup, nil when none was found; set by New.
	cg *MemoryCgroup
	// started is when the account (and so the agent) started.
	started time.Time

	// pollMu serializes readings: it guards scan and pollStart. A reading
	// holds it, not mu, while it reads the cgroup and /proc.
	pollMu    sync.Mutex
	scan      *scanner
	pollStart time.Time             // when the last reading started (this process's monotonic clock)
	pollHook  func(start time.Time) // tests: called once a reading has read its files

	mu      sync.Mutex
	ring    []api.Event
	next    int // ring index of the next event
	seq     uint64
	cgErr   error
	last    MemorySample
	sampled bool
	// base is the reading before last: an OOM kill is at the limit when
	// its counter, or the peak usage up to the limit, rose over the last
	// two readings (the kernel counts the OOM and reaches the limit before
	// the kill, and a reading may fall between the two).
	base    MemorySample
	mem     api.Memory
	prev    map[procKey]procInfo
	recent  []vanished
	pending []pendingOOM
	scanErr error
	// sessions are the running sessions' commands whose connection
	// declared a launcher instance, by pid (SessionStarted); each is
	// forgotten when its session ends.
	sessions map[int]sessionCommand
}

// sessionCommand is a session's command as SessionStarted registered it.
type sessionCommand struct {
	key      procKey
	session  string
	launcher string
}

// vanished is a process that is gone (or a zombie) since the last snapshot.
type vanished struct {
	procInfo
	at         time.Time
	attributed bool
}

// pendingOOM is a rise of the OOM counter still looking for its victims.
type pendingOOM struct {
	n   uint64
	at  time.Time
	mem api.Memory
}

// New prepares an account: it finds the memory cgroup (its absence is
// kept as Memory.Error, not an error: the processes are still watched) and
// registers the metrics.
func New(cfg Config) (*Account, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.ProcSelfCgroup == "" {
		cfg.ProcSelfCgroup = "/proc/self/cgroup"
	}
	if cfg.Proc == "" {
		cfg.Proc = DefaultProc
	}
	if cfg.RootPID == 0 {
		cfg.RootPID = os.Getpid()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Account{cfg: cfg, log: log, now: cfg.Now, scan: newScanner(cfg.Proc, cfg.RootPID),
		ring: make([]api.Event, 0, cfg.Capacity), started: cfg.Now(), sessions: make(map[int]sessionCommand)}
	a.cg, a.cgErr = FindMemoryCgroup(cfg.CgroupRoot, cfg.ProcSelfCgroup)
	if a.cg != nil {
		// The baseline: OOM kills before the agent started are not its.
		if s, err := a.cg.Read(); err == nil {
			a.last, a.base, a.sampled = s, s, true
		} else {
			a.cgErr = err
			log.Warn("cannot read the memory cgroup at start: OOM kills are not counted until it reads, so a rank the OOM killer "+
				"ends reads as a SIGKILL of unknown origin, and /events reports no memory limit or usage",
				"cgroup", a.cg.Path, "err", err)
		}
	} else {
		root := cfg.CgroupRoot
		if root == "" {
			root = DefaultCgroupRoot
		}
		log.Warn("no memory cgroup: OOM kills are not counted, so a rank the OOM killer ends reads as a SIGKILL of unknown origin, "+
			"and /events reports no memory limit or usage; rank exits, failed sessions and GPU errors are still recorded",
			"cgroup_root", root, "proc_self_cgroup", cfg.ProcSelfCgroup, "err", a.cgErr)
	}
	a.mem = a.memory(a.last, false)
	m, err := newMetrics(cfg.Registry, a.gauges)
	if err != nil {
		return nil, err
	}
	a.m = m
	return a, nil
}

// Cgroup describes the memory cgroup the account reads, or why none.
func (a *Account) Cgroup() string {
	if a.cg == nil {
		return "none: " + a.cgErr.Error()
	}
	return fmt.Sprintf("%s (cgroup v%d)", a.cg.Path, a.cg.Version)
}

// Run reads the cgroup and the processes every Interval until ctx ends.
// A reading a /events request took meanwhile counts as one of them.
func (a *Account) Run(ctx context.Context) {
	a.log.Info("account of the pod started", "memory_cgroup", a.Cgroup(), "interval", a.cfg.Interval, "capacity", a.cfg.Capacity)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(a.pollIfDue())
		}
	}
}

// pollIfDue takes a reading unless one started less than an interval ago,
// and returns how long until the next one is due.
func (a *Account) pollIfDue() time.Duration {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	if wait := time.Until(a.pollStart.Add(a.cfg.Interval)); wait > 0 {
		return wait
	}
	a.pollLocked()
	// A reading slower than the interval is followed by a pause, not by
	// the next reading at once.
	return max(time.Until(a.pollStart.Add(a.cfg.Interval)), a.cfg.Interval/2)
}

// Poll takes one reading now: the memory cgroup first, then the processes.
func (a *Account) Poll() {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	a.pollLocked()
}

// fresh returns once a reading that started at or after asked has
// finished: at once when there is one, else after the next one, which it
// takes itself when it is due (an interval after the last started) and
// Run has not taken it first. Requests waiting together share that
// reading. It gives up when ctx ends.
func (a *Account) fresh(ctx context.Context, asked time.Time) {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	for a.pollStart.Before(asked) && ctx.Err() == nil {
		wait := time.Until(a.pollStart.Add(a.cfg.Interval))
		if wait <= 0 {
			a.pollLocked()
			return
		}
		a.pollMu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		a.pollMu.Lock()
	}
}

// pollLocked reads the cgroup and /proc with only a.pollMu held, then
// takes a.mu to fold the reading into the account.
func (a *Account) pollLocked() {
	a.pollStart = time.Now()
	now := a.now()
	var (
		sample MemorySample
		cgErr  error
	)
	if a.cg != nil {
		sample, cgErr = a.cg.Read()
	}
	cur, scanErr := a.scan.snapshot()
	if a.pollHook != nil {
		a.pollHook(a.pollStart)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	ok := false
	if a.cg != nil {
		switch {
		case cgErr != nil && a.cgErr == nil:
			a.cgErr = cgErr
			a.log.Warn("cannot read the memory cgroup; OOM kills are not counted until it reads again", "cgroup", a.cg.Path, "err", cgErr)
		case cgErr == nil:
			if a.cgErr != nil {
				a.log.Info("memory cgroup readable", "cgroup", a.cg.Path)
			}
			a.cgErr = nil
			ok = true
		}
	}
	if scanErr != nil {
		if a.scanErr == nil {
			a.log.Warn("cannot list the processes; rank exits are not recorded until it works again", "err", scanErr)
		}
		a.scanErr = scanErr
		cur = a.prev
	} else {
		a.scanErr = nil
	}
	a.attributeLaunchers(cur)
	a.recent = append(a.recent, a.vanishedSince(cur, now)...)
	a.prev = cur

	if ok {
		if !a.sampled {
			a.last, a.base = sample, sample // the baseline, late
		}
		if sample.OOMKills > a.last.OOMKills {
			n := sample.OOMKills - a.last.OOMKills
			atLimit := sample.LimitEvents > a.base.LimitEvents || peakReachedLimit(a.base, sample)
			a.m.oomKills.Add(float64(n))
			a.pending = append(a.pending, pendingOOM{n: n, at: now, mem: a.memory(sample, atLimit)})
		}
		a.base, a.last, a.sampled = a.last, sample, true
		a.mem = a.memory(sample, false)
	} else {
		a.mem = a.memory(a.last, false)
	}
	a.attribute(now)
}

// attributeLaunchers sets the launcher instance of each process of cur:
// the one it had at the last reading, else that of its nearest ancestor
// which has one or is a session's command registered by SessionStarted
// ("" when none). A process thus keeps the instance it was first seen
// with, also once its daemon is gone and it was re-parented. a.mu is held.
func (a *Account) attributeLaunchers(cur map[procKey]procInfo) {
	byPID := make(map[int]procKey, len(cur))
	for k, p := range cur {
		if old, ok := a.prev[k]; ok {
			p.launcher = old.launcher
			cur[k] = p
		}
		byPID[k.pid] = k
	}
	if len(a.sessions) == 0 {
		return
	}
	none := make(map[procKey]bool) // below no registered session
	var path []procKey
	for k, p := range cur {
		if p.launcher != "" {
			continue
		}
		path = path[:0]
		id := ""
		// At most len(cur) steps: parents read from /proc at different
		// moments need not form a tree.
		for q, ok := k, true; ok && !none[q] && len(path) < len(cur); q, ok = byPID[cur[q].ppid] {
			if id = cur[q].launcher; id != "" {
				break
			}
			path = append(path, q)
			if s, ok := a.sessions[q.pid]; ok && s.key == q {
				id = s.launcher
				break
			}
		}
		for _, q := range path {
			if id == "" {
				none[q] = true
				continue
			}
			p := cur[q]
			p.launcher = id
			cur[q] = p
		}
	}
}

// vanishedSince compares a snapshot with the previous one: processes gone,
// and processes that turned into zombies (whose status is then known).
func (a *Account) vanishedSince(cur map[procKey]procInfo, now time.Time) []vanished {
	var out []vanished
	for k, p := range a.prev {
		if p.zombie {
			continue // reported when it turned into one
		}
		q, ok := cur[k]
		switch {
		case !ok:
			out = append(out, vanished{procInfo: p, at: now})
		case q.zombie:
			q.rssBytes = max(q.rssBytes, p.rssBytes)
			q.leader = p.leader
			out = append(out, vanished{procInfo: q, at: now})
		}
	}
	slices.SortFunc(out, func(x, y vanished) int { return x.key.pid - y.key.pid })
	return out
}

// attribute names the victims of pending OOM kills among the processes
// that vanished around them, records OOM kills left without a victim once
// oomVictimWait has passed, and records the rank exits that no OOM kill
// claimed once they are an interval old.
func (a *Account) attribute(now time.Time) {
	slack := a.cfg.Interval + 100*time.Millisecond
	for i := range a.pending {
		p := &a.pending[i]
		for p.n > 0 {
			best := -1
			for j, v := range a.recent {
				if v.attributed || v.at.Before(p.at.Add(-slack)) || !maybeOOMVictim(v.procInfo) {
					continue
				}
				if best < 0 || v.rssBytes > a.recent[best].rssBytes {
					best = j
				}
			}
			if best < 0 {
				break
			}
			a.recent[best].attributed = true
			a.recordOOM(p, &a.recent[best].procInfo)
			p.n--
		}
		if p.n > 0 && now.Sub(p.at) >= oomVictimWait {
			for ; p.n > 0; p.n-- {
				a.recordOOM(p, nil)
			}
		}
	}
	a.pending = slices.DeleteFunc(a.pending, func(p pendingOOM) bool { return p.n == 0 })

	keep := a.recent[:0]
	for _, v := range a.recent {
		known := v.exitCode >= 0 && !maybeOOMVictim(v.procInfo)
		if !known && now.Sub(v.at) < a.cfg.Interval && !v.attributed {
			keep = append(keep, v) // an OOM kill may still claim it
			continue
		}
		if !v.attributed && v.rank >= 0 && v.leader {
			a.recordRankExit(v.procInfo, v.at)
		}
	}
	a.recent = keep
}

// maybeOOMVictim: the OOM killer sends SIGKILL, so a process seen exiting
// otherwise was not its victim.
func maybeOOMVictim(p procInfo) bool {
	if p.exitCode < 0 {
		return true
	}
	_, sig, _ := waitStatus(p.exitCode)
	return sig == syscall.SIGKILL
}

func (a *Account) recordOOM(p *pendingOOM, victim *procInfo) {
	mem := p.mem
	ev := api.Event{Time: p.at, Kind: api.KindOOMKill, Rank: -1, ExitCode: -1, Signal: "SIGKILL", Memory: &mem}
	who := "a process of this pod"
	if victim != nil {
		ev.PID, ev.Comm, ev.Rank, ev.RSSBytes = victim.key.pid, victim.comm, victim.rank, victim.rssBytes
		who = describe(victim.rank, victim.key.pid, victim.comm)
		a.m.rankExits.WithLabelValues("oom").Inc()
	}
	ev.Message = api.OOMSentence(who, mem)
	a.record(ev, slog.LevelError, "oom_kills", mem.OOMKills, "limit_bytes", mem.LimitBytes, "usage_bytes", mem.UsageBytes,
		"peak_bytes", mem.PeakBytes, "at_limit", mem.AtLimit, "rss_bytes", ev.RSSBytes)
}

func (a *Account) recordRankExit(p procInfo, at time.Time) {
	ev, level, reason := rankExit(p, at)
	if reason != "" {
		a.m.rankExits.WithLabelValues(reason).Inc()
	}
	a.record(ev, level)
}

// rankExit is the event of a rank's end, its log level and its reason
// label ("" for status 0).
func rankExit(p procInfo, at time.Time) (ev api.Event, level slog.Level, reason string) {
	ev = api.Event{Time: at, Kind: api.KindRankExit, PID: p.key.pid, Comm: p.comm, Rank: p.rank, ExitCode: -1, RSSBytes: p.rssBytes,
		Launcher: p.launcher}
	level = slog.LevelDebug
	who := describe(p.rank, p.key.pid, p.comm)
	reason = "unknown"
	switch {
	case p.exitCode < 0:
		ev.Message = who + " exited (its status was not seen: its parent collected it first)"
	default:
		code, sig, core := waitStatus(p.exitCode)
		switch {
		case sig != 0:
			ev.Signal, ev.CoreDumped = signals.Name(sig), core
			ev.Message = who + " died of " + ev.Signal
			if core {
				ev.Message += " (core dumped)"
			}
			reason = signalLabel(ev.Signal)
			level = slog.LevelError
		case code != 0:
			ev.ExitCode = code
			ev.Message = fmt.Sprintf("%s exited with status %d", who, code)
			reason = "exit"
			level = slog.LevelError
		default:
			ev.ExitCode = 0
			ev.Message = who + " exited with status 0"
			reason = ""
		}
	}
	return ev, level, reason
}

func describe(rank, pid int, comm string) string {
	if rank >= 0 {
		return fmt.Sprintf("rank %d (pid %d, %s)", rank, pid, comm)
	}
	return fmt.Sprintf("process %d (%s)", pid, comm)
}

// SessionStarted registers a session's command, so that the processes the
// account finds below it are attributed to the launcher instance its
// connection declared (api.Event.Launcher). A session without one needs
// no registration. It reads the command's start time from /proc, so that
// a pid taken over by another process is not mistaken for it.
func (a *Account) SessionStarted(s SessionStart) {
	if s.Launcher == "" || s.PID <= 0 {
		return
	}
	st, err := proc.ReadStat(a.cfg.Proc, s.PID)
	if err != nil {
		// Gone already: nothing will be found below it.
		a.log.Debug("a session's command is gone before the account registered it; its processes name no launcher",
			"session", s.Session, "pid", s.PID, "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sessions[s.PID] = sessionCommand{key: procKey{st.PID, st.Start}, session: s.Session, launcher: s.Launcher}
}

// SessionExited records the end of an SSH session's command when it failed
// (a non-zero status or a signal), and counts every end. It forgets the
// session's registration (SessionStarted).
func (a *Account) SessionExited(e SessionExit) {
	a.mu.Lock()
	if s, ok := a.sessions[e.PID]; ok && s.session == e.Session {
		delete(a.sessions, e.PID)
	}
	a.mu.Unlock()
	reason := ""
	switch {
	case e.Signal != 0:
		reason = signalLabel(signals.Name(e.Signal))
	case e.ExitCode != 0:
		reason = "exit"
	}
	if reason == "" {
		return
	}
	a.m.sessionExits.WithLabelValues(reason).Inc()
	cmd := commandName(e.Command)
	ev := api.Event{Time: a.now(), Kind: api.KindSessionExit, PID: e.PID, Rank: -1, ExitCode: e.ExitCode,
		CoreDumped: e.CoreDumped, Session: e.Session, Command: cmd, Launcher: e.Launcher}
	level := slog.LevelWarn
	if e.Signal != 0 {
		ev.ExitCode = -1
		ev.Signal = signals.Name(e.Signal)
		ev.Message = fmt.Sprintf("ssh session %s (%s) ended by %s", e.Session, cmd, ev.Signal)
	} else {
		ev.Message = fmt.Sprintf("ssh session %s (%s) exited with status %d", e.Session, cmd, e.ExitCode)
	}
	switch {
	case e.Replaced:
		ev.Message += ", ended by the agent: a newer launcher of the job connected"
		level = slog.LevelInfo
	case e.Aborted:
		ev.Message += " after its client went away"
		level = slog.LevelInfo
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.record(ev, level)
}

// LauncherReplaced records that the agent ended the sessions of launcher
// instance old, running commands, because newer, a newer launcher of the
// job, connected. The SSH server logs it at WARN; the event is logged at
// INFO.
func (a *Account) LauncherReplaced(old, newer launcherid.Instance, commands []string) {
	programs := make([]string, len(commands))
	for i, c := range commands {
		programs[i] = commandName(c)
	}
	ev := api.Event{Time: a.now(), Kind: api.KindLauncherReplaced, Rank: -1, ExitCode: -1,
		Launchers: &api.LauncherChange{Old: api.LauncherOf(old), New: api.LauncherOf(newer), Programs: programs},
		Message: fmt.Sprintf("%s was replaced by %s: ended its %d session(s) (%s), which would otherwise have run on "+
			"until TCP keepalive dropped the lost launcher's connection", old, newer, len(programs), strings.Join(programs, ", "))}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.record(ev, slog.LevelInfo)
}

// GPU records a GPU error.
func (a *Account) GPU(e gpu.Event) {
	kind := api.KindGPUXid
	label := "xid"
	if e.Kind == gpu.EventDoubleBitECC {
		kind, label = api.KindGPUECC, "ecc_dbe"
	}
	a.m.gpuErrors.WithLabelValues(label).Inc()
	at := e.Time
	if at.IsZero() {
		at = a.now()
	}
	ev := api.Event{Time: at, Kind: kind, Rank: -1, ExitCode: -1, Message: e.Message(),
		GPU: &api.GPUEvent{Index: e.Index, UUID: e.UUID, Xid: e.Xid, GPUInstance: e.GPUInstance, ComputeInstance: e.ComputeInstance}}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.record(ev, slog.LevelError)
}

// commandName is what an event keeps of a session's command line: the
// program it runs (mpi.CommandName), never its arguments or the
// environment assignments before it, which may hold secrets (a token
// passed as NAME=value or as an option); printable, at most maxCommand
// bytes.
func commandName(cmd string) string {
	name := mpi.CommandName(cmd)
	if name == "" {
		return "no command"
	}
	if len(name) > maxCommand {
		name = name[:maxCommand] + "..."
	}
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(name, "?"))
}

// record appends ev to the ring and logs it. a.mu is held.
func (a *Account) record(ev api.Event, level slog.Level, attrs ...any) {
	a.seq++
	ev.Seq = a.seq
	if len(a.ring) < a.cfg.Capacity {
		a.ring = append(a.ring, ev)
	} else {
		a.ring[a.next] = ev
	}
	a.next = (a.next + 1) % a.cfg.Capacity
	args := []any{"kind", ev.Kind, "seq", ev.Seq}
	if ev.PID != 0 {
		args = append(args, "pid", ev.PID, "comm", ev.Comm)
	}
	if ev.Rank >= 0 {
		args = append(args, "rank", ev.Rank)
	}
	if ev.Signal != "" {
		args = append(args, "signal", ev.Signal, "core_dumped", ev.CoreDumped)
	} else if ev.ExitCode >= 0 {
		args = append(args, "exit_code", ev.ExitCode)
	}
	a.log.Log(context.Background(), level, ev.Message, append(args, attrs...)...)
}

// Events returns the recorded events that answer q, oldest first, with
// the memory cgroup as it was at the last reading. It takes no reading.
func (a *Account) Events(q api.EventsQuery) api.Events {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.document(q)
}

// document is Events. a.mu is held.
func (a *Account) document(q api.EventsQuery) api.Events {
	now := a.now()
	out := api.Events{Hostname: a.cfg.Hostname, Started: a.started, UptimeSeconds: now.Sub(a.started).Seconds(), Now: now,
		Since: q.Since, After: q.After, LastSeq: a.seq, Memory: a.mem, Events: []api.Event{}}
	if n := uint64(len(a.ring)); a.seq > n {
		out.Dropped = a.seq - n
	}
	start := 0
	if len(a.ring) == a.cfg.Capacity {
		start = a.next // the oldest entry
	}
	for i := range a.ring {
		if ev := a.ring[(start+i)%len(a.ring)]; q.Match(ev) {
			out.Events = append(out.Events, ev)
		}
	}
	return out
}

// Snapshot is what /events serves: it waits (at most maxFreshWait, and
// until ctx ends) for a reading that started after the call, so that a
// launcher asking right after mpirun failed does not miss the failure,
// and returns, from one
// look at the account, the recorded events that answer q followed by what
// is seen but not recorded yet (api.Event.Provisional): OOM kills still
// waiting for their victim, and ranks that ended less than an interval ago
// (an OOM kill may still claim them), each with what is known of its end.
func (a *Account) Snapshot(ctx context.Context, q api.EventsQuery) api.Events {
	ctx, cancel := context.WithTimeout(ctx, maxFreshWait)
	a.fresh(ctx, time.Now())
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.document(q)
	for _, p := range a.pending {
		mem := p.mem
		ev := api.Event{Time: p.at, Kind: api.KindOOMKill, Rank: -1, ExitCode: -1, Signal: "SIGKILL", Memory: &mem, Provisional: true,
			Message: api.OOMSentence("a process of this pod", mem) + " (its victim is not named yet)"}
		for range p.n {
			if q.Match(ev) {
				out.Events = append(out.Events, ev)
			}
		}
	}
	for _, v := range a.recent {
		if v.attributed || v.rank < 0 || !v.leader {
			continue
		}
		ev, _, _ := rankExit(v.procInfo, v.at)
		ev.Provisional = true
		ev.Message += " (not recorded yet: an OOM kill may still claim it)"
		if q.Match(ev) {
			out.Events = append(out.Events, ev)
		}
	}
	return out
}

// peakReachedLimit reports whether the peak usage rose to the limit
// between the readings prev and cur: the cgroup hit its limit just now.
// It stands in for the counters when the limit that held was the pod's
// (a level above the container, which a container cannot read: its
// failcnt or "oom" rises there, not in the container's cgroup). A peak
// that reached the limit long ago does not rise again, and says nothing.
func peakReachedLimit(prev, cur MemorySample) bool {
	if cur.Limit == 0 || cur.Peak <= prev.Peak {
		return false
	}
	slack := max(cur.Limit/100, 2<<20) // the pod's own pause container, rounding to pages
	return cur.Peak+slack >= cur.Limit
}

// memory is the api view of a sample. a.mu is held (or a is being built).
func (a *Account) memory(s MemorySample, atLimit bool) api.Memory {
	if a.cg == nil {
		msg := "no memory cgroup"
		if a.cgErr != nil {
			msg = a.cgErr.Error()
		}
		return api.Memory{Error: msg}
	}
	m := api.Memory{Cgroup: a.cg.Path, Version: a.cg.Version, LimitBytes: s.Limit, UsageBytes: s.Usage, PeakBytes: s.Peak,
		OOMKills: s.OOMKills, AtLimit: atLimit}
	if a.cgErr != nil {
		m.Error = a.cgErr.Error()
	}
	return m
}

// gauges returns the memory limit and usage for the metrics.
func (a *Account) gauges() (limit, usage float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return float64(a.mem.LimitBytes), float64(a.mem.UsageBytes)
}
