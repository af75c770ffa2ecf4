// Package harness builds a small Kubernetes-shaped cluster of "pods" on one Linux
// machine for end-to-end tests of podmpi's launcher and worker-agent.
//
// Each pod is a network namespace with one veth (eth0) into a hub namespace that
// holds a bridge and a dnsmasq answering cluster DNS (pod FQDNs with PTR, the
// headless-service A records and the _ssh._tcp SRV records), a persistent UTS
// namespace carrying the pod's hostname, and /etc/netns/<ns>/{resolv.conf,hosts,hostname}
// in the shape kubelet writes them. Pods have no default route, so no traffic
// leaves the machine.
//
// Pods do NOT isolate PIDs, users or the filesystem: they share /tmp, the binaries
// and /etc/passwd; only the network, the hostname and those three /etc files differ.
//
// Everything needs root, iproute2 (ip), dnsmasq and util-linux (unshare, nsenter,
// setpriv); nftables (nft) for [Cluster.DropTCP]. [StartT] skips a test with one
// line when any of these is missing. Every resource is released by PID and path in
// [Cluster.Close]; [CleanupStale] removes what a crashed run left behind.
package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultPrefix is the default prefix of every network namespace name the harness
// creates ("pmh-<id>-hub", "pmh-<id>-p0", ...).
const DefaultPrefix = "pmh-"

// Role values for [PodSpec.Role].
const (
	RoleLauncher = "launcher"
	RoleWorker   = "worker"
)

// ExtraIfaceAddr is the address put on net1 in every pod when [Config.ExtraIface]
// is set: the same docker0-like address everywhere.
const ExtraIfaceAddr = "172.17.0.1/16"

// Paths the harness writes to. They are variables only so that the shape is
// documented in one place; they are not meant to be changed.
var (
	stateRoot = "/run/podmpi-harness"
	netnsRun  = "/run/netns"
	etcNetns  = "/etc/netns"
)

// Config describes one cluster.
type Config struct {
	// Job is the job name; it is also the subdomain / headless Service name. Required.
	Job string
	// Namespace is the Kubernetes namespace. Default "default".
	Namespace string
	// ClusterDomain is the cluster DNS domain. Default "cluster.local".
	ClusterDomain string
	// Pods lists the pods; pod 0 is usually the launcher. At least one, at most 200.
	Pods []PodSpec
	// Subnet is the IPv4 pod network, e.g. "10.251.7.0/24". The hub (DNS server)
	// gets .1, pod i gets .(10+i). Every cluster has its own hub namespace, so
	// subnets of concurrently running clusters never meet; the default is still a
	// random 10.251.X.0/24 so that addresses in logs tell clusters apart.
	Subnet string
	// ExtraIface gives every pod a second, docker0-like interface: a veth pair
	// net1/net1b inside the pod with [ExtraIfaceAddr] on net1 in every pod.
	ExtraIface bool
	// SRVPort is the port in the _ssh._tcp SRV records. Default 2222.
	SRVPort int
	// LogDir receives dnsmasq's log and the logs of [Cluster.Start] with a relative
	// name. Default: a directory in the cluster's state dir, removed by Close.
	LogDir string
	// Prefix is the prefix of the network namespace names. Default [DefaultPrefix].
	Prefix string
	// DNSLogQueries makes dnsmasq log every query into its log file.
	DNSLogQueries bool
	// Logger receives debug records about setup and teardown. Default: discard.
	Logger *slog.Logger
}

// PodSpec describes one pod.
type PodSpec struct {
	// Hostname is the pod's hostname, e.g. "tj-node-0-1". Required, a DNS label.
	Hostname string
	// Aliases are extra DNS labels that resolve to the pod, published as
	// <alias>.<job>.<ns>.svc.<domain> (e.g. mpi-operator style "tj-worker-0").
	Aliases []string
	// Role is RoleLauncher or RoleWorker. Workers are the headless-service and
	// SRV targets. Default: RoleLauncher for pod 0, RoleWorker for the others.
	Role string
	// Publish says whether DNS records for the pod exist from the start. A pod
	// with Publish false behaves like a pod not yet scheduled until
	// [Cluster.Publish] is called.
	Publish bool
	// EtcFiles are extra per-pod files bind-mounted over /etc/<name> by
	// `ip netns exec`, e.g. {"passwd": "..."} to give the pod its own user
	// database. Names are plain file names that already exist in /etc;
	// resolv.conf, hosts and hostname are the harness's.
	EtcFiles map[string]string
}

