// Package scripts holds the shell scripts of make build, the Debian roots
// and the shared build cache; this Go test checks scripts/cache-build.sh,
// which every builder of /var/cache/podmpi goes through, with real
// processes racing on a real lock.
package scripts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// builder is one scripts/cache-build.sh process of a test.
type builder struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// buildCommand is a builder's command: it counts its runs in count, takes a
// while, then writes the entry's check path (bin/tool) into
// $PODMPI_CACHE_TMP, or exits 3 after a partial write when fail is set.
func buildCommand(count string, sleep string, fail bool) []string {
	script := `echo run >> "$1"; mkdir "$PODMPI_CACHE_TMP/bin"; echo partial > "$PODMPI_CACHE_TMP/bin/half"; sleep "$2"`
	if fail {
		script += `; exit 3`
	} else {
		script += `; echo ok > "$PODMPI_CACHE_TMP/bin/tool"`
	}
	return []string{"sh", "-c", script, "sh", count, sleep}
}

// startBuilder starts cache-build.sh for dest with the given extra options
// and command; the test's cleanup kills it by PID if it still runs.
func startBuilder(t *testing.T, ctx context.Context, dest string, opts []string, command []string) *builder {
	t.Helper()
	args := append([]string{"--dest", dest, "--check", "bin/tool", "--name", "entry"}, opts...)
	args = append(append(args, "--"), command...)
	b := &builder{cmd: exec.CommandContext(ctx, "./cache-build.sh", args...)}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	// A group of its own, so that the build command's children (sleep)
	// end with it: they hold the output pipe Wait waits for.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b.cmd.Cancel = func() error { return syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) }
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			_ = b.cmd.Wait()
		}
	})
	return b
}

// wait returns the builder's exit status.
func (b *builder) wait(t *testing.T) int {
	t.Helper()
	err := b.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("cache-build.sh: %v\n%s", err, b.out.String())
	return -1
}

