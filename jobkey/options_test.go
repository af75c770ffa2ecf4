package jobkey

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Options that take the pseudo-terminal away are honoured per key, in
// order ("pty" after "restrict" gives it back, as in OpenSSH); options the
// server does not implement get the key refused, with the option named.
func TestAuthorizedKeysOptions(t *testing.T) {
	_, pub := writeTrainerLayout(t, 0o640)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	for _, tc := range []struct {
		opts      string
		noPTY     bool
		refused   string // an option the LineError must name; "" = accepted
		wantError bool
	}{
		{opts: "", noPTY: false},
		{opts: "restrict", noPTY: true},
		{opts: "no-pty", noPTY: true},
		{opts: "NO-PTY", noPTY: true},
		{opts: "restrict,pty", noPTY: false},
		{opts: "pty,restrict", noPTY: true},
		{opts: "no-pty,pty", noPTY: false},
		{opts: "no-port-forwarding,no-agent-forwarding,no-x11-forwarding,no-user-rc", noPTY: false},
		{opts: "restrict,port-forwarding", noPTY: true},
		{opts: `command="/bin/evil"`, refused: "command"},
		{opts: `restrict,command="orted"`, refused: "command"},
		{opts: `from="10.0.0.0/8"`, refused: "from"},
		{opts: `environment="LD_PRELOAD=/x"`, refused: "environment"},
		{opts: `permitopen="db:5432"`, refused: "permitopen"},
		{opts: `expiry-time="20300101"`, refused: "expiry-time"},
		{opts: "cert-authority", refused: "cert-authority"},
	} {
		t.Run(tc.opts, func(t *testing.T) {
			data := line + "\n"
			if tc.opts != "" {
				data = tc.opts + " " + line + "\n"
			}
			keys, bad := ParseAuthorizedKeys([]byte(data))
			if tc.refused != "" {
				if len(keys) != 0 || len(bad) != 1 || bad[0].Line != 1 || len(bad[0].Options) == 0 ||
					bad[0].Options[len(bad[0].Options)-1] != tc.refused || !strings.Contains(bad[0].Error(), tc.refused) {
					t.Fatalf("want the key refused naming %q; keys %+v bad %+v", tc.refused, keys, bad)
				}
				return
			}
			if len(bad) != 0 || len(keys) != 1 {
				t.Fatalf("want the key accepted; keys %+v bad %+v", keys, bad)
			}
			if keys[0].NoPTY != tc.noPTY {
				t.Fatalf("NoPTY = %v, want %v", keys[0].NoPTY, tc.noPTY)
			}
		})
	}
	// A malformed line carries no Options: it is not a refusal by policy.
	if _, bad := ParseAuthorizedKeys([]byte("not-a-key AAAA\n")); len(bad) != 1 || len(bad[0].Options) != 0 {
		t.Fatalf("malformed line: %+v", bad)
	}
	// An option name with odd bytes is quoted, never printed raw.
	_, bad := ParseAuthorizedKeys([]byte("\x1b[31m=\"x\" " + line + "\n"))
	if len(bad) == 1 && strings.ContainsRune(bad[0].Error(), 0x1b) {
		t.Fatalf("escape byte printed raw: %q", bad[0].Error())
	}
}

// ReadFileStamped's stamp changes when the kubelet swaps ..data, and when a
// file is rewritten in place; it stays equal otherwise.
func TestStampFollowsKubeletSwap(t *testing.T) {
	dir := t.TempDir()
	writeVersion := func(name, content string) {
		d := filepath.Join(dir, name)
		must(t, os.Mkdir(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, AuthorizedKeys), []byte(content), 0o644))
	}
	writeVersion("..2026_01_01_00_00_00.1", "one\n")
	must(t, os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")))
	must(t, os.Symlink(filepath.Join("..data", AuthorizedKeys), filepath.Join(dir, AuthorizedKeys)))
	p := filepath.Join(dir, AuthorizedKeys)

	data, s1, err := ReadFileStamped(p)
	must(t, err)
	if string(data) != "one\n" || s1.IsZero() {
		t.Fatalf("read %q stamp %+v", data, s1)
	}
	if s, err := StatStamp(p); err != nil || s != s1 {
		t.Fatalf("StatStamp %+v %v, want %+v", s, err, s1)
	}
	// Same size, new directory: the stamp must still change.
	writeVersion("..2026_01_01_00_01_00.2", "two\n")
	must(t, os.Symlink("..2026_01_01_00_01_00.2", filepath.Join(dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	s2, err := StatStamp(p)
	must(t, err)
	if s2 == s1 {
		t.Fatal("stamp unchanged after the ..data swap")
	}
	data, s3, err := ReadFileStamped(p)
	must(t, err)
	if string(data) != "two\n" || s3 != s2 {
		t.Fatalf("after swap read %q stamp %+v want %+v", data, s3, s2)
	}
	// Errors: missing file, FIFO (must not block), directory, world-writable.
	if _, _, err := ReadFileStamped(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file read")
	}
	fifo := filepath.Join(dir, "fifo")
	must(t, mkfifo(fifo))
	if _, _, err := ReadFileStamped(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("fifo: %v", err)
	}
	if _, _, err := ReadFileStamped(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("dir: %v", err)
	}
	ww := filepath.Join(dir, "ww")
	must(t, os.WriteFile(ww, []byte("x"), 0o644))
	must(t, os.Chmod(ww, 0o666))
	if _, _, err := ReadFileStamped(ww); err == nil || !strings.Contains(err.Error(), "world-writable") {
		t.Fatalf("world-writable: %v", err)
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
