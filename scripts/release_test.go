package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// gitRepo makes a git repository with scripts/version.sh and
// scripts/release.sh of this tree (and what they source) and one commit,
// and returns its folder.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	for _, f := range []string{"scripts/version.sh", "scripts/release.sh", "images/lib.sh", "test/cluster/versions.txt"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// script runs a script of dir with env added and returns its combined
// output and whether it exited 0.
func script(t *testing.T, dir string, env []string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return string(out), err == nil
}

// TestVersion: the tree's version is git describe when that is a release
// version, else v0.0.0-<describe>, with -dirty for uncommitted changes;
// --check takes vX.Y.Z(-pre) and nothing else.
func TestVersion(t *testing.T) {
	dir := gitRepo(t)
	short := git(t, dir, "rev-parse", "--short", "HEAD")
	if got, _ := script(t, dir, nil, "scripts/version.sh"); strings.TrimSpace(got) != "v0.0.0-"+short {
		t.Errorf("untagged: %q, want v0.0.0-%s", got, short)
	}
	if err := os.WriteFile(filepath.Join(dir, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "new")
	if got, _ := script(t, dir, nil, "scripts/version.sh"); strings.TrimSpace(got) != "v0.0.0-"+short+"-dirty" {
		t.Errorf("uncommitted change: %q, want v0.0.0-%s-dirty", got, short)
	}
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "two")
	git(t, dir, "tag", "v1.2.3-rc.1")
	if got, _ := script(t, dir, nil, "scripts/version.sh"); strings.TrimSpace(got) != "v1.2.3-rc.1" {
		t.Errorf("tagged: %q, want v1.2.3-rc.1", got)
	}
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "three")
	if got, _ := script(t, dir, nil, "scripts/version.sh"); !regexp.MustCompile(`^v1\.2\.3-rc\.1-1-g[0-9a-f]+$`).MatchString(strings.TrimSpace(got)) {
		t.Errorf("after a tag: %q, want v1.2.3-rc.1-1-g<hash>", got)
	}
	if got, _ := script(t, dir, []string{"SOURCE_DATE_EPOCH=86400"}, "scripts/version.sh", "--created"); strings.TrimSpace(got) != "1970-01-02T00:00:00Z" {
		t.Errorf("--created with SOURCE_DATE_EPOCH=86400: %q", got)
	}
	for v, ok := range map[string]bool{
		"v0.1.0": true, "v10.20.30": true, "v0.1.0-rc.1": true, "v1.2.3-4-gabc": true, "v0.0.0-3479b6c-dirty": true,
		"0.1.0": false, "v0.1": false, "v01.2.3": false, "v0.1.0+build": false, "v0.1.0-": false, "v0.1.0 ": false, "": false,
		"v0.1.0-" + strings.Repeat("a", 130): false,
	} {
		out, got := script(t, dir, nil, "scripts/version.sh", "--check", v)
		if got != ok {
			t.Errorf("--check %q: exit 0 is %v, want %v (%s)", v, got, ok, out)
		}
		if !ok && !strings.Contains(out, "not a release version") {
			t.Errorf("--check %q: want one line saying why, got %q", v, out)
		}
	}
}

// TestReleaseRefuses: make release refuses, with one line naming what and
// how to fix it, before it builds or pushes anything.
func TestReleaseRefuses(t *testing.T) {
	dir := gitRepo(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"no version", []string{"VERSION=", "REGISTRY=r.example.com/p"}, "no VERSION given: make release VERSION=vX.Y.Z"},
		{"make's default", []string{"VERSION=3479b6c", "VERSION_ORIGIN=file", "REGISTRY=r.example.com/p"}, "no VERSION given"},
		{"not a version", []string{"VERSION=1.2.3", "REGISTRY=r.example.com/p"}, "'1.2.3' is not a release version"},
		{"no registry", []string{"VERSION=v0.1.0", "REGISTRY="}, "no REGISTRY given"},
		{"bad registry", []string{"VERSION=v0.1.0", "REGISTRY=Registry.Example.com/P"}, "want host[:port]/path"},
		{"no path", []string{"VERSION=v0.1.0", "REGISTRY=r.example.com"}, "want host[:port]/path"},
		{"bad tls", []string{"VERSION=v0.1.0", "REGISTRY=r.example.com/p", "TLS_VERIFY=no"}, "TLS_VERIFY=no"},
		{"bad step", []string{"VERSION=v0.1.0", "REGISTRY=r.example.com/p"}, "unknown step 'deploy'"},
	} {
		args := []string{"scripts/release.sh"}
		if tc.name == "bad step" {
			args = append(args, "deploy")
		}
		out, ok := script(t, dir, tc.env, args...)
		if ok || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit 0 %v, output %q; want a refusal with %q", tc.name, ok, out, tc.want)
		}
	}
	// A tree with uncommitted changes: refused unless ALLOW_DIRTY=1.
	if err := os.WriteFile(filepath.Join(dir, "scripts", "version.sh"), []byte("#!/bin/sh\necho changed\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, ok := script(t, dir, []string{"VERSION=v0.1.0", "REGISTRY=r.example.com/p", "ALLOW_DIRTY="}, "scripts/release.sh")
	if ok || !strings.Contains(out, "uncommitted changes") || !strings.Contains(out, "ALLOW_DIRTY=1") || !strings.Contains(out, "scripts/version.sh") {
		t.Errorf("dirty tree: exit 0 %v, output %q; want a refusal naming the changed file and ALLOW_DIRTY=1", ok, out)
	}
}
