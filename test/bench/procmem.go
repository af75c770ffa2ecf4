package bench

import (
	"fmt"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/podmpi/podmpi/proc"
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
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Mem{}, fmt.Errorf("process %d: %w", pid, err)
	}
	r, err := p.ProcSMapsRollup()
	if err != nil {
		return Mem{}, fmt.Errorf("smaps_rollup of %d: %w", pid, err)
	}
	return Mem{RSS: int64(r.Rss), PSS: int64(r.Pss)}, nil
}

// Proc is one entry of a process table.
type Proc struct {
	PID, PPID int
	Comm      string
	Cmdline   string // arguments joined by spaces
}

// Procs reads every live process from /proc, keyed by PID. Zombies, and
// processes that exit while it reads, are left out.
func Procs() (map[int]Proc, error) {
	all, err := proc.All(proc.DefaultRoot)
	if err != nil {
		return nil, err
	}
	out := map[int]Proc{}
	for _, st := range all {
		if st.Exited() {
			continue
		}
		cl, _ := proc.ReadFile(proc.DefaultRoot, st.PID, "cmdline", 64<<10)
		out[st.PID] = Proc{PID: st.PID, PPID: st.PPID, Comm: st.Comm, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))}
	}
	return out, nil
}

// Descendants returns the PIDs below root in table (not root itself).
func Descendants(table map[int]Proc, root int) []int {
	stats := make([]proc.Stat, 0, len(table))
	for _, p := range table {
		stats = append(stats, proc.Stat{PID: p.PID, PPID: p.PPID})
	}
	var out []int
	for _, st := range proc.Descendants(stats, root, 0) {
		out = append(out, st.PID)
	}
	return out
}

// ProcCPU is the user+system CPU seconds pid has used so far.
func ProcCPU(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat of %d: %w", pid, err)
	}
	return st.CPUTime(), nil
}

// CountFDs is the number of open file descriptors of pid.
func CountFDs(pid int) (int, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	return p.FileDescriptorsLen()
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
