package jobkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"golang.org/x/crypto/ssh"
)

// writeTrainerLayout writes a job key as Trainer v2 mounts its Secret
// (sshtest.WriteSecret), with id_rsa at keyMode, and returns the dir.
func writeTrainerLayout(t *testing.T, keyMode os.FileMode) (string, ssh.PublicKey) {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	must(t, os.Chmod(filepath.Join(dir, PrivateKey), keyMode))
	return dir, k.Public()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoadTrainerLayoutAllModes(t *testing.T) {
	for _, mode := range []os.FileMode{0o400, 0o440, 0o640, 0o644} {
		dir, pub := writeTrainerLayout(t, mode)
		s, err := LoadSigner(filepath.Join(dir, PrivateKey))
		if err != nil {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		if s.PublicKey().Type() != "ecdsa-sha2-nistp521" {
			t.Fatalf("type %s", s.PublicKey().Type())
		}
		p, err := LoadPublicKey(filepath.Join(dir, PublicKey))
		must(t, err)
		must(t, CheckPair(dir, s, p))
		if Fingerprint(p) != Fingerprint(pub) {
			t.Fatal("fingerprint mismatch")
		}
	}
}

func TestWorldWritableRefused(t *testing.T) {
	dir, _ := writeTrainerLayout(t, 0o600)
	p := filepath.Join(dir, PrivateKey)
	must(t, os.Chmod(p, 0o666))
	_, err := LoadSigner(p)
	if !errors.Is(err, ErrWorldWritable) {
		t.Fatalf("want ErrWorldWritable, got %v", err)
	}
	var ae *Error
	if !errors.As(err, &ae) || ae.Path != p || ae.Hint == "" {
		t.Fatalf("want *Error naming %s with a hint, got %#v", p, err)
	}
}

func TestOtherKeyFormats(t *testing.T) {
	_, edk, _ := ed25519.GenerateKey(rand.Reader)
	openssh, err := ssh.MarshalPrivateKey(edk, "c")
	must(t, err)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})
	p8, err := x509.MarshalPKCS8PrivateKey(edk)
	must(t, err)
	pkcs8 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})
	enc, err := ssh.MarshalPrivateKeyWithPassphrase(edk, "c", []byte("pw"))
	must(t, err)
	for name, tc := range map[string]struct {
		data    []byte
		wantErr string
	}{
		"openssh-ed25519": {pem.EncodeToMemory(openssh), ""},
		"pkcs1-rsa":       {pkcs1, ""},
		"pkcs8-ed25519":   {pkcs8, ""},
		"encrypted":       {pem.EncodeToMemory(enc), "passphrase"},
		"garbage":         {[]byte("hello"), "no key found"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePrivateKey(tc.data)
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("want %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestParseAuthorizedKeys(t *testing.T) {
	dir, pub := writeTrainerLayout(t, 0o640)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	data := "# comment\n\n" + line + " job@tj\nnot-a-key AAAA\ncommand=\"/bin/evil\" " + line + "\nno-pty,restrict " + line + "\n"
	keys, bad := ParseAuthorizedKeys([]byte(data))
	if len(keys) != 2 || keys[0].Line != 3 || keys[0].Comment != "job@tj" || keys[1].Line != 6 {
		t.Fatalf("keys = %+v", keys)
	}
	if len(bad) != 2 || bad[0].Line != 4 || bad[1].Line != 5 || !strings.Contains(bad[1].Error(), "command") {
		t.Fatalf("bad = %v", bad)
	}
	p := filepath.Join(dir, "empty")
	must(t, os.WriteFile(p, []byte("# nothing\n"), 0o644))
	if _, _, err := LoadAuthorizedKeys(p); err == nil || !strings.Contains(err.Error(), "no usable public key") {
		t.Fatalf("want no usable key, got %v", err)
	}
}

func TestFind(t *testing.T) {
	dir, _ := writeTrainerLayout(t, 0o640)
	home := filepath.Dir(dir)
	must(t, os.Rename(dir, filepath.Join(home, ".ssh")))
	got, err := Find("", home, AuthorizedKeys)
	must(t, err)
	if got != filepath.Join(home, ".ssh") {
		t.Fatalf("got %s", got)
	}
	if _, err := Find(filepath.Join(home, "missing"), home, AuthorizedKeys); err == nil {
		t.Fatal("explicit missing dir must fail")
	}
	if _, err := Find("", t.TempDir(), "no-such-file-anywhere"); err == nil || !strings.Contains(err.Error(), "hint:") {
		t.Fatalf("want error with hint, got %v", err)
	}
}

func TestCheckPairMismatch(t *testing.T) {
	d1, _ := writeTrainerLayout(t, 0o640)
	_, pub2 := writeTrainerLayout(t, 0o640)
	s, err := LoadSigner(filepath.Join(d1, PrivateKey))
	must(t, err)
	if err := CheckPair(d1, s, pub2); err == nil || !strings.Contains(err.Error(), "same Secret") {
		t.Fatalf("want mismatch error, got %v", err)
	}
}

func FuzzParseAuthorizedKeys(f *testing.F) {
	f.Add([]byte("# c\n\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxW1YqQ4nxQ2wPqnU3HFwFzVd7tWQv3Vf4n0hVbX0mB c\n"))
	f.Add([]byte("command=\"x\" ssh-ed25519 AAAA\n"))
	f.Add([]byte("ecdsa-sha2-nistp521 AAAA"))
	const ed = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxW1YqQ4nxQ2wPqnU3HFwFzVd7tWQv3Vf4n0hVbX0mB c"
	for _, opts := range []string{"restrict", "no-pty", "restrict,pty", "pty,restrict", `command="x"`, `from="10.0.0.0/8",no-pty`, "No-Pty", `environment="A=b"`} {
		f.Add([]byte(opts + " " + ed + "\n"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, bad := ParseAuthorizedKeys(data)
		lines := strings.Split(string(data), "\n")
		for _, k := range keys {
			if k.Key == nil || k.Line < 1 || k.Line > len(lines) {
				t.Fatalf("bad key entry %+v", k)
			}
			// Only a line that says restrict or no-pty takes the PTY away.
			l := strings.ToLower(lines[k.Line-1])
			if k.NoPTY && !strings.Contains(l, "restrict") && !strings.Contains(l, "no-pty") {
				t.Fatalf("line %d %q: NoPTY without restrict or no-pty", k.Line, lines[k.Line-1])
			}
			// An accepted key never carries an option the server ignores.
			for _, o := range []string{"command=", "from=", "environment=", "permitopen=", "permitlisten=", "principals=", "tunnel="} {
				if pk, _, opts, _, err := ssh.ParseAuthorizedKey([]byte(lines[k.Line-1])); err == nil && pk != nil {
					for _, got := range opts {
						if strings.HasPrefix(strings.ToLower(got), o) {
							t.Fatalf("line %d: key with %s accepted", k.Line, o)
						}
					}
				}
			}
		}
		for _, b := range bad {
			if b.Line < 1 || b.Err == nil {
				t.Fatalf("bad line entry %+v", b)
			}
			for _, o := range b.Options {
				if o == "" || !strings.Contains(b.Error(), o) {
					t.Fatalf("line %d: refused option %q not named in %q", b.Line, o, b.Error())
				}
			}
		}
	})
}

func FuzzParsePrivateKey(f *testing.F) {
	f.Add([]byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParsePrivateKey(data)
		if err == nil && s == nil {
			t.Fatal("nil signer without error")
		}
	})
}
