package account

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/cgroup/cgrouptest"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/proc/proctest"
)

// rig is an account over a fake /proc and a fixture cgroup v1, with a
// clock the test moves.
type rig struct {
	t    *testing.T
	proc *proctest.Dir
	cg   string // the cgroup dir
	reg  *prometheus.Registry
	log  *bytes.Buffer
	a    *Account

	mu  sync.Mutex
	now time.Time
}

const rigInterval = 500 * time.Millisecond

func newRig(t *testing.T, capacity int) *rig {
	t.Helper()
	return newRigOn(t, v1Files("/job", "209715200\n", "1048576\n", "1048576\n", "0\n", "0"), "memory/job", capacity)
}

// newRigOn is a rig over the cgroup fixture files, whose memory cgroup is
// sys/<cg>.
func newRigOn(t *testing.T, files map[string]string, cg string, capacity int) *rig {
	t.Helper()
	dir := cgrouptest.Tree(t, files)
	r := &rig{t: t, proc: proctest.New(t), cg: filepath.Join(dir, "sys", cg), reg: prometheus.NewRegistry(),
		log: &bytes.Buffer{}, now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	r.proc.Write(1, "worker-agent", 'S', 0, 10, 0)
	var err error
	r.a, err = New(Config{
		CgroupRoot: filepath.Join(dir, "sys"), ProcSelfCgroup: filepath.Join(dir, "proc", "cgroup"), Proc: r.proc.Path,
		RootPID: 1, Interval: rigInterval, Capacity: capacity, Hostname: "w-0", Registry: r.reg,
		Logger: slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now: func() time.Time {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.now
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tick moves the clock by one interval and polls.
func (r *rig) tick() {
	r.mu.Lock()
	r.now = r.now.Add(rigInterval)
	r.mu.Unlock()
	r.a.Poll()
}

// cgroup sets the cgroup's counters.
func (r *rig) cgroup(usage, failcnt, oomKills int) {
	r.t.Helper()
	for file, v := range map[string]string{
		"memory.usage_in_bytes": strconv.Itoa(usage),
		"memory.failcnt":        strconv.Itoa(failcnt),
		"memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill " + strconv.Itoa(oomKills),
	} {
		if err := os.WriteFile(filepath.Join(r.cg, file), []byte(v+"\n"), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) events() []api.Event { return r.a.Events(api.EventsQuery{}).Events }

// write sets one file of the rig's cgroup to n.
func (r *rig) write(file string, n int) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.cg, file), []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// job writes orted (10) with two ranks: 11 (rank 0, small) and 12 (rank 1, large).
func (r *rig) job() {
	r.proc.Write(10, "orted", 'S', 1, 100, 0)
	r.proc.Write(11, "train", 'R', 10, 1000, 0, "OMPI_COMM_WORLD_RANK=0")
	r.proc.Write(12, "train", 'R', 10, 40000, 0, "OMPI_COMM_WORLD_RANK=1")
}

func TestOOMKillNamesTheLargestVanishedRank(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	// The OOM killer takes rank 1; orted then kills rank 0 too.
	r.proc.Remove(12)
	r.proc.Remove(11)
	r.cgroup(209715200, 12, 1)
	r.tick()
	r.tick() // rank 0's exit is recorded once no OOM kill claims it
	evs := r.events()
	if len(evs) != 2 {
		t.Fatalf("events = %+v, want the OOM kill and rank 0's exit", evs)
	}
	oom := evs[0]
	if oom.Kind != api.KindOOMKill || oom.Rank != 1 || oom.PID != 12 || oom.Signal != "SIGKILL" || oom.Memory == nil {
		t.Fatalf("first event = %+v, want rank 1's OOM kill", oom)
	}
	if !oom.Memory.AtLimit || oom.Memory.LimitBytes != 200<<20 || oom.Memory.OOMKills != 1 || oom.Memory.Version != 1 {
		t.Errorf("memory = %+v, want at the 200 MiB limit, 1 kill, v1", *oom.Memory)
	}
	for _, want := range []string{"OOM: rank 1 (pid 12, train)", "at its container's memory limit of 200 MiB"} {
		if !strings.Contains(oom.Message, want) {
			t.Errorf("message %q lacks %q", oom.Message, want)
		}
	}
	if evs[1].Kind != api.KindRankExit || evs[1].Rank != 0 || evs[1].ExitCode != -1 || evs[1].Signal != "" {
		t.Errorf("second event = %+v, want rank 0's exit with unknown status", evs[1])
	}
	if !strings.Contains(r.log.String(), "level=ERROR msg=\"OOM: rank 1") {
		t.Errorf("no ERROR log line for the OOM kill:\n%s", r.log)
	}
	if got := testutil.ToFloat64(r.a.m.oomKills); got != 1 {
		t.Errorf("podmpi_worker_oom_kills_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.a.m.rankExits.WithLabelValues("oom")); got != 1 {
		t.Errorf("rank exits{oom} = %v, want 1", got)
	}
}

func TestOOMKillBeforeTheVictimVanishes(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.cgroup(209715200, 3, 1) // counted while rank 1 still frees its memory
	r.tick()
	if evs := r.events(); len(evs) != 0 {
		t.Fatalf("events before the victim vanished: %+v", evs)
	}
	r.proc.Remove(12)
	r.tick()
	evs := r.events()
	if len(evs) != 1 || evs[0].Rank != 1 || evs[0].Kind != api.KindOOMKill {
		t.Fatalf("events = %+v, want rank 1's OOM kill", evs)
	}
}

func TestOOMKillVanishedBeforeTheCounter(t *testing.T) {
	// Killed between the cgroup read and the process scan: the vanish is
	// seen one reading before the counter.
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.proc.Remove(12)
	r.tick()
	r.cgroup(209715200, 1, 1)
	r.tick()
	evs := r.events()
	if len(evs) != 1 || evs[0].Rank != 1 || evs[0].Kind != api.KindOOMKill {
		t.Fatalf("events = %+v, want rank 1's OOM kill", evs)
	}
}

func TestOOMKillWithoutVictim(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.cgroup(100, 0, 2) // something outside the agent's tree, below the limit
	for range 4 {
		r.tick()
	}
	if evs := r.events(); len(evs) != 0 {
		t.Fatalf("recorded before %v: %+v", oomVictimWait, evs)
	}
	r.tick()
	evs := r.events()
	if len(evs) != 2 {
		t.Fatalf("events = %+v, want two OOM kills without a victim", evs)
	}
	for _, ev := range evs {
		if ev.Rank != -1 || ev.PID != 0 || ev.Memory.AtLimit || !strings.Contains(ev.Message, "below its memory limit of 200 MiB") ||
			!strings.Contains(ev.Message, "the node ran out of memory") {
			t.Errorf("event = %+v; want no victim and the node named", ev)
		}
	}
}

func TestRankCrashSeenAsZombie(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.proc.Write(12, "train", 'Z', 10, 0, int(syscall.SIGSEGV)|0x80, "OMPI_COMM_WORLD_RANK=1")
	r.tick()
	evs := r.events()
	if len(evs) != 1 {
		t.Fatalf("events = %+v, want rank 1's crash at once", evs)
	}
	ev := evs[0]
	if ev.Kind != api.KindRankExit || ev.Rank != 1 || ev.Signal != "SIGSEGV" || !ev.CoreDumped || ev.ExitCode != -1 ||
		ev.Message != "rank 1 (pid 12, train) died of SIGSEGV (core dumped)" {
		t.Errorf("event = %+v", ev)
	}
	// Reaped later: not recorded twice.
	r.proc.Remove(12)
	r.tick()
	r.tick()
	if n := len(r.events()); n != 1 {
		t.Errorf("%d events after the zombie was reaped, want 1", n)
	}
	if got := testutil.ToFloat64(r.a.m.rankExits.WithLabelValues("SIGSEGV")); got != 1 {
		t.Errorf("rank exits{SIGSEGV} = %v", got)
	}
}

func TestRankExitNonZeroAndChildNotRecorded(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.proc.Write(13, "sh", 'S', 11, 10, 0, "OMPI_COMM_WORLD_RANK=0") // rank 0's own child
	r.tick()
	r.proc.Remove(13)
	r.proc.Write(11, "train", 'Z', 10, 0, 3<<8, "OMPI_COMM_WORLD_RANK=0")
	r.tick()
	r.tick()
	evs := r.events()
	if len(evs) != 1 || evs[0].Rank != 0 || evs[0].ExitCode != 3 || evs[0].Message != "rank 0 (pid 11, train) exited with status 3" {
		t.Fatalf("events = %+v; want only rank 0's exit 3 (its child is not a rank of its own)", evs)
	}
}

func TestSessionExitsAndGPU(t *testing.T) {
	r := newRig(t, 0)
	r.a.SessionExited(SessionExit{Session: "c1/s2", Command: "orted -mca ess env", PID: 77, ExitCode: 0})
	r.a.SessionExited(SessionExit{Session: "c1/s3", Command: "hydra_pmi_proxy --control-port x", PID: 78, ExitCode: -1, Signal: syscall.SIGKILL})
	r.a.SessionExited(SessionExit{Session: "c1/s4", Command: "orted", PID: 79, ExitCode: 1, Aborted: true})
	r.a.GPU(gpu.Event{Kind: gpu.EventXid, Index: 2, UUID: "GPU-x", Xid: 79, GPUInstance: -1, ComputeInstance: -1})
	r.a.GPU(gpu.Event{Kind: gpu.EventDoubleBitECC, Index: 3, UUID: "GPU-y", GPUInstance: 1, ComputeInstance: 0})
	evs := r.events()
	if len(evs) != 4 {
		t.Fatalf("events = %+v; want 2 session exits (status 0 is not one) and 2 GPU errors", evs)
	}
	if evs[0].Message != "ssh session c1/s3 (hydra_pmi_proxy) ended by SIGKILL" || evs[0].Signal != "SIGKILL" || evs[0].Command != "hydra_pmi_proxy" {
		t.Errorf("session event = %+v", evs[0])
	}
	if !strings.Contains(evs[1].Message, "exited with status 1 after its client went away") {
		t.Errorf("aborted session event = %+v", evs[1])
	}
	if evs[2].Kind != api.KindGPUXid || evs[2].GPU.Xid != 79 || !strings.Contains(evs[2].Message, "fallen off the bus") {
		t.Errorf("xid event = %+v", evs[2])
	}
	if evs[3].Kind != api.KindGPUECC || evs[3].GPU.GPUInstance != 1 || !strings.Contains(evs[3].Message, "double-bit ECC") {
		t.Errorf("ecc event = %+v", evs[3])
	}
	if got := testutil.ToFloat64(r.a.m.sessionExits.WithLabelValues("SIGKILL")); got != 1 {
		t.Errorf("session exits{SIGKILL} = %v", got)
	}
	if got := testutil.ToFloat64(r.a.m.gpuErrors.WithLabelValues("ecc_dbe")); got != 1 {
		t.Errorf("gpu errors{ecc_dbe} = %v", got)
	}
}

// TestSessionExitKeepsTheProgramOnly: /events is unauthenticated, so a
// failed session's event keeps the program its command ran, never the
// arguments or the environment assignments before it.
func TestSessionExitKeepsTheProgramOnly(t *testing.T) {
	r := newRig(t, 0)
	r.a.SessionExited(SessionExit{Session: "c1/s1", ExitCode: 2,
		Command: "PATH=/opt/ompi/bin:$PATH ; export PATH ; HF_TOKEN=hf_secret /opt/ompi/bin/orted -mca orte_hnp_uri \"tcp://10.0.0.1:4000\" --password=pw"})
	r.a.SessionExited(SessionExit{Session: "c1/s2", ExitCode: 1, Command: "API_KEY=k1 python3 train.py --token t1"})
	body, err := json.Marshal(r.a.Events(api.EventsQuery{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"hf_secret", "pw", "10.0.0.1", "k1", "t1", "/opt/ompi/bin", "train.py"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("/events holds %q:\n%s", secret, body)
		}
	}
	evs := r.events()
	if len(evs) != 2 || evs[0].Command != "orted" || evs[1].Command != "python3" || evs[1].Message != "ssh session c1/s2 (python3) exited with status 1" {
		t.Errorf("events = %+v; want orted and python3 named", evs)
	}
}

// TestLauncherReplaced: the sessions the agent ended for a newer launcher
// are one event naming both instances and the programs (never their
// arguments), and each session's end says why it was ended.
func TestLauncherReplaced(t *testing.T) {
	r := newRig(t, 0)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := launcherid.Instance{ID: strings.Repeat("0a", 16), PodUID: "uid-a", Hostname: "tj-launcher-0-0", Start: start}
	newer := launcherid.Instance{ID: strings.Repeat("0b", 16), PodUID: "uid-b", Hostname: "tj-launcher-0-0", Start: start.Add(time.Hour)}
	r.a.LauncherReplaced(old, newer, []string{"PATH=/x ; export PATH ; /opt/ompi/bin/orted -mca orte_hnp_uri \"tcp://10.0.0.1:4000\""})
	r.a.SessionExited(SessionExit{Session: "c1/s2", Command: "orted -mca ess env", PID: 77, ExitCode: -1, Signal: syscall.SIGTERM,
		Aborted: true, Replaced: true})
	evs := r.events()
	if len(evs) != 2 {
		t.Fatalf("events = %+v", evs)
	}
	e := evs[0]
	want := "launcher tj-launcher-0-0 (pod uid uid-a, instance 0a0a0a0a, started 2026-01-02T03:04:05Z) was replaced by " +
		"launcher tj-launcher-0-0 (pod uid uid-b, instance 0b0b0b0b, started 2026-01-02T04:04:05Z): ended its 1 session(s) (orted)"
	if e.Kind != api.KindLauncherReplaced || !strings.HasPrefix(e.Message, want) || e.Launchers == nil ||
		e.Launchers.Old.Instance != old.ID || e.Launchers.New.PodUID != "uid-b" || !e.Launchers.New.Started.Equal(newer.Start) ||
		len(e.Launchers.Programs) != 1 || e.Launchers.Programs[0] != "orted" || strings.Contains(e.Message, "10.0.0.1") {
		t.Errorf("event = %+v", e)
	}
	if !strings.HasSuffix(evs[1].Message, "ended by SIGTERM, ended by the agent: a newer launcher of the job connected") {
		t.Errorf("session event = %+v", evs[1])
	}
}

func TestRingIsBounded(t *testing.T) {
	r := newRig(t, 4)
	for i := range 10 {
		r.a.SessionExited(SessionExit{Session: "s" + strconv.Itoa(i), Command: "orted", ExitCode: 1})
	}
	got := r.a.Events(api.EventsQuery{})
	if got.Dropped != 6 || len(got.Events) != 4 {
		t.Fatalf("dropped %d, kept %d; want 6 and 4", got.Dropped, len(got.Events))
	}
	for i, ev := range got.Events {
		if ev.Seq != uint64(7+i) || ev.Session != "s"+strconv.Itoa(6+i) {
			t.Errorf("event %d = seq %d %s, want the last four in order", i, ev.Seq, ev.Session)
		}
	}
	if got.Hostname != "w-0" || got.Memory.LimitBytes != 200<<20 || got.Memory.Cgroup != r.cg {
		t.Errorf("document = %+v", got)
	}
}

func TestEventsSince(t *testing.T) {
	r := newRig(t, 0)
	r.a.SessionExited(SessionExit{Session: "old", Command: "orted", ExitCode: 1})
	r.tick()
	since := r.a.now()
	r.a.SessionExited(SessionExit{Session: "new", Command: "orted", ExitCode: 1})
	got := r.a.Events(api.EventsQuery{Since: since})
	if evs := got.Events; len(evs) != 1 || evs[0].Session != "new" {
		t.Fatalf("Events(since) = %+v, want only the new one", evs)
	}
	// The agent's start and its clock now: its uptime, one interval.
	if up := got.Now.Sub(got.Started); up != rigInterval || got.UptimeSeconds != rigInterval.Seconds() {
		t.Errorf("Now - Started = %s, uptime %gs, want %s (Started %s)", up, got.UptimeSeconds, rigInterval, got.Started)
	}
}

func TestNoCgroup(t *testing.T) {
	p := proctest.New(t)
	dir := t.TempDir()
	a, err := New(Config{CgroupRoot: dir, ProcSelfCgroup: filepath.Join(dir, "none"), Proc: p.Path, RootPID: 1})
	if err != nil {
		t.Fatal(err)
	}
	a.Poll()
	m := a.Events(api.EventsQuery{}).Memory
	if m.Version != 0 || !strings.Contains(m.Error, "no memory cgroup under") {
		t.Fatalf("memory = %+v; want the reason there is none", m)
	}
	if !strings.HasPrefix(a.Cgroup(), "none: ") {
		t.Errorf("Cgroup() = %q", a.Cgroup())
	}
}

// TestSnapshotShowsWhatIsNotRecordedYet: asked right after a failure, the
// account reads again and shows the OOM kill whose victim is not named yet
// and the rank that ended less than an interval ago, marked provisional.
func TestSnapshotShowsWhatIsNotRecordedYet(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.proc.Remove(11) // rank 0 ends
	got := r.a.Snapshot(t.Context(), api.EventsQuery{})
	if len(got.Events) != 1 || !got.Events[0].Provisional || got.Events[0].Seq != 0 || got.Events[0].Rank != 0 ||
		got.Events[0].Kind != api.KindRankExit {
		t.Fatalf("snapshot = %+v; want rank 0's end, provisional", got.Events)
	}
	r.tick()
	r.tick()            // rank 0's end is recorded
	r.cgroup(100, 0, 2) // two OOM kills, victims still alive
	got = r.a.Snapshot(t.Context(), api.EventsQuery{})
	var ooms int
	for _, ev := range got.Events {
		if ev.Kind == api.KindOOMKill && ev.Provisional && ev.Rank == -1 && strings.Contains(ev.Message, "not named yet") {
			ooms++
		}
	}
	if ooms != 2 {
		t.Fatalf("snapshot = %+v; want two provisional OOM kills", got.Events)
	}
	// An OOM kill whose victim is already gone is named at once.
	r = newRig(t, 0)
	r.job()
	r.tick()
	r.proc.Remove(12)
	r.cgroup(209715200, 1, 1)
	got = r.a.Snapshot(t.Context(), api.EventsQuery{})
	if len(got.Events) != 1 || got.Events[0].Provisional || got.Events[0].Rank != 1 {
		t.Fatalf("snapshot = %+v; want rank 1's OOM kill, recorded", got.Events)
	}
}

// TestSnapshotPagesBySeq: an OOM kill is recorded when its victim is
// named, after an answer that showed it provisional, with the time the
// counter rose, which is before that answer. Asking for what was recorded
// after the answer's LastSeq gets it; asking by time from the answer's
// clock (what launchers did) does not.
func TestSnapshotPagesBySeq(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.a.SessionExited(SessionExit{Session: "c1/s1", Command: "orted", ExitCode: 1})
	r.cgroup(209715200, 3, 1) // the counter rises; rank 1 still frees its memory
	for range 4 {
		r.tick() // 1.5 s on the account's clock after the rise
	}
	first := r.a.Snapshot(t.Context(), api.EventsQuery{})
	if first.LastSeq != 1 || len(first.Events) != 2 || !first.Events[1].Provisional || first.Events[1].Kind != api.KindOOMKill {
		t.Fatalf("first answer: lastSeq %d, events %+v; want the session exit and the provisional OOM kill", first.LastSeq, first.Events)
	}
	r.proc.Remove(12)
	r.tick()
	next := r.a.Snapshot(t.Context(), api.EventsQuery{After: first.LastSeq})
	if len(next.Events) != 1 || next.Events[0].Kind != api.KindOOMKill || next.Events[0].Provisional || next.Events[0].Rank != 1 ||
		!next.Events[0].Time.Before(first.Now) || next.LastSeq != 2 || next.After != 1 {
		t.Fatalf("after=%d: lastSeq %d, events %+v; want rank 1's OOM kill, recorded, stamped before the first answer (%s)",
			first.LastSeq, next.LastSeq, next.Events, first.Now)
	}
	if byTime := r.a.Snapshot(t.Context(), api.EventsQuery{Since: first.Now.Add(-time.Second)}); len(byTime.Events) != 0 {
		t.Errorf("since the first answer less 1 s: %+v; want nothing (paging by time cannot find it)", byTime.Events)
	}
}

// TestProvisionalRankExitKeepsItsSignal: a rank seen as a zombie killed by
// SIGKILL waits an interval for an OOM kill to claim it; meanwhile
// /events shows it provisional with the signal the account already knows.
func TestProvisionalRankExitKeepsItsSignal(t *testing.T) {
	r := newRig(t, 0)
	r.job()
	r.tick()
	r.proc.Write(12, "train", 'Z', 10, 0, int(syscall.SIGKILL), "OMPI_COMM_WORLD_RANK=1")
	r.tick()
	got := r.a.Snapshot(t.Context(), api.EventsQuery{})
	if len(got.Events) != 1 {
		t.Fatalf("events = %+v; want rank 1's end, provisional", got.Events)
	}
	ev := got.Events[0]
	if !ev.Provisional || ev.Rank != 1 || ev.Signal != "SIGKILL" || ev.ExitCode != -1 || !strings.Contains(ev.Message, "died of SIGKILL") {
		t.Errorf("event = %+v; want rank 1, provisional, died of SIGKILL", ev)
	}
}

// newRigV2 is newRig over a cgroup v2 fixture with a 200 MiB limit.
func newRigV2(t *testing.T) *rig {
	t.Helper()
	const cg = "/kubepods.slice/pod/ctr"
	return newRigOn(t, v2Files(cg, "209715200\n", "1048576\n", "1048576\n", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"), cg, 0)
}

// cgroupV2 sets the v2 fixture's counters; the peak is the limit, as it
// is in a pod that once came close to it.
func (r *rig) cgroupV2(usage, maxEvents, oom, oomKill int) {
	r.t.Helper()
	for file, v := range map[string]string{
		"memory.current": strconv.Itoa(usage),
		"memory.peak":    "209715200",
		"memory.events":  fmt.Sprintf("low 0\nhigh 0\nmax %d\noom %d\noom_kill %d\noom_group_kill 0", maxEvents, oom, oomKill),
	} {
		if err := os.WriteFile(filepath.Join(r.cg, file), []byte(v+"\n"), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

// TestOOMKillAtTheLimitOrTheNode decides from the counters that rose
// with the kill: v2's "oom" (the cgroup's own OOM) says the limit; a kill
// with "max" (reclaim at the limit) rising and the lifetime peak at the
// limit, but no "oom", is the node's OOM killer; so is a v1 kill without
// failcnt rising, whatever max_usage_in_bytes says.
func TestOOMKillAtTheLimitOrTheNode(t *testing.T) {
	// counters are the cgroup's before one tick (max is v2's only; v1
	// has failcnt as its limitEvents); nil leaves them as they are.
	type counters struct{ usage, max, limitEvents, kills, peak int }
	at := func(usage, max, limitEvents, kills int) *counters {
		return &counters{usage, max, limitEvents, kills, 200 << 20}
	}
	// peaked is at with a peak usage other than the limit (200 MiB).
	peaked := func(c *counters, peak int) *counters { c.peak = peak; return c }
	for _, tc := range []struct {
		name     string
		v2       bool
		readings []*counters
		atLimit  bool
	}{
		{"v2 node", true, []*counters{at(150<<20, 5, 0, 0), nil, at(150<<20, 9, 0, 1)}, false},
		{"v2 limit", true, []*counters{nil, at(200<<20, 7, 1, 1)}, true},
		{"v2 limit, oom read a reading before the kill", true, []*counters{nil, at(200<<20, 7, 1, 0), at(100<<20, 7, 1, 1)}, true},
		{"v2 limit long before, node now", true, []*counters{at(200<<20, 7, 1, 0), nil, nil, at(100<<20, 7, 1, 1)}, false},
		{"v1 node, peak at the limit", false, []*counters{nil, nil, at(100<<20, 0, 0, 1)}, false},
		{"v1 limit", false, []*counters{nil, at(200<<20, 0, 40, 1)}, true},
		// The pod's limit held first (its failcnt rose, one level up, out
		// of the container's sight): the container's peak rose to the limit
		// with the kill, as measured in a Kubernetes pod on cgroup v1.
		{"v1 limit of the pod, failcnt flat", false, []*counters{peaked(at(10<<20, 0, 0, 0), 10<<20), at(200<<20, 0, 0, 1)}, true},
		{"v2 limit of the pod, oom flat", true, []*counters{peaked(at(10<<20, 0, 0, 0), 10<<20), at(200<<20, 3, 0, 1)}, true},
		{"v2 node, peak far below the limit", true, []*counters{peaked(at(10<<20, 0, 0, 0), 10<<20), peaked(at(120<<20, 0, 0, 1), 120<<20)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigV2(t)
			if !tc.v2 {
				r = newRig(t, 0)
				if err := os.WriteFile(filepath.Join(r.cg, "memory.max_usage_in_bytes"), []byte("209715200\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r.job()
			for _, c := range tc.readings {
				switch {
				case c == nil:
				case tc.v2:
					r.cgroupV2(c.usage, c.max, c.limitEvents, c.kills)
					r.write("memory.peak", c.peak)
				default:
					r.cgroup(c.usage, c.limitEvents, c.kills)
					r.write("memory.max_usage_in_bytes", c.peak)
				}
				r.tick()
			}
			r.proc.Remove(12)
			for range 3 {
				r.tick()
			}
			evs := r.events()
			if len(evs) == 0 || evs[0].Kind != api.KindOOMKill || evs[0].Memory == nil {
				t.Fatalf("events = %+v; want an OOM kill", evs)
			}
			ev := evs[0]
			words := []string{"below its memory limit of 200 MiB", "the node ran out of memory"}
			if tc.atLimit {
				words = []string{"at its container's memory limit of 200 MiB"}
			}
			if ev.Memory.AtLimit != tc.atLimit {
				t.Errorf("memory = %+v; want atLimit %v", *ev.Memory, tc.atLimit)
			}
			for _, w := range words {
				if !strings.Contains(ev.Message, w) {
					t.Errorf("message %q lacks %q", ev.Message, w)
				}
			}
		})
	}
}

// TestUnreadableCgroupAtStartIsLogged: a memory cgroup that cannot be
// read when the agent starts, or none at all, is a WARN naming the path,
// the error, and what the account cannot tell without it.
func TestUnreadableCgroupAtStartIsLogged(t *testing.T) {
	files := v1Files("/job", "209715200\n", "1\n", "1\n", "0\n", "0")
	files["sys/memory/job/memory.oom_control"] = "oom_kill\n"
	dir := cgrouptest.Tree(t, files)
	var buf bytes.Buffer
	_, err := New(Config{CgroupRoot: filepath.Join(dir, "sys"), ProcSelfCgroup: filepath.Join(dir, "proc", "cgroup"), Proc: proctest.New(t).Path,
		RootPID: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"level=WARN", "cannot read the memory cgroup at start", "OOM kills are not counted",
		filepath.Join(dir, "sys", "memory", "job"), "memory.oom_control"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}

	buf.Reset()
	empty := t.TempDir()
	if _, err := New(Config{CgroupRoot: empty, ProcSelfCgroup: filepath.Join(empty, "none"), Proc: proctest.New(t).Path, RootPID: 1,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))}); err != nil {
		t.Fatal(err)
	}
	if log := buf.String(); strings.Count(log, "level=WARN") != 1 || !strings.Contains(log, "no memory cgroup") ||
		!strings.Contains(log, "cgroup_root="+empty) || !strings.Contains(log, "a SIGKILL of unknown origin") {
		t.Errorf("log:\n%s\nwant one WARN naming the cgroup root and what is lost", log)
	}
}

// TestConcurrentSnapshotsShareReadings: requests that arrive together
// wait for one reading and share it; readings never start less than an
// interval apart, whatever the requests; and each answer comes from a
// reading that started after it was asked (the rank removed before shows).
func TestConcurrentSnapshotsShareReadings(t *testing.T) {
	r := newRig(t, 0)
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	r.a.pollHook = func(start time.Time) {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, start)
	}
	r.job()
	r.a.Poll()
	r.proc.Remove(11) // rank 0 ends after the last reading
	const requests = 8
	begin := time.Now()
	var wg sync.WaitGroup
	answers := make([]api.Events, requests)
	for i := range requests {
		wg.Go(func() { answers[i] = r.a.Snapshot(t.Context(), api.EventsQuery{}) })
	}
	wg.Wait()
	elapsed := time.Since(begin)
	for i, a := range answers {
		if len(a.Events) != 1 || a.Events[0].Rank != 0 {
			t.Errorf("answer %d = %+v; want rank 0's end, seen by a reading after the request", i, a.Events)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < rigInterval {
			t.Errorf("readings %d and %d started %s apart, less than the interval %s", i-1, i, gap, rigInterval)
		}
	}
	// The first reading is the test's own; the requests took the others.
	if took, most := len(starts)-1, 1+int(elapsed/rigInterval); took > most {
		t.Errorf("%d requests took %d readings in %s; want at most %d", requests, took, elapsed, most)
	}
}

// TestReadingHoldsNoLockOnTheAccount: while a reading is in /proc, a
// session's exit is recorded and the account answers.
func TestReadingHoldsNoLockOnTheAccount(t *testing.T) {
	r := newRig(t, 0)
	inside, release := make(chan struct{}), make(chan struct{})
	r.a.pollHook = func(time.Time) {
		close(inside)
		<-release
	}
	polled := make(chan struct{})
	go func() { defer close(polled); r.a.Poll() }()
	<-inside
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.a.SessionExited(SessionExit{Session: "c1/s1", Command: "orted", ExitCode: 1})
		_ = r.a.Events(api.EventsQuery{})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("a session's exit waited for the reading")
	}
	close(release)
	<-polled
}

// TestRankExitNamesItsSessionsLauncher: a session's command registered
// for launcher instance A runs a rank, another session's (its connection
// declared nothing) runs another; both ranks are real processes, killed
// as an older launcher's are when a newer one connects. The first rank's
// exit names A, the second's no instance, and the session's own failed
// end names A.
func TestRankExitNamesItsSessionsLauncher(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	const instA = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
	dir := t.TempDir()
	a, err := New(Config{CgroupRoot: dir, ProcSelfCgroup: filepath.Join(dir, "none"), Interval: MinInterval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// session starts a session's command as the SSH server does, with a
	// rank below it, and returns the command and the rank's pid.
	session := func(id string, rank int, launcher string) (*exec.Cmd, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d sleep 30 & echo $!; wait $!", rank))
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		a.SessionStarted(SessionStart{Session: id, PID: cmd.Process.Pid, Launcher: launcher})
		line, err := bufio.NewReader(out).ReadString('\n')
		pid, perr := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || perr != nil {
			t.Fatalf("the rank's pid: %q, %v, %v", line, err, perr)
		}
		return cmd, pid
	}
	cmdA, rankA := session("c1/s1", 3, instA)
	cmdU, rankU := session("c2/s2", 4, "")
	// Until the account has seen both ranks (sleep exec'd, its rank read).
	seen := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for k, p := range a.prev {
			if k.pid == rankA && p.rank == 3 || k.pid == rankU && p.rank == 4 {
				n++
			}
		}
		return n == 2
	}
	for range 200 {
		if a.Poll(); seen() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !seen() {
		t.Fatal("the account did not see both ranks")
	}
	for _, pid := range []int{rankA, rankU} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*exec.Cmd{cmdA, cmdU} {
		var ee *exec.ExitError
		if err := c.Wait(); !errors.As(err, &ee) {
			t.Fatalf("session command: %v, want its status 137", err)
		}
	}
	a.SessionExited(SessionExit{Session: "c1/s1", Command: "orted", PID: cmdA.Process.Pid, ExitCode: cmdA.ProcessState.ExitCode(),
		Launcher: instA})
	a.SessionExited(SessionExit{Session: "c2/s2", Command: "orted", PID: cmdU.Process.Pid, ExitCode: cmdU.ProcessState.ExitCode()})
	byRank := map[int]api.Event{}
	for range 200 {
		a.Poll()
		for _, ev := range a.Events(api.EventsQuery{}).Events {
			if ev.Kind == api.KindRankExit {
				byRank[ev.Rank] = ev
			}
		}
		if len(byRank) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ev, ok := byRank[3]; !ok || ev.PID != rankA || ev.Launcher != instA {
		t.Errorf("rank 3's exit = %+v (recorded %v); want pid %d, launcher %s", ev, ok, rankA, instA)
	}
	if ev, ok := byRank[4]; !ok || ev.PID != rankU || ev.Launcher != "" {
		t.Errorf("rank 4's exit = %+v (recorded %v); want pid %d, no launcher (its connection declared none)", ev, ok, rankU)
	}
	var sessions []api.Event
	for _, ev := range a.Events(api.EventsQuery{}).Events {
		if ev.Kind == api.KindSessionExit {
			sessions = append(sessions, ev)
		}
	}
	if len(sessions) != 2 || sessions[0].Session != "c1/s1" || sessions[0].Launcher != instA || sessions[1].Launcher != "" {
		t.Errorf("session exits = %+v; want c1/s1's naming %s, c2/s2's none", sessions, instA)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sessions) != 0 {
		t.Errorf("registrations kept after the sessions ended: %+v", a.sessions)
	}
}

// TestRankKeepsItsLauncherOnceOrphaned: a rank keeps the launcher
// instance it was first seen with after its daemon is gone and it was
// re-parented to the agent (the daemon of a replaced launcher dies first),
// and one first seen after that names none: it is no longer below the
// session's command.
func TestRankKeepsItsLauncherOnceOrphaned(t *testing.T) {
	r := newRig(t, 0)
	r.proc.Write(10, "orted", 'S', 1, 100, 0)
	r.a.SessionStarted(SessionStart{Session: "c1/s1", PID: 10, Launcher: "a1"})
	r.a.SessionStarted(SessionStart{Session: "c1/s9", PID: 99, Launcher: "a1"}) // gone already: not registered
	r.proc.Write(11, "train", 'R', 10, 1000, 0, "OMPI_COMM_WORLD_RANK=0")
	r.tick()
	r.proc.Remove(10)
	r.proc.Write(11, "train", 'R', 1, 1000, 0, "OMPI_COMM_WORLD_RANK=0")
	r.proc.Write(12, "train", 'R', 1, 1000, 0, "OMPI_COMM_WORLD_RANK=1")
	r.a.SessionExited(SessionExit{Session: "c1/s1", Command: "orted", PID: 10, ExitCode: -1, Signal: syscall.SIGTERM, Launcher: "a1"})
	r.tick()
	r.proc.Write(11, "train", 'Z', 1, 0, 1<<8, "OMPI_COMM_WORLD_RANK=0")
	r.proc.Write(12, "train", 'Z', 1, 0, 1<<8, "OMPI_COMM_WORLD_RANK=1")
	r.tick()
	var got []string
	for _, ev := range r.events() {
		got = append(got, fmt.Sprintf("%s rank %d launcher %q", ev.Kind, ev.Rank, ev.Launcher))
	}
	want := []string{`session-exit rank -1 launcher "a1"`, `rank-exit rank 0 launcher "a1"`, `rank-exit rank 1 launcher ""`}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(r.a.sessions) != 0 {
		t.Errorf("registrations kept: %+v", r.a.sessions)
	}
}
