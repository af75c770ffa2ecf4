package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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

// maxCgroupDepth bounds the walk up the cgroup tree.
const maxCgroupDepth = 64

// CgroupCPUQuota reads the CPU quota of this process's cgroup: cgroup v2
// cpu.max, or cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us. Every level
// from the process's cgroup up to the mount root is read and the tightest
// limit wins; without a limit it falls back to NumCPU. The zero value is
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
	return &CgroupCPUQuota{Root: "/sys/fs/cgroup", ProcSelfCgroup: "/proc/self/cgroup", NumCPU: runtime.NumCPU}
}

// CPUs returns the usable CPU count (see Limit).
func (q *CgroupCPUQuota) CPUs() (float64, error) {
	l, err := q.Limit()
	return l.CPUs, err
}

// Limit returns the usable CPU count and its source. A missing cgroup file
// is not an error (NumCPU is used); a malformed one is.
func (q *CgroupCPUQuota) Limit() (CPULimit, error) {
	numCPU := runtime.NumCPU
	if q.NumCPU != nil {
		numCPU = q.NumCPU
	}
	ncpu := float64(max(numCPU(), 1))
	fallback := CPULimit{CPUs: ncpu, Source: "runtime.NumCPU, no cgroup CPU limit"}

	root := q.Root
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	paths, err := readProcCgroup(q.ProcSelfCgroup)
	if err != nil {
		return CPULimit{}, err
	}

	var (
		quota float64
		src   string
	)
	if exists(filepath.Join(root, "cgroup.controllers")) {
		quota, src, err = walkLimit(root, paths.v2, readCPUMax)
	} else if dir := v1CPUDir(root); dir != "" {
		quota, src, err = walkLimit(dir, paths.v1cpu, readCFS)
	}
	if err != nil {
		return CPULimit{}, err
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

type cgroupPaths struct{ v2, v1cpu string }

// readProcCgroup parses /proc/self/cgroup lines "id:controllers:path".
func readProcCgroup(path string) (cgroupPaths, error) {
	var p cgroupPaths
	if path == "" {
		return p, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("reading %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for lines := 0; sc.Scan() && lines < 256; lines++ {
		id, rest, ok1 := strings.Cut(sc.Text(), ":")
		ctrls, cg, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 {
			continue
		}
		if id == "0" && ctrls == "" {
			p.v2 = cg
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			if c == "cpu" {
				p.v1cpu = cg
			}
		}
	}
	return p, nil
}

// v1CPUDir finds the cgroup v1 cpu controller mount under root.
func v1CPUDir(root string) string {
	for _, name := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		d := filepath.Join(root, name)
		if exists(filepath.Join(d, "cpu.cfs_quota_us")) {
			return d
		}
	}
	return ""
}

// walkLimit reads the limit in mount+cg and each parent up to mount, and
// returns the tightest one. When mount+cg does not exist (the container's
// own cgroup is mounted at mount), only mount is read. src is "" when no
// level has a limit.
func walkLimit(mount, cg string, read func(dir string) (float64, bool, error)) (float64, string, error) {
	mount = filepath.Clean(mount)
	dir := filepath.Join(mount, filepath.FromSlash(cg))
	if rel, err := filepath.Rel(mount, dir); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		dir = mount
	}
	if !exists(dir) {
		dir = mount
	}
	best, src := math.Inf(1), ""
	for depth := 0; depth < maxCgroupDepth; depth++ {
		v, limited, err := read(dir)
		if err != nil {
			return 0, "", err
		}
		if limited && v < best {
			best, src = v, dir
		}
		if dir == mount || len(dir) <= len(mount) {
			break
		}
		dir = filepath.Dir(dir)
	}
	if src == "" {
		return 0, "", nil
	}
	return best, src, nil
}

// readCPUMax reads cgroup v2 dir/cpu.max: "max 100000" or "150000 100000".
func readCPUMax(dir string) (float64, bool, error) {
	file := filepath.Join(dir, "cpu.max")
	data, err := readSmall(file)
	if err != nil || data == "" {
		return 0, false, err
	}
	f := strings.Fields(data)
	if len(f) < 1 || len(f) > 2 {
		return 0, false, malformed(file, data, `"<quota|max> <period>"`)
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || quota <= 0 {
		return 0, false, malformed(file, data, `"<quota|max> <period>"`)
	}
	period := int64(100000)
	if len(f) == 2 {
		period, err = strconv.ParseInt(f[1], 10, 64)
		if err != nil || period <= 0 {
			return 0, false, malformed(file, data, `"<quota|max> <period>"`)
		}
	}
	return float64(quota) / float64(period), true, nil
}

// readCFS reads cgroup v1 dir/cpu.cfs_quota_us (-1 = unlimited) and
// dir/cpu.cfs_period_us.
func readCFS(dir string) (float64, bool, error) {
	qfile := filepath.Join(dir, "cpu.cfs_quota_us")
	qs, err := readSmall(qfile)
	if err != nil || qs == "" {
		return 0, false, err
	}
	quota, err := strconv.ParseInt(qs, 10, 64)
	if err != nil {
		return 0, false, malformed(qfile, qs, "an integer (-1 for no limit)")
	}
	if quota <= 0 {
		return 0, false, nil
	}
	pfile := filepath.Join(dir, "cpu.cfs_period_us")
	ps, err := readSmall(pfile)
	if err != nil {
		return 0, false, err
	}
	period := int64(100000)
	if ps != "" {
		period, err = strconv.ParseInt(ps, 10, 64)
		if err != nil || period <= 0 {
			return 0, false, malformed(pfile, ps, "a positive integer")
		}
	}
	return float64(quota) / float64(period), true, nil
}

// readSmall returns the trimmed content of a small file, "" if it does not exist.
func readSmall(file string) (string, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", file, err)
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading %s: %w", file, err)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

func malformed(file, content, want string) error {
	return fmt.Errorf("cgroup file %s holds %q, want %s; is a cgroup file system mounted there?", file, clip(content), want)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
