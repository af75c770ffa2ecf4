package rsh

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// TestLauncherInstanceOnTheLauncherPodOnly: the launcher's instance, which
// it passes to mpirun's podmpi-rsh in the environment, is declared by a
// client on the launcher's own pod only; a client on another pod (the
// variable reached a rank there) or with a value it cannot read declares
// nothing and runs its command as before.
func TestLauncherInstanceOnTheLauncherPodOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	here := launcherid.New("uid-1", host, time.Now())
	if env := (Settings{Launcher: here}).Env(); len(env) != 1 || env[0] != [2]string{launcherid.EnvName, here.Value()} {
		t.Fatalf("Settings.Env = %v", env)
	}
	elsewhere := launcherid.New("uid-1", "tj-launcher-0-0-not-"+host, time.Now())
	for _, c := range []struct {
		name, value string
		want        string
	}{
		{"launcher pod", here.Value(), here.ID},
		{"another pod", elsewhere.Value(), ""},
		{"unreadable", "1 zz 5 - -", ""},
		{"unset", "", ""},
	} {
		var errb bytes.Buffer
		r := &runner{env: f.env(launcherid.EnvName, c.value), stderr: &errb}
		cfg, fail := r.config(Options{Host: "127.0.0.1", Verbose: 1}, f.srv.Port)
		if fail != nil {
			t.Fatalf("%s: %v", c.name, fail)
		}
		if cfg.Launcher.ID != c.want {
			t.Errorf("%s: declares %q, want %q (stderr %q)", c.name, cfg.Launcher.ID, c.want, errb.String())
		}
		if res := runMain(t, f.env(launcherid.EnvName, c.value), nil, "-p", f.port(), "127.0.0.1", "echo", "ok"); res.code != 0 || res.stdout != "ok\n" {
			t.Errorf("%s: the command did not run: %+v", c.name, res)
		}
	}
}

// TestLauncherPodRefusalEndsAtOnce: on the launcher's pod, a connection
// refused by an address of the pod itself (an MPI that asks for a daemon
// on the launcher's own hostfile entry) is not waited for: one line names
// the launcher's pod and the fix, at once, and the failure record says
// not-worker-agent. On another pod the same refusal is waited for as a
// late worker's.
func TestLauncherPodRefusalEndsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	here := launcherid.New("uid-1", host, time.Now())
	closed := strconv.Itoa(sshtest.FreePort(t))
	records := t.TempDir()
	start := time.Now()
	res := runMain(t, f.env(launcherid.EnvName, here.Value(), EnvWait, "1m", EnvFailureDir, records),
		nil, "-o", "ConnectionAttempts=10", "127.0.0.1", "-p", closed, "prted", "--prtemca", "x")
	if res.code != 255 || time.Since(start) > 5*time.Second {
		t.Fatalf("exit %d after %s, want 255 at once; stderr %q", res.code, time.Since(start), res.stderr)
	}
	for _, want := range []string{"127.0.0.1:" + closed + ": not-worker-agent: ", "an address of this pod " + host,
		"the launcher's own pod, where no worker-agent listens", "PRTE_MCA_prte_keep_fqdn_hostnames"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, res.stderr)
		}
	}
	recs, _, err := ReadFailureRecords(records, 10, nil)
	if err != nil || len(recs) != 1 || recs[0].Phase != string(sshclient.PhaseNotWorkerAgent) {
		t.Errorf("failure records %+v (%v), want one not-worker-agent", recs, err)
	}

	// Another pod's client (the variable reached a rank) waits as for a
	// late worker: ConnectionAttempts=2 bounds it here.
	elsewhere := launcherid.New("uid-1", "tj-launcher-0-0-not-"+host, time.Now())
	res = runMain(t, f.env(launcherid.EnvName, elsewhere.Value(), EnvWait, "1m"),
		nil, "-o", "ConnectionAttempts=2", "127.0.0.1", "-p", closed, "true")
	if res.code != 255 || !strings.Contains(res.stderr, ": tcp-refused: ") || !strings.Contains(res.stderr, "gave up after 2 attempts") {
		t.Errorf("another pod's client: exit %d, stderr %q; want tcp-refused after 2 attempts", res.code, res.stderr)
	}
}
