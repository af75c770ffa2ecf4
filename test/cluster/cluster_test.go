package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestPinsFile(t *testing.T) {
	p, err := LoadPins()
	if err != nil {
		t.Fatal(err)
	}
	if p.Kubernetes == "" || p.CoreDNS == "" || len(p.Trainer) < 2 || len(p.MPIOperator) < 2 || len(p.JobSet) < 2 {
		t.Fatalf("versions.txt lacks a component: %+v", p)
	}
	for k, why := range p.Why {
		if len(strings.Fields(why)) < 3 {
			t.Errorf("versions.txt: %q: say why in a few words, got %q", k, why)
		}
	}
	if !slices.Contains(p.Trainer, "v2.0.0") {
		t.Errorf("Trainer v2.0.0 (the first v2 release) must stay pinned: %v", p.Trainer)
	}
}

func TestParsePinsErrors(t *testing.T) {
	for _, bad := range []string{
		"kubernetes v1.36.3\n",            // no why
		"kubelet v1.36.3 a reason here\n", // unknown component
		"kubernetes 1.36.3 a reason here\ncoredns v1.14.2 x y z\ntrainer v2.3.0 x y z\nmpi-operator v0.8.2 x y z\n", // no v
		"coredns v1.14.2 x y z\ntrainer v2.3.0 x y z\nmpi-operator v0.8.2 x y z\n",                                  // no kubernetes
	} {
		if _, err := parsePins(bad); err == nil {
			t.Errorf("parsePins(%q): want an error", bad)
		}
	}
}

func TestSplitRule(t *testing.T) {
	got := splitRule(`-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -j DROP`)
	want := []string{"-A", "KUBE-FIREWALL", "-m", "comment", "--comment", "block incoming localnet connections", "-j", "DROP"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitRule = %q, want %q", got, want)
	}
}

func TestSplitRuleEscapedQuote(t *testing.T) {
	// kube-router's comments hold quotes, which iptables-save escapes.
	got := splitRule(`-A KUBE-POD-FW-X -d 10.244.0.2/32 -m comment --comment "traffic when source is the pod\'s local node" -j ACCEPT`)
	want := []string{"-A", "KUBE-POD-FW-X", "-d", "10.244.0.2/32", "-m", "comment", "--comment", "traffic when source is the pod's local node", "-j", "ACCEPT"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitRule = %q, want %q", got, want)
	}
}

