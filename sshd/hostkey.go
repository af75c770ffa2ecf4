package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// GeneratedHostKeyFile is the file name of the host key generated into
// Config.StateDir when the auth dir has no id_rsa.
const GeneratedHostKeyFile = "ssh_host_ed25519_key"

// loadHostKey returns the host key, the ed25519 key derived from it when it
// is the job's id_rsa (jobkey.LoadJobKey; nil otherwise), and whether it is
// the job's id_rsa (which clients can pin to id_rsa.pub). Without id_rsa it
// loads or generates an ed25519 key in stateDir; with no stateDir it
// generates one in memory.
func loadHostKey(authDir, stateDir string, log *slog.Logger) (ssh.Signer, ssh.Signer, bool, error) {
	jobKey := filepath.Join(authDir, jobkey.PrivateKey)
	if _, err := os.Stat(jobKey); err == nil || !errors.Is(err, fs.ErrNotExist) {
		signer, derived, err := loadJobHostKey(authDir)
		if err != nil {
			return nil, nil, false, err
		}
		return signer, derived, true, nil
	}
	signer, err := loadGeneratedHostKey(jobKey, stateDir, log)
	return signer, nil, false, err
}

// loadJobHostKey loads the job's id_rsa as the host key, with its derived
// key, after checking it against id_rsa.pub. An RSA key signs with SHA-2
// only.
func loadJobHostKey(authDir string) (ssh.Signer, ssh.Signer, error) {
	jobKey := filepath.Join(authDir, jobkey.PrivateKey)
	// One read serves the host key and its derived key. The job key may be
	// parsed lazily (jobkey.LoadJobKey); one signature now makes a broken
	// key fail at startup (or at a reload) rather than on a connection.
	signer, derived, err := jobkey.LoadJobKey(jobKey)
	if err != nil {
		return nil, nil, err
	}
	if _, err := signer.Sign(rand.Reader, []byte("podmpi host key check")); err != nil {
		return nil, nil, &jobkey.Error{Path: jobKey, Op: "parse private key", Err: err,
			Hint: "expected the job Secret's ssh-privatekey (PEM: EC PRIVATE KEY, RSA PRIVATE KEY, PRIVATE KEY or OPENSSH PRIVATE KEY)"}
	}
	if jobkey.Exists(authDir, jobkey.PublicKey) {
		pub, err := jobkey.LoadPublicKey(filepath.Join(authDir, jobkey.PublicKey))
		if err != nil {
			return nil, nil, err
		}
		if err := jobkey.CheckPair(authDir, signer, pub); err != nil {
			return nil, nil, err
		}
	}
	signer, err = jobkey.HostSigner(signer)
	if err != nil {
		return nil, nil, &jobkey.Error{Path: jobKey, Op: "use as host key", Err: err}
	}
	return signer, derived, nil
}

// loadGeneratedHostKey is the host key when the auth dir has no id_rsa.
func loadGeneratedHostKey(jobKey, stateDir string, log *slog.Logger) (ssh.Signer, error) {
	const cannotPin = "clients cannot pin this host key to id_rsa.pub; mount the job Secret's ssh-privatekey as id_rsa in the auth dir"
	if stateDir == "" {
		signer, err := generateEd25519()
		if err != nil {
			return nil, err
		}
		log.Warn("no job private key and no state dir: using an in-memory host key that changes on every start; "+cannotPin,
			"missing", jobKey, "host_key_fp", jobkey.Fingerprint(signer.PublicKey()))
		return signer, nil
	}
	signer, created, err := loadOrCreateStateKey(stateDir)
	if err != nil {
		return nil, err
	}
	log.Warn("no job private key: using a host key generated for this agent; "+cannotPin,
		"missing", jobKey, "host_key", filepath.Join(stateDir, GeneratedHostKeyFile),
		"generated_now", created, "host_key_fp", jobkey.Fingerprint(signer.PublicKey()))
	return signer, nil
}

func generateEd25519() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 host key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 host key: %w", err)
	}
	return s, nil
}

// loadOrCreateStateKey reuses stateDir/GeneratedHostKeyFile, or generates it
// once (dir 0700, file 0600, written to a temporary file and linked into
// place so two starts never see a half-written key).
func loadOrCreateStateKey(stateDir string) (ssh.Signer, bool, error) {
	path := filepath.Join(stateDir, GeneratedHostKeyFile)
	if _, err := os.Stat(path); err == nil {
		s, err := jobkey.LoadSigner(path)
		return s, false, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, false, &jobkey.Error{Path: stateDir, Op: "create state dir", Err: err,
			Hint: "point --ssh.state-dir at a writable directory (an emptyDir), or mount the job's id_rsa in the auth dir"}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("generate ed25519 host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "podmpi worker-agent host key")
	if err != nil {
		return nil, false, fmt.Errorf("encode ed25519 host key: %w", err)
	}
	tmp, err := os.CreateTemp(stateDir, "."+GeneratedHostKeyFile+".tmp*")
	if err != nil {
		return nil, false, &jobkey.Error{Path: stateDir, Op: "write host key", Err: err,
			Hint: "the state dir must be writable by this uid"}
	}
	defer os.Remove(tmp.Name())
	werr := tmp.Chmod(0o600)
	if werr == nil {
		_, werr = tmp.Write(pem.EncodeToMemory(block))
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, false, &jobkey.Error{Path: tmp.Name(), Op: "write host key", Err: werr}
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, false, &jobkey.Error{Path: path, Op: "write host key", Err: err}
	} else if err != nil {
		// Another agent sharing the state dir won the race: use its key.
		s, err := jobkey.LoadSigner(path)
		return s, false, err
	}
	s, err := jobkey.LoadSigner(path)
	return s, true, err
}
