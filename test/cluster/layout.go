package cluster

import (
	"os"
	"path/filepath"
)

// Fixed facts of the single-node cluster. Nothing here is chosen per run, so
// that a second `up` finds what the first started and `down` knows what to
// remove after a killed run.
const (
	// Bridge is the CNI bridge, created (with the gateway address) before
	// CoreDNS binds to it.
	Bridge = "podmpi-cl0"
	// PodCIDR is the pod network on Bridge; Gateway is the host's address
	// on it: the API server, the kubelet, CoreDNS and the out-of-cluster
	// webhooks listen there.
	PodCIDR     = "10.244.0.0/24"
	Gateway     = "10.244.0.1"
	ServiceCIDR = "10.96.0.0/24"
	// KubernetesServiceIP is the first address of ServiceCIDR.
	KubernetesServiceIP = "10.96.0.1"
	NodeName            = "podmpi-node"
	ClusterDomain       = "cluster.local"
	// CNINetwork is the CNI network name (and the host-local IPAM folder).
	CNINetwork = "podmpi-cluster"
	// NetnsDir is where containerd's CRI plugin mounts pod network
	// namespaces (cni-<uuid>); the folder is fixed in containerd 1.6.
	NetnsDir = "/var/run/netns"
	// ShimSocketDir is where containerd 1.6 puts its shims' sockets
	// whatever its state folder (fixed in the shim code).
	ShimSocketDir = "/run/containerd/s"

	EtcdClientPort = 23790
	EtcdPeerPort   = 23800
	APIServerPort  = 6443
	KCMPort        = 10257
	SchedulerPort  = 10259
	KubeletPort    = 10250
	KubeletHealthz = 10248
	CoreDNSHealth  = 18089
	CoreDNSReady   = 18189
	CoreDNSMetrics = 19153

	// Controllers run on the host: each gets its own ports.
	JobSetWebhookPort  = 19443
	JobSetHealthPort   = 18081
	JobSetMetricsPort  = 18082
	TrainerWebhookPort = 19444
	TrainerHealthPort  = 18083
	TrainerMetricsPort = 18084
	// TrainerStatusPort is upstream's: Trainer gives the pods its status
	// server's URL with the port it listens on
	// (https://<its Service>.<namespace>.svc:<port>), and the Service and
	// deploy/networkpolicy say 10443.
	TrainerStatusPort = 10443
	MPIOperatorPort   = 18086 // --monitoring-port (v0.6.0 also hard-codes health on 8080)
	KubeRouterHealth  = 18087 // kube-router's health server (all addresses: it takes no host)
	KueueWebhookPort  = 19445
	KueueHealthPort   = 18090
	KueueMetricsPort  = 18091
)

// Layout holds the cluster's folders: state (removed by down), run (sockets,
// containerd state; removed by down) and cache (built binaries and images;
// kept).
type Layout struct {
	State string // /var/lib/podmpi-cluster
	Run   string // /run/podmpi-cluster
	Cache string // /var/cache/podmpi/cluster
	Repo  string // the podmpi checkout (images/build.sh, examples/)
}

// DefaultLayout is the layout `podmpi-cluster` uses; PODMPI_CLUSTER_CACHE
// moves the cache (CI keeps the default).
func DefaultLayout(repo string) Layout {
	cache := os.Getenv("PODMPI_CLUSTER_CACHE")
	if cache == "" {
		cache = "/var/cache/podmpi/cluster"
	}
	return Layout{State: "/var/lib/podmpi-cluster", Run: "/run/podmpi-cluster", Cache: cache, Repo: repo}
}

func (l Layout) PKI() string             { return filepath.Join(l.State, "pki") }
func (l Layout) Logs() string            { return filepath.Join(l.State, "daemons") }
func (l Layout) EtcdData() string        { return filepath.Join(l.Run, "etcd") } // tmpfs: etcd 3.4 has no --unsafe-no-fsync
func (l Layout) KubeletRoot() string     { return filepath.Join(l.State, "kubelet") }
func (l Layout) PodLogs() string         { return filepath.Join(l.State, "pod-logs") }
func (l Layout) ContainerdRoot() string  { return filepath.Join(l.State, "containerd") }
func (l Layout) ContainerdState() string { return filepath.Join(l.Run, "containerd") }
func (l Layout) ContainerdSock() string  { return filepath.Join(l.Run, "containerd.sock") }
func (l Layout) RuncRoot() string        { return filepath.Join(l.Run, "runc") }
func (l Layout) CNIConf() string         { return filepath.Join(l.State, "cni", "net.d") }
func (l Layout) IPAMDir() string         { return filepath.Join(l.State, "cni", "ipam") }
func (l Layout) Controllers() string     { return filepath.Join(l.State, "controllers") }
func (l Layout) AdminKubeconfig() string { return filepath.Join(l.State, "admin.kubeconfig") }
func (l Layout) InfoFile() string        { return filepath.Join(l.State, "cluster.json") }
func (l Layout) Bin() string             { return filepath.Join(l.Cache, "bin") }
func (l Layout) Src() string             { return filepath.Join(l.Cache, "src") }

// Kubectl is the kubectl built for the cluster's Kubernetes version.
func (l Layout) Kubectl(p Pins) string {
	return filepath.Join(l.Bin(), "kubernetes-"+p.Kubernetes, "kubectl")
}
