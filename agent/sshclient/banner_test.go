package sshclient

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

func TestBanner(t *testing.T) {
	k := sshtest.NewKey(t)
	good := sshtest.Start(t, sshtest.Options{HostKey: k.Signer})
	httpSrv := httptest.NewServer(http.NotFoundHandler())
	defer httpSrv.Close()
	httpPort := httpSrv.Listener.Addr().(*net.TCPAddr).Port
	cfg := Config{ConnectTimeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second}
	for name, tc := range map[string]struct {
		host  string
		port  int
		phase Phase
		hint  string
	}{
		"ssh server":     {"127.0.0.1", good.Port, "", ""},
		"refused":        {"127.0.0.1", sshtest.FreePort(t), PhaseTCPRefused, ""},
		"silent":         {"127.0.0.1", sshtest.SilentListener(t), PhaseHandshake, "never spoke SSH"},
		"http sidecar":   {"127.0.0.1", httpPort, PhaseHandshake, "sidecar"},
		"tls sidecar":    {"127.0.0.1", sshtest.TLSAlertListener(t), PhaseHandshake, "TLS"},
		"closes at once": {"127.0.0.1", sshtest.ClosingListener(t), PhaseHandshake, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := cfg
			if name == "silent" {
				c.HandshakeTimeout = 500 * time.Millisecond
			}
			start := time.Now()
			id, f := Banner(context.Background(), tc.host, tc.port, c)
			if tc.phase == "" {
				if f != nil || !strings.HasPrefix(id, "SSH-2.0-") {
					t.Fatalf("want an SSH identification, got %q %v", id, f)
				}
				return
			}
			if f == nil || f.Phase != tc.phase || !strings.Contains(f.Hint, tc.hint) {
				t.Fatalf("want %s (hint containing %q), got %v", tc.phase, tc.hint, f)
			}
			if name != "silent" && time.Since(start) > 4*time.Second {
				t.Fatalf("%s took %s: a non-SSH answer must be classified without waiting for the 5s timeout", name, time.Since(start))
			}
		})
	}
}
