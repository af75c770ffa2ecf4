package imagetest

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/imagecheck"
	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/images/glibctest"
)

// binariesContent is everything the binaries-only image may hold.
var binariesContent = []string{
	"opt", "opt/podmpi", "opt/podmpi/LICENSE", "opt/podmpi/NOTICE",
	"opt/podmpi/bin", "opt/podmpi/bin/launcher", "opt/podmpi/bin/podmpi-rsh",
	// The relative links make build lays out: ssh to podmpi-rsh, the MPI
	// launcher names and worker-agent to the launcher.
	"opt/podmpi/bin/ssh", "opt/podmpi/bin/mpirun", "opt/podmpi/bin/mpiexec",
	"opt/podmpi/bin/mpiexec.hydra", "opt/podmpi/bin/worker-agent",
	// The real worker-agent, which bin/worker-agent runs once the image
	// can run it.
	"opt/podmpi/libexec", "opt/podmpi/libexec/worker-agent",
	"opt/podmpi/sbom", "opt/podmpi/sbom/launcher.go-version-m.txt", "opt/podmpi/sbom/podmpi-rsh.go-version-m.txt",
	"opt/podmpi/sbom/podmpi.spdx.json", "opt/podmpi/sbom/worker-agent.go-version-m.txt",
}

// imagePrefix is the local name prefix of the images make image-test built.
func imagePrefix() string {
	prefix := os.Getenv("PODMPI_IMAGE_PREFIX")
	if prefix == "" {
		prefix = "localhost/podmpi"
	}
	if !strings.Contains(prefix, "/") || strings.HasPrefix(prefix, "podmpi") {
		prefix = "localhost/" + prefix
	}
	return prefix
}

