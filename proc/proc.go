// Package proc reads the process table from the proc file system: one
// process's /proc/<pid>/stat, every process's, and the tree below one
// process. It is podmpi's one /proc walker: worker-agent's account of the
// pod (ranks that died, their exit status while they are zombies) and the
// launcher's supervision of mpirun's process tree (reaping orphans, killing
// the tree on timeout) both use it.
//
// It parses stat by hand rather than through a general library because it
// needs field 52 (exit_code: a zombie's wait status, Linux 3.5+), which
// that library does not read, and because the account reads every process
// every half second: a parse that looks at the five fields it needs and
// reads each file once, bounded, costs less.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// DefaultRoot is the proc file system.
const DefaultRoot = "/proc"

// maxStatBytes bounds the bytes of one stat file read (a stat line is
// well under 1 KiB, its command name at most 64 bytes).
const maxStatBytes = 4096

// Stat is what podmpi needs of /proc/<pid>/stat.
type Stat struct {
	PID   int
	Comm  string
	State byte // R, S, D, Z, X, ...
	PPID  int
	// Start is the start time (clock ticks since boot): with the pid, it
	// names one process across pid reuse.
	Start uint64
	// RSS is the resident set, in pages.
	RSS uint64
	// ExitStatus is the wait status of a zombie (field 52, Linux 3.5+),
	// -1 when the kernel does not give it; 0 for a live process.
	ExitStatus int
}

// Exited reports whether the process has exited and waits to be reaped
// (a zombie, or being reaped now).
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// ParseStat parses /proc/<pid>/stat. The command name is between the first
// '(' and the last ')', since it may itself hold spaces and parentheses.
func ParseStat(data []byte) (Stat, error) {
	st := Stat{ExitStatus: -1}
	open := bytes.IndexByte(data, '(')
	closing := bytes.LastIndexByte(data, ')')
	if open < 1 || closing < open {
		return st, errors.New("no (comm) field")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
	if err != nil || pid <= 0 {
		return st, fmt.Errorf("bad pid %q", clip(data[:open]))
	}
	st.PID = pid
	st.Comm = string(data[open+1 : closing])
	f := bytes.Fields(data[closing+1:])
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 || len(f[0]) != 1 {
		return st, fmt.Errorf("only %d fields after the command name", len(f))
	}
	st.State = f[0][0]
	if st.PPID, err = strconv.Atoi(string(f[1])); err != nil {
		return st, fmt.Errorf("bad ppid %q", clip(f[1]))
	}
	if st.Start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return st, fmt.Errorf("bad starttime %q", clip(f[19]))
	}
	rss, err := strconv.ParseInt(string(f[21]), 10, 64)
	if err != nil {
		return st, fmt.Errorf("bad rss %q", clip(f[21]))
	}
	st.RSS = uint64(max(rss, 0))
	if len(f) >= 50 {
		if c, err := strconv.Atoi(string(f[49])); err == nil && c >= 0 {
			st.ExitStatus = c
		}
	}
	return st, nil
}

func clip(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return string(b)
}

// ReadStat reads the stat of pid in the proc file system at root (""
// means DefaultRoot).
func ReadStat(root string, pid int) (Stat, error) {
	data, err := ReadFile(root, pid, "stat", maxStatBytes)
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(data)
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", filepath.Join(rootOr(root), strconv.Itoa(pid), "stat"), err)
	}
	if st.PID != pid {
		return Stat{}, fmt.Errorf("%s: names pid %d", filepath.Join(rootOr(root), strconv.Itoa(pid), "stat"), st.PID)
	}
	return st, nil
}

// All reads the stat of every process in the proc file system at root;
// processes that exit while it reads are left out.
func All(root string) ([]Stat, error) {
	root = rootOr(root)
	d, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	out := make([]Stat, 0, len(names))
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if st, err := ReadStat(root, pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// Descendants returns the processes below root in stats (not root
// itself), parents before their children, at most limit of them (0: no
// bound but the table's size).
func Descendants(stats []Stat, root, limit int) []Stat {
	if limit <= 0 || limit > len(stats) {
		limit = len(stats)
	}
	children := make(map[int][]Stat)
	for _, st := range stats {
		children[st.PPID] = append(children[st.PPID], st)
	}
	var out []Stat
	seen := map[int]bool{root: true}
	queue := []int{root}
	for len(queue) > 0 && len(out) < limit {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.PID] || len(out) >= limit {
				continue
			}
			seen[c.PID] = true
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// ReadFile reads at most limit bytes of /proc/<pid>/<name> in the proc
// file system at root ("" means DefaultRoot).
func ReadFile(root string, pid int, name string, limit int64) ([]byte, error) {
	path := filepath.Join(rootOr(root), strconv.Itoa(pid), name)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

func rootOr(root string) string {
	if root == "" {
		return DefaultRoot
	}
	return root
}
