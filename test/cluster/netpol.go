package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// NetworkPolicy is enforced by kube-router's firewall alone (no routing, no
// service proxy), running on the host like the other controllers. It builds
// iptables chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) with ipsets
// (KUBE-SRC-*, KUBE-DST-*) and the set match; pod-to-pod traffic on the
// bridge reaches those chains through br_netfilter
// (net.bridge.bridge-nf-call-iptables=1). Why kube-router and not
// kube-network-policies: the latter sends packets to user space with the
// nftables queue statement, which this kernel is built without; kube-router
// needs only iptables matches this kernel has. kube-router v2.1.0 has
// reported security flaws: it is acceptable here only because this cluster is
// offline, single-node and torn down after the tests.

// kubeRouterRBAC is the ClusterRole of kube-router's own firewall DaemonSet
// manifest (what it reads), bound to a ServiceAccount whose token it uses.
const kubeRouterRBAC = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-router
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: podmpi-kube-router
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [list, get, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, get, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, get, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: podmpi-kube-router
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: podmpi-kube-router
subjects:
- kind: ServiceAccount
  name: kube-router
  namespace: kube-system
`

// bridgeNFSysctl makes bridged IPv4 traffic traverse iptables.
const bridgeNFSysctl = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// EnsureKubeRouter starts kube-router's firewall (building it if needed).
func (c *Cluster) EnsureKubeRouter(ctx context.Context) error {
	bin, err := c.B.KubeRouter(ctx, c.Pins.KubeRouter)
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		return errors.New("kube-router needs the ipset command (Debian package ipset; scripts/cluster-deps.sh installs it)")
	}
	if err := ensureBridgeNF(); err != nil {
		return err
	}
	dir := c.ctrlDir("kube-router")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if c.InstalledVersion("kube-router") != c.Pins.KubeRouter {
		if _, err := c.Kubectl(ctx, []byte(kubeRouterRBAC), "apply", "--server-side", "--force-conflicts", "--field-manager", "podmpi-cluster", "-f", "-"); err != nil {
			return err
		}
		if err := c.serviceAccountKubeconfig(ctx, filepath.Join(dir, "kubeconfig"), "kube-system", "kube-router"); err != nil {
			return err
		}
	}
	p := c.controllerProc("kube-router", bin, []string{
		"--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false", "--enable-ipv4=true", "--enable-ipv6=false",
		"--hostname-override", NodeName,
		"--service-cluster-ip-range", ServiceCIDR,
		"--health-port", strconv.Itoa(KubeRouterHealth),
		"--metrics-port", "0",
		"--v", "1",
	}, fmt.Sprintf("http://127.0.0.1:%d/healthz", KubeRouterHealth), "")
	c.logf("== kube-router %s (NetworkPolicy firewall)", c.Pins.KubeRouter)
	if err := p.Start(ctx); err != nil {
		return err
	}
	return c.setVersion("kube-router", c.Pins.KubeRouter)
}

// ensureBridgeNF turns on br_netfilter's iptables call for bridged IPv4
// traffic (it is built into this kernel; nothing to load).
func ensureBridgeNF() error {
	b, err := os.ReadFile(bridgeNFSysctl)
	if err != nil {
		return fmt.Errorf("NetworkPolicy on the bridge needs br_netfilter (%s): %w", bridgeNFSysctl, err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	return os.WriteFile(bridgeNFSysctl, []byte("1\n"), 0o644)
}

// ipsetName reports whether an ipset belongs to the cluster (kube-router's
// prefixes).
func ipsetName(name string) bool {
	for _, p := range []string{"KUBE-SRC-", "KUBE-DST-", "KUBE-NAMED-", "kube-router-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// clusterIPSets lists the cluster's ipsets (none when ipset is missing).
func clusterIPSets(ctx context.Context) []string {
	if _, err := exec.LookPath("ipset"); err != nil {
		return nil
	}
	out, err := exec.CommandContext(ctx, "ipset", "list", "-n").Output()
	if err != nil {
		return nil
	}
	var sets []string
	for _, n := range strings.Fields(string(out)) {
		if ipsetName(n) {
			sets = append(sets, n)
		}
	}
	return sets
}

// removeIPSets destroys the cluster's ipsets (after the rules that name
// them are gone).
func removeIPSets(ctx context.Context) error {
	var errs []error
	for _, s := range clusterIPSets(ctx) {
		if _, err := run(ctx, "ipset", "destroy", s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
