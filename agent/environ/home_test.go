package environ

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestEnsureHome: HOME unset, empty, missing or not a folder gets a
// private 0700 directory, and the old value is returned for the log; a
// usable HOME is kept.
func TestEnsureHome(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, base := range [][]string{{"PATH=/bin"}, {"PATH=/bin", "HOME="}, {"PATH=/bin", "HOME=/no/such/home"}, {"PATH=/bin", "HOME=" + file}} {
		env, home, old, err := EnsureHome(base, dir)
		if err != nil || home != dir || Get(env, "HOME") != dir || len(env) != 2 || old != Get(base, "HOME") {
			t.Fatalf("EnsureHome(%q) = %q, %q, %q, %v", base, env, home, old, err)
		}
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("home dir: %v, %v", fi, err)
		}
	}
	usable := t.TempDir()
	env, home, old, err := EnsureHome([]string{"HOME=" + usable}, dir)
	if err != nil || home != "" || old != usable || !slices.Equal(env, []string{"HOME=" + usable}) {
		t.Fatalf("EnsureHome with a usable HOME = %q, %q, %q, %v", env, home, old, err)
	}
	if _, _, _, err := EnsureHome(nil, filepath.Join(dir, "no", "such", "parent")); err == nil {
		t.Fatal("EnsureHome into a missing parent: no error")
	}
}
