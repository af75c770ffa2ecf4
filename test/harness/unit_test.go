package harness

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

func validConfig() Config {
	return Config{Job: "tj", Pods: []PodSpec{
		{Hostname: "tj-launcher-0-0", Publish: true},
		{Hostname: "tj-node-0-0", Aliases: []string{"tj-worker-0"}, Publish: true},
	}}
}

func TestNormalizeDefaults(t *testing.T) {
	cfg := validConfig()
	if err := cfg.normalize(); err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "default" || cfg.ClusterDomain != "cluster.local" || cfg.SRVPort != 2222 || cfg.Prefix != DefaultPrefix {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	p, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil || p.Bits() != 24 || !strings.HasPrefix(cfg.Subnet, "10.251.") {
		t.Errorf("default subnet %q, want 10.251.X.0/24", cfg.Subnet)
	}
	if cfg.Pods[0].Role != RoleLauncher || cfg.Pods[1].Role != RoleWorker {
		t.Errorf("default roles: %q %q", cfg.Pods[0].Role, cfg.Pods[1].Role)
	}
}

var badConfigs = []struct {
	name   string
	mutate func(*Config)
	want   string
}{
	{"no job", func(c *Config) { c.Job = "" }, "Job is empty"},
	{"upper job", func(c *Config) { c.Job = "TJ" }, "not a DNS label"},
	{"newline in host", func(c *Config) { c.Pods[1].Hostname = "a\nserver=8.8.8.8" }, "not a DNS label"},
	{"comma alias", func(c *Config) { c.Pods[1].Aliases = []string{"a,1.2.3.4"} }, "Aliases[0]"},
	{"dash start", func(c *Config) { c.Pods[0].Hostname = "-x" }, "not a DNS label"},
	{"long label", func(c *Config) { c.Pods[0].Hostname = strings.Repeat("a", 64) }, "at most 63"},
	{"no pods", func(c *Config) { c.Pods = nil }, "need 1 to 200 pods"},
	{"too many pods", func(c *Config) { c.Pods = make([]PodSpec, 201) }, "need 1 to 200 pods"},
	{"dup host", func(c *Config) { c.Pods[1].Hostname = c.Pods[0].Hostname }, "already used"},
	{"alias dup", func(c *Config) { c.Pods[0].Aliases = []string{"tj-node-0-0"} }, "already used"},
	{"host is job", func(c *Config) { c.Pods[1].Hostname = "tj" }, "equals the Job"},
	{"bad role", func(c *Config) { c.Pods[1].Role = "master" }, "Role"},
	{"v6 subnet", func(c *Config) { c.Subnet = "fd00::/64" }, "not an IPv4 CIDR"},
	{"small subnet", func(c *Config) { c.Subnet = "10.251.1.0/25" }, "/24 or larger"},
	{"docker subnet", func(c *Config) { c.Subnet = "172.17.5.0/24" }, "overlaps"},
	{"bad port", func(c *Config) { c.SRVPort = 70000 }, "SRVPort"},
	{"bad domain", func(c *Config) { c.ClusterDomain = "cluster..local" }, "ClusterDomain"},
	{"bad prefix", func(c *Config) { c.Prefix = "pmh/" }, "Prefix"},
	{"etc resolv", func(c *Config) { c.Pods[0].EtcFiles = map[string]string{"resolv.conf": ""} }, "written by the harness"},
	{"etc slash", func(c *Config) { c.Pods[0].EtcFiles = map[string]string{"ssh/sshd_config": ""} }, "plain file name"},
	{"etc dotdot", func(c *Config) { c.Pods[0].EtcFiles = map[string]string{"..": ""} }, "bad file name"},
	{"etc missing", func(c *Config) { c.Pods[0].EtcFiles = map[string]string{"no-such-podmpi-file": ""} }, "must exist"},
	{"long prefix", func(c *Config) { c.Prefix = strings.Repeat("p", 17) }, "Prefix"},
}

func TestNormalizeRejects(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.mutate(&cfg)
			err := cfg.normalize()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("normalize() = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

// testRecords builds the records of a 4-pod job without starting anything.
func testRecords(t testing.TB, cfg Config) (dnsRecords, *Cluster) {
	t.Helper()
	if err := cfg.normalize(); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{cfg: cfg, prefix: netip.MustParsePrefix(cfg.Subnet)}
	c.hubIP = c.prefix.Addr().Next()
	svc := cfg.Job + "." + cfg.Namespace + ".svc." + cfg.ClusterDomain
	for i, p := range cfg.Pods {
		info := PodInfo{Index: i, Hostname: p.Hostname, FQDN: p.Hostname + "." + svc, IP: c.podAddr(i), Role: p.Role}
		for _, a := range p.Aliases {
			info.Aliases = append(info.Aliases, a+"."+svc)
		}
		c.pods = append(c.pods, info)
		c.published = append(c.published, p.Publish)
	}
	return c.records(), c
}

func TestRenderDNSConf(t *testing.T) {
	cfg := Config{Job: "tj", Subnet: "10.251.9.0/24", Pods: []PodSpec{
		{Hostname: "tj-launcher-0-0", Publish: true},
		{Hostname: "tj-node-0-0", Aliases: []string{"tj-worker-0"}, Publish: true},
		{Hostname: "tj-node-0-1", Publish: true},
		{Hostname: "tj-node-0-2", Publish: false},
	}}
	r, _ := testRecords(t, cfg)
	got := renderDNSConf(r, "/l/dns.log", "/s/dns.pid", false)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	for _, want := range []string{
		"no-resolv", "no-hosts", "bind-interfaces", "listen-address=10.251.9.1", "no-negcache", "local-ttl=1",
		"local=/cluster.local/", "local=/tj/", "log-facility=/l/dns.log", "pid-file=/s/dns.pid",
		"host-record=tj-launcher-0-0.tj.default.svc.cluster.local,10.251.9.10",
		"host-record=tj-node-0-0.tj.default.svc.cluster.local,tj-worker-0.tj.default.svc.cluster.local,10.251.9.11",
		"host-record=tj-node-0-1.tj.default.svc.cluster.local,10.251.9.12",
		"host-record=tj.default.svc.cluster.local,10.251.9.11",
		"host-record=tj.default.svc.cluster.local,10.251.9.12",
		"srv-host=_ssh._tcp.tj.default.svc.cluster.local,tj-node-0-0.tj.default.svc.cluster.local,2222,0,50",
		"srv-host=_ssh._tcp.tj.default.svc.cluster.local,tj-node-0-1.tj.default.svc.cluster.local,2222,0,50",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("config lacks line %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "tj-node-0-2") || strings.Contains(got, "10.251.9.13") {
		t.Errorf("unpublished pod appears in config:\n%s", got)
	}
	if strings.Contains(got, "log-queries") {
		t.Errorf("log-queries without DNSLogQueries")
	}
	// The launcher is not a Service endpoint.
	if slices.Contains(lines, "host-record=tj.default.svc.cluster.local,10.251.9.10") {
		t.Errorf("launcher published as service endpoint")
	}
	// Pod records precede service records so that PTR names the pod.
	podIdx := slices.Index(lines, "host-record=tj-node-0-0.tj.default.svc.cluster.local,tj-worker-0.tj.default.svc.cluster.local,10.251.9.11")
	svcIdx := slices.Index(lines, "host-record=tj.default.svc.cluster.local,10.251.9.11")
	if podIdx > svcIdx {
		t.Errorf("service record before pod record")
	}
}

func TestCommandArgv(t *testing.T) {
	_, c := testRecords(t, validConfig())
	c.tools = tools{ip: "/sbin/ip", nsenter: "/usr/bin/nsenter", setpriv: "/usr/bin/setpriv"}
	c.pods[1].NetNS, c.pods[1].UTSFile = "pmh-x-p1", "/run/u/p1"
	got, err := c.commandArgv(1, 1000680000, 0, []string{"HOME=/tmp"}, "id", []string{"-u"})
	if err != nil {
		t.Fatal(err)
	}
	want := "/sbin/ip netns exec pmh-x-p1 /usr/bin/nsenter --uts=/run/u/p1 -- /usr/bin/setpriv --reuid=1000680000 --regid=0 " +
		"--clear-groups --inh-caps=-all --pdeathsig=keep -- /usr/bin/env -i -- HOME=/tmp " + DefaultPath + " id -u"
	if strings.Join(got, " ") != want {
		t.Errorf("argv\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	got, err = c.commandArgv(1, -1, -1, []string{"PATH=/x"}, "true", nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, c.tools.setpriv) || slices.Contains(got, DefaultPath) {
		t.Errorf("root argv has setpriv or a second PATH: %v", got)
	}
	for _, bad := range []struct {
		pod  int
		env  []string
		name string
	}{{5, nil, "true"}, {-1, nil, "true"}, {0, []string{"NOEQUALS"}, "true"}, {0, []string{"=x"}, "true"}, {0, nil, ""}, {0, nil, "A=b"}} {
		if _, err := c.commandArgv(bad.pod, -1, -1, bad.env, bad.name, nil); err == nil {
			t.Errorf("commandArgv(pod %d, env %q, name %q) accepted", bad.pod, bad.env, bad.name)
		}
	}
}

var procNetSeed = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 0109FB0A:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 12345 2 0000000000000000 0
  124: 0100007F:1F90 0100007F:A0B2 01 00000000:00000000 00:00000000 00000000     0        0 12346 2 0000000000000000 0
`

func TestParseProcNet(t *testing.T) {
	got := parseProcNet([]byte(procNetSeed))
	want := []procSocket{
		{Local: netip.MustParseAddrPort("10.251.9.1:53"), Remote: netip.MustParseAddrPort("0.0.0.0:0"), State: 7},
		{Local: netip.MustParseAddrPort("127.0.0.1:8080"), Remote: netip.MustParseAddrPort("127.0.0.1:41138"), State: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseProcNet = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "x", "  1: zz:0035 00000000:0000 07", "  1: 0100007F:0035 00000000:0000 0x7g"} {
		if s := parseProcNet([]byte(bad)); len(s) != 0 {
			t.Errorf("parseProcNet(%q) = %v, want none", bad, s)
		}
	}
}

func FuzzParseProcNet(f *testing.F) {
	f.Add([]byte(procNetSeed))
	f.Add([]byte("  1: 0100007F:FFFF FFFFFFFF:0000 0A"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, s := range parseProcNet(b) {
			if !s.Local.Addr().Is4() || !s.Remote.Addr().Is4() {
				t.Fatalf("non-IPv4 socket %v", s)
			}
		}
	})
}

func TestProcStartTime(t *testing.T) {
	if v, err := procStartTime(os.Getpid()); err != nil || v == 0 {
		t.Errorf("procStartTime(self) = %d, %v", v, err)
	}
	if _, err := procStartTime(1 << 30); err == nil {
		t.Error("procStartTime of a pid that cannot exist succeeded")
	}
}

var mountinfoSeed = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
42 27 0:4 uts:[4026532177] /run/podmpi-harness/ab12cd/uts/pmh-ab12cd-p0 rw - nsfs nsfs rw
43 27 0:5 / /mnt/with\040space rw - tmpfs tmpfs rw
`

func TestParseMountinfo(t *testing.T) {
	got := parseMountinfo([]byte(mountinfoSeed))
	want := []string{"/", "/run/podmpi-harness/ab12cd/uts/pmh-ab12cd-p0", "/mnt/with space"}
	if !slices.Equal(got, want) {
		t.Errorf("parseMountinfo = %q, want %q", got, want)
	}
	if got := unescapeOctal(`a\04`); got != `a\04` {
		t.Errorf("truncated escape decoded: %q", got)
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte(mountinfoSeed))
	f.Add([]byte(`1 2 3 4 \777\0`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range parseMountinfo(b) {
			if len(m) > len(b) {
				t.Fatalf("mount point %q longer than input", m)
			}
		}
	})
}

// FuzzConfig checks that whatever names a config holds, either normalize
// rejects them or the generated dnsmasq config has exactly the expected lines
// (no injected directives).
func FuzzConfig(f *testing.F) {
	f.Add("tj", "default", "cluster.local", "tj-node-0-0", "tj-worker-0", 2222)
	for _, tc := range badConfigs {
		cfg := validConfig()
		tc.mutate(&cfg)
		alias := ""
		if len(cfg.Pods) > 1 && len(cfg.Pods[1].Aliases) > 0 {
			alias = cfg.Pods[1].Aliases[0]
		}
		host := ""
		if len(cfg.Pods) > 1 {
			host = cfg.Pods[1].Hostname
		}
		f.Add(cfg.Job, cfg.Namespace, cfg.ClusterDomain, host, alias, cfg.SRVPort)
	}
	f.Fuzz(func(t *testing.T, job, ns, domain, host, alias string, port int) {
		cfg := Config{Job: job, Namespace: ns, ClusterDomain: domain, SRVPort: port, Subnet: "10.251.3.0/24",
			Pods: []PodSpec{{Hostname: "l0", Publish: true}, {Hostname: host, Publish: true}}}
		if alias != "" {
			cfg.Pods[1].Aliases = []string{alias}
		}
		if cfg.normalize() != nil {
			return
		}
		r, _ := testRecords(t, cfg)
		conf := renderDNSConf(r, "/l", "/p", false)
		lines := strings.Split(strings.TrimSpace(conf), "\n")
		// 17 fixed lines, 2 pod records, 1 service record, 1 SRV.
		if len(lines) != 21 {
			t.Fatalf("got %d lines, want 21:\n%s", len(lines), conf)
		}
		if n := strings.Count(conf, "srv-host="); n != 1 {
			t.Fatalf("%d srv-host lines:\n%s", n, conf)
		}
	})
}
