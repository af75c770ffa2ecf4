package account

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// DefaultProc is the proc file system.
const DefaultProc = "/proc"

// maxTracked bounds the processes one snapshot keeps.
const maxTracked = 4096

// maxEnviron bounds the bytes of /proc/<pid>/environ read to find a rank.
const maxEnviron = 1 << 20

// RankVariables are the environment variables that carry a process's MPI
// rank, in the order they are believed: Open MPI (ORTE), PMIx (Open MPI 5,
// PRRTE), PMI (MPICH and Intel MPI's Hydra).
var RankVariables = []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}

// procStat is what the account needs of /proc/<pid>/stat.
type procStat struct {
	pid   int
	comm  string
	state byte
	ppid  int
	start uint64 // starttime (clock ticks since boot): pid + start is one process
	rss   uint64 // resident pages
	// exitCode is the wait status of a zombie (field 52, Linux 3.5+); -1
	// when absent. It is 0 for a live process.
	exitCode int
}

// parseStat parses /proc/<pid>/stat. The command name is between the first
// '(' and the last ')', since it may itself hold spaces and parentheses.
func parseStat(data []byte) (procStat, error) {
	st := procStat{exitCode: -1}
	open := bytes.IndexByte(data, '(')
	closing := bytes.LastIndexByte(data, ')')
	if open < 1 || closing < open {
		return st, errors.New("no (comm) field")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
	if err != nil || pid <= 0 {
		return st, fmt.Errorf("bad pid %q", clipBytes(data[:open]))
	}
	st.pid = pid
	st.comm = string(data[open+1 : closing])
	f := bytes.Fields(data[closing+1:])
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 || len(f[0]) != 1 {
		return st, fmt.Errorf("only %d fields after the command name", len(f))
	}
	st.state = f[0][0]
	if st.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return st, fmt.Errorf("bad ppid %q", clipBytes(f[1]))
	}
	if st.start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return st, fmt.Errorf("bad starttime %q", clipBytes(f[19]))
	}
	rss, err := strconv.ParseInt(string(f[21]), 10, 64)
	if err != nil {
		return st, fmt.Errorf("bad rss %q", clipBytes(f[21]))
	}
	st.rss = uint64(max(rss, 0))
	if len(f) >= 50 {
		if c, err := strconv.Atoi(string(f[49])); err == nil && c >= 0 {
			st.exitCode = c
		}
	}
	return st, nil
}

func clipBytes(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return string(b)
}

// rankFromEnviron returns the MPI rank named in a NUL-separated environment
// block, by the first of RankVariables present with a valid value.
func rankFromEnviron(data []byte) (int, bool) {
	vals := make(map[string][]byte, len(RankVariables))
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		for _, name := range RankVariables {
			if string(k) == name {
				vals[name] = v
			}
		}
	}
	for _, name := range RankVariables {
		if v, ok := vals[name]; ok {
			if r, err := strconv.Atoi(string(v)); err == nil && r >= 0 && r < 1<<24 {
				return r, true
			}
		}
	}
	return -1, false
}

// waitStatus decodes a zombie's wait status: its exit code (-1 when a
// signal ended it), the signal, and whether it dumped core.
func waitStatus(status int) (code int, sig syscall.Signal, core bool) {
	ws := syscall.WaitStatus(status)
	if ws.Signaled() {
		return -1, ws.Signal(), ws.CoreDump()
	}
	return ws.ExitStatus(), 0, false
}

// procKey is one process: the pid with its start time, so a reused pid is
// another process.
type procKey struct {
	pid   int
	start uint64
}

// procInfo is a tracked process as last seen.
type procInfo struct {
	key      procKey
	comm     string
	ppid     int
	rank     int // -1: none
	leader   bool
	rssBytes uint64
	zombie   bool
	exitCode int // wait status of a zombie, -1 unknown
}

// scanner takes snapshots of the processes below one root process.
type scanner struct {
	proc     string
	root     int
	pageSize uint64
	// ranks caches the rank of each process seen with one. A process
	// without one is read again next time: between fork and exec a rank's
	// process still has its launcher's environment, and exec keeps the pid
	// and start time.
	ranks map[procKey]int
}

func newScanner(proc string, root int) *scanner {
	return &scanner{proc: proc, root: root, pageSize: uint64(os.Getpagesize()), ranks: make(map[procKey]int)}
}

// snapshot returns the descendants of the root process, at most maxTracked.
// A process whose stat cannot be read (it exited meanwhile) is skipped.
func (s *scanner) snapshot() (map[procKey]procInfo, error) {
	d, err := os.Open(s.proc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.proc, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.proc, err)
	}
	stats := make(map[int]procStat, len(names))
	children := make(map[int][]int)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		data, err := readBounded(filepath.Join(s.proc, name, "stat"), 4096)
		if err != nil {
			continue
		}
		st, err := parseStat(data)
		if err != nil || st.pid != pid {
			continue
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	out := make(map[procKey]procInfo)
	seen := make(map[procKey]bool, len(s.ranks))
	queue := append([]int(nil), children[s.root]...)
	for len(queue) > 0 && len(out) < maxTracked {
		pid := queue[0]
		queue = queue[1:]
		st := stats[pid]
		k := procKey{pid, st.start}
		rank, ok := s.ranks[k]
		if !ok {
			if rank = s.readRank(pid); rank >= 0 {
				s.ranks[k] = rank
			}
		}
		seen[k] = true
		info := procInfo{key: k, comm: st.comm, ppid: st.ppid, rank: rank, rssBytes: st.rss * s.pageSize, exitCode: -1}
		if st.state == 'Z' || st.state == 'X' {
			info.zombie = true
			info.exitCode = st.exitCode
		}
		out[k] = info
		queue = append(queue, children[pid]...)
	}
	// A rank's leader is the top process of its rank: its parent is not
	// of the same rank (a launcher daemon, or the agent).
	for k, info := range out {
		if info.rank < 0 {
			continue
		}
		pst, ok := stats[info.ppid]
		if !ok {
			info.leader = true
		} else if parent, ok := out[procKey{info.ppid, pst.start}]; !ok || parent.rank != info.rank {
			info.leader = true
		}
		out[k] = info
	}
	for k := range s.ranks {
		if !seen[k] {
			delete(s.ranks, k)
		}
	}
	return out, nil
}

// readRank reads the rank from the process's environment; -1 when it has
// none or the environment cannot be read (another user, gone).
func (s *scanner) readRank(pid int) int {
	data, err := readBounded(filepath.Join(s.proc, strconv.Itoa(pid), "environ"), maxEnviron)
	if err != nil {
		return -1
	}
	r, _ := rankFromEnviron(data)
	return r
}
