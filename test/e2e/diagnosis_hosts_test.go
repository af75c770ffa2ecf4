package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDiagnosisNamesTheHost: the root cause names a real host whenever a
// source knows it, and a daemon's own failure rather than mpirun's generic
// words, across 4 worker pods of 2 slots: every rank exits with status 7
// (Open MPI 4 names the first one without its host; it lives too briefly
// for its agent to see it, and mpirun's default mapping of the hostfile
// places it), orted dies of SIGSEGV as it starts on one worker (a wrapper
// earlier on that agent's PATH kills itself), and OMPI_MCA_plm=isolated in
// the launcher's environment keeps mpirun from starting any daemon.
func TestDiagnosisNamesTheHost(t *testing.T) {
	ctx := testCtx(t, 6*time.Minute)
	f := newFixture(t, "dh", 4)
	f.startAgents(t, ctx, 1, 2, 3, 4)
	workers := f.workersFlag(4)

	t.Run("every_rank_exits_7", func(t *testing.T) {
		// Each rank writes where it runs to a file of its own (the pods
		// share the file system), then exits 7 at once. Open MPI 4 names
		// the first rank only when it handles that rank's end before the
		// job's (every rank ends at once): a run whose output names none
		// is run again, three times at most, once the window the launcher
		// asks the accounts for (from 2 s before mpirun starts) no longer
		// holds the last run's ends.
		ranks := filepath.Join(work, "ranks-exit7")
		if err := MakeDir(ranks); err != nil {
			t.Fatal(err)
		}
		var r result
		for range 3 {
			r = f.run(t, ctx, 60*time.Second, workers, "mpirun.openmpi", "-np", "8", "sh", "-c",
				`hostname > `+ranks+`/$OMPI_COMM_WORLD_RANK; exit 7`)
			if strings.Contains(r.out, "Process name:") {
				break
			}
			t.Logf("mpirun named no rank; again")
			time.Sleep(3 * time.Second)
		}
		first := f.expectRootCause(t, r, "exited with status 7")
		t.Logf("termination message: %s", first)
		m := regexp.MustCompile(`rank (\d+) on (an unknown host|\S+)`).FindStringSubmatch(first)
		if m == nil {
			t.Fatalf("the root cause names no rank: %s", first)
		}
		b, err := os.ReadFile(filepath.Join(ranks, m[1]))
		if ran := strings.TrimSpace(string(b)); err != nil || ran == "" || strings.Split(m[2], ".")[0] != ran {
			t.Errorf("rank %s is named on %s; it ran on %q (%v)", m[1], m[2], ran, err)
		}
		if r.code != 7 {
			t.Errorf("launcher exit %d, want mpirun's 7", r.code)
		}
	})

	t.Run("orted_crashes_at_start", func(t *testing.T) {
		// A wrapper named orted first on the third worker's PATH: it kills
		// itself with SIGSEGV, as an orted that crashes in hwloc does.
		dir := filepath.Join(work, "crashing-orted")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "orted"), []byte("#!/bin/sh\nkill -SEGV $$\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		f.startAgent(t, ctx, 3, AgentOptions{Env: []string{"PATH=" + dir + ":" + os.Getenv("PATH")}})
		defer f.startAgent(t, ctx, 3, AgentOptions{})
		r := f.run(t, ctx, 60*time.Second, workers, "mpirun.openmpi", "-np", "8", "hostname")
		first := f.expectRootCause(t, r, "the MPI daemon orted on "+f.workerName(2), "SIGSEGV", "status 139")
		t.Logf("termination message: %s", first)
		if strings.Contains(first, "NetworkPolicy") {
			t.Errorf("a daemon that crashed is blamed on the network: %s", first)
		}
	})

	t.Run("plm_isolated", func(t *testing.T) {
		p, err := StartLauncher(ctx, f.c, 0, bin, LauncherOptions{
			AuthDir: authDir, RunDir: f.nextRunDir(), Flags: workers, Command: []string{"mpirun.openmpi", "-np", "8", "hostname"},
			Env: []string{"OMPI_MCA_plm=isolated"},
			Log: filepath.Join(f.c.LogDir(), "launcher-plm-isolated.log"),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop() })
		r := wait(t, p, time.Now(), 60*time.Second)
		first := f.expectRootCause(t, r, "OMPI_MCA_plm=isolated", "overrides podmpi's wiring")
		t.Logf("termination message: %s", first)
		if !strings.Contains(r.out, "an MPI setting of the environment overrides podmpi's wiring") {
			t.Errorf("no warning at start; output:\n%s", r.out)
		}
	})
}
