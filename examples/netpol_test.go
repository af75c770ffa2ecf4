package examples

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// peer is the other end of a connection as a NetworkPolicy sees it: a pod
// (its namespace's labels and its own) or an address outside the cluster.
type peer struct {
	name      string
	sameNS    bool              // in the policy's namespace
	nsLabels  map[string]string // the namespace's labels
	podLabels map[string]string // nil for an address outside the cluster
	ip        netip.Addr        // for ipBlock peers
}

// Peers the tests use. Namespaces carry kubernetes.io/metadata.name, as the
// API server sets it on every namespace.
var (
	mpiPod = peer{name: "another MPI pod of the namespace", sameNS: true,
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "team-a"},
		podLabels: map[string]string{mpiLabel: mpiLabelValue, "jobset.sigs.k8s.io/jobset-name": "other"}, ip: netip.MustParseAddr("10.244.1.7")}
	plainPod = peer{name: "a pod of the namespace without the label", sameNS: true,
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "team-a"},
		podLabels: map[string]string{"app": "notebook"}, ip: netip.MustParseAddr("10.244.1.8")}
	kubeDNS = peer{name: "CoreDNS in kube-system",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "kube-system"},
		podLabels: map[string]string{"k8s-app": "kube-dns"}, ip: netip.MustParseAddr("10.244.0.2")}
	openshiftDNS = peer{name: "OpenShift's DNS pod in openshift-dns",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "openshift-dns"},
		podLabels: map[string]string{"dns.operator.openshift.io/daemonset-dns": "default"}, ip: netip.MustParseAddr("10.128.0.5")}
	prometheus = peer{name: "Prometheus in namespace monitoring",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "monitoring"},
		podLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}, ip: netip.MustParseAddr("10.244.2.9")}
	pushgateway = peer{name: "Pushgateway in namespace monitoring",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "monitoring"},
		podLabels: map[string]string{"app.kubernetes.io/name": "prometheus-pushgateway"}, ip: netip.MustParseAddr("10.244.2.10")}
	openshiftPrometheus = peer{name: "OpenShift user-workload Prometheus",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "openshift-user-workload-monitoring", "network.openshift.io/policy-group": "monitoring"},
		podLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}, ip: netip.MustParseAddr("10.128.2.9")}
	otherNSPod = peer{name: "a pod of another namespace",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "team-b"},
		podLabels: map[string]string{mpiLabel: mpiLabelValue}, ip: netip.MustParseAddr("10.244.3.3")}
	apiServer = peer{name: "the Kubernetes API server on a control-plane node", ip: netip.MustParseAddr("192.168.10.2")}
	s3v4      = peer{name: "object storage outside the cluster (IPv4)", ip: netip.MustParseAddr("52.216.1.2")}
	s3v6      = peer{name: "object storage outside the cluster (IPv6)", ip: netip.MustParseAddr("2600:1f18::1")}
)

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(l))
}

// peerMatches applies one NetworkPolicyPeer to p: podSelector alone means
// pods of the policy's namespace, namespaceSelector alone every pod of the
// selected namespaces, both together the selected pods of the selected
// namespaces, ipBlock an address range (minus its exceptions).
func peerMatches(np networkingv1.NetworkPolicyPeer, p peer) bool {
	if np.IPBlock != nil {
		cidr, err := netip.ParsePrefix(np.IPBlock.CIDR)
		if err != nil || !cidr.Contains(p.ip) {
			return false
		}
		for _, e := range np.IPBlock.Except {
			if ex, err := netip.ParsePrefix(e); err == nil && ex.Contains(p.ip) {
				return false
			}
		}
		return true
	}
	if p.podLabels == nil {
		return false // selectors match pods only
	}
	switch {
	case np.NamespaceSelector != nil && np.PodSelector != nil:
		return selects(np.NamespaceSelector, p.nsLabels) && selects(np.PodSelector, p.podLabels)
	case np.NamespaceSelector != nil:
		return selects(np.NamespaceSelector, p.nsLabels)
	case np.PodSelector != nil:
		return p.sameNS && selects(np.PodSelector, p.podLabels)
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		pr := corev1.ProtocolTCP
		if pp.Protocol != nil {
			pr = *pp.Protocol
		}
		if pr != proto {
			continue
		}
		if pp.Port == nil {
			return true
		}
		lo := pp.Port.IntVal // named ports do not occur in the examples
		hi := lo
		if pp.EndPort != nil {
			hi = *pp.EndPort
		}
		if port >= lo && port <= hi {
			return true
		}
	}
	return false
}

