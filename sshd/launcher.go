package sshd

import (
	"cmp"
	"slices"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/mpi"
	"github.com/podmpi/podmpi/proc"
)

// Launcher instances.
//
// A launcher that is lost without closing its connections (its node died,
// its pod's network was cut, its process frozen) leaves the MPI daemons it
// started running on every worker, with their ranks and GPU memory, until
// the kernel's TCP keepalive drops the connection: about 2 h, as under
// OpenSSH, since keepalive probes are off by default so that a partition
// OpenSSH carries through does not end a healthy job either. The proof that
// those daemons are orphans comes when a newer instance of the same job's
// launcher connects: the Job's replacement pod, or the same pod's restarted
// container. The launcher, and the podmpi-rsh processes of its mpirun,
// declare their instance right after authentication (launcherid.RequestType);
// a connection that authenticated with the job's key is the job, so a
// declaration on it is the job's word. When a declared instance is newer
// than another one whose connections are still open, those connections'
// sessions are ended (SIGTERM to each process group, SIGKILL after
// KillGrace, as when a client goes away), the connections closed, and it
// is logged at WARN with both instances and reported to
// Config.OnLauncherReplaced (the account's /events). Connections that
// declared nothing (Hydra's or Open MPI's tree spawn from a worker, a
// person's ssh, horovodrun's checks outside the launcher) are never ended
// this way, whatever connects.
//
// "Newer" must not trust two clocks: the launcher's pod and this one may
// be on nodes whose clocks disagree, and a replacement pod may be on yet
// another node. So each instance's start is placed on this agent's own
// clock: the declaration carries the instance's age, measured on the
// launcher's clock just before it was sent, and the agent knows that it was
// sent after the connection was accepted (the client sends it after the
// server's first bytes) and before it arrived. The start therefore lies in
//
//	[accepted - age - slack, arrived - age + slack]
//
// on the agent's monotonic clock, with slack = declarationSlack plus 0.1% of
// the age for two clocks that tick at slightly different rates (the kernel
// slews a clock by at most 0.05%). An instance whose interval lies
// entirely after another's started later, as far as this agent can prove.
// Every declaration of the same instance (one per connection) widens its
// interval to cover them all, so a declaration that disagrees makes the
// proof harder, never easier. In addition the agent numbers instances by
// the order in which it first heard of them: an instance replaces another
// only when both say so, heard of later and started later. An older
// instance that connects again, or for the first time after a newer one
// (its identity replayed by a podmpi-rsh it started long ago, a launcher
// pod that lingers while its replacement runs), therefore never ends a
// newer one's sessions: its start is not after the newer one's.
//
// Only what is open when the newer instance declares itself is ended; the
// agent keeps the last maxLaunchers instances it heard of.
//
// What each instance started here is told too (LauncherSessions, the
// agent's /events): a launcher that finds a worker-agent younger than its
// run asks whether that agent runs its MPI daemon, which tells an agent
// that restarted before the daemon reached it (the job goes on) from a
// pod that lost the daemon.

// declarationSlack widens each instance's start interval (see above).
const declarationSlack = time.Second

// maxLaunchers bounds the instances the server remembers.
const maxLaunchers = 64

// LauncherReplaced is what Config.OnLauncherReplaced receives when a newer
// launcher instance of the job made the server end an older one's sessions.
type LauncherReplaced struct {
	// Old is the instance whose sessions were ended, New the one that
	// connected; their Start is each launcher's own clock, as declared.
	Old, New launcherid.Instance
	// Commands are the ended sessions' command lines, shortened as in the
	// logs ("(shell)" for a shell session).
	Commands []string
	// Connections is how many of Old's connections were closed.
	Connections int
}

// launcherRecord is what the server knows of one declared instance.
type launcherRecord struct {
	inst launcherid.Instance
	// seq numbers instances in the order this server first heard of them.
	seq uint64
	// earliest and latest bound the instance's start on this process's
	// monotonic clock.
	earliest, latest time.Time
	// loggedLate: that it connected after a newer instance was logged.
	loggedLate bool
	// sessions counts the sessions its connections started here, daemons
	// those whose command runs an MPI daemon (LauncherSessions).
	sessions, daemons int
}

// newerThan reports whether r replaces o: heard of later, and provably
// started after it.
func (r *launcherRecord) newerThan(o *launcherRecord) bool {
	return r.seq > o.seq && r.startedAfter(o)
}

// startedAfter reports whether r's start interval lies entirely after o's.
func (r *launcherRecord) startedAfter(o *launcherRecord) bool { return r.earliest.After(o.latest) }

// startedAfter returns an instance this server heard of that provably
// started after r, nil when none. s.mu is held.
func (s *Server) startedAfter(r *launcherRecord) *launcherRecord {
	for _, o := range s.launchers {
		if o.startedAfter(r) {
			return o
		}
	}
	return nil
}

