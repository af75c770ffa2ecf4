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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The SDK's home, writable under the read-only root (mounted before the
	// Secret inside it).
	p := startContainerPods(ctx, t, pm, "sdk", imagePrefix()+"/openmpi:latest",
		"--mount", "type=tmpfs,destination="+sdkHome+",tmpfs-mode=1777")
	// Trainer's hostfile: <pod>.<subdomain> slots=<numProcPerNode>.
	var hostfile strings.Builder
	for _, n := range p.shortNames() {
		fmt.Fprintf(&hostfile, "%s slots=1\n", n)
	}
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte(hostfile.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(hf), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := []string{"--volume", hf + ":/etc/mpi/hostfile:ro"}
	for _, kv := range e2e.TrainerLauncherEnv("/etc/mpi/hostfile", 1) {
		opts = append(opts, "--env", kv)
	}
	// The runtime's settings for the launcher, as its env twins: the SDK's
	// command leaves no room for flags.
	opts = append(opts, "--env", "PODMPI_DISCOVERY_TIMEOUT=1m", "--env", "PODMPI_PROBE_TIMEOUT=1m", "--env", "PODMPI_MPIRUN_TIMEOUT="+mpirunTimeout())
	out := p.runLauncher(ctx, opts, e2e.SDKCommand("/etc/mpi/hostfile", sdkHome+"/train.py", "python", e2e.SDKFunction)...)
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
