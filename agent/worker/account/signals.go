package account

import (
	"strconv"
	"syscall"
)

// signalNames are the signals with a name of their own in events, logs and
// metric labels; any other is "SIG<n>" in events and "other" in labels.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

// SignalName returns "SIGSEGV" for SIGSEGV, "SIG<n>" for a signal without
// a name of its own.
func SignalName(sig syscall.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}

// rfcSignals maps the signal names of SSH's exit-signal (RFC 4254 §6.10,
// without "SIG") to signals.
var rfcSignals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

// signalLabel is the bounded metric label of a signal name.
func signalLabel(name string) string {
	for _, n := range signalNames {
		if n == name {
			return name
		}
	}
	return "other"
}

// exitReasons are the values of the reason label of the exit counters:
// "exit" (a non-zero status), each named signal, "other" (another signal).
func exitReasons() []string {
	out := []string{"exit", "other"}
	for _, n := range signalNames {
		out = append(out, n)
	}
	return out
}
