package sshd

import "syscall"

// rfcSignals are the signal names of RFC 4254 §6.10, without "SIG".
var rfcSignals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE,
	"HUP": syscall.SIGHUP, "ILL": syscall.SIGILL, "INT": syscall.SIGINT,
	"KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE, "QUIT": syscall.SIGQUIT,
	"SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

// signalName returns the RFC 4254 name of sig for an "exit-signal" message.
// Signals outside the RFC's list are reported as "SIG@openssh.com", which is
// what OpenSSH's sshd sends for them.
func signalName(sig syscall.Signal) string {
	for name, s := range rfcSignals {
		if s == sig {
			return name
		}
	}
	return "SIG@openssh.com"
}
