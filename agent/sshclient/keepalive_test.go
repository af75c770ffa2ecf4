//go:build linux

package sshclient

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestConnectTCPKeepAliveAsOpenSSH: the launcher's and podmpi-rsh's
// connections keep TCP keepalive on with the kernel's idle time, as
// OpenSSH's client does, not Go's 15 s (which drops a connection to a
// healthy worker after about 150 s of network partition).
func TestConnectTCPKeepAliveAsOpenSSH(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_keepalive_time")
	if err != nil {
		t.Skipf("reading the kernel's keepalive time: %v", err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := connect(context.Background(), []string{"127.0.0.1"}, port, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on, idle int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		if on, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); serr != nil {
			return
		}
		idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if on != 1 || idle != want {
		t.Errorf("SO_KEEPALIVE %d, TCP_KEEPIDLE %d s; want 1 and the kernel's tcp_keepalive_time %d s", on, idle, want)
	}
}