// PodInfo is what a test needs to know about a running pod.
type PodInfo struct {
	Index     int
	Hostname  string     // "tj-node-0-1"
	ShortName string     // "<host>.<job>", what Trainer writes into the hostfile
	FQDN      string     // "<host>.<job>.<ns>.svc.<domain>"
	Aliases   []string   // alias FQDNs
	IP        netip.Addr // eth0 address
	NetNS     string     // network namespace name (under /run/netns)
	UTSFile   string     // persistent UTS namespace file
	Role      string
	Published bool
}

// Cluster is a running cluster. All methods are safe for concurrent use.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	id     string
	state  string // state directory
	logDir string
	prefix netip.Prefix
	hubIP  netip.Addr
	hubNS  string
	pods   []PodInfo
	tools  tools

	ctx    context.Context // canceled by Close; tracked commands die with it
	cancel context.CancelFunc

	mu        sync.Mutex
	published []bool
	dns       *dnsmasq
	procs     map[*Proc]struct{}
	logSeq    int

	closeOnce sync.Once
	closeErr  error
}

type tools struct {
	ip, dnsmasq, unshare, nsenter, setpriv string
}

// meta is written to <state>/meta.json before anything else is created; it is
// how [CleanupStale] knows what a dead cluster owned and whether its owner is alive.
type meta struct {
	ID         string   `json:"id"`
	Prefix     string   `json:"prefix"`
	OwnerPID   int      `json:"owner_pid"`
	OwnerStart uint64   `json:"owner_start"` // /proc/<pid>/stat starttime
	NetNS      []string `json:"netns"`
	Created    string   `json:"created"`
}

// Preflight reports what is missing to run a cluster on this machine: root and
// the ip, dnsmasq, unshare, nsenter and setpriv programs. nil means all present.
func Preflight() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, fmt.Sprintf("not root (euid %d)", os.Geteuid()))
	}
	var progs []string
	for _, p := range []string{"ip", "dnsmasq", "unshare", "nsenter", "setpriv"} {
		if _, err := lookPath(p); err != nil {
			progs = append(progs, p)
		}
	}
	if len(progs) > 0 {
		missing = append(missing, "missing "+strings.Join(progs, ", ")+
			" (apt-get install -y dnsmasq-base iproute2 util-linux)")
	}
	if len(missing) == 0 {
		return nil
	}
	return errors.New(strings.Join(missing, "; "))
}

// lookPath finds a program in PATH or in the sbin directories, which a non-login
// root PATH may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or /usr/sbin, /sbin", name)
}

// Start creates a cluster: namespaces, links, UTS namespaces, /etc/netns files
// and dnsmasq, and waits (bounded by ctx and 10 s) until dnsmasq listens. On
// error everything created so far is torn down.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := Preflight(); err != nil {
		return nil, fmt.Errorf("harness: cannot build a cluster on this machine: %w", err)
	}
	if err := cfg.normalize(); err != nil {
		return nil, fmt.Errorf("harness: invalid config: %w", err)
	}
	ctx, cancelStart := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStart()

	c := &Cluster{cfg: cfg, log: cfg.Logger, procs: map[*Proc]struct{}{}}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var err error
	for _, t := range []struct {
		dst  *string
		name string
	}{{&c.tools.ip, "ip"}, {&c.tools.dnsmasq, "dnsmasq"}, {&c.tools.unshare, "unshare"},
		{&c.tools.nsenter, "nsenter"}, {&c.tools.setpriv, "setpriv"}} {
		if *t.dst, err = lookPath(t.name); err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
	}
	c.prefix = netip.MustParsePrefix(cfg.Subnet) // validated by normalize
	c.hubIP = c.prefix.Addr().Next()
	c.ctx, c.cancel = context.WithCancel(context.Background())

	if err := c.makeState(); err != nil {
		c.cancel()
		return nil, err
	}
	c.log.Debug("harness: creating cluster", "id", c.id, "subnet", c.prefix, "pods", len(c.pods))
	if err := c.setup(ctx); err != nil {
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown after failed start: %w", cerr))
		}
		return nil, fmt.Errorf("harness: start cluster %s: %w", c.id, err)
	}
	return c, nil
}

