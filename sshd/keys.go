package sshd

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// keySnapshot is one consistent view of the server's keys: the host keys it
// presents and the client keys it accepts. Snapshots are immutable.
type keySnapshot struct {
	signer  ssh.Signer // host key: the job's id_rsa, or a generated key
	derived ssh.Signer // ed25519 key derived from id_rsa; nil when none
	pinned  bool       // signer is the job's id_rsa

	authorized map[string]jobkey.Key // by wire encoding; empty while authorized_keys is unusable
	// derivedAuth is the derived key's wire encoding when it is also
	// accepted as a client key (id_rsa's own public key is in
	// authorized_keys), else "". derivedLine is that authorized_keys line:
	// its options (no-pty) apply to the derived key too.
	derivedAuth string
	derivedLine jobkey.Key

	problem error // why logins or the host key are not what the Secret says now; nil when fine
}

func (k *keySnapshot) hostSigners() []ssh.Signer {
	if k.derived != nil {
		return []ssh.Signer{k.signer, k.derived}
	}
	return []ssh.Signer{k.signer}
}

// keyStore keeps the keys in step with the auth dir. The kubelet updates a
// mounted Secret by swapping the "..data" symlink its files point through;
// every file then resolves to a new inode. The store compares the stamps of
// authorized_keys, id_rsa and id_rsa.pub (one stat each) whenever keys are
// used, re-reads what changed, and logs each change with the old and new
// fingerprints. It fails closed: an authorized_keys that cannot be read or
// holds no key refuses every login until it is fixed; a job key that
// changed but does not load keeps the previous host key (clients holding the
// new Secret then fail host-key pinning, which names both keys).
type keyStore struct {
	log        *slog.Logger
	authDir    string
	akPath     string
	jobKeyPath string
	pubPath    string

	mu   sync.Mutex
	snap *keySnapshot

	akStamp  jobkey.Stamp // of the authorized_keys content in snap (or of the failed read)
	akKeys   map[string]jobkey.Key
	akErr    error  // authorized_keys currently unusable
	akLogged string // last authorized_keys error logged

	hostStamps  [2]jobkey.Stamp // id_rsa, id_rsa.pub of the host key in snap (pinned only)
	failStamps  [2]jobkey.Stamp // of the last job key that failed to load
	hostErr     error           // that failure, while the files stay as they are
	signer      ssh.Signer
	derived     ssh.Signer
	pinned      bool
	reloadCount int // successful reloads, for tests
}

// newKeyStore loads the keys once; errors are the startup errors of New.
func newKeyStore(authDir, stateDir string, log *slog.Logger) (*keyStore, error) {
	ks := &keyStore{
		log:        log,
		authDir:    authDir,
		akPath:     filepath.Join(authDir, jobkey.AuthorizedKeys),
		jobKeyPath: filepath.Join(authDir, jobkey.PrivateKey),
		pubPath:    filepath.Join(authDir, jobkey.PublicKey),
	}
	keys, skipped, st, err := jobkey.LoadAuthorizedKeysStamped(ks.akPath)
	ks.logSkipped(skipped)
	if err != nil {
		return nil, err
	}
	ks.akStamp, ks.akKeys = st, keyMap(keys)
	stamps := ks.statHost()
	ks.signer, ks.derived, ks.pinned, err = loadHostKey(authDir, stateDir, log)
	if err != nil {
		return nil, err
	}
	if ks.pinned {
		ks.hostStamps = stamps
	}
	ks.snap = ks.build()
	return ks, nil
}

func keyMap(keys []jobkey.Key) map[string]jobkey.Key {
	m := make(map[string]jobkey.Key, len(keys))
	for _, k := range keys {
		if _, dup := m[string(k.Key.Marshal())]; !dup {
			m[string(k.Key.Marshal())] = k
		}
	}
	return m
}

// logSkipped logs authorized_keys lines that were not loaded: a key refused
// for options the server does not implement is an ERROR (its owner meant
// to restrict it), a line that is no key a WARN.
func (ks *keyStore) logSkipped(skipped []jobkey.LineError) {
	for _, le := range skipped {
		if len(le.Options) > 0 {
			ks.log.Error("authorized_keys key refused: it carries options worker-agent does not implement",
				"file", ks.akPath, "line", le.Line, "options", le.Options, "err", le.Err)
			continue
		}
		ks.log.Warn("skipped authorized_keys line", "file", ks.akPath, "line", le.Line, "err", le.Err)
	}
}

// statHost returns the stamps of id_rsa and id_rsa.pub (zero when absent).
func (ks *keyStore) statHost() [2]jobkey.Stamp {
	var s [2]jobkey.Stamp
	s[0], _ = jobkey.StatStamp(ks.jobKeyPath)
	s[1], _ = jobkey.StatStamp(ks.pubPath)
	return s
}

// current returns the keys as the auth dir holds them now, re-reading the
// files that changed since the last call.
func (ks *keyStore) current() *keySnapshot {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	changed := ks.refreshAuthorized()
	if ks.pinned && ks.refreshHost() {
		changed = true
	}
	if changed {
		ks.snap = ks.build()
	}
	return ks.snap
}

