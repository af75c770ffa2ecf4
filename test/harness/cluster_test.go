package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const anyUID = 1000680000 // OpenShift-style uid with no passwd entry

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// run runs a command in a pod as the arbitrary uid and fails the test if it
// could not run to an exit.
func run(t *testing.T, c *Cluster, pod int, name string, args ...string) (string, string, int) {
	t.Helper()
	o, e, code, err := c.Run(testCtx(t, 15*time.Second), pod, anyUID, 0, nil, name, args...)
	if err != nil {
		t.Fatalf("%s %v in pod %d: %v (stderr %q)", name, args, pod, err, e)
	}
	return o, e, code
}

// getentIPs resolves name from pod with `getent ahostsv4` (the search list
// applies) and returns the sorted distinct addresses, nil when it does not resolve.
func getentIPs(t *testing.T, c *Cluster, pod int, name string) []string {
	t.Helper()
	o, _, code := run(t, c, pod, "getent", "ahostsv4", name)
	if code != 0 {
		return nil
	}
	var ips []string
	for _, l := range strings.Split(o, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !slices.Contains(ips, f[0]) {
			ips = append(ips, f[0])
		}
	}
	sort.Strings(ips)
	return ips
}

func srvTargets(t *testing.T, c *Cluster, pod int) []string {
	t.Helper()
	if _, err := exec.LookPath("dig"); err != nil {
		t.Skip("dig not installed (apt-get install -y bind9-dnsutils)")
	}
	o, _, code := run(t, c, pod, "dig", "+short", "+time=2", "+tries=2", "SRV", c.SRVName())
	if code != 0 {
		t.Fatalf("dig SRV exit %d: %s", code, o)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(o), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

func ips(c *Cluster, pods ...int) []string {
	var out []string
	for _, i := range pods {
		out = append(out, c.Pod(i).IP.String())
	}
	sort.Strings(out)
	return out
}

func TestClusterDNSAndPods(t *testing.T) {
	passwd, _ := os.ReadFile("/etc/passwd")
	c := StartT(t, Config{Job: "tj", ExtraIface: true, Pods: []PodSpec{
		{Hostname: "tj-launcher-0-0", Publish: true},
		{Hostname: "tj-node-0-0", Aliases: []string{"tj-worker-0"}, Publish: true},
		{Hostname: "tj-node-0-1", Publish: true, EtcFiles: map[string]string{
			"passwd": string(passwd) + "mpiuser:x:1000680000:0:MPI user:/tmp:/bin/sh\n"}},
		{Hostname: "tj-node-0-2", Publish: false}, // starts late
	}})
	p1 := c.Pod(1)

	t.Run("pod_info", func(t *testing.T) {
		if p1.ShortName != "tj-node-0-0.tj" || p1.FQDN != "tj-node-0-0.tj.default.svc.cluster.local" ||
			!slices.Equal(p1.Aliases, []string{"tj-worker-0.tj.default.svc.cluster.local"}) ||
			p1.Role != RoleWorker || !p1.Published || c.Pod(3).Published {
			t.Errorf("Pod(1) = %+v", p1)
		}
		if !c.prefix.Contains(p1.IP) || p1.IP == c.Pod(2).IP || !slices.Equal(c.Workers(), []int{1, 2, 3}) {
			t.Errorf("addresses/workers: %v %v %v", p1.IP, c.Pod(2).IP, c.Workers())
		}
	})
	t.Run("etc_files", func(t *testing.T) {
		o, _, _ := run(t, c, 1, "cat", "/etc/resolv.conf")
		want := "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver " + c.HubIP().String() + "\noptions ndots:5\n"
		if o != want {
			t.Errorf("resolv.conf = %q, want %q", o, want)
		}
		o, _, _ = run(t, c, 1, "cat", "/etc/hosts")
		if !strings.HasSuffix(o, p1.IP.String()+"\t"+p1.FQDN+"\t"+p1.Hostname+"\n") {
			t.Errorf("hosts lacks the kubelet-style own entry:\n%s", o)
		}
	})
	t.Run("hostname", func(t *testing.T) {
		if o, _, _ := run(t, c, 1, "hostname"); strings.TrimSpace(o) != "tj-node-0-0" {
			t.Errorf("hostname in pod 1 = %q", o)
		}
		if o, _, _ := run(t, c, 1, "hostname", "-f"); strings.TrimSpace(o) != p1.FQDN {
			t.Errorf("hostname -f in pod 1 = %q, want %q", o, p1.FQDN)
		}
		if h, _ := os.Hostname(); h == "tj-node-0-0" {
			t.Errorf("pod hostname leaked into the root UTS namespace")
		}
	})
	t.Run("short_name", func(t *testing.T) {
		o, _, code := run(t, c, 0, "getent", "hosts", p1.ShortName)
		if code != 0 || strings.Fields(o)[0] != p1.IP.String() || strings.Fields(o)[1] != p1.FQDN {
			t.Errorf("getent hosts %s from pod 0: code %d %q, want %s %s", p1.ShortName, code, o, p1.IP, p1.FQDN)
		}
	})
	t.Run("fqdn_and_alias", func(t *testing.T) {
		for _, name := range []string{p1.FQDN, "tj-worker-0.tj", p1.Aliases[0], "tj-node-0-0.tj.default.svc"} {
			if got := getentIPs(t, c, 2, name); !slices.Equal(got, []string{p1.IP.String()}) {
				t.Errorf("%s from pod 2 resolves to %v, want %s", name, got, p1.IP)
			}
		}
	})
	t.Run("headless_service", func(t *testing.T) {
		want := ips(c, 1, 2) // published workers only
		if got := getentIPs(t, c, 0, "tj"); !slices.Equal(got, want) {
			t.Errorf("service tj resolves to %v, want %v", got, want)
		}
	})
	t.Run("srv", func(t *testing.T) {
		got := srvTargets(t, c, 0)
		want := []string{"0 50 2222 tj-node-0-0.tj.default.svc.cluster.local.", "0 50 2222 tj-node-0-1.tj.default.svc.cluster.local."}
		if !slices.Equal(got, want) {
			t.Errorf("SRV = %q, want %q", got, want)
		}
	})
	t.Run("ptr", func(t *testing.T) {
		if _, err := exec.LookPath("dig"); err != nil {
			t.Skip("dig not installed")
		}
		o, _, _ := run(t, c, 0, "dig", "+short", "+time=2", "-x", p1.IP.String())
		if strings.TrimSpace(o) != p1.FQDN+"." {
			t.Errorf("PTR of %s = %q, want %s.", p1.IP, o, p1.FQDN)
		}
	})
	t.Run("bare_hostname_only_resolves_locally", func(t *testing.T) {
		if _, _, code := run(t, c, 1, "getent", "hosts", "tj-launcher-0-0"); code != 2 {
			t.Errorf("bare launcher hostname from pod 1: exit %d, want 2 (not found, as in Kubernetes)", code)
		}
		if _, _, code := run(t, c, 0, "getent", "hosts", "tj-launcher-0-0"); code != 0 {
			t.Errorf("own bare hostname in pod 0 (from /etc/hosts): exit %d, want 0", code)
		}
	})
	t.Run("no_egress", func(t *testing.T) {
		if o, _, _ := run(t, c, 0, "ip", "route", "show", "default"); strings.TrimSpace(o) != "" {
			t.Errorf("pod has a default route: %q", o)
		}
		_, e, code := run(t, c, 0, "ip", "route", "get", "1.1.1.1")
		if code == 0 || !strings.Contains(e, "unreachable") {
			t.Errorf("ip route get 1.1.1.1: exit %d %q, want unreachable", code, e)
		}
		if _, _, code := run(t, c, 0, "getent", "hosts", "example.com"); code != 2 {
			t.Errorf("example.com resolves from a pod (exit %d); dnsmasq must not forward", code)
		}
	})
	t.Run("uid_and_env", func(t *testing.T) {
		if o, _, _ := run(t, c, 1, "id"); strings.TrimSpace(o) != "uid=1000680000 gid=0(root) groups=0(root)" {
			t.Errorf("id = %q", o)
		}
		o, _, code, err := c.Run(testCtx(t, 10*time.Second), 1, anyUID, 0, []string{"FOO=bar baz"}, "sh", "-c", `echo "$FOO|${HOME-unset}|$PATH"`)
		if err != nil || code != 0 || strings.TrimSpace(o) != "bar baz|unset|"+strings.TrimPrefix(DefaultPath, "PATH=") {
			t.Errorf("env: %q code %d err %v", o, code, err)
		}
		if o, _, _, _ := c.Run(testCtx(t, 10*time.Second), 1, -1, -1, nil, "id", "-u"); strings.TrimSpace(o) != "0" {
			t.Errorf("uid -1 runs as %q, want root", o)
		}
		if _, _, code := run(t, c, 1, "sh", "-c", "exit 7"); code != 7 {
			t.Errorf("exit code %d, want 7", code)
		}
	})
	t.Run("etc_files_per_pod", func(t *testing.T) {
		if o, _, code := run(t, c, 2, "id", "-un"); code != 0 || strings.TrimSpace(o) != "mpiuser" {
			t.Errorf("pod 2 with its own passwd: id -un = %q exit %d, want mpiuser", o, code)
		}
		if _, _, code := run(t, c, 1, "id", "-un"); code == 0 {
			t.Errorf("pod 1 sees pod 2's passwd entry")
		}
	})
	t.Run("extra_iface", func(t *testing.T) {
		for _, pod := range []int{0, 2} {
			o, _, _ := run(t, c, pod, "ip", "-4", "-o", "addr", "show", "dev", "net1")
			if !strings.Contains(o, ExtraIfaceAddr) {
				t.Errorf("pod %d net1: %q, want %s", pod, o, ExtraIfaceAddr)
			}
		}
	})
	t.Run("late_publish", func(t *testing.T) {
		p3 := c.Pod(3)
		if got := getentIPs(t, c, 0, p3.ShortName); got != nil {
			t.Fatalf("unpublished %s resolves to %v", p3.ShortName, got)
		}
		ctx := testCtx(t, 15*time.Second)
		if err := c.Publish(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if !c.Pod(3).Published {
			t.Errorf("Pod(3).Published false after Publish")
		}
		if got := getentIPs(t, c, 0, p3.ShortName); !slices.Equal(got, []string{p3.IP.String()}) {
			t.Errorf("after Publish %s resolves to %v, want %s", p3.ShortName, got, p3.IP)
		}
		if got, want := getentIPs(t, c, 0, "tj"), ips(c, 1, 2, 3); !slices.Equal(got, want) {
			t.Errorf("service after Publish = %v, want %v", got, want)
		}
		if _, err := exec.LookPath("dig"); err == nil {
			if got := srvTargets(t, c, 0); len(got) != 3 || !strings.Contains(strings.Join(got, ","), "2222 "+p3.FQDN+".") {
				t.Errorf("SRV after Publish = %q", got)
			}
		}
		if err := c.Unpublish(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := getentIPs(t, c, 0, p1.ShortName); got != nil {
			t.Errorf("after Unpublish %s still resolves to %v", p1.ShortName, got)
		}
		if got, want := getentIPs(t, c, 0, "tj"), ips(c, 2, 3); !slices.Equal(got, want) {
			t.Errorf("service after Unpublish = %v, want %v", got, want)
		}
	})
}

// helperRaceEnv stops a -race helper from sleeping 1 s at exit.
const helperRaceEnv = "GORACE=atexit_sleep_ms=0"

// startListener starts the test binary's TCP helper in pod on ports and waits
// until it prints "ready".
func startListener(t *testing.T, c *Cluster, pod int, ports ...int) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var ps []string
	for _, p := range ports {
		ps = append(ps, strconv.Itoa(p))
	}
	p, err := c.Start(t.Context(), pod, -1, -1, []string{helperRaceEnv, "HARNESS_HELPER=listen", "HARNESS_PORTS=" + strings.Join(ps, ",")}, "", exe)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(p.Log)
		if strings.Contains(string(b), "ready") {
			return p
		}
		if strings.Contains(string(b), "error") || time.Now().After(deadline) {
			t.Fatalf("listener in pod %d not ready: %q", pod, b)
		}
		select {
		case <-p.Done():
			t.Fatalf("listener exited: %v; log %q", p.Wait(), b)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dial connects from pod to addr with the helper; returns its one-line verdict.
func dial(t *testing.T, c *Cluster, pod int, addr string, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	exe, _ := os.Executable()
	start := time.Now()
	o, e, _, err := c.Run(testCtx(t, 15*time.Second), pod, -1, -1,
		[]string{helperRaceEnv, "HARNESS_HELPER=dial", "HARNESS_ADDR=" + addr, "HARNESS_TIMEOUT=" + timeout.String()}, exe)
	if err != nil {
		t.Fatalf("dial helper: %v %s", err, e)
	}
	return strings.TrimSpace(o), time.Since(start)
}

// resolve looks name up from pod with the helper binary (Go's resolver,
// the pod's resolv.conf) and returns what it printed.
func resolve(t *testing.T, c *Cluster, pod int, name string, timeout time.Duration) string {
	t.Helper()
	exe, _ := os.Executable()
	o, e, _, err := c.Run(testCtx(t, 15*time.Second), pod, -1, -1,
		[]string{helperRaceEnv, "HARNESS_HELPER=resolve", "HARNESS_NAME=" + name, "HARNESS_TIMEOUT=" + timeout.String()}, exe)
	if err != nil {
		t.Fatalf("resolve helper: %v %s", err, e)
	}
	return strings.TrimSpace(o)
}

func TestDropTCPAndProcesses(t *testing.T) {
	c := StartT(t, Config{Job: "dj", Pods: []PodSpec{
		{Hostname: "dj-launcher", Publish: true},
		{Hostname: "dj-worker-0", Publish: true},
	}})
	ip := c.Pod(1).IP.String()
	ln := startListener(t, c, 1, 7001, 7002)
	if !slices.Contains(c.PIDs(1), ln.PID()) || slices.Contains(c.PIDs(0), ln.PID()) {
		t.Errorf("listener pid %d: PIDs(1)=%v PIDs(0)=%v", ln.PID(), c.PIDs(1), c.PIDs(0))
	}

	t.Run("drop_tcp", func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("nft not installed (apt-get install -y nftables)")
		}
		if v, _ := dial(t, c, 0, ip+":7001", 2*time.Second); v != "ok hello" {
			t.Fatalf("before DropTCP: %q", v)
		}
		if err := c.DropTCP(1, 7001); err != nil {
			t.Fatal(err)
		}
		v, took := dial(t, c, 0, ip+":7001", time.Second)
		if v != "timeout" || took < 900*time.Millisecond {
			t.Errorf("dropped port: %q after %v, want timeout after ~1s", v, took)
		}
		if v, _ := dial(t, c, 0, ip+":7002", 2*time.Second); v != "ok hello" {
			t.Errorf("other port after DropTCP: %q", v)
		}
		if v, _ := dial(t, c, 0, ip+":7003", 2*time.Second); !strings.Contains(v, "connection refused") {
			t.Errorf("closed port: %q, want connection refused", v)
		}
		if err := c.RestoreTCP(1); err != nil {
			t.Fatal(err)
		}
		if v, _ := dial(t, c, 0, ip+":7001", 2*time.Second); v != "ok hello" {
			t.Errorf("after RestoreTCP: %q", v)
		}
		if err := c.DropTCP(1, 0); err == nil {
			t.Errorf("DropTCP port 0 accepted")
		}
	})
	t.Run("drop_dns", func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("nft not installed (apt-get install -y nftables)")
		}
		name := c.Pod(1).FQDN
		if v := resolve(t, c, 0, name, 2*time.Second); v != "ok "+ip {
			t.Fatalf("before DropDNS: %q", v)
		}
		if err := c.DropDNS(0); err != nil {
			t.Fatal(err)
		}
		if v := resolve(t, c, 0, name, time.Second); v != "timeout" {
			t.Errorf("with DNS dropped: %q, want timeout", v)
		}
		if v := resolve(t, c, 1, name, 2*time.Second); v != "ok "+ip {
			t.Errorf("another pod with DNS dropped in pod 0: %q", v)
		}
		if err := c.RestoreDNS(0); err != nil {
			t.Fatal(err)
		}
		if v := resolve(t, c, 0, name, 2*time.Second); v != "ok "+ip {
			t.Errorf("after RestoreDNS: %q", v)
		}
	})
	t.Run("stop", func(t *testing.T) {
		if err := ln.Stop(); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(c.PIDs(1), ln.PID()) {
			t.Errorf("pid %d still in pod after Stop", ln.PID())
		}
		if ln.ExitCode() != 0 {
			t.Errorf("listener exit code %d, want 0 (it exits on SIGTERM)", ln.ExitCode())
		}
	})
	t.Run("stop_escalates_to_kill", func(t *testing.T) {
		p, err := c.Start(t.Context(), 1, anyUID, 0, nil, "", "sh", "-c", `trap "" TERM; echo up; while :; do sleep 0.1; done`)
		if err != nil {
			t.Fatal(err)
		}
		waitLog(t, p, "up")
		start := time.Now()
		if err := p.StopGrace(300 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
			t.Errorf("StopGrace took %v", took)
		}
		if ws := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("process ended with %v, want SIGKILL", p.Cmd.ProcessState)
		}
	})
	t.Run("run_deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, _, err := c.Run(ctx, 0, anyUID, 0, nil, "sleep", "30")
		if err == nil || time.Since(start) > 3*time.Second {
			t.Errorf("Run past deadline: err %v after %v", err, time.Since(start))
		}
	})
	t.Run("bad_args", func(t *testing.T) {
		if _, _, _, err := c.Run(t.Context(), 9, -1, -1, nil, "true"); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("pod 9: %v", err)
		}
		if _, err := c.Start(t.Context(), 0, -1, -1, []string{"X"}, "", "true"); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
			t.Errorf("bad env: %v", err)
		}
		if _, err := c.Start(t.Context(), 0, -1, -1, nil, "/nonexistent-dir/x.log", "true"); err == nil {
			t.Errorf("unwritable log accepted")
		}
	})
	t.Run("kill_pod", func(t *testing.T) {
		p, err := c.Start(t.Context(), 1, anyUID, 0, nil, "", "sleep", "300")
		if err != nil {
			t.Fatal(err)
		}
		// A daemon that escaped its parent: not tracked, only in the namespace.
		if _, _, code := run(t, c, 1, "sh", "-c", "setsid sleep 301 </dev/null >/dev/null 2>&1 &"); code != 0 {
			t.Fatalf("daemonize: exit %d", code)
		}
		if n := len(c.PIDs(1)); n < 2 {
			t.Fatalf("PIDs(1) = %v, want the sleeps", c.PIDs(1))
		}
		if err := c.KillPod(1); err != nil {
			t.Fatal(err)
		}
		if pids := c.PIDs(1); len(pids) != 0 {
			t.Errorf("PIDs(1) after KillPod = %v", pids)
		}
		if err := p.WaitContext(testCtx(t, 5*time.Second)); err == nil {
			t.Errorf("killed sleep exited cleanly")
		}
		if got := getentIPs(t, c, 0, c.Pod(1).ShortName); len(got) != 1 {
			t.Errorf("DNS of a killed pod must stay (records are the harness's): %v", got)
		}
	})
}