// makeState picks a unique id, creates the state directory and writes meta.json.
func (c *Cluster) makeState() error {
	if err := os.MkdirAll(stateRoot, 0o755); err != nil {
		return fmt.Errorf("harness: create %s: %w", stateRoot, err)
	}
	for try := 0; ; try++ {
		if try == 8 {
			return fmt.Errorf("harness: no unused cluster id after %d tries under %s", try, stateRoot)
		}
		var b [3]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("harness: random id: %w", err)
		}
		id := hex.EncodeToString(b[:])
		hub := c.cfg.Prefix + id + "-hub"
		if _, err := os.Lstat(filepath.Join(netnsRun, hub)); err == nil {
			continue
		}
		state := filepath.Join(stateRoot, id)
		if err := os.Mkdir(state, 0o755); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return fmt.Errorf("harness: create state dir %s: %w", state, err)
		}
		c.id, c.state, c.hubNS = id, state, hub
		break
	}
	c.logDir = c.cfg.LogDir
	if c.logDir == "" {
		c.logDir = filepath.Join(c.state, "log")
	}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		_ = os.RemoveAll(c.state)
		return fmt.Errorf("harness: create log dir %s: %w", c.logDir, err)
	}
	if err := os.Mkdir(filepath.Join(c.state, "uts"), 0o755); err != nil {
		_ = os.RemoveAll(c.state)
		return fmt.Errorf("harness: create uts dir: %w", err)
	}
	m := meta{ID: c.id, Prefix: c.cfg.Prefix, OwnerPID: os.Getpid(), NetNS: []string{c.hubNS},
		Created: time.Now().UTC().Format(time.RFC3339)}
	m.OwnerStart, _ = procStartTime(os.Getpid())
	c.published = make([]bool, len(c.cfg.Pods))
	for i, p := range c.cfg.Pods {
		ns := fmt.Sprintf("%s%s-p%d", c.cfg.Prefix, c.id, i)
		m.NetNS = append(m.NetNS, ns)
		ip := c.podAddr(i)
		svc := c.cfg.Job + "." + c.cfg.Namespace + ".svc." + c.cfg.ClusterDomain
		info := PodInfo{
			Index: i, Hostname: p.Hostname, ShortName: p.Hostname + "." + c.cfg.Job,
			FQDN: p.Hostname + "." + svc, IP: ip, NetNS: ns,
			UTSFile: filepath.Join(c.state, "uts", ns), Role: p.Role, Published: p.Publish,
		}
		for _, a := range p.Aliases {
			info.Aliases = append(info.Aliases, a+"."+svc)
		}
		c.pods = append(c.pods, info)
		c.published[i] = p.Publish
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileAtomic(filepath.Join(c.state, "meta.json"), b, 0o644); err != nil {
		_ = os.RemoveAll(c.state)
		return fmt.Errorf("harness: write meta: %w", err)
	}
	return nil
}

func (c *Cluster) podAddr(i int) netip.Addr {
	a := c.prefix.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(10 + i)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// setup creates the namespaces, links, UTS namespaces, /etc files and dnsmasq.
func (c *Cluster) setup(ctx context.Context) error {
	bits := strconv.Itoa(c.prefix.Bits())
	if err := c.ipCmd(ctx, "", "netns", "add", c.hubNS); err != nil {
		return err
	}
	hub := []string{
		"link set lo up",
		"link add br0 type bridge",
		"addr add " + c.hubIP.String() + "/" + bits + " dev br0",
		"link set br0 up",
	}
	for i, p := range c.pods {
		if err := c.ipCmd(ctx, "", "netns", "add", p.NetNS); err != nil {
			return err
		}
		v := "v" + strconv.Itoa(i)
		hub = append(hub,
			fmt.Sprintf("link add %s type veth peer name eth0 netns %s", v, p.NetNS),
			fmt.Sprintf("link set %s master br0", v),
			fmt.Sprintf("link set %s up", v))
	}
	if err := c.ipBatch(ctx, c.hubNS, hub); err != nil {
		return err
	}
	for _, p := range c.pods {
		batch := []string{
			"link set lo up",
			"addr add " + p.IP.String() + "/" + bits + " dev eth0",
			"link set eth0 up",
		}
		if c.cfg.ExtraIface {
			batch = append(batch,
				"link add net1 type veth peer name net1b",
				"addr add "+ExtraIfaceAddr+" dev net1",
				"link set net1b up",
				"link set net1 up")
		}
		if err := c.ipBatch(ctx, p.NetNS, batch); err != nil {
			return err
		}
		if err := c.makeUTS(ctx, p); err != nil {
			return err
		}
		if err := c.writeEtc(p); err != nil {
			return err
		}
	}
	return c.startDNS(ctx)
}

// makeUTS creates the pod's persistent UTS namespace and sets its hostname.
func (c *Cluster) makeUTS(ctx context.Context, p PodInfo) error {
	f, err := os.OpenFile(p.UTSFile, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create UTS file %s: %w", p.UTSFile, err)
	}
	_ = f.Close()
	return c.runTool(ctx, nil, c.tools.unshare, "--uts="+p.UTSFile, "hostname", p.Hostname)
}

// writeEtc writes /etc/netns/<ns>/{resolv.conf,hosts,hostname}, which
// `ip netns exec` bind-mounts over /etc.
func (c *Cluster) writeEtc(p PodInfo) error {
	dir := filepath.Join(etcNetns, p.NetNS)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	ns, dom := c.cfg.Namespace, c.cfg.ClusterDomain
	resolv := fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver %s\noptions ndots:5\n",
		ns, dom, dom, dom, c.hubIP)
	hosts := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n" +
		fmt.Sprintf("%s\t%s\t%s\n", p.IP, p.FQDN, p.Hostname)
	files := map[string]string{"resolv.conf": resolv, "hosts": hosts, "hostname": p.Hostname + "\n"}
	for name, content := range c.cfg.Pods[p.Index].EtcFiles {
		files[name] = content
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
		}
	}
	return nil
}

