package signals

import (
	"syscall"
	"testing"
)

func TestName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGKILL: "SIGKILL", syscall.SIGCHLD: "SIGCHLD",
		syscall.SIGXCPU: "SIGXCPU", 40: "SIG40", 0: "SIG0",
	} {
		if got := Name(sig); got != want {
			t.Errorf("Name(%d) = %q, want %q", int(sig), got, want)
		}
	}
}

func TestDescribe(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGSEGV: "signal 11 (SIGSEGV, segmentation fault)", syscall.SIGBUS: "signal 7 (SIGBUS, bus error)",
		syscall.SIGFPE: "signal 8 (SIGFPE, floating point exception)", syscall.SIGKILL: "signal 9 (SIGKILL, killed)", 40: "signal 40 (SIG40)",
	} {
		if got := Describe(sig); got != want {
			t.Errorf("Describe(%d) = %q, want %q", int(sig), got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for name, want := range map[string]syscall.Signal{
		"SIGSEGV": syscall.SIGSEGV, "SEGV": syscall.SIGSEGV, "SIG11": syscall.SIGSEGV, "SIGBUS": syscall.SIGBUS,
		"SIG40": 40, "": 0, "SIG": 0, "SIG0": 0, "SIG65": 0, "SIG-1": 0, "NOPE": 0, "sigsegv": 0,
	} {
		if got := Parse(name); got != want {
			t.Errorf("Parse(%q) = %d, want %d", name, int(got), int(want))
		}
	}
	for sig := syscall.Signal(1); sig <= maxSignal; sig++ {
		if got := Parse(Name(sig)); got != sig {
			t.Errorf("Parse(Name(%d)) = %d", int(sig), int(got))
		}
	}
}

func TestSSHName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGSEGV: "SEGV", syscall.SIGBUS: "BUS@podmpi", syscall.SIGSYS: "SYS@podmpi", syscall.SIGXCPU: "XCPU@podmpi", 40: "40@podmpi",
	} {
		if got := SSHName(sig); got != want {
			t.Errorf("SSHName(%d) = %q, want %q", int(sig), got, want)
		}
	}
	for sig, n := range sshNames {
		if got, ok := ParseSSH(n); !ok || got != sig {
			t.Errorf("ParseSSH(%q) = %d, %t", n, int(got), ok)
		}
		if Parse(n) != sig {
			t.Errorf("Parse(%q) != %d", n, int(sig))
		}
	}
	// A client may send only RFC 4254's signals.
	for _, bad := range []string{"", "SIGSEGV", "BUS", "BUS@podmpi", "9", SSHOpenSSHOther} {
		if _, ok := ParseSSH(bad); ok {
			t.Errorf("ParseSSH(%q) accepted", bad)
		}
	}
}

// TestParseSSHExit: every signal worker-agent can report by exit-signal
// is read back, RFC 4254's or not; OpenSSH's name for the others says
// nothing.
func TestParseSSHExit(t *testing.T) {
	for sig := syscall.Signal(1); sig <= maxSignal; sig++ {
		if got, ok := ParseSSHExit(SSHName(sig)); !ok || got != sig {
			t.Errorf("ParseSSHExit(SSHName(%d) = %q) = %d, %t", int(sig), SSHName(sig), int(got), ok)
		}
	}
	for _, bad := range []string{"", SSHOpenSSHOther, "@podmpi", "SIGBUS@podmpi", "NOPE@podmpi", "BUS", "BUS@example.com", "65@podmpi", "0@podmpi", "11@podmpi", "SEGV@podmpi"} {
		if s, ok := ParseSSHExit(bad); ok {
			t.Errorf("ParseSSHExit(%q) = %d", bad, int(s))
		}
	}
}

func FuzzParseSSHExit(f *testing.F) {
	for _, s := range []string{"SEGV", "BUS@podmpi", "40@podmpi", SSHOpenSSHOther, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, ok := ParseSSHExit(s)
		if ok != (sig != 0) || sig < 0 || sig > maxSignal {
			t.Fatalf("ParseSSHExit(%q) = %d, %t", s, int(sig), ok)
		}
		if ok && SSHName(sig) != s {
			t.Fatalf("ParseSSHExit(%q) = %d, whose name is %q", s, int(sig), SSHName(sig))
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"SIGSEGV", "SEGV", "SIG11", "", "SIG99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sig := Parse(s); sig < 0 || sig > maxSignal {
			t.Fatalf("Parse(%q) = %d", s, int(sig))
		}
	})
}
