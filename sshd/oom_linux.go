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
// process of the job before the agent. Only raising is done, which needs
// no privilege.
const sessionOOMBoost = 500

var ownOOMScoreAdj = sync.OnceValues(func() (int, error) { return readOOMScoreAdj("/proc/self/oom_score_adj") })

func readOOMScoreAdj(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// preferAsOOMVictim puts pid's oom_score_adj sessionOOMBoost above the
// agent's own (at most 1000, the kernel's maximum), before it forks: the
// children it starts (orted's ranks, a hydra proxy's) inherit it.
func preferAsOOMVictim(pid int) error {
	own, err := ownOOMScoreAdj()
	if err != nil {
		return err
	}
	v := min(own+sessionOOMBoost, 1000)
	if v == own {
		return nil
	}
	return os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(v)), 0)
}
