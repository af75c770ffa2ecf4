package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// certs lists every certificate the cluster's components use.
func certs() []Cert {
	gw := net.ParseIP(Gateway)
	return []Cert{
		{Name: "apiserver", CN: "kube-apiserver", IPs: []net.IP{gw, net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)},
			DNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain}},
		{Name: "apiserver-kubelet-client", CN: "kube-apiserver-kubelet-client", Orgs: []string{"system:masters"}},
		{Name: "admin", CN: "podmpi-admin", Orgs: []string{"system:masters"}},
		{Name: "controller-manager", CN: "system:kube-controller-manager"},
		{Name: "scheduler", CN: "system:kube-scheduler"},
		{Name: "kubelet-client", CN: "system:node:" + NodeName, Orgs: []string{"system:nodes"}},
		{Name: "kubelet-serving", CN: "system:node:" + NodeName, IPs: []net.IP{gw}, DNS: []string{NodeName}},
		{Name: "coredns", CN: "system:podmpi-coredns"},
	}
}

// APIServerURL is where every client reaches the API server.
func APIServerURL() string {
	return "https://" + net.JoinHostPort(Gateway, strconv.Itoa(APIServerPort))
}

func (c *Cluster) kubeconfig(name string) string {
	return filepath.Join(c.L.PKI(), name+".kubeconfig")
}

