package worker

import (
	"github.com/podmpi/podmpi/agent/execpath"
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
		Role:     api.RoleWorker,
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
		GPUs:       api.GPUs{Devices: []gpu.Device{}},
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
		info.GPUs = api.GPUs{Count: inv.Count(), Source: inv.Source, Reason: inv.Reason, Devices: inv.Devices}
	}
	return info
}

// LookupDaemons finds each MPI daemon of package mpi's table in path with
// exec.LookPath's rules: its absolute path, or "" when it is not there.
func LookupDaemons(path string) map[string]string {
	out := make(map[string]string)
	for _, d := range mpi.AllDaemons() {
		out[d] = execpath.Look(d, path)
	}
	return out
}
