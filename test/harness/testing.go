package harness

import (
	"context"
	"testing"
	"time"
)

// StartT starts a cluster for a test and registers Close with t.Cleanup. It
// skips the test with one line when the machine cannot host a cluster (not root,
// or ip/dnsmasq/unshare/nsenter/setpriv missing) and fails it when setup fails.
// An empty cfg.LogDir becomes a t.TempDir(); when the test fails, the tail of
// dnsmasq's log is logged.
func StartT(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if err := Preflight(); err != nil {
		t.Skipf("harness: needs root and dnsmasq: %v", err)
	}
	if cfg.LogDir == "" {
		cfg.LogDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness: cluster %s dnsmasq log %s (tail): %s", c.ID(), c.DNSLog(), tail(c.DNSLog(), 2000))
		}
		if err := c.Close(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return c
}
