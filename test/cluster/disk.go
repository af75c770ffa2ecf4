package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// The node's disk. When the free space of the kubelet's filesystem falls
// below its evictionHard, the kubelet taints the node disk-pressure and every
// pod of every test stays Pending with "untolerated taint(s)" until its wait
// runs out. On a machine whose disk also holds image builds and Go caches that
// happens quietly, so `up` checks the space first and names what to free.
const (
	// EvictionFloor is the kubelet's evictionHard for nodefs and imagefs:
	// absolute, since a percentage of a large disk shared with other work
	// (or one with blocks reserved for another user) says little.
	EvictionFloor = 512 << 20
	// MinUpFree is the free space `up` wants on each filesystem it writes:
	// containerd's store holds about 2 GiB once the podmpi images are
	// imported and unpacked; then pod logs and the eviction floor, with room.
	MinUpFree = 4 << 30
	// PodmanStorage is where podman keeps the images it builds.
	PodmanStorage = "/var/lib/containers/storage"
)

// DiskSpace is the space left on the filesystem that holds Path, as an
// unprivileged writer sees it (blocks reserved for root or another user
// are not free).
type DiskSpace struct {
	Path        string
	Free, Total uint64
}

func (d DiskSpace) String() string {
	return fmt.Sprintf("%s: %s free of %s", d.Path, gib(d.Free), gib(d.Total))
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// FreeSpace reports the space left where path is, or would be: the nearest
// existing folder above it counts.
func FreeSpace(path string) (DiskSpace, error) {
	p := filepath.Clean(path)
	for {
		if _, err := os.Stat(p); err == nil || p == "/" || p == "." {
			break
		}
		p = filepath.Dir(p)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p, &st); err != nil {
		return DiskSpace{}, fmt.Errorf("statfs %s: %w", p, err)
	}
	bs := uint64(st.Bsize)
	return DiskSpace{Path: path, Free: st.Bavail * bs, Total: st.Blocks * bs}, nil
}

// FreeDiskHint says how to make room on a machine that runs the cluster.
const FreeDiskHint = "free space: make images-prune (superseded podmpi image tags and build stages), " +
	"go clean -cache, or move the cluster's cache (PODMPI_CLUSTER_CACHE)"

// checkDisk fails when a filesystem the cluster writes has less than need
// free, naming each and what to free.
func checkDisk(need uint64, paths ...string) error {
	var short []string
	for _, p := range paths {
		d, err := FreeSpace(p)
		if err != nil {
			return err
		}
		if d.Free < need {
			short = append(short, d.String())
		}
	}
	if len(short) == 0 {
		return nil
	}
	return fmt.Errorf("the disk is nearly full (%s; the cluster wants %s free on each, and the kubelet "+
		"taints the node disk-pressure below %s, leaving every pod Pending): %s",
		strings.Join(short, ", "), gib(need), gib(EvictionFloor), FreeDiskHint)
}

// NodeProblems lists what keeps pods off the node: its NoSchedule and
// NoExecute taints and its pressure or not-ready conditions, each with the
// kubelet's message. Empty for a node that takes pods.
func NodeProblems(n *corev1.Node) []string {
	var out []string
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		s := "taint " + t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		out = append(out, s+":"+string(t.Effect))
	}
	for _, c := range n.Status.Conditions {
		bad := c.Status == corev1.ConditionTrue
		if c.Type == corev1.NodeReady {
			bad = c.Status != corev1.ConditionTrue
		}
		if bad {
			out = append(out, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, strings.TrimSpace(c.Reason+" "+c.Message)))
		}
	}
	if n.Spec.Unschedulable {
		out = append(out, "cordoned (spec.unschedulable)")
	}
	sort.Strings(out)
	return out
}

// NodeHealthError turns NodeProblems into an error naming the cause and the
// fix; nil when there are none.
func NodeHealthError(n *corev1.Node, l Layout) error {
	p := NodeProblems(n)
	if len(p) == 0 {
		return nil
	}
	msg := fmt.Sprintf("node %s takes no pods: %s", n.Name, strings.Join(p, "; "))
	for _, s := range p {
		if strings.Contains(s, "disk-pressure") || strings.HasPrefix(s, string(corev1.NodeDiskPressure)) {
			var free []string
			for _, path := range []string{l.ContainerdRoot(), l.KubeletRoot()} {
				if d, err := FreeSpace(path); err == nil {
					free = append(free, d.String())
				}
			}
			msg += fmt.Sprintf("; the kubelet evicts below %s free (%s); %s", gib(EvictionFloor), strings.Join(free, ", "), FreeDiskHint)
			break
		}
	}
	return errors.New(msg)
}
