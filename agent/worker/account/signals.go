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