// runs is how many times the build command ran.
func runs(t *testing.T, count string) int {
	t.Helper()
	b, err := os.ReadFile(count)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// leftovers are the temporary folders of builds next to dest.
func leftovers(t *testing.T, dest string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{dest + ".tmp.*", dest + ".old.*"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// waitHeld waits until a builder holds dest's lock (it names itself in the
// lock file once it does).
func waitHeld(t *testing.T, dest string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, _ := os.ReadFile(dest + ".lock"); bytes.HasPrefix(b, []byte("pid ")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no builder holds %s.lock after 20 s", dest)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newEntry skips the test without bash and flock, and returns a context
// for its builders, a cache entry's path in a new folder and the file the
// build command counts its runs in.
func newEntry(t *testing.T) (ctx context.Context, dest, count string) {
	t.Helper()
	for _, tool := range []string{"bash", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH (util-linux and bash run the cache's builds)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	return ctx, filepath.Join(dir, "entry"), filepath.Join(dir, "count")
}

// TestCacheBuildOneBuilderAtATime: of two builders of one entry started
// together, the second waits for the first and reuses what it built; the
// build runs once. (Without the lock both built, and the second to finish
// removed the first's result while the first was using it.)
func TestCacheBuildOneBuilderAtATime(t *testing.T) {
	ctx, dest, count := newEntry(t)
	first := startBuilder(t, ctx, dest, nil, buildCommand(count, "2", false))
	waitHeld(t, dest)
	second := startBuilder(t, ctx, dest, nil, buildCommand(count, "0", false))
	if code := first.wait(t); code != 0 {
		t.Fatalf("first builder exited %d:\n%s", code, first.out.String())
	}
	if code := second.wait(t); code != 0 {
		t.Fatalf("second builder exited %d:\n%s", code, second.out.String())
	}
	if n := runs(t, count); n != 1 {
		t.Errorf("the build ran %d times, want once; first:\n%s\nsecond:\n%s", n, first.out.String(), second.out.String())
	}
	if out := second.out.String(); !strings.Contains(out, "waiting for another builder of "+dest) || !strings.Contains(out, "reusing "+dest) {
		t.Errorf("the second builder does not say it waited and reused the first one's entry:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dest, "bin/tool")); err != nil {
		t.Errorf("entry not complete: %v", err)
	}
	if l := leftovers(t, dest); len(l) != 0 {
		t.Errorf("temporary folders left: %v", l)
	}
	// A third caller finds it at once, without the lock.
	third := startBuilder(t, ctx, dest, nil, buildCommand(count, "0", false))
	if code := third.wait(t); code != 0 || !strings.Contains(third.out.String(), "cached in "+dest) || runs(t, count) != 1 {
		t.Errorf("a complete entry was not taken as cached (exit %d, %d runs):\n%s", code, runs(t, count), third.out.String())
	}
}

// TestCacheBuildCompleteOrAbsent: a build that fails, or ends without the
// entry's check paths, puts nothing in place and leaves no temporary
// folder; an incomplete entry and a killed builder's folder are replaced
// by a complete build.
func TestCacheBuildCompleteOrAbsent(t *testing.T) {
	ctx, dest, count := newEntry(t)

	failed := startBuilder(t, ctx, dest, nil, buildCommand(count, "0", true))
	if code := failed.wait(t); code != 1 || !strings.Contains(failed.out.String(), "nothing was put in place") {
		t.Errorf("a failing build: exit %d, want 1 saying nothing was put in place:\n%s", code, failed.out.String())
	}
	incomplete := startBuilder(t, ctx, dest, nil, []string{"true"})
	if code := incomplete.wait(t); code != 1 || !strings.Contains(incomplete.out.String(), "not every one of bin/tool") {
		t.Errorf("a build without bin/tool: exit %d, want 1 naming it:\n%s", code, incomplete.out.String())
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after builds that failed (err %v)", dest, err)
	}
	if l := leftovers(t, dest); len(l) != 0 {
		t.Errorf("temporary folders left: %v", l)
	}

	// What a builder killed mid-way and an older, incomplete entry leave.
	for _, d := range []string{dest + ".tmp.99999/bin", filepath.Join(dest, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ok := startBuilder(t, ctx, dest, nil, buildCommand(count, "0", false))
	if code := ok.wait(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, ok.out.String())
	}
	if _, err := os.Stat(filepath.Join(dest, "bin/tool")); err != nil {
		t.Errorf("incomplete entry not replaced: %v", err)
	}
	if l := leftovers(t, dest); len(l) != 0 {
		t.Errorf("temporary folders left: %v", l)
	}
}

// TestCacheBuildWaitHasADeadline: a builder that waits longer than --wait
// gives up with exit 1, naming the process that holds the lock.
func TestCacheBuildWaitHasADeadline(t *testing.T) {
	ctx, dest, count := newEntry(t)
	holder := startBuilder(t, ctx, dest, nil, buildCommand(count, "4", false))
	waitHeld(t, dest)
	start := time.Now()
	waiter := startBuilder(t, ctx, dest, []string{"--wait", "1"}, buildCommand(count, "0", false))
	code := waiter.wait(t)
	took := time.Since(start)
	pid := "pid " + strconv.Itoa(holder.cmd.Process.Pid)
	if code != 1 || !strings.Contains(waiter.out.String(), "still holds") || !strings.Contains(waiter.out.String(), pid) {
		t.Errorf("waiter: exit %d, want 1 naming the holder (%s):\n%s", code, pid, waiter.out.String())
	}
	if took > 15*time.Second {
		t.Errorf("waiter with --wait 1 took %s", took)
	}
	if code := holder.wait(t); code != 0 || runs(t, count) != 1 {
		t.Errorf("holder exited %d after %d runs of the build, want 0 after its own one:\n%s", code, runs(t, count), holder.out.String())
	}
}
