package gpu

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/cgroup"
)

// CPUQuota reports how many CPUs this container may use.
type CPUQuota interface {
	CPUs() (float64, error)
}

// CPULimit is a CPU count and where it came from.
type CPULimit struct {
	// CPUs is the usable CPU count: the tightest cgroup quota along this
	// process's cgroup path, capped at NumCPU.
	CPUs float64
	// Source names the file (or runtime.NumCPU) the count came from.
	Source string
}

// CgroupCPUQuota reads the CPU quota of this process's cgroup, found as
// package cgroup finds every controller's: cgroup v2 cpu.max, or cgroup v1
// cpu.cfs_quota_us / cpu.cfs_period_us. Every level from the process's
// cgroup up to the mount root is read and the tightest limit wins; without
// a limit it falls back to NumCPU. The zero value is
// not usable: use NewCgroupCPUQuota (and change fields in tests).
type CgroupCPUQuota struct {
	// Root is the cgroup file system mount point, normally /sys/fs/cgroup.
	Root string
	// ProcSelfCgroup is the file listing this process's cgroups, normally
	// /proc/self/cgroup. A missing file means the cgroup is Root itself.
	ProcSelfCgroup string
	// NumCPU returns the CPUs this process may run on; normally runtime.NumCPU.
	NumCPU func() int
}

var _ CPUQuota = (*CgroupCPUQuota)(nil)

// NewCgroupCPUQuota returns a reader for the real cgroup file system.
func NewCgroupCPUQuota() *CgroupCPUQuota {
	return &CgroupCPUQuota{Root: cgroup.DefaultRoot, ProcSelfCgroup: cgroup.DefaultProcSelf, NumCPU: runtime.NumCPU}
}

// CPUs returns the usable CPU count (see Limit).
func (q *CgroupCPUQuota) CPUs() (float64, error) {
	l, err := q.Limit()
	return l.CPUs, err
}

// cpuController is how package cgroup finds the cpu cgroup.
var cpuController = cgroup.Controller{Name: "cpu", V1: "cpu.cfs_quota_us"}

// Limit returns the usable CPU count and its source. No cgroup CPU limit
// (no cpu hierarchy, or no quota on any level) is not an error (NumCPU is
// used); a malformed file is.
func (q *CgroupCPUQuota) Limit() (CPULimit, error) {
	numCPU := runtime.NumCPU
	if q.NumCPU != nil {
		numCPU = q.NumCPU
	}
	ncpu := float64(max(numCPU(), 1))
	fallback := CPULimit{CPUs: ncpu, Source: "runtime.NumCPU, no cgroup CPU limit"}

	d, err := cgroup.Find(q.Root, q.ProcSelfCgroup, cpuController)
	var nf *cgroup.NotFoundError
	if errors.As(err, &nf) {
		return fallback, nil
	}
	if err != nil {
		return CPULimit{}, err
	}
	read := readCPUMax
	if d.Version == 1 {
		read = readCFS
	}
	quota, src := math.Inf(1), ""
	for _, dir := range d.Up() {
		v, limited, err := read(dir)
		if err != nil {
			return CPULimit{}, err
		}
		if limited && v < quota {
			quota, src = v, dir
		}
	}
	if src == "" {
		return fallback, nil
	}
	if quota >= ncpu {
		return CPULimit{CPUs: ncpu, Source: fmt.Sprintf("runtime.NumCPU; the quota in %s allows %s", src, fmtCPUs(quota))}, nil
	}
	return CPULimit{CPUs: quota, Source: src}, nil
}

func fmtCPUs(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// readCPUMax reads cgroup v2 dir/cpu.max: "max 100000" or "150000 100000".
func readCPUMax(dir string) (float64, bool, error) {
	file := filepath.Join(dir, "cpu.max")
	data, err := cgroup.ReadSmall(file)
	if err != nil || data == "" {
		return 0, false, err
	}
	f := strings.Fields(data)
	if len(f) < 1 || len(f) > 2 {
		return 0, false, cgroup.Malformed(file, data, `"<quota|max> <period>"`)
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || quota <= 0 {
		return 0, false, cgroup.Malformed(file, data, `"<quota|max> <period>"`)
	}
	period := int64(100000)
	if len(f) == 2 {
		period, err = strconv.ParseInt(f[1], 10, 64)
		if err != nil || period <= 0 {
			return 0, false, cgroup.Malformed(file, data, `"<quota|max> <period>"`)
		}
	}
	return float64(quota) / float64(period), true, nil
}

// readCFS reads cgroup v1 dir/cpu.cfs_quota_us (-1 = unlimited) and
// dir/cpu.cfs_period_us.
func readCFS(dir string) (float64, bool, error) {
	qfile := filepath.Join(dir, "cpu.cfs_quota_us")
	qs, err := cgroup.ReadSmall(qfile)
	if err != nil || qs == "" {
		return 0, false, err
	}
	quota, err := strconv.ParseInt(qs, 10, 64)
	if err != nil {
		return 0, false, cgroup.Malformed(qfile, qs, "an integer (-1 for no limit)")
	}
	if quota <= 0 {
		return 0, false, nil
	}
	pfile := filepath.Join(dir, "cpu.cfs_period_us")
	ps, err := cgroup.ReadSmall(pfile)
	if err != nil {
		return 0, false, err
	}
	period := int64(100000)
	if ps != "" {
		period, err = strconv.ParseInt(ps, 10, 64)
		if err != nil || period <= 0 {
			return 0, false, cgroup.Malformed(pfile, ps, "a positive integer")
		}
	}
	return float64(quota) / float64(period), true, nil
}
