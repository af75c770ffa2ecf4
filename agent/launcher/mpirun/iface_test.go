package mpirun

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func nif(name string, up bool, addrs ...string) NetInterface {
	n := NetInterface{Name: name, Up: up, Loopback: name == "lo"}
	for _, a := range addrs {
		n.Addrs = append(n.Addrs, netip.MustParsePrefix(a))
	}
	return n
}

func TestSelectInterface(t *testing.T) {
	lo := nif("lo", true, "127.0.0.1/8", "::1/128")
	tests := []struct {
		name    string
		ifs     []NetInterface
		def     string
		want    IfaceChoice
		wantErr bool
	}{
		{"harness pod: eth0 only, no default route", []NetInterface{lo, nif("eth0", true, "10.250.0.10/24")}, "",
			IfaceChoice{"eth0", "10.250.0.0/24", "10.250.0.10", false}, false},
		{"docker0-like duplicate listed first", []NetInterface{lo, nif("net1", true, "172.17.0.1/16"), nif("eth0", true, "10.250.0.11/24")}, "",
			IfaceChoice{"eth0", "10.250.0.0/24", "10.250.0.11", true}, false},
		{"no eth0: default route wins", []NetInterface{lo, nif("ens3", true, "192.168.1.5/24"), nif("ens4", true, "10.0.0.5/8")}, "ens4",
			IfaceChoice{"ens4", "10.0.0.0/8", "10.0.0.5", true}, false},
		{"no eth0, no route: skip docker0 and 172.17/16", []NetInterface{lo, nif("docker0", true, "172.18.0.1/16"), nif("net1", true, "172.17.0.1/16"), nif("ens5", true, "10.1.2.3/24")}, "",
			IfaceChoice{"ens5", "10.1.2.0/24", "10.1.2.3", true}, false},
		{"calico /32", []NetInterface{lo, nif("eth0", true, "192.168.34.7/32")}, "eth0",
			IfaceChoice{"eth0", "192.168.34.7/32", "192.168.34.7", false}, false},
		{"down and v6-only interfaces ignored", []NetInterface{lo, nif("eth0", false, "10.0.0.1/24"), nif("eth1", true, "fd00::2/64"), nif("eth2", true, "169.254.1.1/16", "10.9.0.2/16")}, "",
			IfaceChoice{"eth2", "10.9.0.0/16", "10.9.0.2", false}, false},
		{"only bridge-like: take it", []NetInterface{lo, nif("docker0", true, "172.17.0.1/16")}, "",
			IfaceChoice{"docker0", "172.17.0.0/16", "172.17.0.1", false}, false},
		{"nothing usable", []NetInterface{lo, nif("eth1", true, "fe80::1/64")}, "", IfaceChoice{}, true},
		{"empty", nil, "", IfaceChoice{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectInterface(tt.ifs, tt.def)
			if tt.wantErr {
				if !errors.Is(err, ErrNoInterface) {
					t.Errorf("err = %v, want ErrNoInterface", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("SelectInterface = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDefaultRouteIface(t *testing.T) {
	route := `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth1	0002000A	00000000	0001	0	0	0	00FFFFFF	0	0	0
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
`
	if got := defaultRouteIface(strings.NewReader(route)); got != "eth0" {
		t.Errorf("defaultRouteIface = %q", got)
	}
	if got := defaultRouteIface(strings.NewReader("Iface\tDestination\n")); got != "" {
		t.Errorf("no default route: %q", got)
	}
}

// TestPodInterfaceHost runs the real lookup on this machine: it must agree
// with SelectInterface over the same data and never pick loopback.
func TestPodInterfaceHost(t *testing.T) {
	name, cidr, addr, _, err := PodInterface()
	if err != nil {
		t.Skipf("no usable interface here: %v", err)
	}
	if name == "lo" || name == "" {
		t.Errorf("PodInterface picked %q", name)
	}
	p := netip.MustParsePrefix(cidr)
	if !p.Contains(netip.MustParseAddr(addr)) {
		t.Errorf("addr %s not in %s", addr, cidr)
	}
	t.Logf("pod interface %s %s (%s)", name, addr, cidr)
}