// refreshAuthorized re-reads authorized_keys when its stamp changed and
// reports whether the accepted keys (or their problem) changed.
func (ks *keyStore) refreshAuthorized() bool {
	st, err := jobkey.StatStamp(ks.akPath)
	if err == nil && st == ks.akStamp {
		return false
	}
	var keys []jobkey.Key
	var skipped []jobkey.LineError
	if err == nil {
		keys, skipped, st, err = jobkey.LoadAuthorizedKeysStamped(ks.akPath)
	}
	if err != nil {
		ks.akStamp = st // zero when the file is gone: re-checked every time
		ks.akErr = err
		msg := err.Error()
		if msg == ks.akLogged {
			return false
		}
		ks.akLogged = msg
		ks.logSkipped(skipped)
		ks.log.Error("authorized_keys changed and is unusable: refusing every login until it is fixed",
			"file", ks.akPath, "err", err, "previous_keys", fingerprints(ks.akKeys))
		ks.akKeys = nil
		return true
	}
	ks.logSkipped(skipped)
	old := ks.akKeys
	ks.akStamp, ks.akKeys, ks.akErr, ks.akLogged = st, keyMap(keys), nil, ""
	oldFPs, newFPs := fingerprints(old), fingerprints(ks.akKeys)
	if !slices.Equal(oldFPs, newFPs) || !sameOptions(old, ks.akKeys) {
		ks.log.Info("authorized_keys reloaded", "file", ks.akPath, "old_keys", oldFPs, "new_keys", newFPs)
	}
	return true
}

// refreshHost reloads the job key when id_rsa or id_rsa.pub changed, and
// reports whether the host key (or its problem) changed.
func (ks *keyStore) refreshHost() bool {
	stamps := ks.statHost()
	if stamps == ks.hostStamps {
		if ks.hostErr != nil { // the files went back to the loaded version
			ks.hostErr, ks.failStamps = nil, [2]jobkey.Stamp{}
			return true
		}
		return false
	}
	if stamps == ks.failStamps {
		return false // known bad; logged once
	}
	signer, derived, err := loadJobHostKey(ks.authDir)
	if err != nil {
		ks.failStamps, ks.hostErr = stamps, err
		ks.log.Error("job key changed on disk but cannot be loaded: still serving the previous host key",
			"file", ks.jobKeyPath, "err", err, "host_key_fp", jobkey.Fingerprint(ks.signer.PublicKey()))
		return true
	}
	oldFP, oldDerived := jobkey.Fingerprint(ks.signer.PublicKey()), derivedFP(ks.derived)
	ks.signer, ks.derived, ks.hostStamps = signer, derived, stamps
	ks.failStamps, ks.hostErr = [2]jobkey.Stamp{}, nil
	ks.reloadCount++
	newFP, newDerived := jobkey.Fingerprint(signer.PublicKey()), derivedFP(derived)
	if oldFP != newFP || oldDerived != newDerived {
		attrs := []any{"file", ks.jobKeyPath, "old_host_key_fp", oldFP, "new_host_key_fp", newFP}
		if oldDerived != "" || newDerived != "" {
			attrs = append(attrs, "old_derived_key_fp", oldDerived, "new_derived_key_fp", newDerived)
		}
		ks.log.Info("job key rotated", attrs...)
	}
	return true
}

// build makes the snapshot of the current state.
func (ks *keyStore) build() *keySnapshot {
	k := &keySnapshot{signer: ks.signer, derived: ks.derived, pinned: ks.pinned, authorized: ks.akKeys}
	if k.authorized == nil {
		k.authorized = map[string]jobkey.Key{}
	}
	if k.derived != nil {
		if line, ok := k.authorized[string(k.signer.PublicKey().Marshal())]; ok {
			k.derivedAuth = string(k.derived.PublicKey().Marshal())
			k.derivedLine = line
		}
	}
	var problems []error
	if ks.akErr != nil {
		problems = append(problems, fmt.Errorf("refusing every login: %w", ks.akErr))
	}
	if ks.hostErr != nil {
		problems = append(problems, fmt.Errorf("still serving the previous host key %s: %w", jobkey.Fingerprint(ks.signer.PublicKey()), ks.hostErr))
	}
	k.problem = errors.Join(problems...)
	return k
}

// lookup reports whether key may log in, where it is authorized (its
// authorized_keys line, or the key derived from the job's id_rsa) and the
// line it stands for.
func (k *keySnapshot) lookup(key ssh.PublicKey, akPath, jobKeyPath string) (source string, line jobkey.Key, ok bool) {
	m := string(key.Marshal())
	if l, ok := k.authorized[m]; ok {
		return akPath + ":" + strconv.Itoa(l.Line), l, true
	}
	if k.derivedAuth != "" && m == k.derivedAuth {
		return "derived from " + jobKeyPath, k.derivedLine, true
	}
	return "", jobkey.Key{}, false
}

func fingerprints(m map[string]jobkey.Key) []string {
	out := make([]string, 0, len(m))
	for _, k := range m {
		out = append(out, jobkey.Fingerprint(k.Key))
	}
	slices.Sort(out)
	return out
}

// sameOptions reports whether every key has the same options in a and b.
func sameOptions(a, b map[string]jobkey.Key) bool {
	for w, k := range a {
		if o, ok := b[w]; ok && o.NoPTY != k.NoPTY {
			return false
		}
	}
	return true
}

func derivedFP(s ssh.Signer) string {
	if s == nil {
		return ""
	}
	return jobkey.Fingerprint(s.PublicKey())
}
