package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/layout"
	"github.com/podmpi/podmpi/agent/rsh"
)

// podmpiTree lays out the tree the binaries-only image holds under
// <dir>/opt/podmpi: bin/ as binDir lays it out (worker-agent a link to the
// launcher) and the real worker-agent in libexec/. It returns the tree.
func podmpiTree(t *testing.T, dir string) string {
	t.Helper()
	tree := filepath.Join(dir, "opt", "podmpi")
	for _, f := range []struct {
		src, dst string
	}{{launcherBin, "bin/launcher"}, {relayBin, "bin/" + rsh.Name}, {agentBin, "libexec/worker-agent"}} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(tree, f.dst)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range links() {
		if err := os.Symlink(l[1], filepath.Join(tree, "bin", l[0])); err != nil {
			t.Fatal(err)
		}
	}
	return tree
}

// TestInstallCommand: `launcher install <dir>` (the init container's
// command) copies the tree into an empty folder; the copy's worker-agent
// link checks the image and runs the real one; a second install over it
// works (a restarted init container); a folder with other content is
// refused with exit 65 naming it, on stderr and in the termination
// message; a copy that did not finish is refused by worker-agent and the
// launcher with exit 75.
func TestInstallCommand(t *testing.T) {
	tree := podmpiTree(t, t.TempDir())
	dst := filepath.Join(t.TempDir(), "emptydir")
	if err := os.Mkdir(dst, 0o777); err != nil {
		t.Fatal(err)
	}
	tl := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(tl, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "PODMPI_TERMINATION_LOG=" + tl}
	for range 2 {
		code, out, errs := runProg(t, env, filepath.Join(tree, "bin", "launcher"), "install", dst)
		if code != 0 || !strings.HasPrefix(out, "podmpi: installed "+tree+" into "+dst+": 3 files") {
			t.Fatalf("install: exit %d, stdout %q, stderr %q", code, out, errs)
		}
	}
	code, out, errs := runProg(t, env, filepath.Join(dst, "bin", "worker-agent"), "version")
	if code != 0 || !strings.HasPrefix(out, "worker-agent ") {
		t.Fatalf("the copy's worker-agent version: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "app.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runProg(t, env, filepath.Join(tree, "bin", "launcher"), "install", foreign)
	want := "launcher: install: " + foreign + ": is not empty (app.py) and holds no earlier podmpi install"
	if code != int(exitcode.Config) || !strings.HasPrefix(errs, want) {
		t.Errorf("foreign folder: exit %d, stderr %q; want 65 and %q", code, errs, want)
	}
	if b, _ := os.ReadFile(tl); !strings.Contains(string(b), foreign+": is not empty") || !strings.Contains(string(b), "exit code 65") {
		t.Errorf("termination message %q", b)
	}
	if code, _, errs := runProg(t, env, filepath.Join(tree, "bin", "launcher"), "install"); code != int(exitcode.Usage) || !strings.Contains(errs, "install takes one folder") {
		t.Errorf("no folder: exit %d, stderr %q; want 64", code, errs)
	}

	// A copy that stopped half way.
	if err := os.WriteFile(filepath.Join(dst, layout.PartialMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  []string
	}{
		{"worker-agent", []string{"version"}, nil},
		{"launcher", []string{"probe"}, []string{"PODMPI_WORKERS=w-0.job"}},
		{"mpirun", []string{"-np", "1", "true"}, []string{"PODMPI_WORKERS=w-0.job"}},
	} {
		code, _, errs := runProg(t, append(slices.Clone(env), c.env...), filepath.Join(dst, "bin", c.name), c.args...)
		if code != int(exitcode.ImageUnsupported) || !strings.Contains(errs, dst+" holds a copy of podmpi that `launcher install` began and did not finish") {
			t.Errorf("%s in a half copy: exit %d, stderr %q; want 75 naming it", c.name, code, errs)
		}
	}
	if b, _ := os.ReadFile(tl); !strings.Contains(string(b), "began and did not finish") {
		t.Errorf("termination message %q", b)
	}
}

// TestWorkerAgentInAnImageWithoutGlibc: /opt/podmpi copied into images
// without glibc, run as the worker container's command: the link (the
// static launcher) names what is missing, what the image has and the fix,
// on stderr and in the termination message, and exits 75, instead of the
// kernel's "no such file or directory".
func TestWorkerAgentInAnImageWithoutGlibc(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root: runs the copy chrooted into a root without glibc")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		if chroot, err = exec.LookPath("/usr/sbin/chroot"); err != nil {
			t.Skip("no chroot (coreutils)")
		}
	}
	musl := "ld-musl-" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH] + ".so.1"
	for _, tc := range []struct {
		name  string
		files []string
		want  string
	}{
		{"scratch", nil, "/opt/podmpi/libexec/worker-agent needs glibc's dynamic loader "},
		{"alpine-like", []string{"lib/" + musl}, "/opt/podmpi/libexec/worker-agent needs glibc, and this image has musl libc instead (/lib/" + musl + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			podmpiTree(t, root)
			for _, f := range append(tc.files, "dev/termination-log") {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Mkdir(filepath.Join(root, "proc"), 0o755); err != nil {
				t.Fatal(err)
			}
			code, _, errs := runProg(t, []string{"PATH=/opt/podmpi/bin"}, unshare, "--mount-proc="+filepath.Join(root, "proc"), chroot, root,
				"/opt/podmpi/bin/worker-agent", "--ssh.listen-address", ":2222")
			if code != int(exitcode.ImageUnsupported) {
				t.Fatalf("exit %d, want 75; stderr %q", code, errs)
			}
			for _, w := range []string{"worker-agent: the image cannot run worker-agent: " + tc.want,
				"(the image has: no /lib", "fix: run the worker pods on an image with glibc 2.28 or later"} {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q: %q", w, errs)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(root, "dev", "termination-log")); !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), "exit code 75") {
				t.Errorf("termination message %q", b)
			}
		})
	}
}

// TestShimFindsTheMPIOffPath: a pod spec's PATH (podmpi's bin first, then
// the system's) that does not name the image's MPI, which lives in the
// image's venv (VIRTUAL_ENV, as PyPI's MPI wheels install it): podmpi's
// mpirun finds it there and says so, instead of exit 68.
func TestShimFindsTheMPIOffPath(t *testing.T) {
	bin := binDir(t)
	venv := t.TempDir()
	sys := t.TempDir() // the system's folders, without an MPI
	if err := os.Mkdir(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(venv, "bin", "mpirun"), []byte("#!/bin/sh\necho \"venv mpirun $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	if err := os.Symlink(sh, filepath.Join(sys, "sh")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + ":" + sys, "VIRTUAL_ENV=" + venv, "HOME=" + t.TempDir(), "PODMPI_LOG_FORMAT=text", "PODMPI_TERMINATION_LOG="}
	code, out := runAs(t, bin, "mpirun", env, "--version")
	if code != 0 || !strings.Contains(out, "venv mpirun --version") || !strings.Contains(out, "added="+venv+"/bin") {
		t.Fatalf("exit %d, want 0 from the venv's mpirun and a line naming the folder added:\n%s", code, out)
	}
}
