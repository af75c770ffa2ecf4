// Package relay is the thin side of the launcher's connection sharing: the
// client that a podmpi-rsh started under mpirun runs to have the launcher
// serve its remote command on the SSH connection the launcher already holds
// to that worker, the wire protocol both sides speak, and what the small
// podmpi-rsh binary needs besides (closing inherited descriptors, falling
// back to the full client).
//
// The launcher listens on a unix socket in its private directory (mode
// 0700, its own UID) and names it in PODMPI_RSH_SOCKET for mpirun, beside
// the run's token in PODMPI_RSH_TOKEN. A relay connects, sends the token,
// its command line, the variables the client reads, and its stdin, stdout
// and stderr as descriptors (SCM_RIGHTS, as OpenSSH's
// ControlMaster clients pass theirs), then lets go of its own copies: the
// launcher reads and writes the remote command's streams directly. The
// relay only forwards the signals it receives and exits with the status the
// launcher sends. When it is killed, the launcher sees the socket close and
// closes the session's channel, which makes worker-agent end the command's
// process group.
//
// A relay that cannot be served (no socket, the launcher gone, a refusal,
// a terminal on its stdio) has run nothing and falls back to a connection
// of its own: the full client, `launcher rsh`.
//
// This package imports nothing heavier than the standard library's os and
// syscall, so that the podmpi-rsh binary built on it starts in about a
// millisecond and holds well under a megabyte of its own memory.
package relay

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// EnvSocket names the launcher's socket. The launcher sets it in mpirun's
// environment when it shares its connections; unset or empty, a relay falls
// back at once.
const EnvSocket = "PODMPI_RSH_SOCKET"

// EnvToken carries the run's token: the launcher makes one per run, sets
// it in mpirun's environment beside EnvSocket, and serves only a request
// that carries it. The socket's directory and the peer UID check keep out
// other users; the token keeps out processes of the launcher's own UID that
// are not of its run: on OpenShift every container of a pod runs as the
// same UID, and a sidecar that shares the launcher's TMPDIR could otherwise
// run commands on every worker with the job key it was never given. It is
// never sent to the full client nor logged.
const EnvToken = "PODMPI_RSH_TOKEN"

// EnvUnshared carries to the full client why a relay fell back (it prints
// it as a debug line under -v); the relay sets it when it execs the full
// client.
const EnvUnshared = "PODMPI_RSH_UNSHARED"

// Name is the program name of the ssh-compatible client (the relay binary,
// and the private symlink the launcher gives mpirun).
const Name = "podmpi-rsh"

// Names are the program names under which podmpi's binaries act as the
// client: Name, and ssh. make build installs the relay binary as Name and
// links ssh to it, so that with that directory first on PATH every ssh that
// mpirun, Hydra, Intel MPI, horovodrun or a person starts is podmpi's.
var Names = []string{Name, "ssh"}

// IsName reports whether argv0 (with or without a directory) is one of
// Names.
func IsName(argv0 string) bool {
	return slices.Contains(Names, filepath.Base(argv0))
}

// sentPrefix is the prefix of the variables a relay sends: the client's
// settings (PODMPI_SSH_*, PODMPI_RSH_FAILURE_DIR) are all PODMPI_ twins.
const sentPrefix = "PODMPI_"

// sentNames are the other variables the client reads.
var sentNames = []string{"HOME", "USER"}

// SentEnv is the part of env (KEY=VALUE entries) a relay sends: every
// PODMPI_ variable but the token (Open carries it), HOME and USER. The
// client reads nothing else, and the rest of a job's environment stays out
// of the launcher.
func SentEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == EnvToken {
			continue
		}
		if strings.HasPrefix(k, sentPrefix) || slices.Contains(sentNames, k) {
			out = append(out, kv)
		}
	}
	return out
}

// Token is the run's token in env (EnvToken's last entry), "" when none.
func Token(env []string) string {
	token := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvToken+"="); ok {
			token = v
		}
	}
	return token
}

// DefaultTimeout bounds a relay's handshake: connecting, sending its
// request and descriptors, and the launcher's Accept. The launcher answers
// from its accept loop, before any network work, so this is only reached
// when it is stuck or gone.
const DefaultTimeout = 10 * time.Second

// Client is one relay's session.
type Client struct {
	// Socket is the launcher's socket (EnvSocket).
	Socket string
	// Args are the client's arguments, without argv[0].
	Args []string
	// Env is the process's environment; SentEnv picks what is sent, and
	// the run's token (EnvToken) goes in the request.
	Env []string
	// Stdio are the descriptors of stdin, stdout and stderr (0, 1, 2 in the
	// relay binary).
	Stdio [3]int
	// Signals are forwarded to the launcher (and by it to the remote
	// command) during the session; nil forwards none.
	Signals <-chan os.Signal
	// Release, when set, is called once the launcher holds the stdio and
	// before the command runs: a relay whose Stdio are its own closes them
	// there (CloseStdio), so that it keeps no descriptor but the socket.
	Release func()
	// Started, when set, is called once the command may run, off the
	// command's path (the relay binary subscribes to signals there).
	Started func()
	// Timeout bounds the handshake; DefaultTimeout when zero.
	Timeout time.Duration
}

// CloseStdio closes the process's stdin, stdout and stderr: the Release of
// a relay whose Stdio are 0, 1 and 2 (the relay binary, and the full client
// when it relays), once the launcher holds them.
func CloseStdio() {
	for fd := range 3 {
		_ = syscall.Close(fd)
	}
}

// Unserved is why a relay was not served. Nothing ran: the caller falls
// back to a connection of its own.
type Unserved struct{ Reason string }

func (u *Unserved) Error() string { return "not served by the launcher: " + u.Reason }

// ErrLost is returned (with status 255) when the launcher went away during
// the session, after the command had started.
var ErrLost = errors.New("the launcher closed the shared session without an exit status")

// ErrOutcomeUnknown is returned (with status 255) when the launcher took
// the request and whether it runs the command is not known: no answer came
// within the handshake's timeout, reading it failed, or it was neither
// Accept nor Refuse. The launcher may run the command still, so the relay
// cannot run it on its own connection: a command never runs twice.
var ErrOutcomeUnknown = errors.New("the launcher took the command but gave no answer the relay knows (none in time, or not Accept nor Refuse): it may run it still, so it is not run again here")
