// Package execpath finds programs in a PATH given as a string, with the
// rules os/exec.LookPath applies to the process's own PATH: worker-agent
// looks for the MPI daemons on its sessions' PATH, and agent/rsh makes sure
// podmpi-rsh is found there.
package execpath

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Look searches the colon-separated path for an executable named file,
// with os/exec.LookPath's rules on Unix, and returns its path, or "" when it
// is not found. Like os/exec.LookPath since Go 1.19, a match found through an empty
// or relative PATH entry is not returned (it would depend on the session's
// working directory). The lookup uses this process's effective uid and gid
// (worker-agent's SSH sessions share them).
func Look(file, path string) string {
	return LookFunc(file, path, nil)
}

// LookFunc is Look, skipping every match for which skip returns true: the
// mpirun shim finds the real mpirun after itself with it. A nil skip skips
// nothing.
func LookFunc(file, path string, skip func(p string) bool) string {
	if file == "" || filepath.Base(file) != file {
		return ""
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if !filepath.IsAbs(p) {
			continue
		}
		if isExecutable(p) && (skip == nil || !skip(p)) {
			return p
		}
	}
	return ""
}

// SameFile reports whether the paths a and b name the same file, following
// symlinks (a podmpi name linked to the launcher is the launcher).
func SameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(fa, fb)
}

// isExecutable mirrors os/exec's findExecutable on Linux.
func isExecutable(p string) bool {
	st, err := os.Stat(p)
	if err != nil {
		return false
	}
	m := st.Mode()
	if m.IsDir() {
		return false
	}
	err = unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS)
	if err == nil {
		return true
	}
	// Where faccessat2 is unavailable or blocked by seccomp, fall back to
	// the mode bits, as os/exec does.
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return m&0o111 != 0
	}
	return false
}
