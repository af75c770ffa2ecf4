package imagetest

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/rsh"
)

// checkOpt checks the /opt/podmpi under root (what holds it: the image ref,
// or the layout's folder) for arch: exactly binariesContent, the relative
// links, static launcher and podmpi-rsh, a dynamic worker-agent, and an
// SBOM and "go version -m" texts that name every binary (the SBOM by its
// checksum). It returns each binary's SHA-256.
func checkOpt(t *testing.T, what, root, arch string) map[string]string {
	t.Helper()
	var content []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(root, p); rel != "." {
			content = append(content, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(content)
	want := slices.Clone(binariesContent)
	slices.Sort(want)
	if !slices.Equal(content, want) {
		t.Errorf("%s holds %q\nwant exactly %q", what, content, want)
	}
	bin := filepath.Join(root, "opt", "podmpi", "bin")
	links := map[string]string{}
	for _, n := range rsh.Names {
		if n != rsh.Name {
			links[n] = rsh.Name
		}
	}
	for _, n := range launcher.ShimNames {
		links[n] = "launcher"
	}
	links["worker-agent"] = "launcher"
	for n, want := range links {
		if target, err := os.Readlink(filepath.Join(bin, n)); err != nil || target != want {
			t.Errorf("%s: /opt/podmpi/bin/%s -> %q (%v), want a relative link to %s", what, n, target, err, want)
		}
	}
	for _, name := range []string{"launcher", rsh.Name} {
		if b := readBinary(t, filepath.Join(bin, name)); b.Dynamic || b.Machine != elfMachine[arch] {
			t.Errorf("%s: %s: machine %v dynamic %t; want %v, static", what, name, b.Machine, b.Dynamic, elfMachine[arch])
		}
	}
	agent := filepath.Join(root, "opt", "podmpi", "libexec", "worker-agent")
	if a := readBinary(t, agent); !a.Dynamic || a.Machine != elfMachine[arch] {
		t.Errorf("%s: libexec/worker-agent: machine %v dynamic %t; want %v, dynamic (cgo, NVML)", what, a.Machine, a.Dynamic, elfMachine[arch])
	}
	sums := map[string]string{"worker-agent": fileSHA256(t, agent)}
	for _, name := range []string{"launcher", rsh.Name} {
		sums[name] = fileSHA256(t, filepath.Join(bin, name))
	}
	raw, err := os.ReadFile(filepath.Join(root, "opt", "podmpi", "sbom", "podmpi.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name      string `json:"name"`
			Checksums []struct {
				Algorithm string `json:"algorithm"`
				Value     string `json:"checksumValue"`
			} `json:"checksums"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(raw, &sbom); err != nil {
		t.Fatalf("%s: podmpi.spdx.json: %v", what, err)
	}
	seen := map[string]bool{}
	for _, p := range sbom.Packages {
		seen[p.Name] = true
		if want, ok := sums[p.Name]; ok {
			if len(p.Checksums) != 1 || p.Checksums[0].Value != want {
				t.Errorf("%s: SBOM: %s checksums %+v, want SHA256 %s", what, p.Name, p.Checksums, want)
			}
		}
	}
	if sbom.SPDXVersion != "SPDX-2.3" || !seen["worker-agent"] || !seen["launcher"] || !seen[rsh.Name] || !seen["golang.org/x/crypto"] || !seen["github.com/NVIDIA/go-nvml"] {
		t.Errorf("%s: SBOM: version %q, packages %v: want SPDX-2.3 with the three binaries, x/crypto and go-nvml", what, sbom.SPDXVersion, seen)
	}
	for name, pkg := range map[string]string{"worker-agent": "cmd/worker-agent", "launcher": "cmd/launcher", rsh.Name: "cmd/launcher/podmpi-rsh"} {
		gv, err := os.ReadFile(filepath.Join(root, "opt", "podmpi", "sbom", name+".go-version-m.txt"))
		if err != nil || !strings.HasPrefix(string(gv), name+": ") || !strings.Contains(string(gv), "path\tgithub.com/podmpi/podmpi/"+pkg+"\n") ||
			!strings.Contains(string(gv), "GOARCH="+arch) {
			t.Errorf("%s: %s.go-version-m.txt: %v\n%s", what, name, err, gv)
		}
	}
	return sums
}

// goBuild builds pkg (relative to the repository) into out, static unless
// cgo is asked for, as scripts/build.sh builds it.
func goBuild(t *testing.T, out, pkg string, cgo bool) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./"+pkg)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", pkg, err, out)
	}
}

// TestLayout: images/layout.sh makes from a make build folder the
// /opt/podmpi the binaries image holds (the podmpi image of images/build.sh
// with PODMPI_PREBUILT is that folder as it is): the three binaries (the
// real worker-agent from ../libexec), the links, the SBOM and "go version
// -m" of all three, and nothing else the folder holds. A folder from a
// build that made podmpi-rsh a link to the launcher, or that has no
// ../libexec/worker-agent, is refused, naming it.
func TestLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the three binaries")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc: worker-agent is built with cgo (apt-get install -y gcc)")
	}
	build := t.TempDir()
	bin := filepath.Join(build, "bin")
	agent := filepath.Join(build, "libexec", "worker-agent")
	goBuild(t, filepath.Join(bin, "launcher"), "cmd/launcher", false)
	goBuild(t, filepath.Join(bin, rsh.Name), "cmd/launcher/podmpi-rsh", false)
	goBuild(t, agent, "cmd/worker-agent", true)
	for _, n := range rsh.Names {
		if n != rsh.Name {
			if err := os.Symlink(rsh.Name, filepath.Join(bin, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range append(slices.Clone(launcher.ShimNames), "worker-agent") {
		if err := os.Symlink("launcher", filepath.Join(bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	// make cluster-tool builds bin/podmpi-cluster next to make build's.
	if err := os.WriteFile(filepath.Join(bin, "podmpi-cluster"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	layout := func(bin, opt string) (string, error) {
		out, err := exec.Command(filepath.Join("..", "layout.sh"), bin, opt).CombinedOutput()
		return string(out), err
	}
	if out, err := layout(bin, filepath.Join(root, "opt", "podmpi")); err != nil {
		t.Fatalf("images/layout.sh: %v\n%s", err, out)
	}
	checkOpt(t, "images/layout.sh's /opt/podmpi", root, runtime.GOARCH)

	old := filepath.Join(bin, rsh.Name)
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("launcher", old); err != nil {
		t.Fatal(err)
	}
	out, err := layout(bin, filepath.Join(t.TempDir(), "opt", "podmpi"))
	if err == nil || !strings.Contains(out, old+" is not an executable file") || !strings.Contains(out, "run make build BIN=") {
		t.Errorf("a folder with podmpi-rsh a link to the launcher: %v\n%s", err, out)
	}
	if err := os.RemoveAll(filepath.Dir(agent)); err != nil {
		t.Fatal(err)
	}
	out, err = layout(bin, filepath.Join(t.TempDir(), "opt", "podmpi"))
	if err == nil || !strings.Contains(out, "libexec: no folder") {
		t.Errorf("a folder without ../libexec: %v\n%s", err, out)
	}
}
