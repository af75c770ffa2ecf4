package e2e

import (
	"strings"
	"testing"
	"time"
)

// firstLine is the first output line holding s, "" when none does.
func firstLine(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestDNSBlockedIsNamed: the launcher pod's DNS traffic is dropped on its
// way to the cluster DNS (dnsmasq), as a NetworkPolicy whose DNS rule
// misses the server the pod asks does. Within seconds, the wait's first
// progress line names the DNS server that does not answer and that egress
// to it may be blocked, and a warning says so (the Warning Event where the
// API is there); it used to read "0/2 workers resolved; waiting for ..."
// until --discovery.timeout. The wait still is a wait: once DNS is let
// through again, the launcher says so and the job runs.
func TestDNSBlockedIsNamed(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	f := newFixture(t, "db", 2)
	f.startAgents(t, ctx, 1, 2)
	if err := f.c.DropDNS(0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p := f.launch(t, ctx, append(f.workersFlag(2), "--discovery.timeout", "90s"), "mpirun.openmpi", allreduceOMPI)
	server := f.c.HubIP().String() + ":53"
	silence := "does not answer: egress to it may be blocked"
	waitOutput(t, p, silence, 1, 30*time.Second)
	seen := time.Since(start)
	out := readLog(p)
	first := firstLine(out, "workers resolved; waiting for")
	for _, want := range []string{"0/2 workers resolved; waiting for db-node-0-0.db, db-node-0-1.db (no answer from the DNS server " + server + ")",
		"the DNS server " + server + " " + silence} {
		if !strings.Contains(first, want) {
			t.Errorf("first progress line lacks %q:\n%s", want, first)
		}
	}
	warn := firstLine(out, "DNS lookups get ")
	for _, want := range []string{"level=WARN", "DNS lookups get no answer from the DNS server " + server, "kubectl describe networkpolicy"} {
		if !strings.Contains(warn, want) {
			t.Errorf("the DNS warning lacks %q:\n%s", want, warn)
		}
	}
	t.Logf("the blocked DNS was named %v after the launcher started:\n%s\n%s", seen.Round(100*time.Millisecond), first, warn)

	if err := f.c.RestoreDNS(0); err != nil {
		t.Fatal(err)
	}
	r := wait(t, p, start, 2*time.Minute)
	mustSucceed(t, r)
	checkAllreduce(t, r, 4, map[string]int{"db-node-0-0": 2, "db-node-0-1": 2})
	if !strings.Contains(r.out, "the DNS server answers again") {
		t.Errorf("the launcher did not say the DNS server answers again:\n%s", r.out)
	}
}
