package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/podmpi/podmpi/agent/launcherid"
)

// EventsPath is where worker-agent serves its account of the pod: what
// happened to the processes it started, paged by the account's sequence
// numbers (EventsQuery).
const EventsPath = "/events"

// MaxEventsBytes bounds the /events body a client reads.
const MaxEventsBytes = 4 << 20

// Event kinds. A worker-agent records one event per thing that happened;
// the launcher reads them after a failed job and decides the root cause.
const (
	// KindOOMKill: the kernel's OOM killer killed a process of the pod's
	// memory cgroup (its oom_kill counter rose). PID, Rank and RSSBytes
	// name the victim when the agent saw which of its processes vanished;
	// Memory holds the limit and usage at that time.
	KindOOMKill = "oom-kill"
	// KindRankExit: an MPI rank started below the agent's sessions (a
	// process whose environment names its rank) is gone. Signal and
	// ExitCode are known only when the agent saw it as a zombie before its
	// parent reaped it; otherwise ExitCode is -1 and Signal "".
	KindRankExit = "rank-exit"
	// KindSessionExit: the command of an SSH session (orted, prted,
	// hydra_pmi_proxy) ended with a non-zero status or a signal.
	KindSessionExit = "session-exit"
	// KindGPUXid: NVML reported a critical Xid error on a GPU.
	KindGPUXid = "gpu-xid"
	// KindGPUECC: NVML reported a double-bit (uncorrectable) ECC error.
	KindGPUECC = "gpu-ecc-dbe"
	// KindLauncherReplaced: a newer instance of the job's launcher
	// connected, and the agent ended the sessions of an older one that
	// was lost without closing its connections (Launchers names both).
	// The sessions' own ends follow as KindSessionExit events.
	KindLauncherReplaced = "launcher-replaced"
)

// Event is one entry of the account. Unknown numbers are -1 (Rank,
// ExitCode) or 0 (PID, RSSBytes).
type Event struct {
	// Seq numbers events from 1 in the order they were recorded.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// PID and Comm name the process (the rank, or the session's command).
	PID  int    `json:"pid,omitempty"`
	Comm string `json:"comm,omitempty"`
	// Rank is the MPI rank from the process's environment
	// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK); -1 when unknown.
	Rank int `json:"rank"`
	// ExitCode is the exit status; -1 when the process died of a signal
	// or the status is unknown.
	ExitCode int `json:"exitCode"`
	// Signal is the signal that ended the process ("SIGSEGV"), or "".
	Signal     string `json:"signal,omitempty"`
	CoreDumped bool   `json:"coreDumped,omitempty"`
	// RSSBytes is the process's resident memory when last seen.
	RSSBytes uint64 `json:"rssBytes,omitempty"`
	// Memory is the memory cgroup's state at the event (KindOOMKill).
	Memory *Memory `json:"memory,omitempty"`
	// GPU names the device of a GPU event.
	GPU *GPUEvent `json:"gpu,omitempty"`
	// Session is the SSH session id and Command its command line
	// (shortened), for KindSessionExit.
	Session string `json:"session,omitempty"`
	Command string `json:"command,omitempty"`
	// Launcher is the launcher instance (Launcher.Instance) whose SSH
	// session started the process, for KindSessionExit and KindRankExit:
	// the instance its connection declared. Empty when the client declared
	// none (Hydra's or Open MPI's tree spawn from a worker, a person's
	// ssh, a launcher that does not declare itself), when the agent did not
	// see the rank below a session's command before it was re-parented,
	// and from agents older than the field. A launcher leaves out another
	// instance's events when it decides what killed its run: an earlier
	// launcher's daemons and ranks, ended as the new one connected, die
	// moments before the new run starts.
	Launcher string `json:"launcher,omitempty"`
	// Launchers names the launcher instances of KindLauncherReplaced.
	Launchers *LauncherChange `json:"launchers,omitempty"`
	// Message is the event as one sentence, as the agent logged it.
	Message string `json:"message"`
	// Provisional marks what the agent has seen but not recorded yet (Seq
	// 0): an OOM kill whose victim it has not named yet, a rank's end that
	// may still turn out to be an OOM kill's victim. The next answer
	// replaces it.
	Provisional bool `json:"provisional,omitempty"`
}

