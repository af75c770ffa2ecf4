// Package signals names Unix signals the one way podmpi writes them: in logs,
// events, diagnoses and metric labels ("SIGSEGV"), and on the SSH wire, where
// RFC 4254 section 6.10 names a few without the "SIG" prefix ("SEGV").
package signals

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Name returns "SIGSEGV" for SIGSEGV, and "SIG<n>" for a number the kernel
// gives no name (a real-time signal, or no signal at all).
func Name(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}

// Describe is sig for a sentence: "signal 11 (SIGSEGV, segmentation
// fault)", with the C library's description of it (strsignal's, which Go
// keeps), or "signal 40 (SIG40)" for one without.
func Describe(sig syscall.Signal) string {
	s := fmt.Sprintf("signal %d (%s", int(sig), Name(sig))
	if d := sig.String(); d != "" && !strings.HasPrefix(d, "signal ") {
		s += ", " + d
	}
	return s + ")"
}

// Parse is the inverse of [Name]: it reads "SIGSEGV", "SEGV" or "SIG11"
// and returns 0 for anything else (including ""). [ParseSSHExit] reads
// [SSHName]'s names.
func Parse(name string) syscall.Signal {
	if name == "" {
		return 0
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if s := unix.SignalNum(name); s != 0 {
		return s
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "SIG")); err == nil && n > 0 && n <= maxSignal {
		return syscall.Signal(n)
	}
	return 0
}

// maxSignal is the highest signal number Linux knows (SIGRTMAX).
const maxSignal = 64

// sshNames are the signals RFC 4254 section 6.10 names, by their names there.
var sshNames = map[syscall.Signal]string{
	syscall.SIGABRT: "ABRT", syscall.SIGALRM: "ALRM", syscall.SIGFPE: "FPE", syscall.SIGHUP: "HUP",
	syscall.SIGILL: "ILL", syscall.SIGINT: "INT", syscall.SIGKILL: "KILL", syscall.SIGPIPE: "PIPE",
	syscall.SIGQUIT: "QUIT", syscall.SIGSEGV: "SEGV", syscall.SIGTERM: "TERM", syscall.SIGUSR1: "USR1",
	syscall.SIGUSR2: "USR2",
}

// SSHOpenSSHOther is the name OpenSSH's sshd gives in an "exit-signal"
// message to every signal outside RFC 4254's list (SIGBUS, SIGSYS, ...):
// the signal itself is lost there.
const SSHOpenSSHOther = "SIG@openssh.com"

// sshSuffix marks the name worker-agent gives a signal outside RFC 4254's
// list: "BUS@podmpi". Section 6.10 allows "sig-name@xyz" for any other
// signal; clients that do not know it (OpenSSH's ssh ignores exit-signal
// altogether) are no worse off than with OpenSSH's name, and podmpi-rsh
// exits 128+N for it as for the RFC's.
const sshSuffix = "@podmpi"

// SSHName returns sig's name in an SSH "signal" or "exit-signal" message:
// RFC 4254's name ("SEGV"), else its own name with the "@podmpi" suffix
// ("BUS@podmpi", "34@podmpi" for a signal the kernel does not name).
func SSHName(sig syscall.Signal) string {
	if n, ok := sshNames[sig]; ok {
		return n
	}
	return strings.TrimPrefix(Name(sig), "SIG") + sshSuffix
}

// ParseSSH reads the name of an SSH "signal" request. Only RFC 4254's names
// are accepted: a client may not send an arbitrary signal by number.
func ParseSSH(name string) (syscall.Signal, bool) {
	for s, n := range sshNames {
		if n == name {
			return s, true
		}
	}
	return 0, false
}

// ParseSSHExit reads the signal of an "exit-signal" message: RFC 4254's
// names and worker-agent's "<name>@podmpi" (see [SSHName]). ok is false
// for a name that does not say which signal, such as OpenSSH's
// [SSHOpenSSHOther].
func ParseSSHExit(name string) (syscall.Signal, bool) {
	if s, ok := ParseSSH(name); ok {
		return s, true
	}
	base, found := strings.CutSuffix(name, sshSuffix)
	if !found || base == "" || strings.HasPrefix(base, "SIG") {
		return 0, false
	}
	if s := Parse(base); s != 0 && SSHName(s) == name {
		return s, true
	}
	return 0, false // not as SSHName writes it ("11@podmpi" for SEGV)
}
