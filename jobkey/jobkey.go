// Package jobkey reads the job's SSH material as Kubeflow Trainer v2 and
// mpi-operator mount it into every pod: a directory (the "auth dir", usually
// /home/mpiuser/.ssh or /root/.ssh) holding
//
//	id_rsa           the job's private key: ECDSA P-521 in SEC1 "EC PRIVATE KEY"
//	                 PEM despite the name (ed25519, RSA, PKCS#8 and OpenSSH
//	                 formats are accepted too)
//	id_rsa.pub       the matching public key, one authorized_keys-format line
//	authorized_keys  the same public key
//
// The files are root-owned with modes 0400, 0440, 0640 or 0644 (an fsGroup
// ORs in group bits). Unlike OpenSSH, this package never rejects a group- or
// world-readable key: under a random UID the kubelet's modes are all there is.
// It refuses a world-writable file (anyone in the pod could swap the key) and
// anything that is not a regular file.
//
// The worker-agent uses the private key as its host key and authorized_keys
// for client auth; the launcher signs with the private key and pins the
// workers' host key to id_rsa.pub. One Secret therefore gives both mutual
// authentication and host-key pinning, with no known_hosts to distribute.
//
// It is a leaf at the top of the module, beside hostfile, because both sides
// of every connection depend on it and on nothing else of podmpi: the server
// (sshd, in worker-agent) and the clients (agent/sshclient, behind the
// launcher's probe and podmpi-rsh). With it the package also holds what the
// two ends must agree on besides the keys: the algorithm lists
// (algorithms.go) and the ed25519 key both derive from the job key
// (derived.go).
package jobkey

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// File names inside the auth dir, as both operators mount them.
const (
	PrivateKey     = "id_rsa"
	PublicKey      = "id_rsa.pub"
	AuthorizedKeys = "authorized_keys"
)

// MaxKeyFileSize bounds every key file read; real ones are a few KiB.
const MaxKeyFileSize = 1 << 20

// Error describes a problem with a file or directory of the auth dir, with an
// operator hint. It never carries key material.
type Error struct {
	Path string // file or directory
	Op   string // what was being done: "find", "read", "parse", "check mode"
	Err  error
	Hint string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s %s: %v", e.Op, e.Path, e.Err)
	if e.Hint != "" {
		msg += "; hint: " + e.Hint
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ErrWorldWritable is wrapped by errors for world-writable key files.
var ErrWorldWritable = errors.New("file is world-writable")

// Candidates is the search order used when no auth dir is configured:
// $HOME/.ssh (when home is known), /home/mpiuser/.ssh (Trainer v2 runtimes and
// mpi-operator's non-root examples), /root/.ssh (both operators' default).
func Candidates(home string) []string {
	var out []string
	if home != "" && home != "/" {
		out = append(out, filepath.Join(home, ".ssh"))
	}
	for _, d := range []string{"/home/mpiuser/.ssh", "/root/.ssh"} {
		if len(out) == 0 || out[0] != d {
			out = append(out, d)
		}
	}
	return out
}

// Find returns the auth dir: explicit when set (it must be a directory), else
// the first of Candidates(home) that holds the file want (AuthorizedKeys for
// the server, PrivateKey for a client).
func Find(explicit, home, want string) (string, error) {
	if explicit != "" {
		st, err := os.Stat(explicit)
		if err != nil {
			return "", &Error{Path: explicit, Op: "find auth dir", Err: err,
				Hint: "mount the job's SSH Secret there (mlPolicy.mpi.sshAuthMountPath / sshAuthMountPath) or fix --ssh.auth-dir"}
		}
		if !st.IsDir() {
			return "", &Error{Path: explicit, Op: "find auth dir", Err: errors.New("not a directory"),
				Hint: "--ssh.auth-dir names the directory holding id_rsa, id_rsa.pub and authorized_keys"}
		}
		return explicit, nil
	}
	cands := Candidates(home)
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, want)); err == nil {
			return d, nil
		}
	}
	return "", &Error{Path: strings.Join(cands, ", "), Op: "find auth dir", Err: fmt.Errorf("no directory holds %s", want),
		Hint: "mount the job's SSH Secret (id_rsa, id_rsa.pub, authorized_keys) at one of these or set --ssh.auth-dir"}
}

// CheckMode checks that path is a regular file (after symlinks: the kubelet
// mounts Secret items as symlinks into ..data) and not world-writable.
func CheckMode(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &Error{Path: path, Op: "check mode", Err: err, Hint: hintFor(err)}
	}
	if err := checkInfo(path, st); err != nil {
		return nil, err
	}
	return st, nil
}

