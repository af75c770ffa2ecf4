package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWorkerTmpdirKeptClean: a run leaves nothing in a worker's TMPDIR.
// The launcher pod and the worker pods each have a /tmp of their own, as
// on Kubernetes: here the launcher runs with a private tmpfs on the
// directory that is every worker's TMPDIR, so that its files there are
// not the workers'. With Trainer's status API on, each worker-agent keeps
// the token and CA of the ranks' status endpoint at the path the launcher
// uses, which does not exist on the worker: the directories the agent
// made for it must go with the run, and a file of someone else's in
// TMPDIR must stay.
func TestWorkerTmpdirKeptClean(t *testing.T) {
	ctx := testCtx(t, 4*time.Minute)
	wrapper := filepath.Join(work, "private-tmp")
	if err := os.WriteFile(wrapper, []byte(privateTmp), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(work, "tmp-kept-clean") // every pod's TMPDIR; the launcher's own is a tmpfs there
	if err := MakeDir(tmp); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, "st", 2)
	for _, pod := range []int{1, 2} {
		f.startAgent(t, ctx, pod, AgentOptions{Env: []string{"TMPDIR=" + tmp}})
	}
	// Someone else's empty directory and file in TMPDIR stay.
	if err := MakeDir(filepath.Join(tmp, "podmpi-someone-elses")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "theirs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		t.Helper()
		var out []string
		err := filepath.Walk(tmp, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			out = append(out, p+" "+fi.Mode().String())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := list()
	for _, argv := range [][]string{
		{"mpirun.openmpi", "-np", "4", allreduceOMPI},
		{"mpiexec.hydra", "-np", "4", allreduceMPICH},
	} {
		tr, err := StartFakeTrainer(f.c, 0, filepath.Join(work, "trainer-tmpdir-"+filepath.Base(argv[0])))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		run := filepath.Join(work, "run-tmpdir-"+filepath.Base(argv[0]))
		start := time.Now()
		p, err := StartLauncher(ctx, f.c, 0, bin, LauncherOptions{
			AuthDir: authDir, RunDir: run, Flags: f.workersFlag(2), Command: argv,
			Env:  append([]string{"TMPDIR=" + tmp}, tr.Env...),
			Wrap: []string{wrapper, tmp},
			Log:  filepath.Join(f.c.LogDir(), "launcher-tmpdir-"+filepath.Base(argv[0])+".log"),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop() })
		r := wait(t, p, start, 2*time.Minute)
		mustSucceed(t, r)
		checkAllreduce(t, r, 4, map[string]int{"st-node-0-0": 2, "st-node-0-1": 2})
		if len(tr.Requests()) == 0 {
			t.Fatalf("the launcher never reached the fake Trainer: the status API was off\n%s", r.out)
		}
		// The agents' part ends with the launcher's connections, which
		// close as the launcher exits: wait for that, with a deadline.
		var after []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			after = list()
			if slices.Equal(after, before) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(after, before) {
			t.Errorf("after %s the workers' TMPDIR holds\n%v\nwas\n%v", argv[0], after, before)
		}
	}
}
