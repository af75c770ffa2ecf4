package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/cluster"
)

// podmanService starts podman's Docker-compatible API service on a socket
// of the test's own and stops it (by PID) at the end.
func podmanService(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "podman.sock")
	// podman asks for 1048576 open files per container by default, more
	// than this machine's hard limit (root here lacks CAP_SYS_RESOURCE):
	// give the containers the limits this process has, as images/lib.sh
	// does for podman run.
	var nofile, nproc syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc); err != nil {
		t.Fatal(err)
	}
	if nproc.Max > 32768 {
		nproc.Max = 32768
	}
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("[containers]\ndefault_ulimits = [\"nofile=%d:%d\", \"nproc=%d:%d\"]\n",
		nofile.Max, nofile.Max, nproc.Max, nproc.Max)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file",
		"system", "service", "--time=0", "unix://"+sock)
	logf, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("podman system service: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	waitFor(t, 30*time.Second, "podman API socket", func() (bool, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	})
	return "unix://" + sock
}

// ansi matches the colour codes docker-compose puts around the prefix.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// composePrefix is what docker-compose v1 puts before each service's line.
var composePrefix = regexp.MustCompile(`(?m)^[a-zA-Z0-9_.-]+\s+\| ?`)

// TestCompose runs examples/compose/docker-compose.yaml, unchanged, under
// Debian's docker-compose against podman's Docker-compatible API, with the
// Open MPI and the MPICH image (PODMPI_IMAGE, the file's own knob), and
// checks every rank's line and the launcher's exit status.
func TestCompose(t *testing.T) {
	need(t)
	for _, tool := range []string{"docker-compose", "podman", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/cluster-deps.sh installs it)", tool)
		}
	}
	host := podmanService(t)
	for _, mpi := range []string{"openmpi", "mpich"} {
		t.Run(mpi, func(t *testing.T) {
			// A copy of examples/compose: keygen.sh writes the job's key
			// next to the compose file.
			dir := filepath.Join(t.TempDir(), "examples", "compose")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"docker-compose.yaml", "keygen.sh"} {
				b, err := os.ReadFile(filepath.Join(e.repo, "examples", "compose", f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := exec.Command(filepath.Join(dir, "keygen.sh")).CombinedOutput(); err != nil {
				t.Fatalf("keygen.sh: %v\n%s", err, out)
			}
			start := time.Now()
			log, hung := composeOnce(t, dir, host, mpi)
			if hung {
				t.Fatalf("compose %s: every rank reported but the launcher had not exited %s later: a hang in MPI_Finalize (see finalizeHangWait)", mpi, finalizeHangWait)
			}
			hosts := checkRanks(t, log, 3)
			for i := 1; i <= 3; i++ {
				if hosts[fmt.Sprintf("worker-%d", i)] == 0 {
					t.Errorf("no rank ran on worker-%d: %v", i, hosts)
				}
			}
			t.Logf("compose %s: launcher exit 0 after %s, ranks on %v", mpi, time.Since(start).Round(100*time.Millisecond), hosts)
		})
	}
}

// composeOnce runs `docker-compose up --no-build --exit-code-from launcher`
// in dir as a fresh project and returns the launcher's output, or hung when
// every rank reported but the launcher did not exit (finalizeHangWait).
func composeOnce(t *testing.T, dir, host, mpi string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	project := "podmpict" + randSuffix()
	envv := append(os.Environ(), "DOCKER_HOST="+host, "COMPOSE_PROJECT_NAME="+project,
		// podman's own copy of the image (compose runs on podman, not on
		// the cluster, and podman takes the cluster's plain-http registry
		// only when told per command).
		"PODMPI_IMAGE="+cluster.PodmpiImage(mpi, e.info.ImageTag), "COMPOSE_HTTP_TIMEOUT=300")
	compose := func(ctx context.Context, out *bytes.Buffer, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "docker-compose", args...)
		cmd.Dir, cmd.Env = dir, envv
		cmd.Stdout, cmd.Stderr = out, out
		return cmd
	}
	var bridge string
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		var out bytes.Buffer
		if err := compose(dctx, &out, "down", "--volumes", "--remove-orphans", "--timeout", "5").Run(); err != nil {
			t.Logf("docker-compose down: %v\n%s", err, out.String())
		}
		// Podman's CNI firewall plugin leaves its isolation rules for a
		// removed network's bridge: remove them.
		if bridge != "" {
			removeRulesOf(t, bridge)
		}
	}()
	var buf bytes.Buffer
	up := compose(ctx, &buf, "up", "--no-build", "--exit-code-from", "launcher")
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	launcher := project + "_launcher_1"
	var okSeen time.Time
	var err error
