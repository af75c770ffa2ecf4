package account

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultCgroupRoot is where the cgroup file systems are mounted.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// maxCgroupDepth bounds the walk up the cgroup tree.
const maxCgroupDepth = 64

// unlimitedV1 is the smallest cgroup v1 memory.limit_in_bytes value that
// means "no limit" (the kernel prints PAGE_COUNTER_MAX pages, about 2^63,
// rounded down to the page size).
const unlimitedV1 = 1 << 62

// MemoryCgroup is this process's memory cgroup: cgroup v2 (memory.events,
// memory.current, memory.max, memory.peak) or cgroup v1 (memory.oom_control,
// memory.usage_in_bytes, memory.max_usage_in_bytes, memory.limit_in_bytes,
// memory.failcnt).
type MemoryCgroup struct {
	// Dir is the cgroup's directory; Version is 1 or 2.
	Dir     string
	Version int
	// mount is the top of the hierarchy Dir belongs to: the limit is the
	// tightest one from Dir up to it.
	mount string
}

// MemorySample is one reading of the memory cgroup.
type MemorySample struct {
	Limit    uint64 // tightest limit from the cgroup up to the mount; 0: none
	Usage    uint64
	Peak     uint64 // v1 max_usage_in_bytes, v2 memory.peak; 0 when absent
	OOMKills uint64 // oom_kill
	// LimitEvents counts the evidence that the cgroup itself ran out of
	// memory at its limit: v2 memory.events "oom" (the cgroup's OOM
	// killer invoked because usage reached memory.max and reclaim failed;
	// a node-wide OOM kill does not raise it, and "max", reclaim at the
	// limit that may well succeed, is not counted), v1 memory.failcnt
	// (charges refused at the limit; v1 counts no OOMs, and every OOM at
	// the limit follows refused charges). Only its rise between two
	// samples means anything.
	LimitEvents uint64
}

// FindMemoryCgroup locates this process's memory cgroup under root (the
// cgroup mount point, normally /sys/fs/cgroup) from procSelfCgroup
// (/proc/self/cgroup). A v2 hierarchy at root is used when its memory
// controller is enabled for the cgroup; otherwise the v1 memory hierarchy
// (root/memory, or root itself when it is one). When the path named in
// procSelfCgroup does not exist under the mount (a container whose own
// cgroup is what is mounted there, or a cgroup namespace), the longest
// existing suffix of it is used, then the mount itself.
func FindMemoryCgroup(root, procSelfCgroup string) (*MemoryCgroup, error) {
	if root == "" {
		root = DefaultCgroupRoot
	}
	root = filepath.Clean(root)
	paths, err := readProcCgroup(procSelfCgroup)
	if err != nil {
		return nil, err
	}
	if isFile(filepath.Join(root, "cgroup.controllers")) {
		dir := locate(root, paths.v2)
		if isFile(filepath.Join(dir, "memory.events")) || isFile(filepath.Join(dir, "memory.current")) {
			return &MemoryCgroup{Dir: dir, Version: 2, mount: root}, nil
		}
	}
	for _, mount := range []string{filepath.Join(root, "memory"), root} {
		if !isFile(filepath.Join(mount, "memory.usage_in_bytes")) {
			continue
		}
		dir := locate(mount, paths.v1)
		if isFile(filepath.Join(dir, "memory.usage_in_bytes")) {
			return &MemoryCgroup{Dir: dir, Version: 1, mount: mount}, nil
		}
	}
	return nil, fmt.Errorf("no memory cgroup under %s (neither cgroup v2 with the memory controller nor a cgroup v1 memory hierarchy; "+
		"is the cgroup file system mounted there? --account.cgroup-root points elsewhere)", root)
}

// locate returns mount/cg when it exists, else mount joined with the
// longest existing suffix of cg, else mount.
func locate(mount, cg string) string {
	parts := strings.FieldsFunc(cg, func(r rune) bool { return r == '/' })
	for i := 0; i < len(parts) && i < maxCgroupDepth; i++ {
		rel := filepath.Join(parts[i:]...)
		if !filepath.IsLocal(rel) {
			continue
		}
		dir := filepath.Join(mount, rel)
		if isDir(dir) {
			return dir
		}
	}
	return mount
}

// Read samples the cgroup.
func (c *MemoryCgroup) Read() (MemorySample, error) {
	if c.Version == 2 {
		return c.readV2()
	}
	return c.readV1()
}

