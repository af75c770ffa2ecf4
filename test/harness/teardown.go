package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/proc"
)

// Close tears the cluster down: every process in every pod and in the hub
// (found by namespace, SIGTERM then SIGKILL), dnsmasq, the UTS namespace
// mounts, the network namespaces, /etc/netns/<ns> and the state directory. It
// is idempotent and bounded (about 6 s in the worst case). The returned error
// lists what could not be removed.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	start := time.Now()
	c.mu.Lock()
	c.cancel() // tracked commands get SIGTERM to their process group now
	c.mu.Unlock()

	var errs []error
	paths := []string{filepath.Join(netnsRun, c.hubNS)}
	for _, p := range c.pods {
		paths = append(paths, filepath.Join(netnsRun, p.NetNS))
	}
	if left := killNetns(paths, DefaultGrace, 2*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("pids %v still alive after SIGKILL", left))
	}
	c.mu.Lock()
	if err := c.stopDNS(); err != nil {
		errs = append(errs, fmt.Errorf("dnsmasq: %w", err))
	}
	c.mu.Unlock()
	c.waitProcs(time.Second)

	if err := removeResources(c.resources()); err != nil {
		errs = append(errs, err)
	}
	c.log.Debug("harness: cluster closed", "id", c.id, "took", time.Since(start))
	if len(errs) > 0 {
		return fmt.Errorf("harness: close cluster %s: %w", c.id, errors.Join(errs...))
	}
	return nil
}

// resources lists what the cluster created, for removal.
type resources struct {
	netns    []string // names under /run/netns
	mounts   []string // UTS namespace files (bind mounts)
	etcDirs  []string // /etc/netns/<ns>
	stateDir string
}

func (c *Cluster) resources() resources {
	r := resources{netns: []string{c.hubNS}, stateDir: c.state}
	for _, p := range c.pods {
		r.netns = append(r.netns, p.NetNS)
		r.mounts = append(r.mounts, p.UTSFile)
		r.etcDirs = append(r.etcDirs, filepath.Join(etcNetns, p.NetNS))
	}
	return r
}

