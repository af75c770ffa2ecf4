package sshd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// sessionOOMBoost is how far above worker-agent's own oom_score_adj a
// session's command is put. The agent shares the container's memory cgroup
// with the ranks; when a rank drives it to its limit, the kernel kills the
// rank, and an allocation made before the rank's memory is freed picks a
// second victim: the largest left, often worker-agent itself, whose
// account of the OOM kill is then lost. With the boost, the kernel's
// choice within the cgroup (size plus adj/1000 of the limit) takes every
// process of the job before the agent. It needs no privilege (see
// startAsOOMVictim).
const sessionOOMBoost = 500

// selfOOMScoreAdj is worker-agent's own oom_score_adj.
const selfOOMScoreAdj = "/proc/self/oom_score_adj"

// ownOOMScoreAdj is worker-agent's oom_score_adj as it started: the value
// every start lowers it back to.
var ownOOMScoreAdj = sync.OnceValues(func() (int, error) { return readOOMScoreAdj(selfOOMScoreAdj) })

func readOOMScoreAdj(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// startMu serializes the starts that raise worker-agent's own score: the
// score is the whole process's.
var startMu sync.Mutex

// startAsOOMVictim runs start (a session command's cmd.Start) with
// worker-agent's own oom_score_adj raised by sessionOOMBoost (at most 1000,
// the kernel's maximum) and lowers it back when start returns. The command
// inherits the raised score at fork, so the shell has it from its first
// instruction, and so does everything it forks (orted's ranks, a hydra
// proxy's). Writing the command's /proc entry once it had started came
// after whatever the shell had forked by then.
//
// Lowering the score back needs no privilege: the kernel lets a process
// lower its own down to the value its container runtime set
// (oom_score_adj_min), and the agent's score as it started is never below
// that. While a start lasts (about a millisecond) the agent is as likely a
// victim as a session. boost says why the command keeps the agent's score,
// or that the agent's could not be lowered back; start runs either way.
func startAsOOMVictim(start func() error) (boost, err error) {
	own, err := ownOOMScoreAdj()
	if err != nil {
		return err, start()
	}
	v := min(own+sessionOOMBoost, 1000)
	if v == own {
		return nil, start()
	}
	startMu.Lock()
	defer startMu.Unlock()
	if err := writeOOMScoreAdj(v); err != nil {
		return err, start()
	}
	err = start()
	if rerr := writeOOMScoreAdj(own); rerr != nil {
		return fmt.Errorf("worker-agent's own oom_score_adj stays at %d, not lowered back to %d: %w", v, own, rerr), err
	}
	return nil, err
}

func writeOOMScoreAdj(v int) error {
	return os.WriteFile(selfOOMScoreAdj, []byte(strconv.Itoa(v)), 0)
}