// allows reports whether np lets traffic between a selected pod and p on
// proto/port, in the direction given (ingress: p connects to the pod;
// egress: the pod connects to p).
func allows(np *networkingv1.NetworkPolicy, egress bool, p peer, proto corev1.Protocol, port int32) bool {
	if egress {
		for _, r := range np.Spec.Egress {
			if portMatches(r.Ports, proto, port) && anyPeer(r.To, p) {
				return true
			}
		}
		return false
	}
	for _, r := range np.Spec.Ingress {
		if portMatches(r.Ports, proto, port) && anyPeer(r.From, p) {
			return true
		}
	}
	return false
}

func anyPeer(peers []networkingv1.NetworkPolicyPeer, p peer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, np := range peers {
		if peerMatches(np, p) {
			return true
		}
	}
	return false
}

// TestNetworkPolicy checks what the namespace-wide policy of deploy/namespace
// lets through and what it stops, and that it selects every MPI pod of
// deploy/, the samples and the migration pairs.
func TestNetworkPolicy(t *testing.T) {
	type flow struct {
		egress bool
		p      peer
		proto  corev1.Protocol
		port   int32
		want   bool
		why    string
	}
	in := func(p peer, port int32, want bool, why string) flow {
		return flow{false, p, corev1.ProtocolTCP, port, want, why}
	}
	out := func(p peer, proto corev1.Protocol, port int32, want bool, why string) flow {
		return flow{true, p, proto, port, want, why}
	}
	flows := []flow{
		in(mpiPod, 2222, true, "SSH from the launcher to worker-agent"),
		in(mpiPod, 9022, true, "the launcher asks worker-agent /info"),
		in(mpiPod, 41234, true, "MPI daemons call back, ranks connect, on ephemeral ports"),
		in(plainPod, 2222, false, "a pod that is not part of an MPI job"),
		in(otherNSPod, 2222, false, "an MPI pod of another namespace"),
		in(prometheus, 9022, true, "scrapes of /metrics from the monitoring namespace"),
		in(openshiftPrometheus, 9022, true, "scrapes from OpenShift's monitoring"),
		in(prometheus, 2222, false, "the monitoring namespace has no business on SSH"),
		out(mpiPod, corev1.ProtocolTCP, 2222, true, "SSH to the workers"),
		out(mpiPod, corev1.ProtocolTCP, 9022, true, "worker-agent /info"),
		out(mpiPod, corev1.ProtocolTCP, 50000, true, "MPI's ephemeral ports"),
		out(plainPod, corev1.ProtocolTCP, 8080, false, "other pods of the namespace"),
		out(kubeDNS, corev1.ProtocolUDP, 53, true, "DNS (kube-dns/CoreDNS)"),
		out(kubeDNS, corev1.ProtocolTCP, 53, true, "DNS over TCP (large answers)"),
		out(openshiftDNS, corev1.ProtocolUDP, 5353, true, "DNS on OpenShift (the Service's 53 is the pods' 5353)"),
		out(openshiftDNS, corev1.ProtocolTCP, 5353, true, "DNS over TCP on OpenShift"),
		out(s3v4, corev1.ProtocolTCP, 443, true, "object storage over HTTPS"),
		out(s3v6, corev1.ProtocolTCP, 443, true, "object storage over HTTPS (IPv6)"),
		out(pushgateway, corev1.ProtocolTCP, 9091, true, "the launcher's push to a Pushgateway"),
		out(apiServer, corev1.ProtocolTCP, 443, true, "the launcher's Events and pod reads, API server on 443 (managed clusters)"),
		out(apiServer, corev1.ProtocolTCP, 6443, true, "the launcher's Events and pod reads, API server on 6443 (kubeadm, kind, OpenShift; the policy sees it after the Service's translation)"),
		out(s3v4, corev1.ProtocolTCP, 22, false, "SSH out of the cluster"),
		out(otherNSPod, corev1.ProtocolTCP, 2222, false, "SSH into another namespace's MPI pods"),
	}
	sets := loadManifestSets(t)
	np := policyNamed(t, setNamed(t, sets, "deploy/namespace"), "podmpi")
	types := map[networkingv1.PolicyType]bool{}
	for _, pt := range np.Spec.PolicyTypes {
		types[pt] = true
	}
	if !types[networkingv1.PolicyTypeIngress] || !types[networkingv1.PolicyTypeEgress] {
		t.Errorf("policyTypes %v: want Ingress and Egress (else the other direction is wide open)", np.Spec.PolicyTypes)
	}
	for _, f := range flows {
		dir := "ingress from"
		if f.egress {
			dir = "egress to"
		}
		if got := allows(np, f.egress, f.p, f.proto, f.port); got != f.want {
			t.Errorf("%s %s, %s/%d: allowed=%t, want %t (%s)", dir, f.p.name, f.proto, f.port, got, f.want, f.why)
		}
	}
	// The policy covers every MPI pod podmpi installs or shows, whichever
	// operator makes it.
	n := 0
	for _, set := range sets {
		for _, d := range set.Docs {
			pts, _ := podTemplates(d)
			for _, p := range pts {
				n++
				if !selects(&np.Spec.PodSelector, p.Spec.Labels) {
					t.Errorf("%s: %s %s: pod template %s is not selected by the NetworkPolicy (labels %v)", set.Name, d.GVK.Kind, d.Name, p.Path, p.Spec.Labels)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no pod templates")
	}
}

// policyNamed is the NetworkPolicy name of a manifest set, which must hold
// exactly one.
func policyNamed(t *testing.T, set manifestSet, name string) *networkingv1.NetworkPolicy {
	t.Helper()
	var pols []*networkingv1.NetworkPolicy
	for _, d := range set.Docs {
		if d.GVK.Kind == "NetworkPolicy" && d.Name == name {
			np := new(networkingv1.NetworkPolicy)
			if err := strictYAML(d.Raw, np); err != nil {
				t.Fatal(err)
			}
			pols = append(pols, np)
		}
	}
	if len(pols) != 1 {
		t.Fatalf("want one NetworkPolicy %s, have %d", name, len(pols))
	}
	return pols[0]
}

// TestTrainerStatusPolicy: the launcher's own policy lets it, and only it,
// reach Trainer's status endpoint (TCP 10443 of the Trainer controller in
// kubeflow-system), and nothing else.
func TestTrainerStatusPolicy(t *testing.T) {
	trainer := peer{name: "the Trainer controller in kubeflow-system",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "kubeflow-system"},
		podLabels: map[string]string{"app.kubernetes.io/name": "trainer", "app.kubernetes.io/component": "manager"}, ip: netip.MustParseAddr("10.244.0.20")}
	jobset := peer{name: "the JobSet controller in kubeflow-system",
		nsLabels:  map[string]string{"kubernetes.io/metadata.name": "kubeflow-system"},
		podLabels: map[string]string{"app.kubernetes.io/name": "jobset"}, ip: netip.MustParseAddr("10.244.0.21")}
	sets := loadManifestSets(t)
	np := policyNamed(t, setNamed(t, sets, "deploy/namespace"), "podmpi-trainer-status")
	if len(np.Spec.Ingress) > 0 || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, ingress %v: want an egress policy only (the namespace-wide one rules ingress)", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
	for _, f := range []struct {
		p    peer
		port int32
		want bool
	}{
		{trainer, 10443, true}, {trainer, 9443, false}, {trainer, 8080, false},
		{jobset, 10443, false}, {s3v4, 10443, false}, {mpiPod, 10443, false}, {apiServer, 443, false},
	} {
		if got := allows(np, true, f.p, corev1.ProtocolTCP, f.port); got != f.want {
			t.Errorf("egress to %s, TCP/%d: allowed=%t, want %t", f.p.name, f.port, got, f.want)
		}
	}
	// It selects the launchers of the Trainer runtimes and nothing else.
	launchers := 0
	for _, set := range sets {
		if set.isMigration() {
			continue
		}
		for _, d := range set.Docs {
			pts, _ := podTemplates(d)
			for _, p := range pts {
				launcher := d.GVK.Kind == "ClusterTrainingRuntime" && p.Role == "launcher"
				if got := selects(&np.Spec.PodSelector, p.Spec.Labels); got != launcher {
					t.Errorf("%s: %s %s: pod template %s selected=%t, want %t (labels %v)", set.Name, d.GVK.Kind, d.Name, p.Path, got, launcher, p.Spec.Labels)
				}
				if launcher {
					launchers++
				}
			}
		}
	}
	if launchers == 0 {
		t.Error("no Trainer launcher template")
	}
}

// TestNetworkPolicyEvaluator proves the evaluator the test above relies on
// can say no: a policy without DNS rules refuses DNS, a podSelector alone
// refuses other namespaces, an ipBlock exception is honoured.
func TestNetworkPolicyEvaluator(t *testing.T) {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{mpiLabel: mpiLabelValue}}}}},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"52.216.0.0/16"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: newPort(443)}}},
		},
	}}
	for _, tc := range []struct {
		p     peer
		proto corev1.Protocol
		port  int32
		want  bool
	}{
		{mpiPod, tcp, 1, true},
		{otherNSPod, tcp, 1, false},
		{kubeDNS, udp, 53, false},
		{s3v4, tcp, 443, false}, // excepted
		{peer{name: "elsewhere", ip: netip.MustParseAddr("8.8.8.8")}, tcp, 443, true},
		{peer{name: "elsewhere", ip: netip.MustParseAddr("8.8.8.8")}, udp, 443, false},
		{s3v6, tcp, 443, false}, // not in an IPv4 block
	} {
		if got := allows(np, true, tc.p, tc.proto, tc.port); got != tc.want {
			t.Errorf("egress to %s %s/%d: %t, want %t", tc.p.name, tc.proto, tc.port, got, tc.want)
		}
	}
	if allows(np, false, mpiPod, tcp, 2222) {
		t.Error("a policy without ingress rules must refuse ingress")
	}
}