// removeResources unmounts and deletes everything in r; missing pieces are fine.
func removeResources(r resources) error {
	var errs []error
	for _, n := range r.netns {
		if err := unmountRemove(filepath.Join(netnsRun, n)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range r.mounts {
		if err := unmountRemove(m); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range r.etcDirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	if r.stateDir != "" {
		// Never remove a directory that still has a mount below it: RemoveAll
		// would fail on the busy mount point anyway, and the entry must survive
		// for CleanupStale.
		if under := mountsUnder(r.stateDir); len(under) > 0 {
			errs = append(errs, fmt.Errorf("keep %s: still mounted: %v", r.stateDir, under))
		} else if err := os.RemoveAll(r.stateDir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", r.stateDir, err))
		}
	}
	return errors.Join(errs...)
}

// unmountRemove detaches a (possible) bind mount at path and removes the file.
func unmountRemove(path string) error {
	for range 4 { // a file can be mounted more than once
		err := syscall.Unmount(path, syscall.MNT_DETACH)
		if err != nil {
			break // EINVAL: not a mount point; ENOENT: gone
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// netnsPIDs lists the processes whose network namespace is the one bound at
// nsPath (like `ip netns pids`). Zombies have no namespace and are not listed.
func netnsPIDs(nsPath string) []int {
	var want syscall.Stat_t
	if err := syscall.Stat(nsPath, &want); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/net", &st) != nil {
			continue
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killNetns kills every process in the given namespaces: SIGTERM and up to
// termGrace for them to go (skipped when termGrace is 0), then SIGKILL, repeated
// for new arrivals, up to killWait. It returns the pids still present.
func killNetns(nsPaths []string, termGrace, killWait time.Duration) []int {
	all := func() []int {
		var pids []int
		for _, p := range nsPaths {
			pids = append(pids, netnsPIDs(p)...)
		}
		return pids
	}
	wait := func(d time.Duration, sig syscall.Signal) []int {
		deadline := time.Now().Add(d)
		for {
			pids := all()
			if len(pids) == 0 {
				return nil
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, sig)
			}
			if time.Now().After(deadline) {
				return pids
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if termGrace > 0 {
		if wait(termGrace, syscall.SIGTERM) == nil {
			return nil
		}
	}
	return wait(killWait, syscall.SIGKILL)
}

// procStartTime returns the start time of pid (clock ticks since boot),
// which with the pid identifies a process across pid reuse.
func procStartTime(pid int) (uint64, error) {
	st, err := proc.ReadStat(proc.DefaultRoot, pid)
	return st.Start, err
}

// parseMountinfo returns the mount points listed in /proc/<pid>/mountinfo,
// with the kernel's octal escapes (\040 for space, ...) decoded.
func parseMountinfo(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		out = append(out, unescapeOctal(f[4]))
	}
	return out
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// Mounts returns the mount points of the calling process's mount namespace.
func Mounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountinfo(b), nil
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	all, err := Mounts()
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range all {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// ownerAlive reports whether the process that created a cluster still runs.
func ownerAlive(m meta) bool {
	if m.OwnerPID <= 0 {
		return false
	}
	st, err := procStartTime(m.OwnerPID)
	if err != nil {
		return false
	}
	return m.OwnerStart == 0 || st == m.OwnerStart
}

// CleanupStale removes what crashed runs left behind for clusters whose netns
// names start with prefix (DefaultPrefix if ""): clusters whose creating process
// is gone (per their meta.json), network namespaces and /etc/netns entries with
// the prefix that no live cluster claims, and UTS mounts of dead clusters.
// Clusters of processes still running (for example test packages running in
// parallel) are left alone. It returns what it removed.
func CleanupStale(prefix string) ([]string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("harness: CleanupStale: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("harness: CleanupStale needs root (euid %d)", os.Geteuid())
	}
	var removed []string
	var errs []error
	live := map[string]bool{} // netns names owned by live clusters

	dirs, err := os.ReadDir(stateRoot)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("harness: read %s: %w", stateRoot, err)
	}
	for _, d := range dirs {
		dir := filepath.Join(stateRoot, d.Name())
		if !d.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		var m meta
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			// No meta yet: a cluster being created right now, or a crash in the
			// first instant. Only old ones are stale.
			if fi, serr := os.Stat(dir); serr == nil && time.Since(fi.ModTime()) > time.Minute {
				r := resources{stateDir: dir, mounts: mountsUnder(dir)}
				if err := removeResources(r); err != nil {
					errs = append(errs, err)
				} else {
					removed = append(removed, dir)
				}
			}
			continue
		}
		if m.Prefix != prefix {
			continue
		}
		if ownerAlive(m) {
			for _, n := range m.NetNS {
				live[n] = true
			}
			continue
		}
		r := resources{netns: m.NetNS, stateDir: dir, mounts: mountsUnder(dir)}
		var paths []string
		for _, n := range m.NetNS {
			paths = append(paths, filepath.Join(netnsRun, n))
			r.etcDirs = append(r.etcDirs, filepath.Join(etcNetns, n))
		}
		if left := killNetns(paths, 0, 2*time.Second); len(left) > 0 {
			errs = append(errs, fmt.Errorf("stale cluster %s: pids %v survive SIGKILL", m.ID, left))
		}
		if err := removeResources(r); err != nil {
			errs = append(errs, err)
		}
		removed = append(removed, dir)
		removed = append(removed, m.NetNS...)
	}

	// Namespaces and /etc/netns dirs with our prefix that no live cluster owns.
	for _, base := range []string{netnsRun, etcNetns} {
		ents, err := os.ReadDir(base)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasPrefix(n, prefix) || live[n] {
				continue
			}
			if base == netnsRun {
				path := filepath.Join(netnsRun, n)
				if left := killNetns([]string{path}, 0, 2*time.Second); len(left) > 0 {
					errs = append(errs, fmt.Errorf("netns %s: pids %v survive SIGKILL", n, left))
				}
				etc := filepath.Join(etcNetns, n)
				if _, err := os.Lstat(etc); err == nil {
					removed = append(removed, etc)
				}
				if err := removeResources(resources{netns: []string{n}, etcDirs: []string{etc}}); err != nil {
					errs = append(errs, err)
				}
			} else if err := os.RemoveAll(filepath.Join(base, n)); err != nil {
				errs = append(errs, err)
			}
			removed = append(removed, filepath.Join(base, n))
		}
	}
	sort.Strings(removed)
	removed = compactStrings(removed)
	if len(errs) > 0 {
		return removed, fmt.Errorf("harness: CleanupStale(%q): %w", prefix, errors.Join(errs...))
	}
	return removed, nil
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
