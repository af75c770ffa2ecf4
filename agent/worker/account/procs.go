package account

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"github.com/podmpi/podmpi/proc"
)

// DefaultProc is the proc file system.
const DefaultProc = proc.DefaultRoot

// maxTracked bounds the processes one snapshot keeps.
const maxTracked = 4096

// maxEnviron bounds the bytes of /proc/<pid>/environ read to find a rank.
const maxEnviron = 1 << 20

// RankVariables are the environment variables that carry a process's MPI
// rank, in the order they are believed: Open MPI (ORTE), PMIx (Open MPI 5,
// PRRTE), PMI (MPICH and Intel MPI's Hydra).
var RankVariables = []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}

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
	// launcher is the launcher instance whose session started it, ""
	// when none or unknown (Account.attributeLaunchers).
	launcher string
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
	all, err := proc.All(s.proc)
	if err != nil {
		return nil, err
	}
	byPID := make(map[int]proc.Stat, len(all))
	for _, st := range all {
		byPID[st.PID] = st
	}
	out := make(map[procKey]procInfo)
	seen := make(map[procKey]bool, len(s.ranks))
	for _, st := range proc.Descendants(all, s.root, maxTracked) {
		k := procKey{st.PID, st.Start}
		rank, ok := s.ranks[k]
		if !ok {
			if rank = s.readRank(st.PID); rank >= 0 {
				s.ranks[k] = rank
			}
		}
		seen[k] = true
		info := procInfo{key: k, comm: st.Comm, ppid: st.PPID, rank: rank, rssBytes: st.RSS * s.pageSize, exitCode: -1}
		if st.Exited() {
			info.zombie = true
			info.exitCode = st.ExitStatus
		}
		out[k] = info
	}
	// A rank's leader is the top process of its rank: its parent is not
	// of the same rank (a launcher daemon, or the agent).
	for k, info := range out {
		if info.rank < 0 {
			continue
		}
		pst, ok := byPID[info.ppid]
		if !ok {
			info.leader = true
		} else if parent, ok := out[procKey{info.ppid, pst.Start}]; !ok || parent.rank != info.rank {
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
	data, err := proc.ReadFile(s.proc, pid, "environ", maxEnviron)
	if err != nil {
		return -1
	}
	r, _ := rankFromEnviron(data)
	return r
}
