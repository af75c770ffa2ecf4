// Package proctest is a proc file system fixture for tests: a directory
// of <pid>/stat and <pid>/environ files that a test writes and removes.
package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// StatLine builds a /proc/<pid>/stat line with all 52 fields, the ones
// package proc reads set, the others 0.
func StatLine(pid int, comm string, state byte, ppid int, start, rssPages uint64, exitStatus int) string {
	f := make([]string, 50) // fields 3..52
	for i := range f {
		f[i] = "0"
	}
	f[0] = string(state)
	f[1] = strconv.Itoa(ppid)
	f[19] = strconv.FormatUint(start, 10)
	f[21] = strconv.FormatUint(rssPages, 10)
	f[49] = strconv.Itoa(exitStatus)
	return fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(f, " "))
}

// Dir is a fake proc file system; Path is its root.
type Dir struct {
	t    testing.TB
	Path string
}

// New makes an empty one in a temporary directory of t.
func New(t testing.TB) *Dir { return &Dir{t: t, Path: t.TempDir()} }

// Write sets process pid (its start time is pid*10) with the environment
// env.
func (d *Dir) Write(pid int, comm string, state byte, ppid int, rssPages uint64, exitStatus int, env ...string) {
	d.t.Helper()
	dir := filepath.Join(d.Path, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	stat := StatLine(pid, comm, state, ppid, uint64(pid)*10, rssPages, exitStatus)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(strings.Join(env, "\x00")), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// Remove drops process pid.
func (d *Dir) Remove(pid int) {
	d.t.Helper()
	if err := os.RemoveAll(filepath.Join(d.Path, strconv.Itoa(pid))); err != nil {
		d.t.Fatal(err)
	}
}
