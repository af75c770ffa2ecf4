//go:build linux

package sshd

import (
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTCPKeepAliveAsOpenSSH checks the socket of an accepted connection:
// TCP keepalive on with the kernel's idle time (OpenSSH's TCPKeepAlive
// yes), not Go's 15 s, which drops a connection to a healthy peer after
// about 150 s of network partition. ss shows the keepalive timer of the
// server's end.
func TestTCPKeepAliveAsOpenSSH(t *testing.T) {
	t.Parallel()
	ss, err := exec.LookPath("ss")
	if err != nil {
		t.Skip("ss (iproute2) not installed")
	}
	idle := kernelKeepAliveTime(t)
	ts := startServer(t, nil)
	c, err := net.Dial("tcp", ts.addr)
	must(t, err)
	defer c.Close()
	local := c.LocalAddr().(*net.TCPAddr).Port
	timer := regexp.MustCompile(`timer:\(keepalive,([0-9]+)(min|sec|ms)`)
	var line string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command(ss, "-Htno", "state", "established",
			"( sport = :"+strconv.Itoa(ts.port)+" and dport = :"+strconv.Itoa(local)+" )").Output()
		must(t, err)
		if line = strings.TrimSpace(string(out)); line != "" {
			break
		}
	}
	m := timer.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the server's end of the connection has no keepalive timer: ss says %q", line)
	}
	n, _ := strconv.Atoi(m[1])
	left := map[string]time.Duration{"min": time.Minute, "sec": time.Second, "ms": time.Millisecond}[m[2]] * time.Duration(n)
	// ss rounds down to whole minutes; a minute of slack covers it.
	if left < idle-2*time.Minute {
		t.Errorf("keepalive fires in %s, want the kernel's tcp_keepalive_time %s (ss: %q)", left, idle, line)
	}
}

// kernelKeepAliveTime reads net.ipv4.tcp_keepalive_time.
func kernelKeepAliveTime(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_keepalive_time")
	if err != nil {
		t.Skipf("reading the kernel's keepalive time: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("tcp_keepalive_time %q: %v", b, err)
	}
	if n <= 300 {
		t.Skipf("this network namespace sets tcp_keepalive_time to %d s: too short to tell it from Go's 15 s", n)
	}
	return time.Duration(n) * time.Second
}