wait:
	for i := 0; ; i++ {
		select {
		case err = <-done:
			break wait
		case <-time.After(time.Second):
		}
		if bridge == "" {
			if b, ierr := exec.Command("podman", "network", "inspect", project+"_default", "--format", "{{.NetworkInterface}}").Output(); ierr == nil {
				bridge = strings.TrimSpace(string(b))
			}
		}
		// Podman runs health checks from systemd timers; this machine has
		// no systemd, so the test runs them for the project's containers
		// that are not healthy yet: what the timers would do. Compose
		// starts the launcher once the workers' own healthcheck (the
		// file's /readyz probe) passes.
		runHealthchecks(ctx, project)
		if i%5 == 4 && okSeen.IsZero() {
			if logs, lerr := exec.Command("podman", "logs", launcher).CombinedOutput(); lerr == nil && strings.Contains(string(logs), "podmpi-allreduce: OK") {
				okSeen = time.Now()
			}
		}
		if !okSeen.IsZero() && time.Since(okSeen) > finalizeHangWait {
			_ = up.Process.Kill()
			<-done
			return "", true
		}
	}
	out := buf.String()
	log := composePrefix.ReplaceAllString(ansi.ReplaceAllString(out, ""), "")
	if err != nil && strings.Contains(out, "'NoneType' object has no attribute 'log_stream'") {
		// docker-compose 1.29's log printer sometimes loses a container it
		// attached to through podman's API (a client crash after the job
		// ran): read the launcher's exit status and log from podman.
		t.Logf("docker-compose's log printer crashed (a Compose v1 client bug under podman); reading the launcher container directly")
		if _, werr := exec.CommandContext(ctx, "podman", "wait", launcher).Output(); werr != nil {
			t.Fatalf("podman wait %s: %v", launcher, werr)
		}
		code, ierr := exec.CommandContext(ctx, "podman", "inspect", launcher, "--format", "{{.State.ExitCode}}").Output()
		logs, lerr := exec.CommandContext(ctx, "podman", "logs", launcher).CombinedOutput()
		if ierr != nil || lerr != nil {
			t.Fatalf("reading %s: %v %v", launcher, ierr, lerr)
		}
		if c := strings.TrimSpace(string(code)); c != "0" {
			t.Fatalf("launcher exit %s; log:\n%s", c, lastLines(string(logs), 40))
		}
		return string(logs), false
	}
	if err != nil {
		t.Fatalf("docker-compose up --no-build --exit-code-from launcher: %v\n%s", err, lastLines(out, 60))
	}
	return log, false
}

// runHealthchecks runs the healthcheck of every running container of a
// compose project that is not healthy yet.
func runHealthchecks(ctx context.Context, project string) {
	podman := []string{"--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file"}
	out, err := exec.CommandContext(ctx, "podman", append(podman, "ps", "--filter", "label=com.docker.compose.project="+project,
		"--format", "{{.ID}} {{.Status}}")...).Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, status, _ := strings.Cut(line, " ")
		if id == "" || strings.Contains(status, "(healthy)") || !strings.Contains(status, "(") {
			continue
		}
		_ = exec.CommandContext(ctx, "podman", append(podman, "healthcheck", "run", id)...).Run()
	}
}

// removeRulesOf deletes the filter-table rules that name a network
// interface (-i or -o).
func removeRulesOf(t *testing.T, iface string) {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "-A ") || !(strings.Contains(l, " -i "+iface+" ") || strings.Contains(l, " -o "+iface+" ")) {
			continue
		}
		args := []string{"-w", "-t", "filter", "-D"}
		args = append(args, shellFields(strings.TrimPrefix(l, "-A "))...)
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			t.Logf("iptables %v: %v: %s", args, err, out)
		}
	}
}

// shellFields splits an iptables-save rule, keeping quoted comments whole.
func shellFields(s string) []string {
	var out []string
	var cur strings.Builder
	inQ, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQ, have = !inQ, true
		case r == ' ' && !inQ:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}
