package imagetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/test/harness"
)

// arbitraryUID is an OpenShift-style UID with no passwd entry in the image.
const arbitraryUID = "1000680000"

// podman is the engine with the flags this machine needs (see images/lib.sh,
// which test.sh sources and whose values arrive through the environment).
type podman struct {
	global  []string
	ulimits []string
}

func newPodman(t *testing.T) podman {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (apt-get install -y podman runc)")
	}
	p := podman{
		global:  []string{"--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file"},
		ulimits: []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"},
	}
	if v, ok := os.LookupEnv("PODMPI_PODMAN_FLAGS"); ok {
		p.global = strings.Fields(v)
	}
	if v, ok := os.LookupEnv("PODMPI_ULIMITS"); ok {
		p.ulimits = strings.Fields(v)
	}
	return p
}

// run runs podman with args under ctx and returns combined output.
func (p podman) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", append(append([]string{}, p.global...), args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// writeAuthDir writes a job key as Trainer v2 mounts its Secret
// (sshtest.WriteSecret: id_rsa root:root 0640, readable only through GID 0
// as an arbitrary OpenShift UID has it; the public files 0644).
func writeAuthDir(t *testing.T) string {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	dir := filepath.Join(t.TempDir(), "ssh")
	if err := sshtest.WriteSecret(dir, k, k.Public()); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hardened are the container options of the acceptance criterion: arbitrary
// UID in group 0 with no passwd entry written by podman, read-only root with
// only /tmp writable (as an emptyDir), no capabilities, no new privileges.
//
// PODMPI_IMAGE_TEST_ENV adds space-separated NAME=VALUE pairs to every
// container (for experiments, e.g. UCX_TLS=tcp).
func hardened(netns, hostname, authDir string) []string {
	args := []string{
		"--network", "ns:/run/netns/" + netns,
		"--hostname", hostname,
		"--user", arbitraryUID + ":0",
		"--passwd=false",
		"--read-only",
		"--read-only-tmpfs=false",
		"--mount", "type=tmpfs,destination=/tmp,tmpfs-mode=1777",
		"--cap-drop=ALL",
		"--security-opt", "no-new-privileges",
		"--volume", authDir + ":/home/mpiuser/.ssh:ro",
		"--env", "PODMPI_SSH_AUTH_DIR=/home/mpiuser/.ssh",
		"--env", "PODMPI_LOG_FORMAT=text",
	}
	for _, kv := range strings.Fields(os.Getenv("PODMPI_IMAGE_TEST_ENV")) {
		args = append(args, "--env", kv)
	}
	return args
}

func TestAllreduceAcrossContainers(t *testing.T) {
	if os.Getenv("PODMPI_IMAGE_TEST") != "1" {
		t.Skip("set PODMPI_IMAGE_TEST=1 (make image-test builds the images and does): runs MPI across podman containers")
	}
	pm := newPodman(t)
	prefix := os.Getenv("PODMPI_IMAGE_PREFIX")
	if prefix == "" {
		prefix = "localhost/podmpi"
	}
	if !strings.Contains(prefix, "/") || strings.HasPrefix(prefix, "podmpi") {
		prefix = "localhost/" + prefix
	}
	for _, mpi := range []struct {
		name, image string
		np          int
		launcher    []string // flags before "--"
	}{
		// Open MPI: the workers come from a Trainer-style /etc/mpi/hostfile.
		{"openmpi", prefix + "/openmpi:latest", 6, nil},
		// MPICH: the workers come from a name template and a count, with
		// the same Trainer hostfile absent.
		{"mpich", prefix + "/mpich:latest", 6, []string{"--discovery.template=tj-node-0-{i}.tj", "--workers-expected=3"}},
		// Intel MPI: Trainer's hostfile again, which the launcher rewrites
		// as Intel's host:N (the podmpi-intelmpi runtime's case).
		{"intelmpi", prefix + "/intelmpi:latest", 6, nil},
	} {
		t.Run(mpi.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			if out, err := pm.run(ctx, "image", "inspect", "--format", "{{.Id}}", mpi.image); err != nil {
				t.Fatalf("image %s is missing (run images/build.sh %s): %v\n%s", mpi.image, mpi.name, err, out)
			}
			if mpi.name == "mpich" {
				checkMPICHVersion(ctx, t, pm, mpi.image)
			}
			c := harness.StartT(t, harness.Config{
				Job: "tj",
				Pods: []harness.PodSpec{
					{Hostname: "tj-launcher-0-0", Role: harness.RoleLauncher, Publish: true},
					{Hostname: "tj-node-0-0", Publish: true},
					{Hostname: "tj-node-0-1", Publish: true},
					{Hostname: "tj-node-0-2", Publish: true},
				},
			})
			authDir := writeAuthDir(t)
			name := func(role string) string { return "podmpi-it-" + c.ID() + "-" + mpi.name + "-" + role }
			// Remove our containers by name, whatever happened.
			var started []string
			t.Cleanup(func() {
				cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer ccancel()
				for _, n := range started {
					if out, err := pm.run(cctx, "rm", "--force", "--time", "5", n); err != nil {
						t.Errorf("removing container %s: %v\n%s", n, err, out)
					}
				}
			})

			var hostfile strings.Builder
			for _, i := range c.Workers() {
				p := c.Pod(i)
				n := name(p.Hostname)
				args := append([]string{"run", "--detach", "--name", n}, pm.ulimits...)
				args = append(args, hardened(p.NetNS, p.Hostname, authDir)...)
				args = append(args, mpi.image, "worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022")
				started = append(started, n)
				if out, err := pm.run(ctx, args...); err != nil {
					t.Fatalf("starting worker %s: %v\n%s", n, err, out)
				}
				fmt.Fprintf(&hostfile, "%s slots=2\n", p.ShortName)
			}

			// What the containers really are: UID, no passwd entry, read-only root.
			w0 := name(c.Pod(c.Workers()[0]).Hostname)
			out, err := pm.run(ctx, "exec", w0, "sh", "-c",
				`echo uid=$(id -u) gid=$(id -g); getent passwd $(id -u) || echo "no passwd entry"; `+
					`touch /probe 2>&1 || true; touch /tmp/probe && echo "/tmp writable"; grep Cap /proc/self/status; `+
					`grep NoNewPrivs /proc/self/status`)
			if err != nil {
				t.Fatalf("inspecting %s: %v\n%s", w0, err, out)
			}
			t.Logf("inside %s:\n%s", w0, out)
			for _, want := range []string{"uid=" + arbitraryUID + " gid=0", "no passwd entry", "Read-only file system", "/tmp writable",
				"CapEff:\t0000000000000000", "NoNewPrivs:\t1"} {
				if !strings.Contains(out, want) {
					t.Errorf("worker container: want %q in:\n%s", want, out)
				}
			}

			lp := c.Pod(0)
			ln := name("launcher")
			args := append([]string{"run", "--name", ln}, pm.ulimits...)
			args = append(args, hardened(lp.NetNS, lp.Hostname, authDir)...)
			if mpi.launcher == nil {
				hf := filepath.Join(t.TempDir(), "hostfile")
				if err := os.WriteFile(hf, []byte(hostfile.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Dir(hf), 0o755); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--volume", hf+":/etc/mpi/hostfile:ro")
			}
			// 2 ranks per worker: the CPU-only workers report 1 slot each on /info.
			args = append(args, mpi.image, "launcher", "--slots=2", "--discovery.timeout=1m", "--probe.timeout=1m", "--mpirun.timeout="+mpirunTimeout())
			args = append(args, mpi.launcher...)
			args = append(args, "--", "mpirun", "-np", fmt.Sprint(mpi.np), "podmpi-allreduce")
			started = append(started, ln)
			start := time.Now()
			out, err = pm.run(ctx, args...)
			t.Logf("podman %s\n(%.1f s)\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
			if err != nil {
				for _, i := range c.Workers() {
					if logs, lerr := pm.run(context.Background(), "logs", name(c.Pod(i).Hostname)); lerr == nil {
						t.Logf("worker %s log:\n%s", c.Pod(i).Hostname, logs)
					}
				}
				t.Fatalf("launcher container: %v", err)
			}
			want := fmt.Sprintf("podmpi-allreduce: OK: %d ranks", mpi.np)
			if !strings.Contains(out, want) {
				t.Fatalf("launcher output lacks %q", want)
			}
			// Every worker ran ranks: each worker's hostname appears.
			for _, i := range c.Workers() {
				if !strings.Contains(out, "on "+c.Pod(i).Hostname) {
					t.Errorf("no rank ran on %s", c.Pod(i).Hostname)
				}
			}
		})
	}
}

// mpirunTimeout is the launcher's --mpirun.timeout; PODMPI_IMAGE_TEST_MPIRUN_TIMEOUT
// overrides the default 2m.
func mpirunTimeout() string {
	if v := os.Getenv("PODMPI_IMAGE_TEST_MPIRUN_TIMEOUT"); v != "" {
		return v
	}
	return "2m"
}
