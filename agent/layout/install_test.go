package layout

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tree writes a small podmpi tree laid out as the images' /opt/podmpi:
// files with their modes, relative links, a nested folder.
func tree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "opt", "podmpi")
	files := map[string]fs.FileMode{
		"bin/launcher": 0o755, "bin/podmpi-rsh": 0o755, "libexec/worker-agent": 0o755,
		"sbom/podmpi.spdx.json": 0o644, "LICENSE": 0o644, "NOTICE": 0o444,
	}
	for name, mode := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("content of "+name), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"bin/ssh": "podmpi-rsh", "bin/mpirun": "launcher", "bin/worker-agent": "launcher"} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// sameTree fails t unless dst holds what src holds: the same folders,
// files with the same bytes and permission bits, links with the same
// targets.
func sameTree(t *testing.T, src, dst string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		a, _ := os.Lstat(p)
		b, err := os.Lstat(to)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		if a.Mode() != b.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, b.Mode(), a.Mode())
		}
		switch {
		case a.Mode()&fs.ModeSymlink != 0:
			ta, _ := os.Readlink(p)
			tb, _ := os.Readlink(to)
			if ta != tb {
				t.Errorf("%s -> %q, want -> %q", rel, tb, ta)
			}
		case a.Mode().IsRegular():
			ca, _ := os.ReadFile(p)
			cb, _ := os.ReadFile(to)
			if string(ca) != string(cb) {
				t.Errorf("%s: content %q, want %q", rel, cb, ca)
			}
		}
		n++
		return nil
	})
	if err != nil || n < 10 {
		t.Fatalf("walked %d entries: %v", n, err)
	}
}

func TestInstallCopiesTheTree(t *testing.T) {
	src := tree(t)
	dst := filepath.Join(t.TempDir(), "podmpi") // missing: created
	st, err := Install(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 6 || st.Links != 3 || st.Dirs != 3 {
		t.Errorf("stats %s, want 6 files, 3 links, 3 folders", st)
	}
	sameTree(t, src, dst)
	if why := Incomplete(dst); why != "" {
		t.Errorf("Incomplete: %s", why)
	}
	if b, err := os.ReadFile(filepath.Join(dst, Marker)); err != nil || !strings.Contains(string(b), src) {
		t.Errorf("marker %q (%v)", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, PartialMarker)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("partial marker left: %v", err)
	}

	// A restarted init container: the same copy again, over the first.
	if _, err := Install(src, dst); err != nil {
		t.Fatalf("second install: %v", err)
	}
	sameTree(t, src, dst)
	if left, _ := filepath.Glob(filepath.Join(dst, "*", "*.podmpi-tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// The installed tree copies on too, without its marker as a file.
	again := filepath.Join(t.TempDir(), "again")
	if _, err := Install(dst, again); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, again)
}

// TestInstallRefuses: a folder with other content, a file, a path in the
// tree itself, relative paths, and a folder that is no podmpi tree are
// refused with the path and a hint, and nothing is written.
func TestInstallRefuses(t *testing.T) {
	src := tree(t)
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "app.py"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, dst string
		want           []string
	}{
		{"foreign content", src, foreign, []string{foreign + ": is not empty (app.py)", "holds no earlier podmpi install", "hint: "}},
		{"a file", src, file, []string{file + ": is not a folder"}},
		{"inside the tree", src, filepath.Join(src, "copy"), []string{"overlaps it"}},
		{"the tree's parent", src, filepath.Dir(src), []string{"overlaps it"}},
		{"relative", src, "podmpi", []string{"want absolute paths"}},
		{"no tree", foreign, filepath.Join(t.TempDir(), "x"), []string{"holds no bin/launcher"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Install(tc.src, tc.dst)
			var ie *InstallError
			if !errors.As(err, &ie) {
				t.Fatalf("err %v, want an InstallError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(foreign, "app.py")); string(b) != "keep me" {
		t.Error("the foreign folder was changed")
	}
	if names, _ := filepath.Glob(filepath.Join(foreign, ".podmpi*")); len(names) > 0 {
		t.Errorf("markers written into a refused folder: %v", names)
	}
}

// TestInstallHalfCopy: a copy that stops half way (here at a FIFO in the
// tree) leaves its partial marker, so the tree is never taken for whole;
// a later Install over it (the fixed tree, a restarted init container)
// completes it.
func TestInstallHalfCopy(t *testing.T) {
	src := tree(t)
	fifo := filepath.Join(src, "sbom", "zz-fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	dst := t.TempDir()
	_, err := Install(src, dst)
	if err == nil || !strings.Contains(err.Error(), "zz-fifo") || !strings.Contains(err.Error(), PartialMarker+" stays") {
		t.Fatalf("err %v, want the FIFO named", err)
	}
	why := Incomplete(dst)
	if !strings.Contains(why, "began and did not finish") {
		t.Fatalf("Incomplete = %q", why)
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(src, dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, dst)
	if why := Incomplete(dst); why != "" {
		t.Errorf("after the second copy: %s", why)
	}
}

func TestRoot(t *testing.T) {
	if r, err := Root("/opt/podmpi/bin/launcher"); err != nil || r != "/opt/podmpi" {
		t.Errorf("Root = %q, %v", r, err)
	}
	if _, err := Root("/usr/local/bin2/launcher"); err == nil || !strings.Contains(err.Error(), "not in a bin/ folder") {
		t.Errorf("Root outside bin/: %v", err)
	}
	if got := RealWorkerAgent("/podmpi"); got != "/podmpi/libexec/worker-agent" {
		t.Errorf("RealWorkerAgent = %q", got)
	}
}