func (c *MemoryCgroup) readV2() (MemorySample, error) {
	var s MemorySample
	events, err := readKeyed(filepath.Join(c.Dir, "memory.events"))
	if err != nil {
		return s, err
	}
	s.OOMKills = events["oom_kill"]
	s.LimitEvents = events["oom"]
	if s.Usage, _, err = readUint(filepath.Join(c.Dir, "memory.current")); err != nil {
		return s, err
	}
	if s.Peak, _, err = readUint(filepath.Join(c.Dir, "memory.peak")); err != nil {
		return s, err
	}
	s.Limit, err = c.walkLimit("memory.max", func(v string) (uint64, bool, error) {
		if v == "max" {
			return 0, false, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil, err
	})
	return s, err
}

func (c *MemoryCgroup) readV1() (MemorySample, error) {
	var s MemorySample
	oom, err := readKeyed(filepath.Join(c.Dir, "memory.oom_control"))
	if err != nil {
		return s, err
	}
	s.OOMKills = oom["oom_kill"]
	if s.Usage, _, err = readUint(filepath.Join(c.Dir, "memory.usage_in_bytes")); err != nil {
		return s, err
	}
	if s.Peak, _, err = readUint(filepath.Join(c.Dir, "memory.max_usage_in_bytes")); err != nil {
		return s, err
	}
	if s.LimitEvents, _, err = readUint(filepath.Join(c.Dir, "memory.failcnt")); err != nil {
		return s, err
	}
	s.Limit, err = c.walkLimit("memory.limit_in_bytes", func(v string) (uint64, bool, error) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false, err
		}
		return n, n < unlimitedV1, nil
	})
	return s, err
}

// walkLimit reads file in Dir and each parent up to the mount and returns
// the tightest limit; 0 when no level has one.
func (c *MemoryCgroup) walkLimit(file string, parse func(string) (uint64, bool, error)) (uint64, error) {
	var best uint64
	dir := c.Dir
	for depth := 0; depth < maxCgroupDepth; depth++ {
		p := filepath.Join(dir, file)
		v, err := readSmall(p)
		if err != nil {
			return 0, err
		}
		if v != "" {
			n, limited, err := parse(v)
			if err != nil {
				return 0, malformed(p, v, "a byte count")
			}
			if limited && (best == 0 || n < best) {
				best = n
			}
		}
		if dir == c.mount || len(dir) <= len(c.mount) {
			break
		}
		dir = filepath.Dir(dir)
	}
	return best, nil
}

type cgroupPaths struct{ v2, v1 string }

// readProcCgroup parses /proc/self/cgroup ("id:controllers:path" lines): the
// v2 path (id 0, no controllers) and the v1 memory controller's path. A
// missing file means the root cgroup.
func readProcCgroup(path string) (cgroupPaths, error) {
	if path == "" {
		return cgroupPaths{}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cgroupPaths{}, nil
	}
	if err != nil {
		return cgroupPaths{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return parseProcCgroup(data), nil
}

func parseProcCgroup(data []byte) cgroupPaths {
	var p cgroupPaths
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
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
		for c := range strings.SplitSeq(ctrls, ",") {
			if c == "memory" {
				p.v1 = cg
			}
		}
	}
	return p
}

// readKeyed reads a flat keyed file ("key value" lines, as memory.events
// and memory.oom_control are). A missing file is an error: the cgroup
// went away.
func readKeyed(path string) (map[string]uint64, error) {
	data, err := readBounded(path, 4096)
	if err != nil {
		return nil, err
	}
	m, err := parseKeyed(data)
	if err != nil {
		return nil, malformed(path, string(data), `"key value" lines`)
	}
	return m, nil
}

// parseKeyed parses "key value" lines with unsigned values. Blank lines are
// skipped; anything else malformed is an error.
func parseKeyed(data []byte) (map[string]uint64, error) {
	m := make(map[string]uint64)
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %q: want key and value", line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		m[f[0]] = v
		if len(m) > 64 {
			return nil, errors.New("too many keys")
		}
	}
	return m, nil
}

// readUint reads a file holding one unsigned number; ok is false (and the
// value 0) when the file does not exist.
func readUint(path string) (uint64, bool, error) {
	v, err := readSmall(path)
	if err != nil || v == "" {
		return 0, false, err
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, malformed(path, v, "a byte count")
	}
	return n, true, nil
}

// readSmall returns the trimmed content of a small file, "" when it does
// not exist.
func readSmall(path string) (string, error) {
	data, err := readBounded(path, 256)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(data)), err
}

// readBounded reads at most n bytes of path.
func readBounded(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

func malformed(path, content, want string) error {
	if len(content) > 64 {
		content = content[:64] + "..."
	}
	return fmt.Errorf("cgroup file %s holds %q, want %s; is a cgroup file system mounted there?", path, content, want)
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
