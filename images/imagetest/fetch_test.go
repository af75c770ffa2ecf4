package imagetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBuildFetchesOnHost builds the binaries-only image and the Intel MPI
// image the way a fresh machine behind a TLS-inspecting proxy builds them:
// every RUN step of every build reaches no HTTPS server (its https_proxy
// points at a closed port; apt's http://deb.debian.org still works, as it
// does behind such a proxy), no layer comes from the cache, and Intel MPI's
// wheel cache is empty. images/build.sh must fetch on this machine what the
// builds would fetch over HTTPS (Go modules, the wheels) and hand it to
// them: the build passes, and the image runs Intel MPI and mpi4py.
//
// It wraps podman (a podman first on PATH that adds those build arguments
// to every "podman build" and runs the real one), and hides
// /var/cache/podmpi/intelmpi-<version> behind an empty folder in a mount
// namespace of its own for the build. Root, podman, the network to PyPI and
// the Go module proxy from this machine, and several minutes (nothing
// cached): PODMPI_FETCH_TEST=1.
func TestBuildFetchesOnHost(t *testing.T) {
	if os.Getenv("PODMPI_FETCH_TEST") != "1" {
		t.Skip("builds two images without cache (several minutes): PODMPI_FETCH_TEST=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (a mount namespace, podman's store)")
	}
	p := newPodman(t)
	realPodman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile(filepath.Join(root, "images", "intelmpi.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG INTEL_MPI_VERSION=(\S+)$`).FindSubmatch(df)
	if m == nil {
		t.Fatal("images/intelmpi.Dockerfile: no ARG INTEL_MPI_VERSION=")
	}
	wheelCache := "/var/cache/podmpi/intelmpi-" + string(m[1])

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// RUN steps get https_proxy from these build arguments (podman passes
	// the proxy variables to RUN without an ARG line).
	shim := fmt.Sprintf(`#!/bin/bash
# podman whose builds reach no HTTPS server from their RUN steps and use no cache.
args=() injected=0
for a in "$@"; do
	args+=("$a")
	if [[ $injected == 0 && $a == build ]]; then
		args+=(--no-cache --build-arg https_proxy=http://127.0.0.1:9 --build-arg HTTPS_PROXY=http://127.0.0.1:9)
		injected=1
	fi
done
exec %q "${args[@]}"
`, realPodman)
	if err := os.WriteFile(filepath.Join(bin, "podman"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(tmp, "intelmpi-cache")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(wheelCache, 0o755); err != nil {
		t.Fatal(err)
	}
	tag := "v0.0.0-fetchtest"
	prefix := "podmpi-fetchtest"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, n := range []string{"podmpi", "intelmpi"} {
			for _, tg := range []string{tag, tag + "-amd64", "latest"} {
				_, _ = p.run(ctx, "rmi", "localhost/"+prefix+"/"+n+":"+tg)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--", "bash", "-c",
		`mount --bind "$1" "$2" && exec "$3"/images/build.sh podmpi intelmpi`, "bash", empty, wheelCache, root)
	cmd.Dir = root
	logs := filepath.Join(tmp, "logs")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "PODMPI_VERSION="+tag, "PODMPI_TAG="+tag, "PODMPI_IMAGE_PREFIX="+prefix,
		"PODMPI_PLATFORMS=linux/amd64", "PODMPI_MPI_PLATFORMS=linux/amd64", "PODMPI_BUILD_LOGS="+logs, "PODMPI_INTELMPI_WHEELS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		var tails []string
		for _, f := range []string{"podmpi-amd64.log", "intelmpi-amd64.log"} {
			if b, rerr := os.ReadFile(filepath.Join(logs, f)); rerr == nil {
				tails = append(tails, f+":\n"+lastLines(string(b), 25))
			}
		}
		t.Fatalf("images/build.sh podmpi intelmpi with no HTTPS from the builds' RUN steps: %v\n%s\n%s", err, out, strings.Join(tails, "\n"))
	}
	t.Logf("built in %s without HTTPS from inside the builds:\n%s", time.Since(start).Round(time.Second), lastLines(string(out), 12))
	if fi, err := os.ReadDir(empty); err != nil || len(fi) == 0 {
		t.Errorf("the wheels were not fetched into the (hidden) cache %s on this machine: %v", wheelCache, err)
	}
	args := append(append([]string{"run", "--rm", "--network=none"}, p.ulimits...), "localhost/"+prefix+"/intelmpi:"+tag,
		"sh", "-c", "/opt/intel/mpi/bin/mpiexec.hydra --version | head -1; python3 -c 'import mpi4py; print(\"mpi4py\", mpi4py.__version__)'")
	got, err := p.run(ctx, args...)
	if err != nil || !strings.Contains(got, "Intel(R) MPI Library") || !strings.Contains(got, "mpi4py ") {
		t.Fatalf("the Intel MPI image does not run Intel MPI and mpi4py: %v\n%s", err, got)
	}
	t.Logf("the image: %s", strings.TrimSpace(got))
}

// lastLines is the end of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
