package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// run runs a host command and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ensureBridge creates the CNI bridge with the gateway address, up, before
// anything binds to the gateway (the bridge plugin reuses it).
func ensureBridge(ctx context.Context) error {
	if _, err := os.Stat("/sys/class/net/" + Bridge); err != nil {
		if _, err := run(ctx, "ip", "link", "add", Bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	out, err := run(ctx, "ip", "-4", "-o", "addr", "show", "dev", Bridge)
	if err != nil {
		return err
	}
	if !strings.Contains(out, " "+Gateway+"/") {
		if _, err := run(ctx, "ip", "addr", "add", Gateway+"/24", "dev", Bridge); err != nil {
			return err
		}
	}
	if _, err = run(ctx, "ip", "link", "set", Bridge, "up"); err != nil {
		return err
	}
	return ensureAPIServiceRoute(ctx)
}

// serviceRule is a rule kube-proxy would make that pods here need: a
// Service's cluster address and port (ip:port) to where its controller
// listens on the host (the gateway's port to). It names the bridge, so
// removeRules takes it away with the cluster's others.
func serviceRule(ip string, port, to int, what string) []string {
	return []string{"PREROUTING", "-i", Bridge, "-d", ip + "/32", "-p", "tcp", "--dport", strconv.Itoa(port),
		"-m", "comment", "--comment", "podmpi-cluster: " + what,
		"-j", "DNAT", "--to-destination", net.JoinHostPort(Gateway, strconv.Itoa(to))}
}

// apiServiceRule: the kubernetes Service (what a pod's in-cluster client
// dials, KUBERNETES_SERVICE_HOST:443) to the API server on the gateway.
var apiServiceRule = serviceRule(KubernetesServiceIP, 443, APIServerPort, "the kubernetes Service to the API server")

// issuerRule: the service-account token issuer's URL
// (https://kubernetes.default.svc.<domain>, port 443), which a controller on
// the host reaches through its own hosts file at the gateway, to the API
// server there. Trainer's status server fetches the issuer's OIDC discovery
// document from it as it starts.
var issuerRule = []string{"OUTPUT", "-d", Gateway + "/32", "-p", "tcp", "--dport", "443",
	"-m", "comment", "--comment", "podmpi-cluster: the token issuer's URL to the API server",
	"-j", "DNAT", "--to-destination", net.JoinHostPort(Gateway, strconv.Itoa(APIServerPort))}

// ensureAPIServiceRoute adds apiServiceRule unless it is there.
func ensureAPIServiceRoute(ctx context.Context) error { return ensureRule(ctx, apiServiceRule) }

// ensureRule adds a nat rule unless it is there.
func ensureRule(ctx context.Context, rule []string) error {
	if _, err := run(ctx, "iptables", append([]string{"-w", "-t", "nat", "-C"}, rule...)...); err == nil {
		return nil
	}
	_, err := run(ctx, "iptables", append([]string{"-w", "-t", "nat", "-A"}, rule...)...)
	return err
}

// mountsUnder returns the mount points at or below any of roots, deepest
// first (from /proc/self/mountinfo, unescaped).
func mountsUnder(roots ...string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, r := range roots {
			if mp == r || strings.HasPrefix(mp, r+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		di, dj := strings.Count(out[i], "/"), strings.Count(out[j], "/")
		if di != dj {
			return di > dj
		}
		return out[i] > out[j]
	})
	return out, nil
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts every mount at or below roots, deepest first; a mount
// still busy is detached (MNT_DETACH) so that its folder can go.
func unmountAll(roots ...string) error {
	var errs []error
	for pass := 0; pass < 3; pass++ {
		mps, err := mountsUnder(roots...)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				if err2 := syscall.Unmount(mp, syscall.MNT_DETACH); err2 != nil && pass == 2 {
					errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err2))
				}
			}
		}
	}
	if mps, _ := mountsUnder(roots...); len(mps) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %s", strings.Join(mps, ", ")))
	}
	return errors.Join(errs...)
}

