package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mem is the memory of one process or a set of processes, in bytes.
type Mem struct {
	RSS int64 // resident set size
	PSS int64 // proportional set size: shared pages divided among their users
}

// Add returns m+o.
func (m Mem) Add(o Mem) Mem { return Mem{RSS: m.RSS + o.RSS, PSS: m.PSS + o.PSS} }

// ReadMem reads Rss and Pss of pid from /proc/<pid>/smaps_rollup.
func ReadMem(pid int) (Mem, error) {
	p := fmt.Sprintf("/proc/%d/smaps_rollup", pid)
	b, err := os.ReadFile(p)
	if err != nil {
		return Mem{}, fmt.Errorf("read %s: %w", p, err)
	}
	return parseRollup(b)
}

func parseRollup(b []byte) (Mem, error) {
	var m Mem
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "Rss:":
			dst = &m.RSS
		case "Pss:":
			dst = &m.PSS
		default:
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || kb < 0 {
			return Mem{}, fmt.Errorf("smaps_rollup: bad %s value %q", f[0], f[1])
		}
		*dst = kb * 1024
		seen++
	}
	if seen < 2 {
		return Mem{}, fmt.Errorf("smaps_rollup: no Rss and Pss lines")
	}
	return m, nil
}

// Proc is one entry of a process table.
type Proc struct {
	PID, PPID int
	Comm      string
	Cmdline   string // NULs as spaces
}

// Procs reads every process from /proc, keyed by PID. Processes that exit
// while it reads are left out.
func Procs() (map[int]Proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	out := map[int]Proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		p, ok := parseStat(pid, stat)
		if !ok {
			continue
		}
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		p.Cmdline = strings.TrimSpace(string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '})))
		out[pid] = p
	}
	return out, nil
}

// parseStat reads comm and ppid from a /proc/<pid>/stat line; zombies are
// reported as not ok.
func parseStat(pid int, b []byte) (Proc, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 >= len(b) {
		return Proc{}, false
	}
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
		return Proc{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Proc{}, false
	}
	return Proc{PID: pid, PPID: ppid, Comm: string(b[open+1 : end])}, true
}

// Descendants returns the PIDs below root in table (not root itself).
func Descendants(table map[int]Proc, root int) []int {
	children := map[int][]int{}
	for _, p := range table {
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 && len(out) <= len(table) {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU is the user+system CPU seconds pid has used so far.
func ProcCPU(pid int) (float64, error) {
	p := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	return parseStatCPU(b)
}

func parseStatCPU(b []byte) (float64, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || end+2 >= len(b) {
		return 0, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(string(b[end+2:]))
	// After the name: state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the name, want 13 or more", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: bad utime/stime %q %q", f[11], f[12])
	}
	return float64(u+s) / clockTicks, nil
}

// CountFDs is the number of open file descriptors of pid.
func CountFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

// Footprint is what a process tree holds at one instant.
type Footprint struct {
	Procs  int
	Mem    Mem
	FDs    int
	MaxFDs int    // of the process holding the most
	MaxFDP string // its command name
}

// TreeFootprint sums memory and descriptors over root and every process
// below it in table. Processes that exit while it reads are left out.
func TreeFootprint(table map[int]Proc, root int) Footprint {
	var f Footprint
	for _, pid := range append([]int{root}, Descendants(table, root)...) {
		m, err := ReadMem(pid)
		if err != nil {
			continue
		}
		n, err := CountFDs(pid)
		if err != nil {
			continue
		}
		f.Procs++
		f.Mem = f.Mem.Add(m)
		f.FDs += n
		if n > f.MaxFDs {
			f.MaxFDs, f.MaxFDP = n, table[pid].Comm
		}
	}
	return f
}

// Peak keeps, field by field, the largest of the footprints it is given.
func (f Footprint) Peak(o Footprint) Footprint {
	f.Procs = max(f.Procs, o.Procs)
	f.Mem.RSS = max(f.Mem.RSS, o.Mem.RSS)
	f.Mem.PSS = max(f.Mem.PSS, o.Mem.PSS)
	f.FDs = max(f.FDs, o.FDs)
	if o.MaxFDs > f.MaxFDs {
		f.MaxFDs, f.MaxFDP = o.MaxFDs, o.MaxFDP
	}
	return f
}