// ipCmd runs `ip [-n ns] args...` with a deadline.
func (c *Cluster) ipCmd(ctx context.Context, ns string, args ...string) error {
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	return c.runTool(ctx, nil, c.tools.ip, args...)
}

// ipBatch runs a list of ip commands in one `ip -n ns -batch -`.
func (c *Cluster) ipBatch(ctx context.Context, ns string, lines []string) error {
	return c.runTool(ctx, []byte(strings.Join(lines, "\n")+"\n"), c.tools.ip, "-n", ns, "-batch", "-")
}

// runTool runs a setup program with a 10 s deadline and returns its stderr in
// the error.
func (c *Cluster) runTool(ctx context.Context, stdin []byte, prog string, args ...string) error {
	return runTool(ctx, stdin, prog, args...)
}

func runTool(ctx context.Context, stdin []byte, prog string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if ctx.Err() != nil {
			msg += " (deadline exceeded)"
		}
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(prog), strings.Join(args, " "), err, msg)
	}
	return nil
}

// ID is the cluster's unique id, part of every namespace name.
func (c *Cluster) ID() string { return c.id }

// NumPods is the number of pods.
func (c *Cluster) NumPods() int { return len(c.pods) }

// Pod describes pod i. It panics if i is out of range, like a slice index.
func (c *Cluster) Pod(i int) PodInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[i]
	p.Aliases = append([]string(nil), p.Aliases...)
	p.Published = c.published[i]
	return p
}

// Workers lists the indexes of the pods with RoleWorker.
func (c *Cluster) Workers() []int {
	var w []int
	for i, p := range c.pods {
		if p.Role == RoleWorker {
			w = append(w, i)
		}
	}
	return w
}

// HubIP is the address of the DNS server, the only nameserver in every pod.
func (c *Cluster) HubIP() netip.Addr { return c.hubIP }

// HubNetNS is the name of the hub network namespace.
func (c *Cluster) HubNetNS() string { return c.hubNS }

// ServiceFQDN is the headless Service name "<job>.<ns>.svc.<domain>".
func (c *Cluster) ServiceFQDN() string {
	return c.cfg.Job + "." + c.cfg.Namespace + ".svc." + c.cfg.ClusterDomain
}

// SRVName is "_ssh._tcp.<job>.<ns>.svc.<domain>".
func (c *Cluster) SRVName() string { return "_ssh._tcp." + c.ServiceFQDN() }

// LogDir is the directory holding dnsmasq's log and relative [Cluster.Start] logs.
func (c *Cluster) LogDir() string { return c.logDir }

// DNSLog is the path of dnsmasq's log file.
func (c *Cluster) DNSLog() string { return filepath.Join(c.logDir, "dnsmasq-"+c.id+".log") }

// StateDir is the cluster's state directory under /run/podmpi-harness.
func (c *Cluster) StateDir() string { return c.state }

func (c *Cluster) checkPod(i int) error {
	if i < 0 || i >= len(c.pods) {
		return fmt.Errorf("harness: pod index %d out of range: cluster %s has %d pods", i, c.id, len(c.pods))
	}
	return nil
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
