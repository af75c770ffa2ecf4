package launcher

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
)

// silentDNS is Go's resolver asking a UDP socket on loopback that reads
// every query and answers none: a DNS server the launcher cannot reach, as
// behind a NetworkPolicy whose DNS rule misses where the cluster's DNS runs.
func silentDNS(t *testing.T) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// TestDNSWaitSaysTheServerDoesNotAnswer: with a DNS server that answers
// nothing, the dns-wait does not look like a slow start: its first progress
// line names the silence and the likely cause, a Warning Event says so
// while the wait goes on, and the deadline (the same, exit 66) says it
// first in its hint. It used to log "0/2 workers resolved; waiting for
// ..." until the deadline, and only then "DNS timeout".
func TestDNSWaitSaysTheServerDoesNotAnswer(t *testing.T) {
	api := newFakeAPI(t, jobPod("tj-node-0-1-bb", "tj-node-0-1"), jobPod("tj-node-0-2-cc", "tj-node-0-2"))
	cfg := Defaults()
	cfg.Discovery = discovery.Spec{Workers: []string{"tj-node-0-1.tj.invalid.", "tj-node-0-2.tj.invalid."}, Self: "tj-launcher-0-0"}
	cfg.Resolver = silentDNS(t)
	cfg.DiscoveryTimeout = 5 * time.Second
	cfg.Implementation = "openmpi4"
	cfg.Command = []string{"mpirun", "true"}
	code, msg, logs := runJobWithAPI(t, api, cfg)
	if code != exitcode.DiscoveryTimeout {
		t.Fatalf("exit %d (%s), want %d", code, msg, exitcode.DiscoveryTimeout)
	}
	var first string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "workers resolved; waiting for") {
			first = l
			break
		}
	}
	for _, want := range []string{"0/2 workers resolved; waiting for tj-node-0-1.tj.invalid., tj-node-0-2.tj.invalid. (no answer from the DNS server ",
		" does not answer: egress to it may be blocked (a NetworkPolicy's DNS rule)"} {
		if !strings.Contains(first, want) {
			t.Errorf("first progress line lacks %q:\n%s", want, first)
		}
	}
	var warned, failed *corev1.Event
	for _, e := range api.events(t) {
		switch e.Reason {
		case EventDNSNotAnswering:
			warned = &e
		case "WorkersNotResolved":
			failed = &e
		}
	}
	if warned == nil || warned.Type != kube.Warning || !strings.Contains(warned.Message, "DNS lookups get no answer from the DNS server ") ||
		!strings.Contains(warned.Message, "kubectl describe networkpolicy") {
		t.Errorf("no %s Warning naming the silent server and the NetworkPolicy: %+v", EventDNSNotAnswering, warned)
	}
	if failed == nil {
		t.Errorf("no WorkersNotResolved Event at the deadline")
	}
	if i := strings.Index(msg, "likely causes:\n  - no answer from the DNS server "); i < 0 || !strings.Contains(msg[i:], "egress to it may be blocked") {
		t.Errorf("the deadline's hint does not start with the silent DNS server:\n%s", msg)
	}
}
