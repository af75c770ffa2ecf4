package sshclient

import (
	"path/filepath"

	"github.com/podmpi/podmpi/jobkey"
)

// LoadJobConfig loads the client side of the job's SSH material: the auth
// dir is jobkey.Find(authDir, home, jobkey.PrivateKey); its id_rsa is the
// signer and its id_rsa.pub the pinned host key. A non-empty explicitKey
// (ssh -i) replaces id_rsa as the signer; the auth dir is then optional, and
// without it HostKey stays nil (Dial refuses unless InsecureIgnoreHostKey).
// A missing id_rsa.pub also leaves HostKey nil. When both id_rsa and
// id_rsa.pub are used they must be a pair. home may be empty (no passwd
// entry, no $HOME). Errors are *jobkey.Error values naming the file.
func LoadJobConfig(authDir, home, explicitKey string) (Config, error) {
	var cfg Config
	dir, findErr := jobkey.Find(authDir, home, jobkey.PrivateKey)
	if findErr != nil && explicitKey == "" {
		return Config{}, findErr
	}
	keyPath := explicitKey
	if keyPath == "" {
		keyPath = filepath.Join(dir, jobkey.PrivateKey)
	}
	s, derived, err := jobkey.LoadJobKey(keyPath)
	if err != nil {
		return Config{}, err
	}
	cfg.Signer = s
	if findErr != nil || !jobkey.Exists(dir, jobkey.PublicKey) {
		return cfg, nil
	}
	pubPath := filepath.Join(dir, jobkey.PublicKey)
	pub, err := jobkey.LoadPublicKey(pubPath)
	if err != nil {
		return Config{}, err
	}
	if explicitKey == "" {
		if err := jobkey.CheckPair(dir, s, pub); err != nil {
			return Config{}, err
		}
		// The derived key stands for the job key only when the signer is
		// the job's id_rsa, the pair of the pinned id_rsa.pub.
		cfg.Derived = derived
	}
	cfg.HostKey = pub
	cfg.HostKeySource = pubPath
	return cfg, nil
}
