package account

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// statLine builds a /proc/<pid>/stat line (52 fields) for a fixture.
func statLine(pid int, comm string, state byte, ppid int, start, rssPages uint64, exitCode int) string {
	f := make([]string, 50) // fields 3..52
	for i := range f {
		f[i] = "0"
	}
	f[0] = string(state)
	f[1] = strconv.Itoa(ppid)
	f[19] = strconv.FormatUint(start, 10)
	f[21] = strconv.FormatUint(rssPages, 10)
	f[49] = strconv.Itoa(exitCode)
	return fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(f, " "))
}

func TestParseStat(t *testing.T) {
	st, err := parseStat([]byte(statLine(42, "a) (b", 'Z', 7, 1234, 99, 0x8b)))
	if err != nil {
		t.Fatal(err)
	}
	if st.pid != 42 || st.comm != "a) (b" || st.state != 'Z' || st.ppid != 7 || st.start != 1234 || st.rss != 99 || st.exitCode != 0x8b {
		t.Errorf("parseStat = %+v", st)
	}
	// A kernel older than 3.5 has no exit_code field.
	short := strings.Join(strings.Fields(statLine(1, "init", 'S', 0, 5, 1, 0))[:44], " ")
	if st, err := parseStat([]byte(short)); err != nil || st.exitCode != -1 {
		t.Errorf("44 fields: %+v, %v; want exitCode -1", st, err)
	}
	for _, bad := range []string{"", "42", "x (a) S 1", "42 (a) S x 0", ") 42 (", "-1 (a) S 1 " + strings.Repeat("0 ", 30)} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) = nil error", bad)
		}
	}
}

// TestParseStatThisProcess reads the test's own stat.
func TestParseStatThisProcess(t *testing.T) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	st, err := parseStat(data)
	if err != nil {
		t.Fatal(err)
	}
	if st.pid != os.Getpid() || st.ppid != os.Getppid() || st.rss == 0 || st.start == 0 {
		t.Errorf("parseStat(own stat) = %+v", st)
	}
}

func TestRankFromEnviron(t *testing.T) {
	env := func(kv ...string) []byte { return []byte(strings.Join(kv, "\x00") + "\x00") }
	for _, tc := range []struct {
		env  []byte
		want int
	}{
		{env("PATH=/bin", "OMPI_COMM_WORLD_RANK=3", "PMIX_RANK=9"), 3},
		{env("PMIX_RANK=9", "PMI_RANK=1"), 9},
		{env("PMI_RANK=12"), 12},
		{env("PMI_RANK=x", "HOME=/"), -1},
		{env("OMPI_COMM_WORLD_RANK=-1", "PMI_RANK=2"), 2},
		{env("XOMPI_COMM_WORLD_RANK=1"), -1},
		{[]byte("OMPI_COMM_WORLD_RANK=4"), 4},
		{nil, -1},
	} {
		if got, _ := rankFromEnviron(tc.env); got != tc.want {
			t.Errorf("rankFromEnviron(%q) = %d, want %d", tc.env, got, tc.want)
		}
	}
}

func TestWaitStatus(t *testing.T) {
	if c, s, core := waitStatus(0x8b); c != -1 || s != syscall.SIGSEGV || !core {
		t.Errorf("waitStatus(0x8b) = %d %v %v, want SIGSEGV with core", c, s, core)
	}
	if c, s, _ := waitStatus(3 << 8); c != 3 || s != 0 {
		t.Errorf("waitStatus(3<<8) = %d %v, want exit 3", c, s)
	}
	if c, s, _ := waitStatus(9); c != -1 || s != syscall.SIGKILL {
		t.Errorf("waitStatus(9) = %d %v, want SIGKILL", c, s)
	}
}

// TestSnapshotRealProcesses starts a shell holding a rank's environment
// with a child of the same rank, and checks that a snapshot rooted at the
// test process finds both, the shell as the rank's leader.
func TestSnapshotRealProcesses(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "sleep 30 & wait")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "OMPI_COMM_WORLD_RANK=5"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	s := newScanner("/proc", os.Getpid())
	// Until the shell's child has exec'd sleep it is a second "sh": wait
	// for the pair, not merely for two processes.
	var snap map[procKey]procInfo
	var shell, sleep *procInfo
	for range 200 {
		var err error
		if snap, err = s.snapshot(); err != nil {
			t.Fatal(err)
		}
		shell, sleep = nil, nil
		for _, p := range snap {
			switch {
			case p.comm == "sh" && p.key.pid == cmd.Process.Pid:
				shell = &p
			case p.comm == "sleep":
				sleep = &p
			}
		}
		if shell != nil && sleep != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if shell == nil || sleep == nil {
		t.Fatalf("snapshot = %+v; want sh and its sleep", snap)
	}
	if shell.rank != 5 || !shell.leader || shell.key.pid != cmd.Process.Pid || shell.rssBytes == 0 {
		t.Errorf("shell = %+v; want rank 5, leader, pid %d, some RSS", *shell, cmd.Process.Pid)
	}
	if sleep.rank != 5 || sleep.leader || sleep.ppid != cmd.Process.Pid {
		t.Errorf("sleep = %+v; want rank 5, not leader, child of the shell", *sleep)
	}
}