// checkInfo applies CheckMode's rules to a file's info.
func checkInfo(path string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return &Error{Path: path, Op: "check mode", Err: fmt.Errorf("not a regular file (mode %s)", st.Mode()),
			Hint: "point the auth dir at the mounted Secret's files"}
	}
	if st.Mode().Perm()&0o002 != 0 {
		return &Error{Path: path, Op: "check mode", Err: fmt.Errorf("%w (mode %04o)", ErrWorldWritable, st.Mode().Perm()),
			Hint: "anyone in the pod could replace this key; mount the Secret with defaultMode 0400 (0440/0640 with fsGroup are fine)"}
	}
	return nil
}

// ReadFile reads a key file after CheckMode, bounded by MaxKeyFileSize.
func ReadFile(path string) ([]byte, error) {
	if _, err := CheckMode(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Path: path, Op: "read", Err: err, Hint: hintFor(err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKeyFileSize+1))
	if err != nil {
		return nil, &Error{Path: path, Op: "read", Err: err}
	}
	if len(data) > MaxKeyFileSize {
		return nil, &Error{Path: path, Op: "read", Err: fmt.Errorf("larger than %d bytes", MaxKeyFileSize), Hint: "this is not an SSH key file"}
	}
	return data, nil
}

func hintFor(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "the job's SSH Secret is not mounted here; check the volume and sshAuthMountPath"
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("this process (uid %d, gid %d) cannot read it; give the pod an fsGroup matching the file's group, or mount with a mode readable by this uid", os.Getuid(), os.Getgid())
	}
	return ""
}

// ParsePrivateKey parses a private key in any format x/crypto/ssh knows:
// SEC1 "EC PRIVATE KEY", PKCS#1 "RSA PRIVATE KEY", PKCS#8 "PRIVATE KEY" and
// "OPENSSH PRIVATE KEY". Passphrase-protected keys are refused.
func ParsePrivateKey(data []byte) (ssh.Signer, error) {
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, errors.New("the private key is protected by a passphrase; job keys must be unencrypted")
		}
		// x/crypto's messages never include key bytes.
		return nil, err
	}
	return s, nil
}

// LoadSigner reads and parses the private key at path.
func LoadSigner(path string) (ssh.Signer, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParsePrivateKey(data)
	if err != nil {
		return nil, &Error{Path: path, Op: "parse private key", Err: err,
			Hint: "expected the job Secret's ssh-privatekey (PEM: EC PRIVATE KEY, RSA PRIVATE KEY, PRIVATE KEY or OPENSSH PRIVATE KEY)"}
	}
	return s, nil
}

// LoadPublicKey reads the first public key of an authorized_keys-format file
// (id_rsa.pub).
func LoadPublicKey(path string) (ssh.PublicKey, error) {
	keys, _, err := LoadAuthorizedKeys(path)
	if err != nil {
		return nil, err
	}
	return keys[0].Key, nil
}

// Key is one accepted entry of an authorized_keys file.
type Key struct {
	Key     ssh.PublicKey
	Comment string
	Line    int
	// NoPTY is set by the line's options "restrict" or "no-pty" (unless a
	// later "pty" gives the terminal back, as in OpenSSH): the key never
	// gets a pseudo-terminal, whatever the server allows others.
	NoPTY bool
}

