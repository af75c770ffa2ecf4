package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// TestDrills breaks one thing at a time in a 1 launcher + 3 workers cluster
// and checks the launcher's exit code and its diagnosis line: the phase and
// the host, with the hint. A 4th worker pod (dr-node-0-3) is never published
// and never started. Each drill restores the cluster for the next one.
func TestDrills(t *testing.T) {
	ctx := testCtx(t, 8*time.Minute)
	f := newFixture(t, "dr", 4, 4)
	f.startAgents(t, ctx, 1, 2, 3)
	workers := f.workersFlag(3)
	probeFast := []string{"--probe.timeout", "5s"}

	// expectProbeFailure runs the launcher and checks exit 67 with the
	// diagnosis line of host in phase containing hint, and that the other
	// two workers passed.
	expectProbeFailure := func(t *testing.T, host, phase, hint string) {
		t.Helper()
		r := f.run(t, ctx, 60*time.Second, append(append([]string{}, workers...), probeFast...), "mpirun.openmpi", "hostname")
		if r.code != 67 {
			t.Errorf("exit %d, want 67 (probe failed)", r.code)
		}
		line := diagLine(r.out, host, phase)
		switch {
		case line == "":
			t.Errorf("no diagnosis line %q in the output", host+":2222: "+phase+": ")
		case !strings.Contains(line, "; hint: ") || !strings.Contains(line, hint):
			t.Errorf("diagnosis line lacks a hint with %q:\n%s", hint, line)
		default:
			t.Logf("diagnosis: %s", line)
		}
		if !strings.Contains(r.out, "== probe (2/3 workers reachable)") {
			t.Errorf("want exactly the one broken worker failing the probe")
		}
		if got := countHosts(r.out, map[string]int{"dr-node-0-0": 0, "dr-node-0-1": 0, "dr-node-0-2": 0}); len(got) > 0 {
			t.Errorf("mpirun ran after a failed probe: hostname lines %v", got)
		}
		if t.Failed() {
			t.Logf("launcher output:\n%s", r.out)
		}
	}

	t.Run("worker_never_starts", func(t *testing.T) {
		r := f.run(t, ctx, 30*time.Second,
			[]string{"--discovery.template", "dr-node-0-{i}.dr", "--workers-expected", "4", "--discovery.timeout", "3s"},
			"mpirun.openmpi", "hostname")
		if r.code != 66 {
			t.Errorf("exit %d, want 66 (discovery timeout)", r.code)
		}
		var line string
		for _, l := range strings.Split(r.out, "\n") {
			if strings.Contains(l, "dns-wait") && strings.Contains(l, "missing: dr-node-0-3.dr") {
				line = l
				break
			}
		}
		if line == "" {
			t.Errorf("no dns-wait diagnosis naming the missing worker dr-node-0-3.dr")
		}
		for _, ok := range []string{"dr-node-0-0.dr", "dr-node-0-1.dr", "dr-node-0-2.dr"} {
			if strings.Contains(line, ok+" ") || strings.Contains(line, ok+",") {
				t.Errorf("diagnosis names the resolvable worker %s as missing: %s", ok, line)
			}
		}
		if !strings.Contains(r.out, "likely causes:") || !strings.Contains(r.out, "publishNotReadyAddresses") {
			t.Errorf("no hint (scheduling / publishNotReadyAddresses) for the discovery timeout")
		}
		if r.took > 20*time.Second {
			t.Errorf("took %v with --discovery.timeout 3s", r.took)
		}
		if t.Failed() {
			t.Logf("launcher output:\n%s", r.out)
		}
	})

	t.Run("port_dropped", func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("nft not installed (apt-get install -y nftables)")
		}
		if err := f.c.DropTCP(2, SSHPort); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := f.c.RestoreTCP(2); err != nil {
				t.Error(err)
			}
		}()
		start := time.Now()
		expectProbeFailure(t, "dr-node-0-1.dr", "tcp-timeout", "NetworkPolicy")
		// --probe.timeout is the probe's deadline, dial included.
		if took := time.Since(start); took > 5*time.Second+3*time.Second {
			t.Errorf("launcher took %v to give up with --probe.timeout 5s", took.Round(time.Millisecond))
		}
	})

	t.Run("wrong_authorized_key", func(t *testing.T) {
		f.startAgent(t, ctx, 1, AgentOptions{AuthDir: wrongAuthDir})
		defer f.startAgent(t, ctx, 1, AgentOptions{})
		expectProbeFailure(t, "dr-node-0-0.dr", "auth", "authorized_keys")
	})

	t.Run("wrong_host_key", func(t *testing.T) {
		f.startAgent(t, ctx, 3, AgentOptions{AuthDir: wrongHostDir})
		defer f.startAgent(t, ctx, 3, AgentOptions{})
		expectProbeFailure(t, "dr-node-0-2.dr", "host-key", "different job's Secret")
	})

	t.Run("http_on_ssh_port", func(t *testing.T) {
		// What a sidecar proxy answering on the worker's port looks like:
		// worker-agent still runs and answers /info on 9022 (so the slots
		// phase has its count), but port 2222 is served by something else.
		f.startAgent(t, ctx, 2, AgentOptions{Args: []string{"--ssh.listen-address", ":2224"}})
		defer f.startAgent(t, ctx, 2, AgentOptions{})
		ln, err := ListenInPod(f.c, 2, ":2222")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		expectProbeFailure(t, "dr-node-0-1.dr", "handshake", "sidecar")
	})

	t.Run("daemon_not_on_path", func(t *testing.T) {
		// PATH without /usr/bin (and so without orted); /bin is a symlink
		// to /usr/bin on merged-usr Debian, so it cannot be used either.
		f.startAgent(t, ctx, 3, AgentOptions{Env: []string{"PATH=" + noMPIPath}, Args: []string{"--ssh.shell", "/bin/sh"}})
		defer f.startAgent(t, ctx, 3, AgentOptions{})
		expectProbeFailure(t, "dr-node-0-2.dr", "remote-command", "orted")
	})

	t.Run("worker_killed_mid_job", func(t *testing.T) {
		start := time.Now()
		p := f.launch(t, ctx, workers, "mpirun.openmpi", "-np", "6", allreduceOMPI, "120")
		waitOutput(t, p, "sleeping", 6, 60*time.Second)
		before := len(readLog(p))
		if err := f.c.KillPod(3); err != nil {
			t.Fatal(err)
		}
		delete(f.agents, 3)
		killed := time.Now()
		defer f.startAgent(t, ctx, 3, AgentOptions{})
		r := wait(t, p, start, 30*time.Second)
		after := time.Since(killed)
		if r.code == 0 {
			t.Errorf("launcher exit 0 after a worker died")
		}
		if after > 10*time.Second {
			t.Errorf("launcher exited %v after the worker died, want < 10s", after.Round(time.Millisecond))
		}
		if tail := r.out[min(before, len(r.out)):]; !strings.Contains(tail, "dr-node-0-2") {
			t.Errorf("the output after the kill does not name the dead worker dr-node-0-2:\n%s", tail)
		}
		f.noLeftovers(t, 5*time.Second)
		if t.Failed() {
			t.Logf("launcher exit %d; output:\n%s", r.code, r.out)
		}
	})

	t.Run("worker_name_leaves_dns", func(t *testing.T) {
		// A worker that is only not Ready leaves a headless Service
		// without publishNotReadyAddresses (mpi-operator's default) while
		// its agent and ranks run on: its name is out of DNS for 8 s,
		// eight rounds of the watch, then back. The launcher asks the
		// address the name had, finds the same agent there, and the job
		// completes; it used to stop mpirun (74) after two rounds.
		start := time.Now()
		p := f.launch(t, ctx, append(append([]string{}, workers...), "--diagnosis.watch-interval", "1s"),
			"mpirun.openmpi", "-np", "6", allreduceOMPI, "16")
		waitOutput(t, p, "sleeping", 6, 60*time.Second)
		if err := f.c.Unpublish(ctx, 3); err != nil {
			t.Fatal(err)
		}
		published := false
		defer func() {
			if !published {
				_ = f.c.Publish(ctx, 3)
			}
		}()
		time.Sleep(8 * time.Second)
		if err := f.c.Publish(ctx, 3); err != nil {
			t.Fatal(err)
		}
		published = true
		r := wait(t, p, start, 60*time.Second)
		if r.code != 0 {
			t.Errorf("exit %d, want 0: a worker whose name left DNS while its agent ran ended the job", r.code)
		}
		for _, want := range []string{"a worker's name is missing from DNS, but its worker-agent, the same one, answers", "a worker's name resolves again"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("the launcher's log lacks %q", want)
			}
		}
		if t.Failed() {
			t.Logf("launcher exit %d; output:\n%s", r.code, r.out)
		}
	})

	t.Run("sigterm_mid_job", func(t *testing.T) {
		const grace = 5 * time.Second
		start := time.Now()
		p := f.launch(t, ctx, append(append([]string{}, workers...), "--mpirun.kill-grace", grace.String()),
			"mpirun.openmpi", "-np", "6", allreduceOMPI, "120")
		waitOutput(t, p, "sleeping", 6, 60*time.Second)
		// Kubernetes signals the container's main process only.
		sent := time.Now()
		if err := syscall.Kill(p.PID(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := wait(t, p, start, grace+10*time.Second)
		took := time.Since(sent)
		// The launcher forwards SIGTERM to mpirun and then exits with
		// mpirun's code (Open MPI exits 1 after a SIGTERM), or 128+15 when
		// it had to kill it: any failure code, never 0.
		if r.code == 0 {
			t.Errorf("exit 0 after SIGTERM, want a failure code")
		}
		t.Logf("exit %d after SIGTERM", r.code)
		if took > grace+2*time.Second {
			t.Errorf("launcher took %v to exit after SIGTERM, grace %v", took.Round(time.Millisecond), grace)
		}
		f.noLeftovers(t, max(grace-took, 0)+time.Second)
		if t.Failed() {
			t.Logf("launcher exit %d after %v; output:\n%s", r.code, took, r.out)
		}
	})
}

func readLog(p *harness.Proc) string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// waitOutput waits until the launcher's output holds n occurrences of s.
func waitOutput(t *testing.T, p *harness.Proc, s string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for strings.Count(readLog(p), s) < n {
		select {
		case <-p.Done():
			t.Fatalf("launcher exited %d before %d x %q; output:\n%s", p.ExitCode(), n, s, readLog(p))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d x %q within %v; output:\n%s", n, s, d, readLog(p))
		}
	}
}
