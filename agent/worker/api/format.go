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