// podNetns lists the network namespaces containerd's CRI made for pods.
func podNetns() []string {
	ents, _ := os.ReadDir(NetnsDir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "cni-") {
			out = append(out, filepath.Join(NetnsDir, e.Name()))
		}
	}
	return out
}

// removeNetns unmounts and deletes each pod network namespace; with the
// namespace goes its end of each veth pair, and so the host end.
func removeNetns() error {
	var errs []error
	for _, ns := range podNetns() {
		_ = syscall.Unmount(ns, syscall.MNT_DETACH)
		if err := os.Remove(ns); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// bridgePorts lists the interfaces enslaved to the cluster bridge (the host
// ends of the pods' veth pairs).
func bridgePorts() []string {
	ents, _ := os.ReadDir("/sys/class/net/" + Bridge + "/brif")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// removeLinks deletes the veths left on the bridge and the bridge itself.
func removeLinks(ctx context.Context) error {
	var errs []error
	for _, p := range append(bridgePorts(), Bridge) {
		if err := delLink(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// delLink deletes a network interface. One that is already gone is no error:
// the kernel takes a veth's host end away by itself once its pod's namespace
// is freed, which can happen between listing the bridge's ports and deleting
// them, and deleting either end of a pair deletes both.
func delLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	if _, err := run(ctx, "ip", "link", "del", name); err != nil && linkExists(name) {
		return err
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// Chains the kubelet creates (iptables-nft or legacy, IPv4 and IPv6): its
// canary and hint chains. The cluster's CNI configuration creates none (no
// ipMasq, no portmap), and CNI-* chains on this machine belong to podman's
// own networks, which are left alone.
func clusterChains(save string) map[string][]string {
	chains := map[string][]string{} // table -> chains
	table := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(strings.TrimPrefix(line, ":"))[0]
			if strings.HasPrefix(name, "KUBE-") {
				chains[table] = append(chains[table], name)
			}
		}
	}
	return chains
}

// ruleLines returns the -A lines of iptables-save that belong to the cluster:
// jumps into its chains, rules in them, or rules naming the bridge or the
// pod network.
func ruleLines(save string) []string {
	var out []string
	table := ""
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "*") {
			table = strings.TrimPrefix(line, "*")
			continue
		}
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		if strings.Contains(line, "KUBE-") || strings.Contains(line, Bridge) ||
			strings.Contains(line, strings.TrimSuffix(PodCIDR, "/24")) {
			out = append(out, table+" "+line)
		}
	}
	return out
}

// removeRules deletes the cluster's iptables rules and chains (IPv4 and
// IPv6): first the rules (jumps included), then the emptied chains.
func removeRules(ctx context.Context) error {
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool + "-save"); err != nil {
			continue
		}
		save, err := run(ctx, tool+"-save")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		chains := clusterChains(save)
		for _, l := range ruleLines(save) {
			f := strings.Fields(l)
			table := f[0]
			// A rule in one of the cluster's own chains goes with the
			// flush below; only jumps and rules in other chains are
			// deleted one by one.
			if len(f) > 2 && slices.Contains(chains[table], f[2]) {
				continue
			}
			args := append([]string{"-w", "-t", table, "-D"}, splitRule(strings.Join(f[2:], " "))...)
			if _, err := run(ctx, tool, args...); err != nil {
				errs = append(errs, err)
			}
		}
		for table, chains := range chains {
			for _, ch := range chains {
				_, _ = run(ctx, tool, "-w", "-t", table, "-F", ch)
			}
			for _, ch := range chains {
				if _, err := run(ctx, tool, "-w", "-t", table, "-X", ch); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// splitRule splits an iptables-save rule into arguments, honouring the
// double quotes iptables-save puts around comments.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	inQ, have := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\' && i+1 < len(s):
			// iptables-save escapes quotes inside a comment (pod\'s).
			i++
			cur.WriteByte(s[i])
			have = true
		case ch == '"':
			inQ = !inQ
			have = true
		case ch == ' ' && !inQ:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// cgroupRoots are the kubelet's cgroup trees (cgroupfs driver) in every v1
// hierarchy, or in the v2 tree.
func cgroupRoots() []string {
	var out []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		p := filepath.Join("/sys/fs/cgroup", e.Name(), "kubepods")
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		out = append(out, "/sys/fs/cgroup/kubepods")
	}
	return out
}

// PodCgroups are the folders of the pod with this UID in the kubelet's
// cgroup trees (cgroupfs driver: kubepods/[burstable|besteffort/]pod<uid>),
// one per v1 hierarchy, or the one of the v2 tree: the fault drills throttle
// a pod's CPU and kill a container's processes through them.
func PodCgroups(uid string) []string {
	var out []string
	for _, root := range cgroupRoots() {
		for _, qos := range []string{"", "burstable", "besteffort"} {
			p := filepath.Join(root, qos, "pod"+uid)
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				out = append(out, p)
			}
		}
	}
	return out
}

// cgroupPIDs lists the processes still in the kubelet's cgroups.
func cgroupPIDs() []int {
	seen := map[int]bool{}
	for _, root := range cgroupRoots() {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, l := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(l); err == nil {
					seen[n] = true
				}
			}
			return nil
		})
	}
	var out []int
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// removeCgroups removes the kubelet's cgroup folders, deepest first (a
// cgroup folder is removed with rmdir once empty).
func removeCgroups() error {
	var errs []error
	for _, root := range cgroupRoots() {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		for _, d := range dirs {
			var err error
			for i := 0; i < 50; i++ { // a cgroup empties a moment after its last process
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// clusterProcesses finds every process that belongs to the cluster: its
// executable is one the cluster built (under the cache), or its command line
// names the cluster's state or run folder (containerd and its shims, etcd,
// the nsexec helper), or it sits in the kubelet's cgroups (containers).
func (l Layout) clusterProcesses() []int {
	self := os.Getpid()
	inCg := map[int]bool{}
	for _, p := range cgroupPIDs() {
		inCg[p] = true
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 || !alive(pid) {
			continue
		}
		if inCg[pid] {
			out = append(out, pid)
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cl := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.HasPrefix(exe, l.Bin()+"/") || strings.Contains(cl, l.State+"/") || strings.Contains(cl, l.Run+"/") ||
			strings.HasSuffix(cl, l.State+" ") || strings.HasSuffix(cl, l.Run+" ") {
			// Not this program's own invocations (podmpi-cluster down/up).
			if strings.Contains(cl, "podmpi-cluster ") && !strings.Contains(cl, " nsexec ") {
				continue
			}
			out = append(out, pid)
		}
	}
	return out
}

// Traces lists everything of the cluster that is on this machine: its
// processes, mounts, pod network namespaces, links (the bridge and any
// veth), iptables rules and chains, kubelet cgroups and state folders. After
// Down it is empty.
func (l Layout) Traces() []string {
	var out []string
	for _, pid := range l.clusterProcesses() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d: %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))))
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			mp := unescapeMount(f[4])
			if strings.Contains(line, l.State) || strings.Contains(line, l.Run) ||
				strings.HasPrefix(mp, NetnsDir+"/cni-") || strings.HasPrefix(mp, "/run/netns/cni-") {
				out = append(out, "mount "+mp)
			}
		}
	}
	for _, ns := range podNetns() {
		out = append(out, "netns "+ns)
	}
	if linkExists(Bridge) {
		out = append(out, "link "+Bridge)
	}
	for _, p := range bridgePorts() {
		out = append(out, "link "+p+" (on "+Bridge+")")
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		save, err := exec.Command(tool).Output()
		if err != nil {
			continue
		}
		for _, r := range ruleLines(string(save)) {
			out = append(out, tool+" rule "+r)
		}
		for table, chains := range clusterChains(string(save)) {
			for _, ch := range chains {
				out = append(out, tool+" chain "+table+" "+ch)
			}
		}
	}
	for _, set := range clusterIPSets(context.Background()) {
		out = append(out, "ipset "+set)
	}
	for _, cg := range cgroupRoots() {
		out = append(out, "cgroup "+cg)
	}
	for _, d := range []string{l.State, l.Run} {
		if _, err := os.Stat(d); err == nil {
			out = append(out, "folder "+d)
		}
	}
	sort.Strings(out)
	return out
}