// fakeProc is a /proc fixture: write sets a process, remove drops it.
type fakeProc struct {
	t   *testing.T
	dir string
}

func newFakeProc(t *testing.T) *fakeProc { return &fakeProc{t: t, dir: t.TempDir()} }

func (f *fakeProc) write(pid int, comm string, state byte, ppid int, rssPages uint64, exitCode int, env ...string) {
	f.t.Helper()
	d := filepath.Join(f.dir, strconv.Itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "stat"), []byte(statLine(pid, comm, state, ppid, uint64(pid)*10, rssPages, exitCode)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "environ"), []byte(strings.Join(env, "\x00")), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) remove(pid int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.dir, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

func TestSnapshotFixture(t *testing.T) {
	p := newFakeProc(t)
	p.write(1, "worker-agent", 'S', 0, 10, 0)
	p.write(10, "orted", 'S', 1, 10, 0)
	p.write(11, "python", 'R', 10, 1000, 0, "OMPI_COMM_WORLD_RANK=0")
	p.write(12, "python", 'R', 11, 10, 0, "OMPI_COMM_WORLD_RANK=0")
	p.write(13, "other", 'S', 2, 10, 0, "OMPI_COMM_WORLD_RANK=7") // not below pid 1
	snap, err := newScanner(p.dir, 1).snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 3 {
		t.Fatalf("snapshot = %+v, want orted and two pythons", snap)
	}
	for _, q := range snap {
		switch q.key.pid {
		case 10:
			if q.rank != -1 || q.leader {
				t.Errorf("orted = %+v", q)
			}
		case 11:
			if q.rank != 0 || !q.leader || q.rssBytes != 1000*uint64(os.Getpagesize()) {
				t.Errorf("rank leader = %+v", q)
			}
		case 12:
			if q.rank != 0 || q.leader {
				t.Errorf("rank child = %+v", q)
			}
		default:
			t.Errorf("unexpected %+v", q)
		}
	}
}

// TestSnapshotRankAfterExec: a rank's process is first seen between fork
// and exec, with its launcher's environment; after exec (same pid, same
// start time) it has its rank. The rank must not stay unknown.
func TestSnapshotRankAfterExec(t *testing.T) {
	p := newFakeProc(t)
	p.write(1, "worker-agent", 'S', 0, 10, 0)
	p.write(10, "orted", 'S', 1, 10, 0)
	p.write(11, "orted", 'R', 10, 10, 0, "PATH=/bin")
	s := newScanner(p.dir, 1)
	if _, err := s.snapshot(); err != nil {
		t.Fatal(err)
	}
	p.write(11, "python", 'R', 10, 1000, 0, "PATH=/bin", "OMPI_COMM_WORLD_RANK=3")
	snap, err := s.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if q := snap[procKey{11, 110}]; q.rank != 3 || !q.leader {
		t.Errorf("after exec: %+v, want rank 3, leader", q)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(42, "a) (b", 'Z', 7, 1234, 99, 0x8b)))
	f.Add([]byte("1 (init) S 0"))
	f.Add([]byte("1 () R"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseStat(data)
		if err == nil && (st.pid <= 0 || st.exitCode < -1) {
			t.Fatalf("parseStat(%q) = %+v", data, st)
		}
	})
}

func FuzzRankFromEnviron(f *testing.F) {
	f.Add([]byte("OMPI_COMM_WORLD_RANK=3\x00PMI_RANK=4\x00"))
	f.Add([]byte("PMIX_RANK=99999999999\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, ok := rankFromEnviron(data)
		if ok != (r >= 0) || r >= 1<<24 {
			t.Fatalf("rankFromEnviron(%q) = %d, %v", data, r, ok)
		}
	})
}

// BenchmarkSnapshot is one scan of this machine's /proc for the test
// process's descendants: what every Config.Interval costs the agent.
func BenchmarkSnapshot(b *testing.B) {
	s := newScanner("/proc", os.Getpid())
	for b.Loop() {
		if _, err := s.snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}