// platformArchs are the architectures the binaries image was built for
// (PODMPI_PLATFORMS, as images/test.sh passes it to build.sh).
func platformArchs() []string {
	v := os.Getenv("PODMPI_PLATFORMS")
	if v == "" {
		return []string{runtime.GOARCH}
	}
	var archs []string
	for _, p := range strings.Split(v, ",") {
		archs = append(archs, p[strings.LastIndex(p, "/")+1:])
	}
	return archs
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func readBinary(t *testing.T, path string) glibctest.Binary {
	t.Helper()
	b, err := glibctest.ReadBinary(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestBinariesImage checks the FROM scratch image of every platform it was
// built for: only /opt/podmpi, binaries of the right architecture, a
// worker-agent that needs glibc 2.28 at most, a static launcher, and an SBOM
// that names both binaries by their checksums. Then it does what adopters
// do, COPY --from the image into a Debian bullseye base (glibc 2.31), and
// runs both binaries there under an arbitrary UID; and it checks that the
// MPI images carry the same binaries.
func TestBinariesImage(t *testing.T) {
	if os.Getenv("PODMPI_IMAGE_TEST") != "1" {
		t.Skip("set PODMPI_IMAGE_TEST=1 (make image-test builds the images and does): inspects the podmpi binaries image")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts the images (podman image mount)")
	}
	pm := newPodman(t)
	tag := os.Getenv("PODMPI_TAG")
	if tag == "" {
		t.Fatal("PODMPI_TAG is not set (images/test.sh sets it to the tag build.sh used)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := imagePrefix() + "/podmpi"
	sums := map[string]map[string]string{} // arch -> binary -> sha256
	for _, arch := range platformArchs() {
		t.Run(arch, func(t *testing.T) {
			ref := name + ":" + tag + "-" + arch
			out, err := pm.run(ctx, "image", "inspect", "--format", "{{.Architecture}} {{.Os}} {{index .Labels \"org.opencontainers.image.licenses\"}}", ref)
			if err != nil {
				t.Fatalf("image %s is missing (images/build.sh podmpi with PODMPI_PLATFORMS): %v\n%s", ref, err, out)
			}
			if got := strings.TrimSpace(out); got != arch+" linux Apache-2.0" {
				t.Errorf("%s: architecture, OS, license %q, want %q", ref, got, arch+" linux Apache-2.0")
			}
			mnt, err := pm.run(ctx, "image", "mount", ref)
			if err != nil {
				t.Fatalf("podman image mount %s: %v\n%s", ref, err, mnt)
			}
			t.Cleanup(func() {
				if out, err := pm.run(context.Background(), "image", "unmount", ref); err != nil {
					t.Errorf("podman image unmount %s: %v\n%s", ref, err, out)
				}
			})
			dir := strings.TrimSpace(mnt)
			sums[arch] = checkOpt(t, ref, dir, arch)
			agent := readBinary(t, filepath.Join(dir, "opt", "podmpi", "libexec", "worker-agent"))
			if glibc := agent.Newest(); glibc == "" || imagecheck.VersionLess(glibctest.MaxGLIBC, glibc) {
				t.Errorf("%s: worker-agent needs GLIBC_%s; want at most GLIBC_%s", ref, glibc, glibctest.MaxGLIBC)
			} else {
				t.Logf("%s: only /opt/podmpi; worker-agent needs GLIBC_%s, launcher and %s static", ref, glibc, rsh.Name)
			}
		})
	}

	// What adopters do: COPY --from the image into their own base. Here a
	// Debian bullseye base, run with an arbitrary UID and nothing else.
	host := runtime.GOARCH
	if sums[host] == nil {
		t.Fatalf("no binaries image for this machine's architecture %s", host)
	}
	from := name + ":" + tag + "-" + host
	testImage := "localhost/podmpi-imagetest/adopter:" + strconv.Itoa(os.Getpid())
	dir := t.TempDir()
	dockerfile := "FROM docker.io/library/debian:bullseye-slim\n" +
		"COPY --from=" + from + " /opt/podmpi /opt/podmpi\n" +
		"ENV PATH=/opt/podmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := pm.run(ctx, "build", "--network=none", "-t", testImage, dir); err != nil {
		t.Fatalf("building an image FROM debian:bullseye-slim with COPY --from=%s: %v\n%s", from, err, out)
	}
	t.Cleanup(func() {
		if out, err := pm.run(context.Background(), "rmi", "--force", testImage); err != nil {
			t.Errorf("removing %s: %v\n%s", testImage, err, out)
		}
	})
	out, err := pm.run(ctx, append(append([]string{"run", "--rm", "--network=none", "--user", arbitraryUID + ":0", "--passwd=false",
		"--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges"}, pm.ulimits...),
		testImage, "sh", "-c",
		"cat /etc/debian_version; ldd --version | sed -n 1p; worker-agent --help | sed -n 1p; launcher --help | sed -n 1p; worker-agent version; "+
			"command -v ssh; command -v mpirun; ssh -V")...)
	t.Logf("podman run %s (Debian bullseye + COPY --from the binaries image):\n%s", testImage, out)
	if err != nil {
		t.Fatalf("running the copied binaries on bullseye: %v", err)
	}
	for _, want := range []string{"\n11.", "2.31", "worker-agent runs in every worker pod", "launcher runs in the launcher pod",
		"\n/opt/podmpi/bin/ssh\n/opt/podmpi/bin/mpirun\n", "ssh-compatible client"} {
		if !strings.Contains("\n"+out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The MPI images carry exactly these binaries, and /opt/podmpi/bin first
	// on PATH: every podmpi name is found there.
	for _, mpi := range []string{"openmpi", "mpich", "intelmpi", "horovod"} {
		ref := imagePrefix() + "/" + mpi + ":" + tag
		args := append(append([]string{"run", "--rm", "--network=none"}, pm.ulimits...), ref, "sh", "-c",
			"sha256sum /opt/podmpi/libexec/worker-agent /opt/podmpi/bin/launcher /opt/podmpi/bin/"+rsh.Name+"; for n in worker-agent launcher "+
				strings.Join(append(slices.Clone(rsh.Names), launcher.ShimNames...), " ")+"; do echo \"$n=$(command -v $n)\"; done")
		out, err := pm.run(ctx, args...)
		if err != nil {
			t.Errorf("%s: %v\n%s", ref, err, out)
			continue
		}
		wants := []string{sums[host]["worker-agent"] + "  /opt/podmpi/libexec/worker-agent", sums[host]["launcher"] + "  /opt/podmpi/bin/launcher",
			sums[host][rsh.Name] + "  /opt/podmpi/bin/" + rsh.Name}
		for _, n := range append([]string{"worker-agent", "launcher"}, append(slices.Clone(rsh.Names), launcher.ShimNames...)...) {
			wants = append(wants, n+"=/opt/podmpi/bin/"+n+"\n")
		}
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s: want %q in:\n%s", ref, want, out)
			}
		}
	}
}
