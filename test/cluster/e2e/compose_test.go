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
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(ctx, filepath.Join(dir, "keygen.sh")).CombinedOutput(); err != nil {
				t.Fatalf("keygen.sh: %v\n%s", err, out)
			}
			project := "podmpict" + randSuffix()
			envv := append(os.Environ(), "DOCKER_HOST="+host, "COMPOSE_PROJECT_NAME="+project,
				"PODMPI_IMAGE="+e.info.Images[mpi], "COMPOSE_HTTP_TIMEOUT=300")
			compose := func(args ...string) (string, error) {
				cctx := ctx
				if args[0] == "down" {
					var cancel context.CancelFunc
					cctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
				}
				cmd := exec.CommandContext(cctx, "docker-compose", args...)
				cmd.Dir, cmd.Env = dir, envv
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				return out.String(), err
			}
			t.Cleanup(func() {
				if out, err := compose("down", "--volumes", "--remove-orphans", "--timeout", "5"); err != nil {
					t.Logf("docker-compose down: %v\n%s", err, out)
				}
			})
			start := time.Now()
			// Podman runs health checks from systemd timers; this machine
			// has no systemd, so the test runs them, every second, for the
			// project's containers that are not healthy yet: what the
			// timers would do. Compose starts the launcher once the
			// workers' own healthcheck (the file's /readyz probe) passes.
			hcDone := make(chan struct{})
			hcStopped := make(chan struct{})
			go func() {
				defer close(hcStopped)
				for {
					select {
					case <-hcDone:
						return
					case <-time.After(time.Second):
					}
					runHealthchecks(ctx, project)
				}
			}()
			out, err := compose("up", "--no-build", "--exit-code-from", "launcher")
			close(hcDone)
			<-hcStopped
			if err != nil {
				t.Fatalf("docker-compose up --exit-code-from launcher: %v\n%s", err, lastLines(out, 60))
			}
			log := composePrefix.ReplaceAllString(ansi.ReplaceAllString(out, ""), "")
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