// Memory is the state of the pod's memory cgroup.
type Memory struct {
	// Cgroup is the directory the agent reads ("" when none was found).
	Cgroup string `json:"cgroup"`
	// Version is 1 or 2 (cgroup v1 or v2); 0 when no cgroup was found.
	Version int `json:"version"`
	// LimitBytes is the tightest memory limit from the cgroup up to the
	// root; 0 means no limit.
	LimitBytes uint64 `json:"limitBytes"`
	// UsageBytes is the current usage; PeakBytes the highest usage the
	// kernel recorded (0 when it does not say).
	UsageBytes uint64 `json:"usageBytes"`
	PeakBytes  uint64 `json:"peakBytes,omitempty"`
	// OOMKills is the cgroup's oom_kill counter.
	OOMKills uint64 `json:"oomKills"`
	// AtLimit, on an OOM kill, is true when the kill came with evidence
	// that the cgroup hit its own limit: cgroup v2's memory.events "oom"
	// counter (the cgroup's OOM killer invoked at its limit) or cgroup
	// v1's memory.failcnt (charges refused at the limit) rose with it.
	// False when oom_kill rose alone: the node's OOM killer picked the
	// process because the node ran out of memory, whatever the peak (a
	// lifetime figure) says.
	AtLimit bool `json:"atLimit,omitempty"`
	// Error says why the cgroup could not be read, when it could not.
	Error string `json:"error,omitempty"`
}

// LauncherChange is a KindLauncherReplaced event: the instance whose
// sessions were ended, the one whose connection proved it replaced, and
// the programs of the sessions ended.
type LauncherChange struct {
	Old      Launcher `json:"old"`
	New      Launcher `json:"new"`
	Programs []string `json:"programs"`
}

// Launcher is one launcher instance as it declared itself to the agent.
type Launcher struct {
	// Instance is the random id of the launcher process (32 hex digits).
	Instance string `json:"instance"`
	// PodUID and Hostname are its pod's ("" when not given).
	PodUID   string `json:"podUID,omitempty"`
	Hostname string `json:"hostname"`
	// Started is when it started, on the launcher's own clock.
	Started time.Time `json:"started"`
}

// LauncherOf is the instance i as the agent tells it.
func LauncherOf(i launcherid.Instance) Launcher {
	return Launcher{Instance: i.ID, PodUID: i.PodUID, Hostname: i.Hostname, Started: i.Start}
}

// GPUEvent is the device and code of a GPU event.
type GPUEvent struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Xid is the Xid code (KindGPUXid).
	Xid uint64 `json:"xid,omitempty"`
	// GPUInstance and ComputeInstance name a MIG device; -1 otherwise.
	GPUInstance     int `json:"gpuInstance"`
	ComputeInstance int `json:"computeInstance"`
}

