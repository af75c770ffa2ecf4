// Package cgroup finds this process's cgroup directory for one controller,
// on cgroup v2 or v1, and reads the small files in it. It is the one way
// podmpi locates the pod's cgroup: worker-agent's account of the pod reads
// the memory controller's (OOM kills, limit, usage), the gpu package's CPU
// quota the cpu controller's.
//
// The cgroup is found from /proc/self/cgroup under the cgroup mount point
// (normally /sys/fs/cgroup): the unified (v2) hierarchy when the mount
// point is one and the controller is enabled in the cgroup, else the v1
// hierarchy of the controller (a directory named after it, one whose
// comma-separated name lists it, such as cpu,cpuacct, or the mount point
// itself). When the path /proc/self/cgroup names does not exist under the
// mount (a container whose own cgroup is what is mounted there, or a cgroup
// namespace), the longest existing suffix of it is used, then the mount.
// Limits are read from the cgroup up to the mount (Dir.Up): a pod-level
// limit above the container's counts.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Defaults: the mount point and this process's cgroup list.
const (
	DefaultRoot     = "/sys/fs/cgroup"
	DefaultProcSelf = "/proc/self/cgroup"
)

// MaxDepth bounds every walk of the cgroup tree.
const MaxDepth = 64

// Controller is what Find looks for: a controller's name as
// /proc/self/cgroup lists it on v1, and the files that show it enabled in
// a cgroup directory.
type Controller struct {
	Name string
	// V2 lists files of which one must exist in a v2 cgroup for the
	// controller to count as enabled there; none: the v2 cgroup is taken
	// as it is (its files may be absent, as cpu.max is without the cpu
	// controller).
	V2 []string
	// V1 is a file every cgroup of the controller's v1 hierarchy has.
	V1 string
}

// Dir is a process's cgroup for one controller.
type Dir struct {
	// Path is the cgroup's directory; Version is 1 or 2.
	Path    string
	Version int
	// Mount is the top of the hierarchy Path belongs to.
	Mount string
}

// NotFoundError is Find's error when no hierarchy of the controller is
// mounted under the root.
type NotFoundError struct {
	Controller string
	Root       string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no %s cgroup under %s (neither cgroup v2 with the %s controller nor a cgroup v1 %s hierarchy; "+
		"is the cgroup file system mounted there?)", e.Controller, e.Root, e.Controller, e.Controller)
}

// Find locates the cgroup for c of the process whose cgroup list is
// procSelfCgroup ("" or a missing file: the root cgroup) under root (""
// means DefaultRoot). No hierarchy of c is a *NotFoundError; an unreadable
// procSelfCgroup is another error.
func Find(root, procSelfCgroup string, c Controller) (Dir, error) {
	if root == "" {
		root = DefaultRoot
	}
	root = filepath.Clean(root)
	paths, err := readProcCgroup(procSelfCgroup)
	if err != nil {
		return Dir{}, err
	}
	if isFile(filepath.Join(root, "cgroup.controllers")) {
		dir := locate(root, paths.v2)
		if len(c.V2) == 0 || slices.ContainsFunc(c.V2, func(f string) bool { return isFile(filepath.Join(dir, f)) }) {
			return Dir{Path: dir, Version: 2, Mount: root}, nil
		}
	}
	for _, mount := range v1Mounts(root, c.Name) {
		if !isFile(filepath.Join(mount, c.V1)) {
			continue
		}
		dir := locate(mount, paths.v1[c.Name])
		if isFile(filepath.Join(dir, c.V1)) {
			return Dir{Path: dir, Version: 1, Mount: mount}, nil
		}
	}
	return Dir{}, &NotFoundError{Controller: c.Name, Root: root}
}

// v1Mounts lists where a v1 hierarchy of controller may be mounted under
// root: root/controller, the directories whose comma-separated name lists
// it (cpu,cpuacct), and root itself.
func v1Mounts(root, controller string) []string {
	out := []string{filepath.Join(root, controller)}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.IsDir() && e.Name() != controller && slices.Contains(strings.Split(e.Name(), ","), controller) {
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	return append(out, root)
}

// Up lists d's directory and each parent up to its mount, at most
// MaxDepth of them.
func (d Dir) Up() []string {
	var out []string
	dir := d.Path
	for range MaxDepth {
		out = append(out, dir)
		if dir == d.Mount || len(dir) <= len(d.Mount) {
			break
		}
		dir = filepath.Dir(dir)
	}
	return out
}

// locate returns mount/cg when it exists, else mount joined with the
// longest existing suffix of cg, else mount. It never leaves mount.
func locate(mount, cg string) string {
	parts := strings.FieldsFunc(cg, func(r rune) bool { return r == '/' })
	for i := 0; i < len(parts) && i < MaxDepth; i++ {
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

// procPaths are the cgroup paths /proc/self/cgroup names: the v2 one (id
// 0, no controllers) and each v1 controller's.
type procPaths struct {
	v2 string
	v1 map[string]string
}

// readProcCgroup reads /proc/self/cgroup; "" or a missing file means the
// root cgroup.
func readProcCgroup(path string) (procPaths, error) {
	if path == "" {
		return procPaths{}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return procPaths{}, nil
	}
	if err != nil {
		return procPaths{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return parseProcCgroup(data), nil
}

// parseProcCgroup parses "id:controllers:path" lines.
func parseProcCgroup(data []byte) procPaths {
	p := procPaths{v1: make(map[string]string)}
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
			if c != "" && len(p.v1) < 64 {
				p.v1[c] = cg
			}
		}
	}
	return p
}

// ReadKeyed reads a flat keyed file ("key value" lines, as memory.events
// and memory.oom_control are). A missing file is an error: the cgroup went
// away.
func ReadKeyed(path string) (map[string]uint64, error) {
	data, err := readBounded(path, 4096)
	if err != nil {
		return nil, err
	}
	m, err := parseKeyed(data)
	if err != nil {
		return nil, Malformed(path, string(data), `"key value" lines`)
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

// ReadUint reads a file holding one unsigned number; ok is false (and the
// value 0) when the file does not exist.
func ReadUint(path string) (n uint64, ok bool, err error) {
	v, err := ReadSmall(path)
	if err != nil || v == "" {
		return 0, false, err
	}
	n, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, Malformed(path, v, "a byte count")
	}
	return n, true, nil
}

// ReadSmall returns the trimmed content of a small file (its first 256
// bytes), "" when it does not exist.
func ReadSmall(path string) (string, error) {
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

// Malformed is the error for a cgroup file that does not hold what it
// should.
func Malformed(path, content, want string) error {
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