func waitLog(t *testing.T, p *Proc, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(p.Log); strings.Contains(string(b), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%q not in %s within 10s", want, p.Log)
}

// clusterTraces is what must be gone after Close.
type clusterTraces struct {
	netns, etcDirs, utsFiles []string
	stateDir                 string
	dnsPID                   int
}

func tracesOf(c *Cluster) clusterTraces {
	tr := clusterTraces{netns: []string{c.HubNetNS()}, stateDir: c.StateDir()}
	for i := range c.NumPods() {
		p := c.Pod(i)
		tr.netns = append(tr.netns, p.NetNS)
		tr.etcDirs = append(tr.etcDirs, filepath.Join(etcNetns, p.NetNS))
		tr.utsFiles = append(tr.utsFiles, p.UTSFile)
	}
	c.mu.Lock()
	if c.dns != nil {
		tr.dnsPID = c.dns.cmd.Process.Pid
	}
	c.mu.Unlock()
	return tr
}

func checkGone(t *testing.T, tr clusterTraces) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v %s", err, out)
	}
	for _, n := range tr.netns {
		if strings.Contains(string(out), n) {
			t.Errorf("netns %s still listed:\n%s", n, out)
		}
	}
	mounts, err := Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if slices.Contains(tr.utsFiles, m) || strings.HasPrefix(m, tr.stateDir+"/") {
			t.Errorf("mount %s left", m)
		}
	}
	for _, p := range append(append([]string{tr.stateDir}, tr.etcDirs...), tr.utsFiles...) {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
	if tr.dnsPID > 0 {
		if err := syscall.Kill(tr.dnsPID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("dnsmasq pid %d still exists (kill 0: %v)", tr.dnsPID, err)
		}
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("harness: needs root and dnsmasq: %v", err)
	}
	c, err := Start(testCtx(t, 30*time.Second), Config{Job: "cj", LogDir: t.TempDir(), Pods: []PodSpec{
		{Hostname: "cj-launcher", Publish: true}, {Hostname: "cj-worker-0", Publish: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tr := tracesOf(c)
	if tr.dnsPID == 0 {
		t.Fatal("no dnsmasq")
	}
	// A tracked process that ignores SIGTERM (needs the SIGKILL step).
	stubborn, err := c.Start(context.Background(), 0, anyUID, 0, nil, "", "sh", "-c", `trap "" TERM; echo up; while :; do sleep 0.1; done`)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, stubborn, "up")
	// A started, never-waited Command.
	cmd := c.Command(context.Background(), 1, anyUID, 0, nil, "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A daemon outside any process group we know.
	if _, _, code := run(t, c, 1, "sh", "-c", "setsid sleep 302 </dev/null >/dev/null 2>&1 &"); code != 0 {
		t.Fatal("daemonize failed")
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Close took %v, want < 10s", took)
	}
	t.Logf("Close took %v", time.Since(start))
	checkGone(t, tr)
	select {
	case <-stubborn.Done():
	default:
		t.Errorf("stubborn process %d survived Close", stubborn.PID())
	}
	if err := cmd.Wait(); err == nil {
		t.Errorf("untracked Command exited cleanly; want killed")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.Start(t.Context(), 0, -1, -1, nil, "", "true"); err == nil {
		t.Errorf("Start on a closed cluster succeeded")
	}
	if err := c.Command(t.Context(), 0, -1, -1, nil, "true").Run(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Command on a closed cluster: %v", err)
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("harness: needs root and dnsmasq: %v", err)
	}
	before, _ := os.ReadDir(stateRoot)
	// Invalid config: nothing may be created.
	if _, err := Start(t.Context(), Config{Job: "Bad"}); err == nil {
		t.Fatal("bad config accepted")
	}
	after, _ := os.ReadDir(stateRoot)
	if len(after) > len(before) {
		t.Errorf("state dirs grew on a rejected config: %d -> %d", len(before), len(after))
	}
}

func randPrefix(t *testing.T) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "pmt" + hex.EncodeToString(b[:]) + "-"
}

func TestCleanupStale(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("harness: needs root and dnsmasq: %v", err)
	}
	prefix := randPrefix(t)
	// Leftovers of a "crashed" run: a namespace with our prefix, with a process
	// in it and an /etc/netns dir, owned by no cluster.
	orphan := prefix + "orphan"
	if out, err := exec.Command("ip", "netns", "add", orphan).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", orphan).Run() })
	_ = os.MkdirAll(filepath.Join(etcNetns, orphan), 0o755)
	sleeper := exec.Command("ip", "netns", "exec", orphan, "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	sleeperDone := make(chan error, 1)
	go func() { sleeperDone <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })

	// A new run starts fine next to the leftovers.
	live := StartT(t, Config{Job: "lj", Prefix: prefix, Pods: []PodSpec{{Hostname: "lj-0", Publish: true}, {Hostname: "lj-1", Publish: true}}})
	// A cluster whose owner "died": same prefix, meta.json names a dead owner.
	dead, err := Start(testCtx(t, 30*time.Second), Config{Job: "dj", Prefix: prefix, LogDir: t.TempDir(),
		Pods: []PodSpec{{Hostname: "dj-0", Publish: true}, {Hostname: "dj-1", Publish: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	if _, err := dead.Start(t.Context(), 1, anyUID, 0, nil, "", "sleep", "300"); err != nil {
		t.Fatal(err)
	}
	deadTraces := tracesOf(dead)
	metaPath := filepath.Join(dead.StateDir(), "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	m.OwnerPID, m.OwnerStart = gone.Process.Pid, 1
	b, _ = json.Marshal(m)
	if err := os.WriteFile(metaPath, b, 0o644); err != nil {
		t.Fatal(err)
	}

	removed, err := CleanupStale(prefix)
	if err != nil {
		t.Fatalf("CleanupStale: %v (removed %v)", err, removed)
	}
	t.Logf("removed %v", removed)
	for _, want := range []string{filepath.Join(netnsRun, orphan), filepath.Join(etcNetns, orphan), dead.StateDir(), dead.HubNetNS()} {
		if !slices.Contains(removed, want) {
			t.Errorf("CleanupStale did not report %s", want)
		}
	}
	checkGone(t, deadTraces)
	if _, err := os.Lstat(filepath.Join(netnsRun, orphan)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan netns left: %v", err)
	}
	select {
	case <-sleeperDone:
	case <-time.After(5 * time.Second):
		t.Errorf("process in the orphan netns survived")
	}
	// The live cluster is untouched and still answers.
	if got := getentIPs(t, live, 0, live.Pod(1).ShortName); !slices.Equal(got, []string{live.Pod(1).IP.String()}) {
		t.Errorf("live cluster broken by CleanupStale: %v", got)
	}
	for _, r := range removed {
		if strings.Contains(r, live.ID()) {
			t.Errorf("CleanupStale removed %s of a live cluster", r)
		}
	}
	// Closing the cleaned-up cluster is harmless.
	if err := dead.Close(); err != nil {
		t.Errorf("Close after CleanupStale: %v", err)
	}
	if _, err := CleanupStale("bad/prefix"); err == nil {
		t.Errorf("bad prefix accepted")
	}
}

func TestParallelClusters(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("harness: needs root and dnsmasq: %v", err)
	}
	// Two clusters with the same job, names and subnet must not see each other.
	cfg := Config{Job: "pj", Subnet: "10.251.250.0/24", Pods: []PodSpec{{Hostname: "pj-0", Publish: true}, {Hostname: "pj-1", Publish: true}}}
	a := StartT(t, cfg)
	cfg.Pods = []PodSpec{{Hostname: "pj-0", Publish: true}, {Hostname: "pj-1", Publish: false}}
	b := StartT(t, cfg)
	if a.Pod(0).NetNS == b.Pod(0).NetNS {
		t.Fatal("same netns name")
	}
	if got := getentIPs(t, a, 0, "pj-1.pj"); len(got) != 1 {
		t.Errorf("cluster a: pj-1.pj = %v", got)
	}
	if got := getentIPs(t, b, 0, "pj-1.pj"); got != nil {
		t.Errorf("cluster b sees cluster a's record: %v", got)
	}
	if o, _, _ := run(t, b, 1, "hostname"); strings.TrimSpace(o) != "pj-1" {
		t.Errorf("hostname %q", o)
	}
}
