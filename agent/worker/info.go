package worker

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/mpi"
)

// Info returns the current /info document.
func (w *Worker) Info() api.Info {
	w.mu.Lock()
	detected, inv, slots, derr := w.detected, w.inv, w.slots, w.detectErr
	w.mu.Unlock()

	info := api.Info{
		Hostname: w.cfg.Hostname,
		Daemons:  LookupDaemons(w.cfg.Path),
		UID:      w.cfg.UID,
		GID:      w.cfg.GID,
		User:     w.cfg.User,
		AuthDir:  w.cfg.AuthDir,
		HostKey: api.HostKey{
			Fingerprint:        w.cfg.SSH.HostKeyFingerprint(),
			DerivedFingerprint: w.derivedFingerprint(),
			Pinned:             w.cfg.SSH.HostKeyPinned(),
		},
		SSHAddress: w.sshAddress(),
		Version:    w.cfg.Version,
		GPUs:       api.GPUs{Devices: []api.Device{}},
	}
	switch {
	case !detected:
		info.Slots.Reason = api.ReasonDetecting
		info.GPUs.Reason = api.ReasonDetecting
	case derr != nil:
		info.Slots.Reason = derr.Error()
		info.GPUs.Reason = derr.Error()
	default:
		info.Slots = api.Slots{N: slots.N, Source: slots.Source, Reason: slots.Reason}
		info.GPUs = api.GPUs{Count: inv.Count(), Source: inv.Source, Reason: inv.Reason, Devices: devices(inv.Devices)}
	}
	return info
}

// LookupDaemons finds each MPI daemon of package mpi's table in path with
// exec.LookPath's rules: its absolute path, or "" when it is not there.
func LookupDaemons(path string) map[string]string {
	out := make(map[string]string)
	for _, d := range mpi.AllDaemons() {
		out[d] = LookPath(d, path)
	}
	return out
}

// devices converts the GPU inventory for /info.
func devices(ds []gpu.Device) []api.Device {
	out := make([]api.Device, len(ds))
	for i, d := range ds {
		out[i] = api.Device(d)
	}
	return out
}

// LookPath searches the colon-separated path for an executable named file,
// with os/exec.LookPath's rules on Unix, and returns its path, or "" when it
// is not found. Like LookPath since Go 1.19, a match found through an empty
// or relative PATH entry is not returned (it would depend on the session's
// working directory). The lookup uses this process's effective uid and gid,
// which the SSH sessions share.
func LookPath(file, path string) string {
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
		if isExecutable(p) {
			return p
		}
	}
	return ""
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
