package jobkey

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/fips140"
	"crypto/hkdf"
	"crypto/rsa"
	"crypto/sha512"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"sync"

	"golang.org/x/crypto/ssh"
)

// derivedInfo is the HKDF info string of the derived key; changing it
// changes every derived key, so it carries a version.
const derivedInfo = "podmpi derived ed25519 job key v1"

// Derived keys.
//
// Trainer v2 and mpi-operator generate the job key as ECDSA P-521. Go's
// P-521 is slow (0.8 ms to sign, 2.9 ms to verify on our machines, against
// 0.05 ms for ed25519; a cold process also spends ~9 ms parsing the key),
// and every Go-to-Go connection makes four such operations in a row: the
// worker signs the key exchange with its host key, the launcher verifies
// it, the launcher signs its user auth, the worker verifies that.
//
// Both ends hold the job's private key (id_rsa is mounted in every pod), so
// both derive the same ed25519 key from it: HKDF-SHA512 over the key type
// and a canonical secret value, the private scalar (ECDSA) or the prime
// factors in ascending order (RSA), never an encoding: the same key stored
// as SEC1, PKCS#1, PKCS#8 or OpenSSH PEM derives the same ed25519 key. The
// worker offers it as a second host key and accepts it as a client key when
// its own id_rsa's public key is in authorized_keys; the launcher pins it as
// a host key and signs with it first. Only holders of id_rsa can derive it,
// so it grants exactly what the job key grants, no more. OpenSSH clients
// that pin nothing (UserKnownHostsFile=/dev/null, as MPI recipes set) prefer
// ed25519 and so negotiate the derived host key; that is why its
// fingerprint is logged and shown in the worker's /info.
//
// In FIPS 140 mode (crypto/fips140.Enabled) nothing is derived: a key made
// from another key's secret is not an approved key generation, so both ends
// use only the job key itself.

// LoadJobKey reads the private key at path like LoadSigner and also returns
// the ed25519 key derived from it (nil when the key is already ed25519:
// there is nothing to speed up; nil in FIPS 140 mode). For the SEC1 "EC PRIVATE KEY" PEM both
// operators write, the job key's public half comes from the file and the
// full parse is deferred to its first signature, which a worker-agent that
// accepts the derived key never asks for.
func LoadJobKey(path string) (signer, derived ssh.Signer, err error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if s, d, ok := fastSEC1(data); ok {
		if !DeriveEnabled() {
			d = nil
		}
		return s, d, nil
	}
	raw, err := ssh.ParseRawPrivateKey(data)
	if err == nil {
		signer, err = ssh.NewSignerFromKey(raw)
	}
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			err = errors.New("the private key is protected by a passphrase; job keys must be unencrypted")
		}
		return nil, nil, &Error{Path: path, Op: "parse private key", Err: err,
			Hint: "expected the job Secret's ssh-privatekey (PEM: EC PRIVATE KEY, RSA PRIVATE KEY, PRIVATE KEY or OPENSSH PRIVATE KEY)"}
	}
	derived, err = DeriveSigner(raw)
	if err != nil {
		return nil, nil, &Error{Path: path, Op: "derive ed25519 key", Err: err}
	}
	return signer, derived, nil
}

// DeriveEnabled reports whether keys are derived: not in FIPS 140 mode.
func DeriveEnabled() bool { return !fips140.Enabled() }

// DeriveSigner returns the ed25519 key derived from an ECDSA or RSA private
// key (as crypto/x509 and x/crypto/ssh return them), or nil for an ed25519
// key and in FIPS 140 mode.
func DeriveSigner(raw any) (ssh.Signer, error) {
	switch k := raw.(type) {
	case ed25519.PrivateKey, *ed25519.PrivateKey:
		return nil, nil
	case *ecdsa.PrivateKey:
		if !DeriveEnabled() {
			return nil, nil
		}
		scalar, err := k.Bytes()
		if err != nil {
			return nil, fmt.Errorf("ECDSA private key: %w", err)
		}
		return deriveFrom(k.Curve.Params().Name, scalar)
	case *rsa.PrivateKey:
		if !DeriveEnabled() {
			return nil, nil
		}
		secret, err := rsaSecret(k)
		if err != nil {
			return nil, err
		}
		return deriveFrom("rsa-primes", secret)
	default:
		return nil, fmt.Errorf("unsupported private key type %T", raw)
	}
}

