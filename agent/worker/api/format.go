package api

import (
	"fmt"
	"strconv"
)

// FormatBytes writes a byte count for people: "200 MiB", "1.5 GiB", "512 B".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	v := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= unit
		if v < unit || u == "PiB" {
			if v == float64(uint64(v)) {
				return fmt.Sprintf("%d %s", uint64(v), u)
			}
			return fmt.Sprintf("%.1f %s", v, u)
		}
	}
	return strconv.FormatUint(n, 10) + " B"
}

// OOMSentence is what both the worker-agent's account and the launcher's
// diagnosis say of an OOM kill of who ("rank 1 (pid 12, train)", "rank 3
// on w-1"), by what m says of the memory cgroup at the kill: at its own
// limit (Memory.AtLimit), below it (the node ran out of memory), or with
// no limit at all.
func OOMSentence(who string, m Memory) string {
	return "OOM: " + who + " was killed by the kernel's OOM killer " + oomWhere(m)
}

// oomWhere says where the memory ran out.
func oomWhere(m Memory) string {
	switch {
	case m.LimitBytes == 0:
		return fmt.Sprintf("with no memory limit on its pod (usage %s): the node ran out of memory", FormatBytes(m.UsageBytes))
	case m.AtLimit:
		s := "at its container's memory limit of " + FormatBytes(m.LimitBytes)
		if m.PeakBytes > 0 {
			s += " (peak usage " + FormatBytes(m.PeakBytes) + ")"
		}
		return s
	}
	return fmt.Sprintf("below its memory limit of %s (usage %s): the node ran out of memory", FormatBytes(m.LimitBytes), FormatBytes(m.UsageBytes))
}