// startBounds is the interval of a declared instance's start on this
// server's clock: declared at age on a connection accepted at accepted,
// arrived at arrived.
func startBounds(accepted, arrived time.Time, age time.Duration) (earliest, latest time.Time) {
	slack := declarationSlack + age/1000
	return accepted.Add(-age - slack), arrived.Add(-age + slack)
}

// launcherRequest handles launcherid.RequestType: it records the instance
// the connection declares and ends what older instances left open. It
// answers true when the declaration was recorded.
func (s *Server) launcherRequest(ctx gliderssh.Context, req *ssh.Request) bool {
	arrived := time.Now()
	st := stateOf(ctx)
	if st == nil {
		return false
	}
	inst, age, err := launcherid.ParseDeclaration(req.Payload)
	if err != nil {
		s.log.Info("launcher declaration refused", "conn", st.id, "err", err)
		return false
	}
	earliest, latest := startBounds(st.start, arrived, age)

	s.mu.Lock()
	if st.launcher != nil {
		same := st.launcher.inst.ID == inst.ID
		s.mu.Unlock()
		if !same {
			s.log.Info("launcher declaration refused: the connection declared another instance already", "conn", st.id,
				"declared", st.launcher.inst.String(), "now", inst.String())
		}
		return same
	}
	rec := s.recordLauncher(inst, earliest, latest)
	st.launcher = rec
	var ended []replaced
	var newer *launcherRecord
	for _, o := range s.launchers {
		switch {
		case o == rec:
		case rec.newerThan(o):
			if r := s.claimLauncher(o); r != nil {
				ended = append(ended, *r)
			}
		case o.startedAfter(rec) && newer == nil:
			newer = o
		}
	}
	late := newer != nil && !rec.loggedLate
	rec.loggedLate = rec.loggedLate || late
	s.mu.Unlock()

	s.log.Info("launcher instance declared", "conn", st.id, "launcher", inst.String(),
		"start_uncertainty", latest.Sub(earliest).Round(time.Millisecond))
	if late {
		s.log.Info("an older launcher instance of the job connected after a newer one; its sessions are left alone",
			"conn", st.id, "launcher", inst.String(), "newer", newer.inst.String())
	}
	for _, r := range ended {
		s.endReplaced(r, rec.inst, st.id)
	}
	return true
}

// recordLauncher returns the record of inst, adding it (and forgetting the
// oldest record no connection holds when there are too many) or widening
// its start interval. s.mu is held.
func (s *Server) recordLauncher(inst launcherid.Instance, earliest, latest time.Time) *launcherRecord {
	if rec := s.launchers[inst.ID]; rec != nil {
		if earliest.Before(rec.earliest) {
			rec.earliest = earliest
		}
		if latest.After(rec.latest) {
			rec.latest = latest
		}
		return rec
	}
	if len(s.launchers) >= maxLaunchers {
		s.forgetLauncher()
	}
	s.launcherSeq++
	rec := &launcherRecord{inst: inst, seq: s.launcherSeq, earliest: earliest, latest: latest}
	s.launchers[inst.ID] = rec
	return rec
}

// forgetLauncher drops the record heard of first among those no open
// connection declared, else the first of all. s.mu is held.
func (s *Server) forgetLauncher() {
	held := map[*launcherRecord]bool{}
	for c := range s.conns {
		if c.launcher != nil {
			held[c.launcher] = true
		}
	}
	var victim *launcherRecord
	for _, r := range s.launchers {
		if victim == nil || held[victim] && !held[r] || held[victim] == held[r] && r.seq < victim.seq {
			victim = r
		}
	}
	delete(s.launchers, victim.inst.ID)
}

// replaced is what an older instance has open: its connections and
// sessions.
type replaced struct {
	old      launcherid.Instance
	conns    []*connState
	sessions []*session
}

// claimLauncher takes the open connections and sessions of o, marking its
// sessions replaced; nil when it has none. s.mu is held.
func (s *Server) claimLauncher(o *launcherRecord) *replaced {
	r := &replaced{old: o.inst}
	for c := range s.conns {
		if c.launcher == o {
			r.conns = append(r.conns, c)
		}
	}
	for sess := range s.sessions {
		if sess.st.launcher == o && sess.replaced.CompareAndSwap(false, true) {
			r.sessions = append(r.sessions, sess)
		}
	}
	if len(r.conns) == 0 && len(r.sessions) == 0 {
		return nil
	}
	slices.SortFunc(r.conns, func(a, b *connState) int { return a.start.Compare(b.start) })
	return r
}

