package worker

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/gpu"
)

// Daemons are the MPI daemons mpirun starts on workers over SSH.
var Daemons = []string{"orted", "prted", "hydra_pmi_proxy", "hydra_bstrap_proxy"}

// Info is the /info document. The launcher reads these exact keys.
type Info struct {
	Hostname   string       `json:"hostname"`
	Slots      SlotsInfo    `json:"slots"`
	GPUs       GPUsInfo     `json:"gpus"`
	Daemons    DaemonPaths  `json:"daemons"`
	UID        int          `json:"uid"`
	GID        int          `json:"gid"`
	User       string       `json:"user"`
	AuthDir    string       `json:"authDir"`
	HostKey    HostKeyInfo  `json:"hostKey"`
	SSHAddress string       `json:"sshAddress"`
	Version    version.Info `json:"version"`
}

// SlotsInfo is the "slots" object: N is 0 and Source "" until GPU detection
// has finished.
type SlotsInfo struct {
	N      int    `json:"n"`
	Source string `json:"source"` // gpu|cpu|fixed|default
	Reason string `json:"reason"`
}

// GPUsInfo is the "gpus" object.
type GPUsInfo struct {
	Count   int          `json:"count"`
	Source  string       `json:"source"` // nvml|none; "" until detection has finished
	Reason  string       `json:"reason"`
	Devices []gpu.Device `json:"devices"`
}

// DaemonPaths holds the absolute path of each MPI daemon found on the
// sessions' PATH, or "" when it is not there.
type DaemonPaths struct {
	Orted            string `json:"orted"`
	Prted            string `json:"prted"`
	HydraPMIProxy    string `json:"hydra_pmi_proxy"`
	HydraBstrapProxy string `json:"hydra_bstrap_proxy"`
}

// HostKeyInfo is the "hostKey" object: the fingerprints of the host keys
// the SSH server presents. DerivedFingerprint is the ed25519 key derived
// from the job key, which OpenSSH clients that pin nothing negotiate; ""
// when there is none (FIPS 140 mode, an ed25519 job key, no id_rsa).
type HostKeyInfo struct {
	Fingerprint        string `json:"fingerprint"`
	DerivedFingerprint string `json:"derivedFingerprint"`
	Pinned             bool   `json:"pinned"`
}

// Info returns the current /info document.
func (w *Worker) Info() Info {
	w.mu.Lock()
	detected, inv, slots, derr := w.detected, w.inv, w.slots, w.detectErr
	w.mu.Unlock()

	info := Info{
		Hostname: w.cfg.Hostname,
		Daemons:  LookupDaemons(w.cfg.Path),
		UID:      w.cfg.UID,
		GID:      w.cfg.GID,
		User:     w.cfg.User,
		AuthDir:  w.cfg.AuthDir,
		HostKey: HostKeyInfo{
			Fingerprint:        w.cfg.SSH.HostKeyFingerprint(),
			DerivedFingerprint: w.derivedFingerprint(),
			Pinned:             w.cfg.SSH.HostKeyPinned(),
		},
		SSHAddress: w.sshAddress(),
		Version:    w.cfg.Version,
		GPUs:       GPUsInfo{Devices: []gpu.Device{}},
	}
	switch {
	case !detected:
		info.Slots.Reason = "gpu detection in progress"
		info.GPUs.Reason = "gpu detection in progress"
	case derr != nil:
		info.Slots.Reason = derr.Error()
		info.GPUs.Reason = derr.Error()
	default:
		info.Slots = SlotsInfo{N: slots.N, Source: slots.Source, Reason: slots.Reason}
		info.GPUs = GPUsInfo{Count: inv.Count(), Source: inv.Source, Reason: inv.Reason, Devices: inv.Devices}
	}
	return info
}

// LookupDaemons finds each of Daemons in path with exec.LookPath's rules.
func LookupDaemons(path string) DaemonPaths {
	return DaemonPaths{
		Orted:            LookPath("orted", path),
		Prted:            LookPath("prted", path),
		HydraPMIProxy:    LookPath("hydra_pmi_proxy", path),
		HydraBstrapProxy: LookPath("hydra_bstrap_proxy", path),
	}
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