func newPort(n int32) *intstr.IntOrString {
	p := intstr.FromInt32(n)
	return &p
}

// TestMpirunTimeoutProblems covers the time-limit check on its own.
func TestMpirunTimeoutProblems(t *testing.T) {
	for _, tc := range []struct {
		env, argv []string
		want      int
	}{
		{nil, []string{"launcher", "--", "mpirun", "--mpirun.timeout=1h"}, 0}, // after --: mpirun's
		{[]string{"PODMPI_MPIRUN_TIMEOUT=0"}, nil, 0},
		{[]string{"PODMPI_MPIRUN_TIMEOUT=0s"}, []string{"launcher", "--mpirun.timeout=0", "--"}, 0},
		{[]string{"PODMPI_MPIRUN_TIMEOUT=24h"}, nil, 1},
		{[]string{"PODMPI_MPIRUN_TIMEOUT=forever"}, nil, 1},
		{nil, []string{"launcher", "--mpirun.timeout=2h", "--", "mpirun"}, 1},
		{nil, []string{"launcher", "--mpirun.timeout", "2h", "--", "mpirun"}, 1},
	} {
		if got := mpirunTimeoutProblems("x", tc.env, tc.argv); len(got) != tc.want {
			t.Errorf("env %q argv %q: %d problems %q, want %d", tc.env, tc.argv, len(got), got, tc.want)
		}
	}
}
