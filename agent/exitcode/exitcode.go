// Package exitcode defines the documented exit codes of launcher and
// worker-agent. They are part of the user-facing API: Kubernetes shows them in
// the pod status, and docs/troubleshooting.md explains each one.
//
// The launcher passes mpirun's own exit status through unchanged. Its own
// failures use the range 64-79 (after BSD sysexits), which neither Open MPI
// nor Hydra use for their own errors, so an operator can tell "the launcher
// gave up before or around mpirun" from "the MPI job failed". A launcher
// ended by a signal exits 128+signal, as a shell would report it.
package exitcode

// Code is a process exit status.
type Code int

// Exit codes shared by both binaries and the rsh client.
const (
	// OK: the job (or the agent) finished successfully.
	OK Code = 0
	// Usage: bad flags or arguments; nothing was started.
	Usage Code = 64
	// Config: bad configuration found before any work: unreadable or
	// malformed key files, unsafe key file modes, a malformed hostfile,
	// conflicting settings.
	Config Code = 65
	// DiscoveryTimeout: not every expected worker (or the launcher's own
	// name) resolved in DNS before --discovery.timeout.
	DiscoveryTimeout Code = 66
	// ProbeFailed: one or more workers could not be reached over SSH, or lack
	// the MPI daemon, before the probe deadline.
	ProbeFailed Code = 67
	// MPIRunNotFound: the command (usually mpirun) could not be started.
	MPIRunNotFound Code = 68
	// MPIRunTimeout: mpirun ran longer than --mpirun.timeout and was killed.
	MPIRunTimeout Code = 69
	// Listen: worker-agent could not listen on its SSH or HTTP address
	// (port busy, address not available).
	Listen Code = 70
	// Internal: an unexpected internal error; please report it.
	Internal Code = 71
	// SlotsUnknown: with --slots auto, some workers' slot counts were still
	// unknown at the deadline (--probe.timeout): their worker-agent gave
	// none and the discovery source gives none. Running with a guessed
	// count would silently change the job's world size.
	SlotsUnknown Code = 72
	// LaunchFailed: podmpi-rsh could not start an MPI daemon after mpirun
	// started, and mpirun did not exit on its own within the grace the
	// launcher gives it (Hydra waits for such a daemon for ever); the
	// launcher stopped it. An mpirun that exits on its own keeps its code.
	LaunchFailed Code = 73
	// WorkerGone: after mpirun started, a worker's pod was gone for sure
	// (replaced by another pod under its name, or its name no longer
	// resolves, its port is closed, or it has no route), and mpirun did not
	// exit on its own within the grace the launcher gives it (a deleted pod
	// can vanish without closing mpirun's connections); the launcher
	// stopped it. An mpirun that exits on its own keeps its code.
	WorkerGone Code = 74
	// ImageUnsupported: the image cannot run podmpi's part in it: the real
	// worker-agent (cgo) needs glibc's dynamic loader and libraries of the
	// symbol versions it was linked against (glibc 2.28 or later; a musl
	// image such as Alpine has none), or the podmpi tree is incomplete (an
	// install that did not finish, no libexec/worker-agent). Checked
	// before anything of the image runs, instead of the kernel's "no such
	// file or directory" or the loader's "GLIBC_2.28 not found".
	ImageUnsupported Code = 75
	// RemoteShell: the rsh client could not run the remote command (DNS, TCP,
	// handshake, host key or authentication failure). Same value as OpenSSH's
	// ssh(1) uses, which Open MPI and Hydra already understand.
	RemoteShell Code = 255
	// CommandNotFound: the remote shell could not find the command
	// (worker-agent sessions, as sh and sshd report it).
	CommandNotFound Code = 127
)

// Entry documents one exit code.
type Entry struct {
	Code    Code
	Name    string
	Binary  string // "launcher", "worker-agent", "rsh", or "all"
	Meaning string
	Fix     string
}

// Table lists every exit code the binaries produce, in numeric order. The
// README and docs/troubleshooting.md are checked against it by tests.
var Table = []Entry{
	{OK, "ok", "all", "success", "-"},
	{Usage, "usage", "all", "bad flags or arguments; nothing was started", "run with --help; every flag also has a PODMPI_* environment variable"},
	{Config, "config", "all", "bad configuration: key files unreadable, malformed or world-writable, malformed hostfile, conflicting settings", "the message names the file and line; fix the Secret/ConfigMap mount or the flag"},
	{DiscoveryTimeout, "discovery-timeout", "launcher", "some workers (or the launcher's own name) never resolved in DNS before --discovery.timeout", "check the named pods are scheduled (gang scheduling, quota), that the headless Service has publishNotReadyAddresses: true, and the subdomain"},
	{ProbeFailed, "probe-failed", "launcher", "one or more workers failed the SSH probe (tcp, handshake, host key, auth, missing MPI daemon)", "read the per-worker diagnosis line and its hint; docs/troubleshooting.md explains each phase"},
	{MPIRunNotFound, "command-not-found", "launcher", "the command after -- (usually mpirun) could not be started", "install the MPI in the image or put it on PATH"},
	{MPIRunTimeout, "mpirun-timeout", "launcher", "mpirun ran longer than --mpirun.timeout and was stopped", "raise --mpirun.timeout or find the hanging rank"},
	{Listen, "listen", "worker-agent", "could not listen on the SSH or HTTP address (port in use, address not available)", "pick a free port with --ssh.listen-address / --web.listen-address"},
	{Internal, "internal", "all", "unexpected internal error", "report it with the log"},
	{SlotsUnknown, "slots-unknown", "launcher", "with --slots auto, some workers' worker-agent gave no slot count before --probe.timeout and the discovery source gives none (never a smaller world in silence)", "the message names each worker and why: start worker-agent there, let the launcher reach --worker.web-port, raise --probe.timeout for slow starts, or give counts (name=N, slots=N in the hostfile, --slots N, --slots.allow-default)"},
	{LaunchFailed, "launch-failed", "launcher", "podmpi-rsh could not start an MPI daemon after mpirun started and mpirun did not exit on its own within --diagnosis.launch-grace; the launcher stopped it (the termination message names host, port and phase)", "read the podmpi-rsh diagnosis first in the termination message: usually a worker whose worker-agent is not running or not reachable on its SSH port"},
	{WorkerGone, "worker-gone", "launcher", "after mpirun started, a worker's pod was gone (deleted, evicted, restarted, its node lost) and mpirun did not exit on its own within --diagnosis.launch-grace; the launcher stopped it (the termination message names the worker)", "kubectl get events and kubectl describe pod for the named worker; an MPI job cannot go on without its ranks: run it again (from a checkpoint)"},
	{ImageUnsupported, "image-unsupported", "worker-agent", "the image cannot run worker-agent: no glibc loader or libc of the versions it needs (a musl image, glibc older than 2.28), or an incomplete /opt/podmpi copy, which the launcher refuses too (the message names what is missing and what the image has)", "run the worker pods on an image with glibc 2.28 or later (Debian 10+, Ubuntu 20.04+, UBI 8+, CUDA/NGC images); let the init container's launcher install finish"},
	{CommandNotFound, "remote-command-not-found", "worker-agent session", "the remote shell could not find the command (for example orted not on PATH)", "put the MPI daemon on the worker-agent's PATH"},
	{RemoteShell, "remote-shell", "rsh", "the rsh client could not run the remote command: dns, tcp, handshake, host key or auth failure (one stderr line names host and phase)", "read the phase and hint on stderr"},
}
