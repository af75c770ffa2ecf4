package harness

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// maxPods bounds a cluster; pod i gets host number 10+i in the subnet.
const maxPods = 200

// normalize fills defaults and validates the config. Every name ends up in
// dnsmasq's config file and in ip/unshare argv, so names are restricted to DNS
// labels: nothing else can be injected.
func (cfg *Config) normalize() error {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.SRVPort == 0 {
		cfg.SRVPort = 2222
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Subnet == "" {
		var b [1]byte
		_, _ = rand.Read(b[:])
		cfg.Subnet = fmt.Sprintf("10.251.%d.0/24", b[0])
	}
	if err := checkLabel("Job", cfg.Job); err != nil {
		return err
	}
	if err := checkLabel("Namespace", cfg.Namespace); err != nil {
		return err
	}
	if err := checkDomain("ClusterDomain", cfg.ClusterDomain); err != nil {
		return err
	}
	if cfg.SRVPort < 1 || cfg.SRVPort > 65535 {
		return fmt.Errorf("SRVPort %d out of range 1-65535", cfg.SRVPort)
	}
	if err := checkPrefix(cfg.Prefix); err != nil {
		return err
	}
	if len(cfg.Pods) == 0 || len(cfg.Pods) > maxPods {
		return fmt.Errorf("harness config: Pods: need 1 to %d pods, got %d", maxPods, len(cfg.Pods))
	}
	p, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil || !p.Addr().Is4() {
		return fmt.Errorf("harness config: Subnet %q is not an IPv4 CIDR like 10.251.7.0/24", cfg.Subnet)
	}
	if p.Bits() > 24 {
		return fmt.Errorf("harness config: Subnet %q: need a /24 or larger (pods use host numbers 10..%d)", cfg.Subnet, 10+maxPods-1)
	}
	p = p.Masked()
	if ExtraIfaceNet.Overlaps(p) {
		return fmt.Errorf("harness config: Subnet %q overlaps the extra interface network %s", cfg.Subnet, ExtraIfaceNet)
	}
	cfg.Subnet = p.String()

	seen := map[string]int{}
	for i := range cfg.Pods {
		ps := &cfg.Pods[i]
		if err := checkLabel(fmt.Sprintf("Pods[%d].Hostname", i), ps.Hostname); err != nil {
			return err
		}
		if ps.Role == "" {
			ps.Role = RoleWorker
			if i == 0 {
				ps.Role = RoleLauncher
			}
		}
		if ps.Role != RoleLauncher && ps.Role != RoleWorker {
			return fmt.Errorf("harness config: Pods[%d].Role %q: want %q or %q", i, ps.Role, RoleLauncher, RoleWorker)
		}
		for name := range ps.EtcFiles {
			if err := checkEtcName(name); err != nil {
				return fmt.Errorf("harness config: Pods[%d].EtcFiles: %w", i, err)
			}
		}
		names := append([]string{ps.Hostname}, ps.Aliases...)
		for k, n := range names {
			if k > 0 {
				if err := checkLabel(fmt.Sprintf("Pods[%d].Aliases[%d]", i, k-1), n); err != nil {
					return err
				}
			}
			if n == cfg.Job {
				return fmt.Errorf("harness config: Pods[%d]: name %q equals the Job (service) name", i, n)
			}
			if j, dup := seen[n]; dup {
				return fmt.Errorf("harness config: Pods[%d]: name %q already used by Pods[%d]", i, n, j)
			}
			seen[n] = i
		}
	}
	return nil
}

// ExtraIfaceNet is the network of [ExtraIfaceAddr].
var ExtraIfaceNet = netip.MustParsePrefix(ExtraIfaceAddr).Masked()

// checkLabel accepts an RFC 1123 DNS label: lowercase alphanumerics and '-', not
// starting or ending with '-', at most 63 characters.
func checkLabel(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty; want a DNS label like \"tj-node-0-1\"", field)
	}
	if len(s) > 63 {
		return fmt.Errorf("%s %q is %d characters; a DNS label has at most 63", field, s, len(s))
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		ok := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' && i > 0 && i < len(s)-1
		if !ok {
			return fmt.Errorf("%s %q is not a DNS label (lowercase a-z, 0-9, '-' inside)", field, s)
		}
	}
	return nil
}

func checkDomain(field, s string) error {
	if s == "" || len(s) > 200 {
		return fmt.Errorf("%s %q: want a domain like \"cluster.local\"", field, s)
	}
	for _, l := range strings.Split(s, ".") {
		if err := checkLabel(field, l); err != nil {
			return fmt.Errorf("%s %q: bad label: %w", field, s, err)
		}
	}
	return nil
}

// checkEtcName accepts a file name that `ip netns exec` can bind over /etc/<name>.
func checkEtcName(name string) error {
	switch name {
	case "resolv.conf", "hosts", "hostname":
		return fmt.Errorf("%q is written by the harness", name)
	case "", ".", "..":
		return fmt.Errorf("bad file name %q", name)
	}
	if strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q: want a plain file name under /etc", name)
	}
	if st, err := os.Stat(filepath.Join("/etc", name)); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("/etc/%s must exist as a regular file for ip netns exec to bind over it", name)
	}
	return nil
}

// checkPrefix accepts a short namespace-name prefix: [a-z0-9-], 1 to 16 characters.
func checkPrefix(s string) error {
	if s == "" || len(s) > 16 {
		return fmt.Errorf("harness config: Prefix %q: want 1 to 16 characters of a-z, 0-9, '-'", s)
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-') {
			return fmt.Errorf("harness config: Prefix %q: want 1 to 16 characters of a-z, 0-9, '-'", s)
		}
	}
	return nil
}
