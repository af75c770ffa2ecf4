package main

import (
	"strings"
	"testing"
)

// FuzzValidateFlags parses arbitrary flag values through cobra and
// validate: bad input must give an error, never a panic, and accepted
// addresses must be host:port.
func FuzzValidateFlags(f *testing.F) {
	for _, s := range []string{
		"--ssh.listen-address=:2222", "--ssh.listen-address=2222", "--web.listen-address=:http2x",
		"--web.listen-address=", "--slots=many", "--slots=4", "--slots=-3", "--gpu.detect=cuda",
		"--shutdown.grace=soon", "--ssh.kill-grace=-1s", "--ssh.max-sessions=0", "--ssh.shell=sh",
		"--ssh.listen-address=[::1]:22", "--ssh.listen-address=host:ssh", "--ssh.keepalive-interval=0",
		"--ssh.max-startups=10:30:100", "--ssh.max-startups=50:30:10", "--ssh.max-startups=1:1", "--ssh.per-source-max-startups=0",
		"--web.max-connections=100001",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		o := &options{env: func(string) (string, bool) { return "", false }}
		root := newRootCmd(o)
		if err := root.ParseFlags(strings.Split(arg, "\x00")); err != nil {
			return
		}
		if _, err := o.validate(); err != nil {
			if !strings.Contains(err.Error(), "hint: ") {
				t.Fatalf("validate error without a hint: %v", err)
			}
			return
		}
		if err := checkAddr("--ssh.listen-address", o.sshListen); err != nil {
			t.Fatalf("validate accepted %q but checkAddr rejects it: %v", o.sshListen, err)
		}
		// Accepted limits are within their ranges.
		begin, rate, full := o.startups()
		if begin < 1 || begin > full || rate < 1 || rate > 100 || full > maxFlagStartups ||
			o.perSource < 1 || o.webMaxConns < 1 || o.webMaxConns > maxFlagConnections {
			t.Fatalf("validate accepted out-of-range limits %d:%d:%d per-source %d web %d", begin, rate, full, o.perSource, o.webMaxConns)
		}
	})
}
