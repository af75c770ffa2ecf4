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
	if got := SSHName(syscall.SIGSEGV); got != "SEGV" {
		t.Errorf("SSHName(SIGSEGV) = %q", got)
	}
	if got := SSHName(syscall.SIGBUS); got != SSHOther {
		t.Errorf("SSHName(SIGBUS) = %q, want %q", got, SSHOther)
	}
	for sig, n := range sshNames {
		if got, ok := ParseSSH(n); !ok || got != sig {
			t.Errorf("ParseSSH(%q) = %d, %t", n, int(got), ok)
		}
		if Parse(n) != sig {
			t.Errorf("Parse(%q) != %d", n, int(sig))
		}
	}
	for _, bad := range []string{"", "SIGSEGV", "BUS", "9", SSHOther} {
		if _, ok := ParseSSH(bad); ok {
			t.Errorf("ParseSSH(%q) accepted", bad)
		}
	}
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
