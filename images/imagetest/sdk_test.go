package imagetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/e2e"
	"github.com/podmpi/podmpi/test/harness"
)

// sdkHome is the SDK's DEFAULT_MPI_USER_HOME, where its command writes the
// training function.
const sdkHome = "/home/mpiuser"

// TestSDKCommandAcrossContainers runs the Kubeflow SDK's launcher command
// unchanged (`mpirun --hostfile /etc/mpi/hostfile bash -c '<script>'`, no
// "launcher --") in the Open MPI image, with Trainer's launcher environment,
// in hardened containers whose only writable places are /tmp and the SDK's
// home (an emptyDir-like tmpfs, as the examples' runtimes mount one there):
// the image's mpirun (podmpi's, first on PATH) runs the launcher's phases,
// then the real mpirun, and every rank writes and runs the function.
func TestSDKCommandAcrossContainers(t *testing.T) {
	if os.Getenv("PODMPI_IMAGE_TEST") != "1" {
		t.Skip("set PODMPI_IMAGE_TEST=1 (make image-test builds the images and does): runs the SDK's command across podman containers")
	}
	pm := newPodman(t)
	image := imagePrefix() + "/openmpi:latest"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if out, err := pm.run(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		t.Fatalf("image %s is missing (run images/build.sh openmpi): %v\n%s", image, err, out)
	}
	c := harness.StartT(t, harness.Config{
		Job: "sdk",
		Pods: []harness.PodSpec{
			{Hostname: "sdk-launcher-0-0", Role: harness.RoleLauncher, Publish: true},
			{Hostname: "sdk-node-0-0", Publish: true},
			{Hostname: "sdk-node-0-1", Publish: true},
			{Hostname: "sdk-node-0-2", Publish: true},
		},
	})
	authDir := writeAuthDir(t)
	name := func(role string) string { return "podmpi-it-" + c.ID() + "-sdk-" + role }
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
	// The SDK's home, writable under the read-only root (mounted before the
	// Secret inside it).
	home := []string{"--mount", "type=tmpfs,destination=" + sdkHome + ",tmpfs-mode=1777"}

	var hostfile strings.Builder
	for _, i := range c.Workers() {
		p := c.Pod(i)
		n := name(p.Hostname)
		args := append([]string{"run", "--detach", "--name", n}, pm.ulimits...)
		args = append(args, home...)
		args = append(args, hardened(p.NetNS, p.Hostname, authDir)...)
		args = append(args, image, "worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022")
		started = append(started, n)
		if out, err := pm.run(ctx, args...); err != nil {
			t.Fatalf("starting worker %s: %v\n%s", n, err, out)
		}
		// Trainer's hostfile: <pod>.<subdomain> slots=<numProcPerNode>.
		fmt.Fprintf(&hostfile, "%s slots=1\n", p.ShortName)
	}
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte(hostfile.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(hf), 0o755); err != nil {
		t.Fatal(err)
	}

	lp := c.Pod(0)
	ln := name("launcher")
	args := append([]string{"run", "--name", ln}, pm.ulimits...)
	args = append(args, home...)
	args = append(args, hardened(lp.NetNS, lp.Hostname, authDir)...)
	args = append(args, "--volume", hf+":/etc/mpi/hostfile:ro")
	for _, kv := range e2e.TrainerLauncherEnv("/etc/mpi/hostfile", 1) {
		args = append(args, "--env", kv)
	}
	// The runtime's settings for the launcher, as its env twins: the SDK's
	// command leaves no room for flags.
	args = append(args, "--env", "PODMPI_DISCOVERY_TIMEOUT=1m", "--env", "PODMPI_PROBE_TIMEOUT=1m", "--env", "PODMPI_MPIRUN_TIMEOUT="+mpirunTimeout())
	args = append(args, image)
	args = append(args, e2e.SDKCommand("/etc/mpi/hostfile", sdkHome+"/train.py", "python", e2e.SDKFunction)...)
	started = append(started, ln)
	start := time.Now()
	out, err := pm.run(ctx, args...)
	t.Logf("podman %s\n(%.1f s)\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
	if err != nil {
		for _, i := range c.Workers() {
			if logs, lerr := pm.run(context.Background(), "logs", name(c.Pod(i).Hostname)); lerr == nil {
				t.Logf("worker %s log:\n%s", c.Pod(i).Hostname, logs)
			}
		}
		t.Fatalf("launcher container: %v", err)
	}
	for _, want := range []string{"== hostfile", "== probe (3/3 workers reachable)", "replacing the command's hostfile with the launcher's"} {
		if !strings.Contains(out, want) {
			t.Errorf("launcher output lacks %q: the SDK's command did not get the launcher's phases", want)
		}
	}
	ranks := regexp.MustCompile(`(?m)^sdk-rank (\d) of 3 on (\S+)$`).FindAllStringSubmatch(out, -1)
	hosts := map[string]bool{}
	for _, m := range ranks {
		hosts[m[2]] = true
	}
	if len(ranks) != 3 || len(hosts) != 3 {
		t.Errorf("%d sdk-rank lines on %d hosts, want 3 on the 3 workers", len(ranks), len(hosts))
	}
}