// rsaSecret is the canonical secret of an RSA key: its prime factors in
// ascending order, each with a 4-byte big-endian length. The factorisation
// of N is unique, so unlike the private exponent (d mod φ(N) or mod λ(N)),
// the CRT values, the order of p and q, or any encoding of them, it is the
// same for every file holding this key.
func rsaSecret(k *rsa.PrivateKey) ([]byte, error) {
	if len(k.Primes) < 2 {
		return nil, errors.New("RSA key without its prime factors")
	}
	primes := make([]*big.Int, len(k.Primes))
	copy(primes, k.Primes)
	slices.SortFunc(primes, func(a, b *big.Int) int { return a.Cmp(b) })
	var out []byte
	for _, p := range primes {
		if p == nil || p.Sign() <= 0 {
			return nil, errors.New("RSA key with an invalid prime factor")
		}
		b := p.Bytes()
		out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

func deriveFrom(kind string, secret []byte) (ssh.Signer, error) {
	ikm := append([]byte(kind+"\x00"), secret...)
	seed, err := hkdf.Key(sha512.New, ikm, nil, derivedInfo, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	rk, err := hkdf.Key(sha512.New, ikm, nil, requestInfo, RequestKeySize)
	if err != nil {
		return nil, err
	}
	s, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		return nil, err
	}
	as, ok := s.(ssh.AlgorithmSigner)
	if !ok {
		return nil, fmt.Errorf("derived key: %T is not an ssh.AlgorithmSigner", s)
	}
	return &derivedSigner{AlgorithmSigner: as, requestKey: rk}, nil
}

// requestInfo is the HKDF info string of the request key; it carries a
// version as derivedInfo does.
const requestInfo = "podmpi job request key v1"

// RequestKeySize is the size of RequestKey's keys (HMAC-SHA256).
const RequestKeySize = 32

// derivedSigner is the derived ed25519 key with the request key derived
// from the same secret.
type derivedSigner struct {
	ssh.AlgorithmSigner
	requestKey []byte
}

// RequestKey returns the key for authenticating requests between the
// job's pods (an HMAC-SHA256 key) that comes with a derived key: derived
// as the derived key is, from the same canonical secret of the job's
// private key, under an info string of its own, so that it says nothing
// about the derived key or the job key, and every holder of id_rsa, and
// only they, derives the same one. It returns nil for any other signer,
// and so whenever there is no derived key (an ed25519 job key, FIPS 140
// mode: a key must serve one purpose there, and the job key signs).
// The caller must not change or reveal it.
func RequestKey(derived ssh.Signer) []byte {
	if d, ok := derived.(*derivedSigner); ok {
		return d.requestKey
	}
	return nil
}

// sec1Key is RFC 5915's ECPrivateKey.
type sec1Key struct {
	Version    int
	PrivateKey []byte
	Curve      asn1.ObjectIdentifier `asn1:"optional,explicit,tag:0"`
	PublicKey  asn1.BitString        `asn1:"optional,explicit,tag:1"`
}

var sec1Curves = map[string]elliptic.Curve{
	"1.2.840.10045.3.1.7": elliptic.P256(),
	"1.3.132.0.34":        elliptic.P384(),
	"1.3.132.0.35":        elliptic.P521(),
}

// fastSEC1 handles an unencrypted SEC1 PEM that names its curve and
// carries its public key: the derived key and the job key's public half
// come straight from the encoding, with no curve arithmetic. ok is false
// for anything else (the caller then parses fully).
func fastSEC1(data []byte) (signer, derived ssh.Signer, ok bool) {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "EC PRIVATE KEY" || len(blk.Headers) != 0 {
		return nil, nil, false
	}
	var k sec1Key
	if rest, err := asn1.Unmarshal(blk.Bytes, &k); err != nil || len(rest) != 0 || k.Version != 1 {
		return nil, nil, false
	}
	curve, known := sec1Curves[k.Curve.String()]
	if !known || len(k.PublicKey.Bytes) == 0 {
		return nil, nil, false
	}
	size := (curve.Params().BitSize + 7) / 8
	if len(k.PrivateKey) == 0 || len(k.PrivateKey) > size {
		return nil, nil, false
	}
	// Validates the point (on the curve) without a scalar multiplication.
	ecpub, err := ecdsa.ParseUncompressedPublicKey(curve, k.PublicKey.Bytes)
	if err != nil {
		return nil, nil, false
	}
	pub, err := ssh.NewPublicKey(ecpub)
	if err != nil {
		return nil, nil, false
	}
	scalar := make([]byte, size)
	copy(scalar[size-len(k.PrivateKey):], k.PrivateKey)
	derived, err = deriveFrom(curve.Params().Name, scalar)
	if err != nil {
		return nil, nil, false
	}
	return &lazySigner{pub: pub, data: data}, derived, true
}

// lazySigner is the job key whose private half is parsed on first use. The
// parse checks that it matches the public key it stood for.
type lazySigner struct {
	pub  ssh.PublicKey
	data []byte
	once sync.Once
	s    ssh.Signer
	err  error
}

func (l *lazySigner) PublicKey() ssh.PublicKey { return l.pub }

func (l *lazySigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	l.once.Do(func() {
		l.s, l.err = ssh.ParsePrivateKey(l.data)
		if l.err == nil && string(l.s.PublicKey().Marshal()) != string(l.pub.Marshal()) {
			l.s, l.err = nil, errors.New("the private key does not match the public key stored with it")
		}
		l.data = nil
	})
	if l.err != nil {
		return nil, l.err
	}
	return l.s.Sign(rand, data)
}