// writeKubeconfigs writes one kubeconfig per client certificate.
func (c *Cluster) writeKubeconfigs() error {
	for _, k := range []struct{ file, user, cert string }{
		{c.L.AdminKubeconfig(), "podmpi-admin", "admin"},
		{c.kubeconfig("controller-manager"), "system:kube-controller-manager", "controller-manager"},
		{c.kubeconfig("scheduler"), "system:kube-scheduler", "scheduler"},
		{c.kubeconfig("kubelet"), "system:node:" + NodeName, "kubelet-client"},
		{c.kubeconfig("coredns"), "system:podmpi-coredns", "coredns"},
	} {
		if err := c.pki.Kubeconfig(k.file, APIServerURL(), k.user, k.cert, ""); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) bin(name string) string {
	return filepath.Join(c.L.Bin(), "kubernetes-"+c.Pins.Kubernetes, name)
}

// httpHealth returns a health check that GETs url and wants 200, with the
// cluster CA and admin certificate for https (or no verification when the
// server's certificate is self-signed, as the controller-manager's is).
func (c *Cluster) httpHealth(url string, verify bool) func(context.Context) error {
	return func(ctx context.Context) error {
		client := c.httpClient(verify)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := client.Do(req.WithContext(rctx))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

func (c *Cluster) httpClient(verify bool) *http.Client {
	cfg := &tls.Config{InsecureSkipVerify: !verify} //nolint:gosec // only for daemons with self-signed serving certificates on loopback
	if verify {
		pool := x509.NewCertPool()
		if b, err := os.ReadFile(c.pki.CAFile()); err == nil {
			pool.AppendCertsFromPEM(b)
		}
		cfg.RootCAs = pool
		if kp, err := tls.LoadX509KeyPair(c.pki.CertFile("admin"), c.pki.KeyFile("admin")); err == nil {
			cfg.Certificates = []tls.Certificate{kp}
		}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 5 * time.Second}
}

func (c *Cluster) proc(name, path string, args []string, health func(context.Context) error, start time.Duration) *Process {
	return &Process{
		Name: name, Path: path, Args: args, Health: health,
		StartTimeout: start, StopTimeout: 15 * time.Second,
		Dir: c.L.Logs(), Self: c.Self,
	}
}

// corePlane is the control plane, containerd, CoreDNS and the kubelet, in
// start order.
func (c *Cluster) corePlane() []*Process {
	pki := c.pki
	etcd := c.proc("etcd", "/usr/bin/etcd", []string{
		"--name", "podmpi",
		"--data-dir", c.L.EtcdData(),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdPeerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdPeerPort),
		"--initial-cluster", fmt.Sprintf("podmpi=http://127.0.0.1:%d", EtcdPeerPort),
		"--quota-backend-bytes", strconv.Itoa(2 << 30),
		"--logger", "zap",
	}, c.httpHealth(fmt.Sprintf("http://127.0.0.1:%d/health", EtcdClientPort), false), 30*time.Second)

	apiserver := c.proc("kube-apiserver", c.bin("kube-apiserver"), []string{
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
		"--bind-address", Gateway,
		"--advertise-address", Gateway,
		"--secure-port", strconv.Itoa(APIServerPort),
		"--tls-cert-file", pki.CertFile("apiserver"),
		"--tls-private-key-file", pki.KeyFile("apiserver"),
		"--client-ca-file", pki.CAFile(),
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc." + ClusterDomain,
		"--service-account-key-file", filepath.Join(pki.Dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki.Dir, "sa.key"),
		"--service-cluster-ip-range", ServiceCIDR,
		"--kubelet-client-certificate", pki.CertFile("apiserver-kubelet-client"),
		"--kubelet-client-key", pki.KeyFile("apiserver-kubelet-client"),
		"--kubelet-certificate-authority", pki.CAFile(),
		// The node's name does not resolve on this machine.
		"--kubelet-preferred-address-types", "InternalIP",
		// No kube-proxy: the API server calls webhook Services' endpoints
		// itself (the controllers listen on the host, behind selector-less
		// Services).
		"--enable-aggregator-routing=true",
		"--allow-privileged=false",
		"--profiling=false",
		"--event-ttl", "1h",
	}, c.httpHealth(APIServerURL()+"/readyz", true), 90*time.Second)

	kcm := c.proc("kube-controller-manager", c.bin("kube-controller-manager"), []string{
		"--kubeconfig", c.kubeconfig("controller-manager"),
		"--authentication-kubeconfig", c.kubeconfig("controller-manager"),
		"--authorization-kubeconfig", c.kubeconfig("controller-manager"),
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(KCMPort),
		"--root-ca-file", pki.CAFile(),
		"--service-account-private-key-file", filepath.Join(pki.Dir, "sa.key"),
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file", pki.CAFile(),
		"--cluster-signing-key-file", filepath.Join(pki.Dir, "ca.key"),
		"--leader-elect=false",
		"--allocate-node-cidrs=false",
		"--profiling=false",
	}, c.httpHealth(fmt.Sprintf("https://127.0.0.1:%d/healthz", KCMPort), false), 60*time.Second)

	sched := c.proc("kube-scheduler", c.bin("kube-scheduler"), []string{
		"--kubeconfig", c.kubeconfig("scheduler"),
		"--authentication-kubeconfig", c.kubeconfig("scheduler"),
		"--authorization-kubeconfig", c.kubeconfig("scheduler"),
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(SchedulerPort),
		"--leader-elect=false",
		"--profiling=false",
	}, c.httpHealth(fmt.Sprintf("https://127.0.0.1:%d/healthz", SchedulerPort), false), 60*time.Second)

	containerd := c.proc("containerd", "/usr/bin/containerd", []string{
		"--config", filepath.Join(c.L.State, "containerd.toml"),
	}, func(ctx context.Context) error {
		_, err := c.ctr(ctx, "version")
		return err
	}, 60*time.Second)

	coredns := c.proc("coredns", filepath.Join(c.L.Bin(), "coredns-"+c.Pins.CoreDNS, "coredns"), []string{
		"-conf", filepath.Join(c.L.State, "Corefile"),
	}, c.httpHealth(fmt.Sprintf("http://%s:%d/ready", Gateway, CoreDNSReady), false), 60*time.Second)

	kubelet := c.proc("kubelet", c.bin("kubelet"), []string{
		"--config", filepath.Join(c.L.State, "kubelet.yaml"),
		"--kubeconfig", c.kubeconfig("kubelet"),
		"--root-dir", c.L.KubeletRoot(),
		"--hostname-override", NodeName,
		"--node-ip", Gateway,
		"--v", "1",
	}, c.httpHealth(fmt.Sprintf("http://127.0.0.1:%d/healthz", KubeletHealthz), false), 90*time.Second)
	return []*Process{etcd, apiserver, kcm, sched, containerd, coredns, kubelet}
}

// RestartDaemon stops one daemon of the core plane by its pid file
// (SIGTERM, then SIGKILL after its grace), starts it again with the same
// arguments and waits until it is healthy: the fault drills restart the
// kubelet under running jobs this way, as an upgrade or a crash of the
// node agent would. Containers run on under containerd meanwhile.
func (c *Cluster) RestartDaemon(ctx context.Context, name string) error {
	var names []string
	for _, p := range c.corePlane() {
		names = append(names, p.Name)
		if p.Name != name {
			continue
		}
		if _, ok := p.Running(); !ok {
			return fmt.Errorf("%s does not run (podmpi-cluster status; make cluster-up starts the cluster)", name)
		}
		if err := p.Stop(); err != nil {
			return err
		}
		return p.Start(ctx)
	}
	return fmt.Errorf("no daemon %q in the cluster's core plane (one of: %s)", name, strings.Join(names, ", "))
}

// ctr runs containerd's client against the cluster's containerd in the
// namespace the CRI plugin uses.
func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.L.ContainerdSock(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// writeConfigs writes containerd's, the kubelet's, the CNI and CoreDNS
// configuration files.
func (c *Cluster) writeConfigs() error {
	for _, d := range []string{c.L.CNIConf(), c.L.IPAMDir(), c.L.KubeletRoot(), c.L.PodLogs(), c.L.ContainerdRoot(), c.L.ContainerdState(), c.L.Logs()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	containerd := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # The machine's root lacks CAP_SYS_RESOURCE: nothing may lower
  # oom_score_adj (the pause container asks for -998), or runc fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[5]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
  # One hosts.toml per registry: the cluster's own is plain http.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[7]q
`, c.L.ContainerdRoot(), c.L.ContainerdState(), c.L.ContainerdSock(), PauseImage, c.L.RuncRoot(), c.L.CNIConf(), c.L.RegistryHosts())
	if err := os.WriteFile(filepath.Join(c.L.State, "containerd.toml"), []byte(containerd), 0o644); err != nil {
		return err
	}
	if err := c.writeRegistryHosts(); err != nil {
		return err
	}

	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[2]q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[3]q, "gateway": %[4]q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %[5]q
      }
    }
  ]
}
`, CNINetwork, Bridge, PodCIDR, Gateway, c.L.IPAMDir())
	if err := os.WriteFile(filepath.Join(c.L.CNIConf(), "10-podmpi.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}

	// Pods whose dnsPolicy is Default get this; ClusterFirst pods get
	// clusterDNS. The host's own resolv.conf points at a resolver pods
	// cannot use.
	if err := os.WriteFile(filepath.Join(c.L.State, "resolv.conf"), []byte("nameserver "+Gateway+"\n"), 0o644); err != nil {
		return err
	}
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
tlsCertFile: %[4]s
tlsPrivateKeyFile: %[5]s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[6]s
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%[7]s
clusterDNS:
  - %[1]s
clusterDomain: %[8]s
resolvConf: %[9]s
podLogsDir: %[10]s
# The disk is shared with other work: evict only when it is really full,
# in bytes (a percentage of a large shared disk says little).
evictionHard:
  memory.available: 100Mi
  nodefs.available: %[11]dMi
  nodefs.inodesFree: 1%%
  imagefs.available: %[11]dMi
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 87600h
serializeImagePulls: false
maxPods: 110
`, Gateway, KubeletPort, KubeletHealthz, c.pki.CertFile("kubelet-serving"), c.pki.KeyFile("kubelet-serving"), c.pki.CAFile(),
		c.L.ContainerdSock(), ClusterDomain, filepath.Join(c.L.State, "resolv.conf"), c.L.PodLogs(), EvictionFloor>>20)
	if err := os.WriteFile(filepath.Join(c.L.State, "kubelet.yaml"), []byte(kubelet), 0o644); err != nil {
		return err
	}

	return os.WriteFile(filepath.Join(c.L.State, "Corefile"), []byte(corefile(c.kubeconfig("coredns"))), 0o644)
}

// corefile is the cluster DNS configuration.
func corefile(kubeconfig string) string {
	// kubeadm v1.36's Corefile without forward, loop and reload: cluster
	// names only, nothing leaves the machine. Like kubeadm's it does not
	// cache cluster.local answers (neither success nor denial), so a pod's
	// name is served as soon as its EndpointSlice is.
	return fmt.Sprintf(`.:53 {
    bind %[1]s
    errors
    health %[1]s:%[2]d {
       lameduck 5s
    }
    ready %[1]s:%[3]d
    kubernetes %[4]s in-addr.arpa ip6.arpa {
       kubeconfig %[5]s podmpi
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus %[1]s:%[6]d
    cache 30 {
       disable success %[4]s
       disable denial %[4]s
    }
    loadbalance
}
`, Gateway, CoreDNSHealth, CoreDNSReady, ClusterDomain, kubeconfig, CoreDNSMetrics)
}

// corednsRBAC lets CoreDNS's user read what the kubernetes plugin watches
// (kubeadm's system:coredns role).
const corednsRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:podmpi-coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:podmpi-coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:podmpi-coredns
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:podmpi-coredns
`
