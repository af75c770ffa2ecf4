package account

import (
	"syscall"

	"github.com/podmpi/podmpi/agent/signals"
)

// labelSignals are the signals with a reason label of their own on the exit
// counters; any other is "other" there (events still name it).
var labelSignals = []syscall.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
	syscall.SIGBUS, syscall.SIGFPE, syscall.SIGKILL, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2,
	syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTERM, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGSYS,
}

// signalLabel is the bounded metric label of a signal name.
func signalLabel(name string) string {
	for _, s := range labelSignals {
		if signals.Name(s) == name {
			return name
		}
	}
	return "other"
}

// exitReasons are the values of the reason label of the exit counters:
// "exit" (a non-zero status), each labelled signal, "other" (another signal).
func exitReasons() []string {
	out := []string{"exit", "other"}
	for _, s := range labelSignals {
		out = append(out, signals.Name(s))
	}
	return out
}