// endReplaced ends what r holds: each session's process group gets SIGTERM
// now and SIGKILL after KillGrace, then the connections are closed. The
// declaration of newer on connection conn caused it.
func (s *Server) endReplaced(r replaced, newer launcherid.Instance, conn string) {
	reason := "a newer launcher of the job connected (" + newer.String() + ")"
	cmds := make([]string, 0, len(r.sessions))
	for _, sess := range r.sessions {
		sess.endTree(reason, s.cfg.KillGrace)
		cmds = append(cmds, sess.command())
	}
	for _, c := range r.conns {
		c.raw.Close()
	}
	attrs := []any{"conn", conn, "old_launcher", r.old.String(), "new_launcher", newer.String(),
		"sessions", len(r.sessions), "connections", len(r.conns), "kill_after", s.cfg.KillGrace}
	if len(r.sessions) == 0 {
		s.log.Info("a newer launcher of the job connected: closed the idle connections of the older one", attrs...)
		return
	}
	s.log.Warn("a newer launcher of the job connected: ending the sessions of the older one, whose launcher is gone "+
		"or replaced (its MPI daemons and their ranks would otherwise run on until TCP keepalive drops the connection)",
		append(attrs, "commands", cmds)...)
	if s.cfg.OnLauncherReplaced != nil {
		s.cfg.OnLauncherReplaced(LauncherReplaced{Old: r.old, New: newer, Commands: cmds, Connections: len(r.conns)})
	}
}

// endTree ends a replaced session: its process group, as abort does, and
// every process below its command that left the group, as Open MPI's orted
// puts each rank in a process group of its own. Those are found before any
// signal, while their parents still hold them: once orted is gone they are
// re-parented, and nothing says any more that they were the session's. (A
// client that merely went away leaves orted the time to end its ranks
// itself; a replaced launcher's orted may not get there, its mpirun being
// gone.) Each gets SIGTERM now and SIGKILL after grace unless it is gone,
// or its pid names another process by then (its start time differs); those
// re-parented to this process are reaped.
func (sess *session) endTree(reason string, grace time.Duration) {
	sess.mu.Lock()
	leader := sess.pgid
	sess.mu.Unlock()
	var below []proc.Stat
	if leader > 0 {
		all, err := proc.All(proc.DefaultRoot)
		if err != nil {
			sess.s.log.Warn("cannot list the processes of a replaced session; ending its process group only", "session", sess.id, "err", err)
		}
		below = proc.Descendants(all, leader, maxTreeProcs)
	}
	sess.abort(reason, grace)
	if len(below) == 0 {
		return
	}
	signalAll(below, syscall.SIGTERM)
	sess.s.log.Info("ending the processes a replaced session started outside its process group", "session", sess.id,
		"processes", len(below), "kill_after", grace)
	time.AfterFunc(grace, func() {
		signalAll(below, syscall.SIGKILL)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if reapAll(below) == 0 {
				return
			}
		}
	})
}

// maxTreeProcs bounds the processes endTree follows for one session.
const maxTreeProcs = 4096

// signalAll sends sig to each process of ps that is still the same process
// (same start time).
func signalAll(ps []proc.Stat, sig syscall.Signal) {
	for _, p := range ps {
		if same(p) {
			_ = syscall.Kill(p.PID, sig)
		}
	}
}

// reapAll collects the processes of ps that are children of this process
// and have exited, and returns how many of ps still exist.
func reapAll(ps []proc.Stat) int {
	left := 0
	for _, p := range ps {
		if !same(p) {
			continue
		}
		// A zombie keeps its pid until reaped: this waits for p, never for
		// another process that took its pid.
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil); pid != p.PID {
			left++
		}
	}
	return left
}

// same reports whether p's pid still names p (alive or a zombie).
func same(p proc.Stat) bool {
	st, err := proc.ReadStat(proc.DefaultRoot, p.PID)
	return err == nil && st.Start == p.Start
}

// LauncherSessions is what one declared launcher instance started on this
// server since it started.
type LauncherSessions struct {
	Instance launcherid.Instance
	// Sessions is how many sessions its connections started, Daemons how
	// many of those run an MPI daemon (mpi.CommandDaemon: orted, prted,
	// hydra_pmi_proxy, ...), Open how many of them run now.
	Sessions, Daemons, Open int
}

// LauncherSessions lists the declared launcher instances that started
// sessions here, in the order the server first heard of them.
func (s *Server) LauncherSessions() []LauncherSessions {
	s.mu.Lock()
	defer s.mu.Unlock()
	open := map[*launcherRecord]int{}
	for sess := range s.sessions {
		if rec := sess.st.launcher; rec != nil && sess.running() {
			open[rec]++
		}
	}
	var out []LauncherSessions
	for _, rec := range s.launchers {
		if rec.sessions > 0 {
			out = append(out, LauncherSessions{Instance: rec.inst, Sessions: rec.sessions, Daemons: rec.daemons, Open: open[rec]})
		}
	}
	slices.SortFunc(out, func(a, b LauncherSessions) int {
		return cmp.Compare(s.launchers[a.Instance.ID].seq, s.launchers[b.Instance.ID].seq)
	})
	return out
}

// declared is the instance st's connection declared, nil when none.
func (s *Server) declared(st *connState) *launcherRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return st.launcher
}

// sessionStarted counts a session that started cmdline for rec, the
// instance its connection declared (nil: none).
func (s *Server) sessionStarted(rec *launcherRecord, cmdline string) {
	if rec == nil {
		return
	}
	daemon := mpi.CommandDaemon(cmdline) != ""
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.sessions++
	if daemon {
		rec.daemons++
	}
}
