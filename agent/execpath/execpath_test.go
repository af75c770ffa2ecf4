package execpath

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLook(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	for p, mode := range map[string]os.FileMode{
		filepath.Join(a, "tool"): 0o755, filepath.Join(a, "plain"): 0o644, filepath.Join(b, "plain"): 0o755,
	} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(a, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(a, "tool"), filepath.Join(b, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ file, path, want string }{
		{"tool", a + ":" + b, filepath.Join(a, "tool")},
		{"plain", a + ":" + b, filepath.Join(b, "plain")},
		{"dir", a, ""},
		{"link", b, filepath.Join(b, "link")},
		{"tool", "", ""},
		{"tool", ":.:rel", ""},
		{"missing", a + ":" + b, ""},
		{"../tool", a, ""},
		{"", a, ""},
		{filepath.Join(a, "tool"), b, ""},
	}
	for _, tc := range tests {
		if got := Look(tc.file, tc.path); got != tc.want {
			t.Errorf("Look(%q, %q) = %q, want %q", tc.file, tc.path, got, tc.want)
		}
	}
}

func FuzzLook(f *testing.F) {
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "orted"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		f.Fatal(err)
	}
	for _, s := range [][2]string{{"orted", dir}, {"orted", ":" + dir + ":"}, {"..", "/"}, {"", ""}, {"orted", "rel:" + dir}, {"a/b", dir}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, file, path string) {
		got := Look(file, path)
		if got == "" {
			return
		}
		if !filepath.IsAbs(got) || filepath.Base(got) != file {
			t.Fatalf("Look(%q, %q) = %q: want an absolute path ending in the file name", file, path, got)
		}
		found := false
		for _, d := range filepath.SplitList(path) {
			if filepath.IsAbs(d) && filepath.Clean(d) == filepath.Dir(got) {
				found = true
			}
		}
		if !found {
			t.Fatalf("Look(%q, %q) = %q: not in any absolute PATH entry", file, path, got)
		}
	})
}

func TestLookFuncAndSameFile(t *testing.T) {
	t.Parallel()
	shim, real := t.TempDir(), t.TempDir()
	self := filepath.Join(shim, "launcher")
	for _, p := range []string{self, filepath.Join(real, "mpirun")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// bin/mpirun -> launcher, as make build links it.
	if err := os.Symlink("launcher", filepath.Join(shim, "mpirun")); err != nil {
		t.Fatal(err)
	}
	path := shim + ":" + real
	if got := Look("mpirun", path); got != filepath.Join(shim, "mpirun") {
		t.Fatalf("Look = %q", got)
	}
	notSelf := func(p string) bool { return SameFile(p, self) }
	if got := LookFunc("mpirun", path, notSelf); got != filepath.Join(real, "mpirun") {
		t.Fatalf("LookFunc skipping the launcher = %q, want the real one", got)
	}
	if got := LookFunc("mpirun", shim, notSelf); got != "" {
		t.Fatalf("LookFunc with only the shim on PATH = %q, want none", got)
	}
	if SameFile(filepath.Join(real, "mpirun"), self) || SameFile("/nonexistent", self) || !SameFile(filepath.Join(shim, "mpirun"), self) {
		t.Fatal("SameFile")
	}
}