// Events is the /events document.
type Events struct {
	Hostname string `json:"hostname"`
	// Started is when this worker-agent started, on its clock, and
	// UptimeSeconds how long it has run (its monotonic clock: a step of
	// the wall clock does not change it); zero from agents older than the
	// fields. An agent younger than the job it is asked about is not the
	// one that ran the job's daemon (its pod was deleted and replaced, or
	// its container restarted).
	Started       time.Time `json:"started,omitzero"`
	UptimeSeconds float64   `json:"uptimeSeconds,omitempty"`
	// Now is the agent's clock when it answered; Since and After are the
	// query it answered (EventsQuery).
	Now   time.Time `json:"now"`
	Since time.Time `json:"since"`
	After uint64    `json:"after"`
	// LastSeq is the highest Seq the agent has recorded when it answered
	// (whether or not the query let that event through): the next
	// request asks ?after=LastSeq for what is new. 0 from agents older
	// than the field, which page by Since alone.
	LastSeq uint64 `json:"lastSeq"`
	// Memory is the memory cgroup as it is now.
	Memory Memory `json:"memory"`
	// Dropped counts events the agent no longer keeps (its account is a
	// ring of the last events); when it is not 0, the oldest ones of the
	// window may be missing.
	Dropped uint64  `json:"dropped"`
	Events  []Event `json:"events"`
	// Launchers are the launcher instances that declared themselves on
	// this agent's SSH connections and started sessions here since it
	// started, as they are now (neither After nor Since applies). A
	// launcher that finds an agent younger than its run finds there
	// whether that agent runs its MPI daemon: then the agent restarted
	// before the daemon reached it, and nothing of the job was lost.
	// Absent from agents older than the field.
	Launchers []LauncherSessions `json:"launchers,omitempty"`
}

// LauncherSessions is what one launcher instance started on the agent.
type LauncherSessions struct {
	Launcher
	// Sessions is how many sessions its connections started, Daemons how
	// many of those run an MPI daemon (orted, prted, hydra_pmi_proxy,
	// ...), Open how many of them run now.
	Sessions int `json:"sessions"`
	Daemons  int `json:"daemons"`
	Open     int `json:"open"`
}

// Query parameters of a /events request.
const (
	QueryAfter = "after"
	QuerySince = "since"
)

// EventsQuery is what a /events request asks for:
// ?after=<seq>&since=<RFC 3339 time>, both optional.
//
// After pages by the account's own order: an event is recorded with the
// next sequence number when the agent has decided what it was, which may
// be a while after the time it carries (an OOM kill is recorded when its
// victim is named, up to a few seconds after the counter rose, with the
// time the counter rose). A client that asks ?after=<LastSeq of its last
// answer> gets every event recorded since, whatever its time.
//
// Since is a time on the agent's wall clock: only events whose Time is
// at or after it are returned (recorded and provisional alike). The
// launcher passes the start of its run (its own clock, less a slack for
// clocks of different nodes that do not quite agree), so that what an
// earlier job left in the account is not read; launchers older than
// After paged by Since alone, which loses an event recorded after an
// answer with a time before it.
type EventsQuery struct {
	After uint64
	Since time.Time
}

// ParseEventsQuery reads a /events request's query.
func ParseEventsQuery(v url.Values) (EventsQuery, error) {
	var q EventsQuery
	if s := v.Get(QueryAfter); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("%s=%.32q: want the sequence number of the last event seen (lastSeq of the previous answer), such as 42", QueryAfter, s)
		}
		q.After = n
	}
	if s := v.Get(QuerySince); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, fmt.Errorf("%s=%.40q: want an RFC 3339 time such as 2025-01-02T03:04:05Z", QuerySince, s)
		}
		q.Since = t
	}
	return q, nil
}

// Encode is the query string of q ("after=42&since=...").
func (q EventsQuery) Encode() string {
	v := url.Values{}
	v.Set(QueryAfter, strconv.FormatUint(q.After, 10))
	if !q.Since.IsZero() {
		v.Set(QuerySince, q.Since.UTC().Format(time.RFC3339Nano))
	}
	return v.Encode()
}

// Match reports whether e answers q: a recorded event with Seq above
// After, or a provisional one (Seq 0, not recorded yet, so never paged
// past), at or after Since.
func (q EventsQuery) Match(e Event) bool {
	if e.Time.Before(q.Since) {
		return false
	}
	return e.Provisional || e.Seq > q.After
}

// DecodeEvents parses a /events body. Unknown keys are ignored.
func DecodeEvents(r io.Reader) (Events, error) {
	var ev Events
	if err := json.NewDecoder(io.LimitReader(r, MaxEventsBytes)).Decode(&ev); err != nil {
		return Events{}, fmt.Errorf("decoding worker-agent %s: %w", EventsPath, err)
	}
	return ev, nil
}
