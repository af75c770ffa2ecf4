// Package api is worker-agent's HTTP API as one set of types: the /info
// document the worker serves (agent/worker) and the launcher reads when it
// asks each worker for its slots (agent/launcher/slots), and the /events
// document (the account of the pod: OOM kills, rank and session exits, GPU
// errors) the launcher reads after a failed job. Both sides use these
// types, so a field renamed on one side is renamed on the other.
//
// It depends only on leaves (the gpu package's Device type, without NVML
// when built without cgo, as the launcher is): the launcher links it without
// the worker's SSH server or GPU detection.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/gpu"
	"github.com/podmpi/podmpi/hostfile"
)

// InfoPath is where the document is served.
const InfoPath = "/info"

// MaxInfoBytes bounds the /info body a client reads.
const MaxInfoBytes = 1 << 20

// Roles a /info document names. worker-agent serves RoleWorker; the
// launcher serves a /info of its own with RoleLauncher and nothing else, so
// that a launcher asking a hostfile peer that is another launcher pod (a
// runtime that starts several) can say so at once.
const (
	RoleWorker   = "worker-agent"
	RoleLauncher = "launcher"
)

// Info is the /info document.
type Info struct {
	// Role is RoleWorker or RoleLauncher ("" from worker-agents older than
	// the field: a worker).
	Role     string `json:"role,omitempty"`
	Hostname string `json:"hostname"`
	Slots    Slots  `json:"slots"`
	GPUs     GPUs   `json:"gpus"`
	// Daemons maps each MPI daemon of package mpi's table to its absolute
	// path on the sessions' PATH, or "" when it is not there.
	Daemons    map[string]string `json:"daemons"`
	UID        int               `json:"uid"`
	GID        int               `json:"gid"`
	User       string            `json:"user"`
	AuthDir    string            `json:"authDir"`
	HostKey    HostKey           `json:"hostKey"`
	SSHAddress string            `json:"sshAddress"`
	Version    version.Info      `json:"version"`
}

// ReasonDetecting is Slots.Reason (and GPUs.Reason) while the agent is still
// detecting its GPUs: the slots are not known yet, and a client should ask
// again rather than give up.
const ReasonDetecting = "gpu detection in progress"

// Slots is the agent's slot decision.
type Slots struct {
	// N is the number of slots the agent offers (>= 1); 0 while the agent
	// has not decided yet (Reason ReasonDetecting) or could not decide
	// (Reason says why).
	N int `json:"n"`
	// Source is how N was found: "gpu", "cpu", "fixed" or "default"; ""
	// while N is 0.
	Source string `json:"source"`
	// Reason explains a fallback, e.g. why no GPU was counted, or why N is 0.
	Reason string `json:"reason"`
}

// GPUs is the agent's GPU inventory.
type GPUs struct {
	// Count is the number of GPUs the agent sees.
	Count int `json:"count"`
	// Source is "nvml" or "none"; "" until detection has finished.
	Source string `json:"source"`
	// Reason says why no GPU was found, when Source is "none".
	Reason  string       `json:"reason"`
	Devices []gpu.Device `json:"devices"`
}

// HostKey holds the fingerprints of the host keys the SSH server presents.
// DerivedFingerprint is the ed25519 key derived from the job key, which
// OpenSSH clients that pin nothing negotiate; "" when there is none (FIPS
// 140 mode, an ed25519 job key, no id_rsa).
type HostKey struct {
	Fingerprint        string `json:"fingerprint"`
	DerivedFingerprint string `json:"derivedFingerprint"`
	Pinned             bool   `json:"pinned"`
}

// ErrNotDecided is wrapped by Info.SlotsError while the agent is still
// detecting its GPUs: ask again later.
var ErrNotDecided = errors.New("worker-agent has not decided its slots yet")

// NotWorkerError is DecodeInfo's error for a /info that names another role:
// the peer is not a worker-agent, and asking again will not change that.
type NotWorkerError struct {
	Role     string
	Hostname string
}

func (e *NotWorkerError) Error() string {
	return fmt.Sprintf("%s answers /info as a %s, not a worker-agent", e.Hostname, e.Role)
}

// DecodeInfo parses a /info body, checks that it is a worker-agent's
// (*NotWorkerError otherwise) and checks its slots (SlotsError). Unknown keys
// are ignored, so a newer agent can serve more.
func DecodeInfo(r io.Reader) (Info, error) {
	var info Info
	if err := json.NewDecoder(r).Decode(&info); err != nil {
		return Info{}, fmt.Errorf("decoding worker-agent /info: %w", err)
	}
	if info.Role != "" && info.Role != RoleWorker {
		return info, &NotWorkerError{Role: info.Role, Hostname: info.Hostname}
	}
	return info, info.SlotsError()
}

// SlotsError reports whether the document gives a usable slot count:
// slots.n in 1..hostfile.MaxSlots and gpus.count not negative. An agent
// still detecting its GPUs answers slots.n=0 with no source: the error then
// wraps ErrNotDecided. An agent whose detection failed answers slots.n=0 with
// the failure as the reason: that error is final.
func (info Info) SlotsError() error {
	if info.Slots.N == 0 && info.Slots.Source == "" {
		reason := strings.TrimSpace(info.Slots.Reason)
		if reason == "" || reason == ReasonDetecting {
			if reason == "" {
				reason = "no reason given"
			}
			return fmt.Errorf("%w (slots.n=0: %s)", ErrNotDecided, reason)
		}
		return fmt.Errorf("worker-agent could not decide its slots (slots.n=0): %s", reason)
	}
	if info.Slots.N < 1 || info.Slots.N > hostfile.MaxSlots {
		return fmt.Errorf("worker-agent /info reports slots.n=%d, want 1..%d", info.Slots.N, hostfile.MaxSlots)
	}
	if info.GPUs.Count < 0 {
		return fmt.Errorf("worker-agent /info reports gpus.count=%d", info.GPUs.Count)
	}
	return nil
}
