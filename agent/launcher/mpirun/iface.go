package mpirun

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
)

// NetInterface is what SelectInterface needs to know about one interface.
type NetInterface struct {
	Name     string
	Up       bool
	Loopback bool
	Addrs    []netip.Prefix
}

// IfaceChoice is the result of SelectInterface.
type IfaceChoice struct {
	// Name is the chosen interface (eth0).
	Name string
	// CIDR is the network of its first usable IPv4 address (10.250.0.0/24).
	CIDR string
	// Addr is that address (10.250.0.10).
	Addr string
	// Multi is true when more than one UP non-loopback interface has a usable
	// IPv4 address.
	Multi bool
}

// ErrNoInterface is returned when no UP non-loopback interface has an IPv4
// address.
var ErrNoInterface = errors.New("no UP non-loopback interface with an IPv4 address")

// bridgeLike reports names of interfaces that container engines and
// virtualisation create on a host, which are never the pod's own network.
func bridgeLike(name string) bool {
	for _, p := range []string{"docker", "virbr", "br-", "podman", "cni", "lxcbr", "lxdbr", "veth"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// dockerDefault is Docker's default bridge network, which appears with the
// same address in every pod that carries a docker0-like interface.
var dockerDefault = netip.MustParsePrefix("172.17.0.0/16")

// usableV4 returns the first IPv4 address of ifc that is not link-local.
func usableV4(ifc NetInterface) (netip.Prefix, bool) {
	for _, p := range ifc.Addrs {
		a := p.Addr().Unmap()
		if a.Is4() && !a.IsLinkLocalUnicast() && !a.IsLoopback() && !a.IsUnspecified() {
			return netip.PrefixFrom(a, p.Bits()), true
		}
	}
	return netip.Prefix{}, false
}

// SelectInterface picks the pod's interface from ifs (in system order) and
// the name of the interface holding the default route ("" when there is
// none, as in the test harness's pods). Candidates are UP, non-loopback
// interfaces with a non-link-local IPv4 address. The choice, in order:
//
//  1. eth0 (the Kubernetes pod interface for every CNI);
//  2. the default-route interface;
//  3. the first candidate that is not bridge-like (docker0, virbr0, br-…,
//     cni0, veth…) and whose address is not in Docker's 172.17.0.0/16;
//  4. the first candidate.
func SelectInterface(ifs []NetInterface, defaultRoute string) (IfaceChoice, error) {
	type cand struct {
		ifc NetInterface
		p   netip.Prefix
	}
	var cands []cand
	for _, ifc := range ifs {
		if !ifc.Up || ifc.Loopback {
			continue
		}
		if p, ok := usableV4(ifc); ok {
			cands = append(cands, cand{ifc, p})
		}
	}
	if len(cands) == 0 {
		return IfaceChoice{}, ErrNoInterface
	}
	pick := -1
	for i, c := range cands {
		if c.ifc.Name == "eth0" {
			pick = i
			break
		}
	}
	if pick < 0 && defaultRoute != "" {
		for i, c := range cands {
			if c.ifc.Name == defaultRoute {
				pick = i
				break
			}
		}
	}
	if pick < 0 {
		for i, c := range cands {
			if !bridgeLike(c.ifc.Name) && !dockerDefault.Contains(c.p.Addr()) {
				pick = i
				break
			}
		}
	}
	if pick < 0 {
		pick = 0
	}
	c := cands[pick]
	return IfaceChoice{
		Name:  c.ifc.Name,
		CIDR:  c.p.Masked().String(),
		Addr:  c.p.Addr().String(),
		Multi: len(cands) > 1,
	}, nil
}

// PodInterface inspects this host's interfaces and routes and returns
// SelectInterface's choice.
func PodInterface() (name, cidr, addr string, multi bool, err error) {
	sys, err := net.Interfaces()
	if err != nil {
		return "", "", "", false, fmt.Errorf("listing network interfaces: %w", err)
	}
	ifs := make([]NetInterface, 0, len(sys))
	for _, s := range sys {
		ni := NetInterface{Name: s.Name, Up: s.Flags&net.FlagUp != 0, Loopback: s.Flags&net.FlagLoopback != 0}
		addrs, err := s.Addrs()
		if err != nil {
			return "", "", "", false, fmt.Errorf("reading addresses of %s: %w", s.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			bits, _ := ipn.Mask.Size()
			if ip.Unmap().Is4() && bits > 32 {
				bits -= 96
			}
			ni.Addrs = append(ni.Addrs, netip.PrefixFrom(ip.Unmap(), bits))
		}
		ifs = append(ifs, ni)
	}
	def := ""
	if f, err := os.Open("/proc/net/route"); err == nil {
		def = defaultRouteIface(f)
		f.Close()
	}
	c, err := SelectInterface(ifs, def)
	if err != nil {
		return "", "", "", false, fmt.Errorf("finding the pod interface: %w", err)
	}
	return c.Name, c.CIDR, c.Addr, c.Multi, nil
}

// defaultRouteIface reads /proc/net/route and returns the interface of the
// first IPv4 default route (destination and mask 0), or "".
func defaultRouteIface(r io.Reader) string {
	sc := bufio.NewScanner(r)
	for n := 0; sc.Scan() && n < 10000; n++ {
		f := strings.Fields(sc.Text())
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0]
		}
	}
	return ""
}
