package account

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/proc/proctest"
)

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

func TestSnapshotFixture(t *testing.T) {
	p := proctest.New(t)
	p.Write(1, "worker-agent", 'S', 0, 10, 0)
	p.Write(10, "orted", 'S', 1, 10, 0)
	p.Write(11, "python", 'R', 10, 1000, 0, "OMPI_COMM_WORLD_RANK=0")
	p.Write(12, "python", 'R', 11, 10, 0, "OMPI_COMM_WORLD_RANK=0")
	p.Write(13, "other", 'S', 2, 10, 0, "OMPI_COMM_WORLD_RANK=7") // not below pid 1
	snap, err := newScanner(p.Path, 1).snapshot()
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
	p := proctest.New(t)
	p.Write(1, "worker-agent", 'S', 0, 10, 0)
	p.Write(10, "orted", 'S', 1, 10, 0)
	p.Write(11, "orted", 'R', 10, 10, 0, "PATH=/bin")
	s := newScanner(p.Path, 1)
	if _, err := s.snapshot(); err != nil {
		t.Fatal(err)
	}
	p.Write(11, "python", 'R', 10, 1000, 0, "PATH=/bin", "OMPI_COMM_WORLD_RANK=3")
	snap, err := s.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if q := snap[procKey{11, 110}]; q.rank != 3 || !q.leader {
		t.Errorf("after exec: %+v, want rank 3, leader", q)
	}
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