func TestRuleLinesAndChains(t *testing.T) {
	save := `*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
:CNI-abc - [0:0]
-A POSTROUTING -s 10.88.0.0/16 -j CNI-abc
-A POSTROUTING -s 10.244.0.0/24 -j MASQUERADE
-A FORWARD -i podmpi-cl0 -j ACCEPT
COMMIT
`
	chains := clusterChains(save)
	if !reflect.DeepEqual(chains, map[string][]string{"mangle": {"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}}) {
		t.Errorf("clusterChains = %v (podman's CNI-* chains are not the cluster's)", chains)
	}
	rules := ruleLines(save)
	want := []string{"nat -A POSTROUTING -s 10.244.0.0/24 -j MASQUERADE", "nat -A FORWARD -i podmpi-cl0 -j ACCEPT"}
	if !reflect.DeepEqual(rules, want) {
		t.Errorf("ruleLines = %q, want %q", rules, want)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b`); got != "/var/lib/a b" {
		t.Errorf("unescapeMount = %q", got)
	}
}

func TestExposeOnHost(t *testing.T) {
	objs, err := decodeObjects([]byte(`apiVersion: v1
kind: Service
metadata: {name: hook, namespace: ns}
spec:
  selector: {app: x}
  ports:
  - {name: webhook-server, port: 443, targetPort: 9443}
  - {name: other, port: 80}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: mgr, namespace: ns}
spec:
  template:
    spec:
      serviceAccountName: mgr-sa
`))
	if err != nil {
		t.Fatal(err)
	}
	objs, sas := withoutDeployments(objs)
	if len(objs) != 1 || sas["mgr"] != "ns/mgr-sa" {
		t.Fatalf("withoutDeployments: %d objects, service accounts %v", len(objs), sas)
	}
	objs, err = exposeOnHost(objs, "ns", "hook", map[string]int{"webhook-server": 19443})
	if err != nil {
		t.Fatal(err)
	}
	if _, has, _ := unstructured.NestedMap(objs[0].Object, "spec", "selector"); has {
		t.Error("the Service keeps its selector")
	}
	ep := objs[1]
	subsets, _, _ := unstructured.NestedSlice(ep.Object, "subsets")
	s := subsets[0].(map[string]any)
	port := s["ports"].([]any)[0].(map[string]any)
	if ep.GetKind() != "Endpoints" || port["port"] != int64(19443) || port["name"] != "webhook-server" ||
		s["addresses"].([]any)[0].(map[string]any)["ip"] != Gateway || len(s["ports"].([]any)) != 1 {
		t.Errorf("Endpoints = %v", ep.Object)
	}
	if _, err := exposeOnHost(objs, "ns", "missing", map[string]int{"x": 1}); err == nil {
		t.Error("a missing Service must be an error")
	}
}

func TestSetImages(t *testing.T) {
	const in = `kind: X
spec:
  a:
    template:
      spec:
        initContainers: [{name: podmpi, image: old}, {name: i, image: old}]
        containers: [{name: c, image: old}, {name: d, image: old}]
  b: [{template: {spec: {containers: [{name: podmpi, image: old}]}}}]
`
	for _, tc := range []struct {
		images map[string]string
		want   string // each container's "name=image", sorted
	}{
		// The binaries-only image goes to the init container podmpi only
		// (a container of that name is not it).
		{map[string]string{"openmpi": "new:1", "podmpi": "bin:1"}, "c=new:1, d=new:1, init i=new:1, init podmpi=bin:1, podmpi=new:1"},
		// Without one, every container gets the MPI image, which holds
		// /opt/podmpi too.
		{map[string]string{"openmpi": "new:1"}, "c=new:1, d=new:1, init i=new:1, init podmpi=new:1, podmpi=new:1"},
	} {
		objs, err := decodeObjects([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		SetImages(objs[0], tc.images["openmpi"], tc.images)
		var got []string
		eachContainer(objs[0], func(init bool, c map[string]any) {
			s := fmt.Sprintf("%s=%s", c["name"], c["image"])
			if init {
				s = "init " + s
			}
			got = append(got, s)
		})
		sort.Strings(got)
		if g := strings.Join(got, ", "); g != tc.want {
			t.Errorf("SetImages with %v: %s, want %s", tc.images, g, tc.want)
		}
	}
}

// TestProcess starts a real daemon, finds it again through its pid file,
// and stops it; a daemon that exits while starting is reported with its log.
func TestProcess(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := &Process{
		Name: "sleeper", Path: "/bin/sh", Args: []string{"-c", "touch " + ready + "; exec sleep 600"},
		Health: func(context.Context) error {
			if _, err := os.Stat(ready); err != nil {
				return err
			}
			return nil
		},
		StartTimeout: 20 * time.Second, StopTimeout: 5 * time.Second, Dir: dir,
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid, ok := p.Running()
	if !ok {
		t.Fatal("started but not running")
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// A second Start reuses it.
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pid2, _ := p.Running(); pid2 != pid {
		t.Fatalf("second Start started another process (%d, was %d)", pid2, pid)
	}
	// A pid file whose start time does not match is not the daemon.
	b, _ := os.ReadFile(p.pidFile())
	if err := os.WriteFile(p.pidFile(), []byte(strings.Fields(string(b))[0]+" 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Running(); ok {
		t.Fatal("a pid file with another start time was taken for the daemon")
	}
	if err := os.WriteFile(p.pidFile(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatal("still alive after Stop")
	}
	if _, err := os.Stat(p.pidFile()); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("pid file left after Stop")
	}

	bad := &Process{Name: "bad", Path: "/bin/sh", Args: []string{"-c", "echo broken config >&2; exit 3"},
		Health:       func(context.Context) error { return errors.New("not yet") },
		StartTimeout: 20 * time.Second, StopTimeout: time.Second, Dir: dir}
	err := bad.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited while starting") || !strings.Contains(err.Error(), "broken config") {
		t.Fatalf("a daemon that exits at once: got %v", err)
	}
}

// TestProcessInheritsNoDescriptor: a daemon gets stdin, stdout and stderr
// and nothing else of the process that starts it. make cluster-up run under
// flock(1) (as the machine's users share the cluster) has the lock's
// descriptor, not close-on-exec: a daemon that inherited it held the lock
// for as long as the cluster ran, and every later flock waited for ever.
func TestProcessInheritsNoDescriptor(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "lock")
	// As flock(1) opens it: without O_CLOEXEC.
	fd, err := syscall.Open(lock, syscall.O_CREAT|syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	p := &Process{Name: "sleeper", Path: "/bin/sleep", Args: []string{"600"},
		Health:       func(context.Context) error { return nil },
		StartTimeout: 20 * time.Second, StopTimeout: 5 * time.Second, Dir: dir}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid, _ := p.Running()
	t.Cleanup(func() { _ = p.Stop() })
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if n, _ := strconv.Atoi(e.Name()); n > 2 {
			t.Errorf("the daemon has descriptor %d (%s) of the process that started it", n, target)
		}
	}
	// The lock is free once this process lets go of it.
	syscall.Close(fd)
	fd2, err := syscall.Open(lock, syscall.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd2)
	if err := syscall.Flock(fd2, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the lock is still held while the daemon runs: %v", err)
	}
}

// TestDownLeavesNothing brings up a bare cluster (no controllers, no
// podmpi images), runs a pod with a Secret volume (so that there are a
// network namespace, a veth, a tmpfs Secret mount, a sandbox shm mount, an
// overlay root and kubelet cgroups), takes it down, and compares the
// machine before and after: mounts, links, network namespaces,
// iptables/nftables rules, cgroups and processes. Root, and only with no
// cluster running (it would take it down): PODMPI_CLUSTER_LEAKTEST=1.
func TestDownLeavesNothing(t *testing.T) {
	if os.Getenv("PODMPI_CLUSTER_LEAKTEST") != "1" {
		t.Skip("brings a cluster up and down: PODMPI_CLUSTER_LEAKTEST=1 (make cluster-test runs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	repo, _ := filepath.Abs("../..")
	tool := os.Getenv("PODMPI_CLUSTER_TOOL")
	if tool == "" {
		t.Skip("PODMPI_CLUSTER_TOOL unset (make cluster-test sets it)")
	}
	l := DefaultLayout(repo)
	if _, err := ReadInfo(l); err == nil {
		t.Skip("a cluster runs; this test would take it down")
	}
	before := snapshot(t)
	if tr := l.Traces(); len(tr) > 0 {
		t.Fatalf("traces of a cluster before the test: %v", tr)
	}
	runTool := func(args ...string) string {
		cmd := exec.Command(tool, args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podmpi-cluster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { _ = exec.Command(tool, "down").Run() })
	runTool("up", "--trainer", "none", "--mpi-operator", "none", "--no-images")
	c, err := New(repo, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	pod := `apiVersion: v1
kind: Secret
metadata: {name: leak-secret, namespace: default}
stringData: {key: value}
---
apiVersion: v1
kind: Pod
metadata: {name: leak-pod, namespace: default}
spec:
  automountServiceAccountToken: false
  containers:
  - name: pause
    image: ` + PauseImage + `
    resources: {requests: {cpu: 10m}}
    volumeMounts: [{name: s, mountPath: /s}, {name: e, mountPath: /e}]
  volumes:
  - {name: s, secret: {secretName: leak-secret}}
  - {name: e, emptyDir: {medium: Memory}}
`
	if _, err := c.Kubectl(context.Background(), []byte(pod), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(context.Background(), nil, "wait", "--for=condition=Ready", "pod/leak-pod", "--timeout=120s"); err != nil {
		t.Fatal(err)
	}
	during := l.Traces()
	for _, kind := range []string{"netns ", "mount ", "process ", "cgroup ", "link "} {
		if !slices.ContainsFunc(during, func(s string) bool { return strings.HasPrefix(s, kind) }) {
			t.Errorf("with a pod running, no %q trace was seen: the check could not catch a leak of that kind; traces: %v", kind, during)
		}
	}
	// The registry runs (and is one of the traces down must remove).
	if !slices.ContainsFunc(during, func(s string) bool {
		return strings.HasPrefix(s, "process ") && strings.Contains(s, "/registry serve ")
	}) {
		t.Errorf("no registry process among the cluster's traces while it runs: %v", during)
	}
	if err := httpGet("http://" + RegistryAddr() + "/v2/"); err != nil {
		t.Errorf("the cluster's registry does not answer: %v", err)
	}
	runTool("down")
	after := snapshot(t)
	if tr := l.Traces(); len(tr) > 0 {
		t.Errorf("left after down:\n  %s", strings.Join(tr, "\n  "))
	}
	for kind, items := range after {
		var added []string
		for _, it := range items {
			if !slices.Contains(before[kind], it) {
				added = append(added, it)
			}
		}
		if len(added) > 0 {
			t.Errorf("%s added between before and after: %v", kind, added)
		}
	}
}

// snapshot reads the machine's mounts, links, network namespaces, rules,
// kubelet cgroups and processes of the cluster's programs.
func snapshot(t *testing.T) map[string][]string {
	t.Helper()
	s := map[string][]string{}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 {
				s["mounts"] = append(s["mounts"], unescapeMount(f[4]))
			}
		}
	}
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		// Other work on this machine makes its own veths and bridges;
		// the cluster's are the bridge and veths on it (and any veth it
		// would leave has no peer left, so is counted among new veths
		// only when created meanwhile by the cluster).
		if e.Name() == Bridge || strings.HasPrefix(e.Name(), "veth") {
			s["links"] = append(s["links"], e.Name())
		}
	}
	nss, _ := os.ReadDir(NetnsDir)
	for _, e := range nss {
		if strings.HasPrefix(e.Name(), "cni-") {
			s["netns"] = append(s["netns"], e.Name())
		}
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if out, err := exec.Command(tool).Output(); err == nil {
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, ":") && acceptingBuiltin(l) {
					continue
				}
				if strings.HasPrefix(l, "-A ") || strings.HasPrefix(l, ":") {
					s["rules"] = append(s["rules"], tool+" "+strings.Fields(l)[0]+" "+l)
				}
			}
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		s["nft-tables"] = strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	s["cgroups"] = cgroupRoots()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		exe, err := os.Readlink(filepath.Join("/proc", p.Name(), "exe"))
		if err != nil {
			continue
		}
		base := filepath.Base(exe)
		for _, prog := range []string{"etcd", "containerd", "containerd-shim-runc-v2", "runc", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "coredns", "pause", "registry"} {
			if base == prog {
				s["processes"] = append(s["processes"], base)
			}
		}
	}
	return s
}

// TestKilledRunIsCleaned: `podmpi-cluster run` (what make cluster-test
// uses) brings a cluster up; its whole process group is then killed with
// SIGKILL, as a CI timeout does. Its reaper, in a session of its own, must
// take the cluster down: nothing of it may stay.
func TestKilledRunIsCleaned(t *testing.T) {
	if os.Getenv("PODMPI_CLUSTER_LEAKTEST") != "1" {
		t.Skip("brings a cluster up and down: PODMPI_CLUSTER_LEAKTEST=1 (make cluster-test runs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	tool := os.Getenv("PODMPI_CLUSTER_TOOL")
	if tool == "" {
		t.Skip("PODMPI_CLUSTER_TOOL unset (make cluster-test sets it)")
	}
	repo, _ := filepath.Abs("../..")
	l := DefaultLayout(repo)
	if _, err := ReadInfo(l); err == nil {
		t.Skip("a cluster runs; this test would take it down")
	}
	t.Cleanup(func() { _ = exec.Command(tool, "down").Run() })
	cmd := exec.Command(tool, "run", "--trainer", "none", "--mpi-operator", "none", "--no-images", "--", "sleep", "600")
	cmd.Dir = repo
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := ReadInfo(l); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("podmpi-cluster run exited before the cluster was up: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatal("cluster not up after 5 minutes")
		}
	}
	// The registry is among what the reaper must take down.
	if err := httpGet("http://" + RegistryAddr() + "/v2/"); err != nil {
		t.Errorf("the cluster's registry does not answer before the kill: %v", err)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed := time.Now()
	var tr []string
	for time.Since(killed) < 3*time.Minute {
		if tr = l.Traces(); len(tr) == 0 {
			t.Logf("the reaper took the cluster down %s after the kill", time.Since(killed).Round(100*time.Millisecond))
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("3 minutes after the kill, left:\n  %s", strings.Join(tr, "\n  "))
}

// httpGet wants 200 from url within 5 s.
func httpGet(url string) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// TestDelLinkGone: taking down what an earlier cluster left must not fail on
// a link that is already gone. Deleting one end of a veth pair deletes both,
// and the kernel removes a pod's host end by itself once its namespace is
// freed, between the listing of the bridge's ports and their deletion.
func TestDelLinkGone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates a veth pair)")
	}
	a, b := fmt.Sprintf("pmt%da", os.Getpid()%100000), fmt.Sprintf("pmt%db", os.Getpid()%100000)
	ctx := context.Background()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Skipf("cannot create a veth pair here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", a).Run() })
	if err := delLink(ctx, a); err != nil {
		t.Fatalf("delete %s: %v", a, err)
	}
	if linkExists(a) || linkExists(b) {
		t.Fatalf("after deleting %s: %s exists %v, %s exists %v", a, a, linkExists(a), b, linkExists(b))
	}
	if err := delLink(ctx, b); err != nil {
		t.Errorf("delete %s, gone with its peer: %v", b, err)
	}
}

// acceptingBuiltin reports whether an iptables-save chain line is a
// built-in chain whose policy is ACCEPT (":INPUT ACCEPT [1520:206134]").
// Such a chain filters nothing by itself, and its counters change with
// traffic; iptables-nft creates one when a rule is first put in it (kube-
// router's) and leaves it, empty, when the rules go. Its rules are the -A
// lines, still compared, as are a DROP policy and the cluster's own chains.
func acceptingBuiltin(l string) bool {
	f := strings.Fields(strings.TrimPrefix(l, ":"))
	if len(f) < 2 || f[1] != "ACCEPT" {
		return false
	}
	switch f[0] {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// TestRegistryConfig: the registry serves plain http on the bridge address
// from its storage, and containerd's configuration points its registry
// hosts at the folder whose hosts.toml says http for that address (without
// it containerd would try https and the node could not pull).
func TestRegistryConfig(t *testing.T) {
	cfg := registryConfig("/store")
	for _, want := range []string{"rootdirectory: /store", "addr: " + RegistryAddr(), "delete:\n    enabled: true"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("registry.yml lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "tls:") || strings.Contains(cfg, "auth:") {
		t.Errorf("registry.yml: want plain http without auth:\n%s", cfg)
	}
	hosts := registryHostsTOML()
	for _, want := range []string{`server = "http://` + RegistryAddr() + `"`, `[host."http://` + RegistryAddr() + `"]`, `"pull", "resolve"`} {
		if !strings.Contains(hosts, want) {
			t.Errorf("hosts.toml lacks %q:\n%s", want, hosts)
		}
	}
	l := Layout{State: t.TempDir(), Run: t.TempDir(), Cache: t.TempDir()}
	c := &Cluster{L: l, pki: &PKI{Dir: l.PKI()}}
	if err := c.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	toml, err := os.ReadFile(filepath.Join(l.State, "containerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(toml), `config_path = "`+l.RegistryHosts()+`"`) {
		t.Errorf("containerd.toml does not point config_path at %s:\n%s", l.RegistryHosts(), toml)
	}
	got, err := os.ReadFile(filepath.Join(l.RegistryHosts(), RegistryAddr(), "hosts.toml"))
	if err != nil || string(got) != hosts {
		t.Errorf("%s/%s/hosts.toml: %q, %v; want the registry's", l.RegistryHosts(), RegistryAddr(), got, err)
	}
	if got := RegistryImage("openmpi", "v0.1.0"); got != "10.244.0.1:15000/podmpi/openmpi:v0.1.0" {
		t.Errorf("RegistryImage = %s", got)
	}
}
