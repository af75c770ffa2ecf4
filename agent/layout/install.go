package layout

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podmpi/podmpi/agent/version"
)

// Marker is the file Install writes last into the folder it filled: the
// copy is whole. PartialMarker is the file it writes first and removes
// last: a copy was begun. A folder holding either is an earlier podmpi
// install, which Install may fill again (an init container that was
// restarted); any other non-empty folder is refused.
const (
	Marker        = ".podmpi-installed"
	PartialMarker = ".podmpi-installing"
)

// Stats counts what Install copied.
type Stats struct {
	Files, Links, Dirs int
	Bytes              int64
	Took               time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("%d files (%.1f MB), %d links, %d folders in %s",
		s.Files, float64(s.Bytes)/1e6, s.Links, s.Dirs, s.Took.Round(time.Millisecond))
}

// InstallError is a folder Install will not fill, or a copy that failed:
// what, where, and the fix.
type InstallError struct {
	Path string
	Err  error
	Hint string
}

func (e *InstallError) Error() string {
	s := e.Path + ": " + e.Err.Error()
	if e.Hint != "" {
		s += "; hint: " + e.Hint
	}
	return s
}

func (e *InstallError) Unwrap() error { return e.Err }

// Install copies the tree at src into dst: folders, regular files with
// their permission bits, and symlinks as symlinks (their targets as they
// are: the tree's links are relative). dst is created when missing; it
// must be empty or hold an earlier install (Marker or PartialMarker), so
// that a misplaced mount is never overwritten. The copy writes
// PartialMarker first, each file under a temporary name renamed into
// place, and Marker last (then removes PartialMarker): a folder whose copy
// stopped half way is never taken for a whole one (Incomplete), and
// running Install again over it (a restarted init container) completes it.
func Install(src, dst string) (Stats, error) {
	start := time.Now()
	var st Stats
	src, dst = filepath.Clean(src), filepath.Clean(dst)
	if !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
		return st, &InstallError{Path: dst, Err: fmt.Errorf("want absolute paths, have %q and %q", src, dst),
			Hint: "give the folder as an absolute path, e.g. launcher install /podmpi"}
	}
	if dst == src || strings.HasPrefix(dst, src+string(filepath.Separator)) || strings.HasPrefix(src, dst+string(filepath.Separator)) {
		return st, &InstallError{Path: dst, Err: fmt.Errorf("is %s or overlaps it, the tree being copied", src),
			Hint: "mount the emptyDir somewhere else in the init container, e.g. /podmpi"}
	}
	if fi, err := os.Stat(filepath.Join(src, BinDir, Launcher)); err != nil || !fi.Mode().IsRegular() {
		return st, &InstallError{Path: src, Err: fmt.Errorf("holds no %s/%s: not a podmpi tree", BinDir, Launcher),
			Hint: "run the launcher of the binaries-only image: /opt/podmpi/bin/launcher install <dir>"}
	}
	if err := checkTarget(dst); err != nil {
		return st, err
	}
	fail := func(path string, err error) (Stats, error) {
		return st, &InstallError{Path: path, Err: err,
			Hint: "the folder must be writable by the init container's user (an emptyDir is) and have room for the copy; " + PartialMarker + " stays, so the copy is not used"}
	}
	if err := os.WriteFile(filepath.Join(dst, PartialMarker),
		[]byte(fmt.Sprintf("podmpi %s: copy of %s begun at %s\n", version.Get().Version, src, start.UTC().Format(time.RFC3339))), 0o644); err != nil {
		return fail(dst, err)
	}
	if err := os.Remove(filepath.Join(dst, Marker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(dst, err)
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == "." || rel == Marker || rel == PartialMarker {
			return nil // a tree that was itself installed carries its markers
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			st.Dirs++
			return mkdir(to, info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			st.Links++
			return symlink(p, to)
		case d.Type().IsRegular():
			n, err := copyFile(p, to, info.Mode().Perm())
			st.Files++
			st.Bytes += n
			return err
		}
		return fmt.Errorf("%s is a %s, not a file, folder or symlink", p, info.Mode().Type())
	})
	if err != nil {
		return fail(dst, err)
	}
	st.Took = time.Since(start)
	if err := writeAtomic(filepath.Join(dst, Marker), []byte(fmt.Sprintf("podmpi %s: copy of %s: %s\n", version.Get().Version, src, st)), 0o644); err != nil {
		return fail(dst, err)
	}
	if err := os.Remove(filepath.Join(dst, PartialMarker)); err != nil {
		return fail(dst, err)
	}
	st.Took = time.Since(start)
	return st, nil
}

// checkTarget creates dst when missing and refuses a dst that is not a
// folder, or a non-empty one without an earlier install's marker.
func checkTarget(dst string) error {
	fi, err := os.Stat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return &InstallError{Path: dst, Err: err, Hint: "mount an emptyDir there, writable by the init container's user"}
		}
		return nil
	case err != nil:
		return &InstallError{Path: dst, Err: err}
	case !fi.IsDir():
		return &InstallError{Path: dst, Err: errors.New("is not a folder"), Hint: "give the emptyDir's mount path"}
	}
	f, err := os.Open(dst)
	if err != nil {
		return &InstallError{Path: dst, Err: err}
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return &InstallError{Path: dst, Err: err}
	}
	for _, n := range names {
		if n == Marker || n == PartialMarker {
			return nil
		}
	}
	if len(names) > 0 {
		shown := strings.Join(names[:min(len(names), 3)], ", ")
		if len(names) > 3 {
			shown += ", ..."
		}
		return &InstallError{Path: dst, Err: fmt.Errorf("is not empty (%s) and holds no earlier podmpi install (%s)", shown, Marker),
			Hint: "mount an empty emptyDir there; podmpi does not overwrite a folder it did not fill"}
	}
	return nil
}

func mkdir(p string, perm fs.FileMode) error {
	if err := os.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a folder", p)
	}
	return os.Chmod(p, perm) // past the umask, and over an earlier copy's
}

func symlink(from, to string) error {
	target, err := os.Readlink(from)
	if err != nil {
		return err
	}
	if cur, err := os.Readlink(to); err == nil && cur == target {
		return nil
	}
	if err := os.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Symlink(target, to)
}

// copyFile copies the regular file from to to with perm, through a
// temporary name in to's folder renamed into place.
func copyFile(from, to string, perm fs.FileMode) (int64, error) {
	in, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	tmp := to + ".podmpi-tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, perm)
	}
	if err == nil {
		err = os.Rename(tmp, to)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return n, fmt.Errorf("copying %s: %w", from, err)
	}
	return n, nil
}

func writeAtomic(p string, b []byte, perm fs.FileMode) error {
	tmp := p + ".podmpi-tmp"
	if err := os.WriteFile(tmp, b, perm); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
