package rsh

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/rsh/relay"
)

// TestFallbackWhenTheSocketIsMissing: a client whose launcher socket is
// gone runs the command on a connection of its own, and -v says why.
func TestFallbackWhenTheSocketIsMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	missing := filepath.Join(t.TempDir(), "rsh.sock")
	cmd := helper(t, []string{EnvAuthDir + "=" + f.dir, relay.EnvSocket + "=" + missing}, "-v", "-p", f.port(), "127.0.0.1", "echo own; exit 4")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || out.String() != "own\n" {
		t.Fatalf("exit %v, stdout %q, stderr %q", err, out.String(), errb.String())
	}
	want := "podmpi-rsh: debug: not using the launcher's shared connection (connecting to " + missing
	if !strings.Contains(errb.String(), want) {
		t.Fatalf("stderr %q lacks %q", errb.String(), want)
	}
	c := relay.Client{Socket: missing, Args: []string{"h", "true"}, Stdio: [3]int{0, 1, 2}}
	var u *relay.Unserved
	if _, err := c.Run(); !errors.As(err, &u) {
		t.Fatalf("relay to a missing socket: %v, want *relay.Unserved", err)
	}
}
