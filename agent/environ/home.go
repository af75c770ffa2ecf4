package environ

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// EnsureHome gives env a usable HOME: when HOME is unset, empty, or not a
// folder this process can write, dir is created with mode 0700 and set as
// HOME. home is the HOME set ("" when env's stands) and old the one it
// replaces; the caller logs both.
//
// A pod running as a UID without a passwd entry (OpenShift's random UID,
// a runAsUser not in the image) often has no HOME at all, and Open MPI 4's
// mpirun then dies of SIGSEGV (exit 139) in PMIx's home-directory lookup
// before printing anything; under OpenShift's restricted-v2 with a
// read-only root, HOME is / and every client that writes there fails:
// horovodrun creates ~/.horovod before it starts anything and stops with
// "Permission denied".
func EnsureHome(env []string, dir string) (out []string, home, old string, err error) {
	old = Get(env, "HOME")
	if Usable(old) {
		return env, "", old, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return env, "", old, fmt.Errorf("creating a writable HOME at %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return env, "", old, fmt.Errorf("creating a writable HOME at %s: %w", dir, err)
	}
	return Set(env, "HOME", dir), dir, old, nil
}

// Usable reports whether home is a folder this process can create files
// in (access(2) with its real UID, which the launcher and worker-agent
// run as).
func Usable(home string) bool {
	if home == "" {
		return false
	}
	fi, err := os.Stat(home)
	return err == nil && fi.IsDir() && unix.Access(home, unix.W_OK|unix.X_OK) == nil
}