// LineError is an authorized_keys line that was skipped, and why.
type LineError struct {
	Line int
	Err  error
	// Options are the line's options the server does not implement (for
	// example command=, from=): the key was refused because honouring only
	// part of them would grant its owner more than intended. Empty for a
	// line that is not a public key at all.
	Options []string
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Authorized_keys options and what worker-agent makes of them. "restrict"
// and "no-pty" take the pseudo-terminal away (Key.NoPTY) and "pty" gives it
// back; the others only take away, or give back, what this server never
// grants (forwarding of ports, agents and X11, ~/.ssh/rc). Every other
// option (command=, from=, environment=, permitopen=, permitlisten=,
// principals=, tunnel=, expiry-time=, cert-authority, no-touch-required,
// verify-required) would restrict what the key may run or where it may come
// from; they are not implemented, so a key carrying one is refused rather
// than silently granted more than its owner intended.
var (
	ptyOptions      = map[string]bool{"restrict": true, "no-pty": true, "pty": false}
	harmlessOptions = map[string]bool{
		"no-agent-forwarding": true, "no-port-forwarding": true, "no-user-rc": true, "no-x11-forwarding": true,
		"agent-forwarding": true, "port-forwarding": true, "user-rc": true, "x11-forwarding": true,
	}
)

// ParseAuthorizedKeys parses authorized_keys content line by line. Blank lines
// and comments are ignored; malformed lines and keys with unsupported options
// are reported as LineErrors and skipped (OpenSSH skips malformed lines too).
func ParseAuthorizedKeys(data []byte) ([]Key, []LineError) {
	var keys []Key
	var bad []LineError
	for i, line := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		pk, comment, options, _, err := ssh.ParseAuthorizedKey(line)
		if err != nil {
			bad = append(bad, LineError{Line: n, Err: fmt.Errorf("not a public key: %w", err)})
			continue
		}
		k := Key{Key: pk, Comment: comment, Line: n}
		var unsupported []string
		for _, o := range options {
			name, _, _ := strings.Cut(o, "=")
			name = strings.ToLower(name)
			if noPTY, ok := ptyOptions[name]; ok {
				k.NoPTY = noPTY
			} else if !harmlessOptions[name] {
				unsupported = append(unsupported, truncateOption(name))
			}
		}
		if len(unsupported) > 0 {
			bad = append(bad, LineError{Line: n, Options: unsupported,
				Err: fmt.Errorf("key refused: options %s are not implemented by worker-agent (remove them, or keep this key out of the job's authorized_keys)", strings.Join(unsupported, ","))})
			continue
		}
		keys = append(keys, k)
	}
	return keys, bad
}

// truncateOption makes an option name safe to quote in a message: at most
// 32 bytes, and Go-quoted unless it is a plain option name.
func truncateOption(name string) string {
	if name == "" {
		return `""`
	}
	cut := name
	if len(cut) > 32 {
		cut = cut[:32]
	}
	for _, c := range []byte(cut) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '@' || c == '.') {
			return strconv.QuoteToASCII(cut)
		}
	}
	if len(cut) < len(name) {
		cut += "..."
	}
	return cut
}

// LoadAuthorizedKeys reads an authorized_keys-format file. It fails when the
// file holds no usable key; skipped lines are returned for the caller to log.
func LoadAuthorizedKeys(path string) ([]Key, []LineError, error) {
	keys, bad, _, err := LoadAuthorizedKeysStamped(path)
	return keys, bad, err
}

// LoadAuthorizedKeysStamped is LoadAuthorizedKeys that also returns the
// Stamp of the file it read (see ReadFileStamped), for a caller that
// re-reads the file only when it changed.
func LoadAuthorizedKeysStamped(path string) ([]Key, []LineError, Stamp, error) {
	data, st, err := ReadFileStamped(path)
	if err != nil {
		return nil, nil, Stamp{}, err
	}
	keys, bad := ParseAuthorizedKeys(data)
	if len(keys) == 0 {
		cause := errors.New("no usable public key")
		if len(bad) > 0 {
			cause = fmt.Errorf("no usable public key (%v)", bad[0])
		}
		return nil, bad, st, &Error{Path: path, Op: "parse public keys", Err: cause,
			Hint: "expected the job Secret's ssh-publickey, one line like \"ecdsa-sha2-nistp521 AAAA...\""}
	}
	return keys, bad, st, nil
}

// Material is everything loaded from one auth dir.
type Material struct {
	Dir            string
	Signer         ssh.Signer    // id_rsa; nil when absent and not required
	PublicKey      ssh.PublicKey // id_rsa.pub; nil when absent
	AuthorizedKeys []Key         // authorized_keys; nil when absent and not required
	Skipped        []LineError   // authorized_keys lines skipped
}

// Fingerprint returns the SHA256 fingerprint of k, as ssh-keygen -l prints it.
func Fingerprint(k ssh.PublicKey) string {
	if k == nil {
		return ""
	}
	return ssh.FingerprintSHA256(k)
}

// Exists reports whether dir/name exists (following symlinks).
func Exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// CheckPair verifies that the public key matches the signer, so a mismatch
// between id_rsa and id_rsa.pub (a hand-made Secret) is named up front rather
// than surfacing as a host-key failure on every client.
func CheckPair(dir string, signer ssh.Signer, pub ssh.PublicKey) error {
	if signer == nil || pub == nil {
		return nil
	}
	if !bytes.Equal(signer.PublicKey().Marshal(), pub.Marshal()) {
		return &Error{Path: filepath.Join(dir, PublicKey), Op: "match key pair",
			Err:  fmt.Errorf("%s is %s but %s is %s", PrivateKey, Fingerprint(signer.PublicKey()), PublicKey, Fingerprint(pub)),
			Hint: "id_rsa and id_rsa.pub must come from the same Secret (ssh-privatekey and ssh-publickey)"}
	}
	return nil
}
