package e2e

import (
	"strings"
	"testing"
)

// TestSSHToSelf: the check of TestOpenMPI5 finds podmpi's client failing
// to reach the launcher's own pod, and not the MPI's own lines that start
// with the launcher's name or the ranks' output. No cluster needed.
func TestSSHToSelf(t *testing.T) {
	const host = "job-launcher-0-0"
	log := strings.Join([]string{
		"[job-launcher-0-0:00017] plm:ssh: Warning: setpgid(22,22) failed in parent with errno=Permission denied(13)",
		"rank 4/6 on job-launcher-0-0: allreduce=21 (expect 21), vector of 65536 doubles ok",
		`{"level":"INFO","msg":"hostfile written","hosts":3}`,
	}, "\n")
	if got := sshToSelf(log, host); got != "" {
		t.Errorf("sshToSelf found %q in a log without ssh to the launcher", got)
	}
	bad := "podmpi-rsh: job-launcher-0-0.job:2222: connect: connection refused (not-worker-agent)"
	if got := sshToSelf(log+"\n"+bad, host); got != bad {
		t.Errorf("sshToSelf = %q, want the client's line %q", got, bad)
	}
	if got := sshToSelf(bad, ""); got != "" {
		t.Errorf("no launcher host: sshToSelf = %q, want nothing", got)
	}
}
