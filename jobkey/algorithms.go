package jobkey

import (
	"net"

	"golang.org/x/crypto/ssh"
)

// The SSH algorithms both ends of podmpi offer (worker-agent's server, the
// launcher's probe and podmpi-rsh), set explicitly rather than taken from
// x/crypto's defaults, which include diffie-hellman-group14-sha1 and
// hmac-sha1-96. No SHA-1 key exchange, no SHA-1 or truncated MAC, no CBC or
// RC4; the ML-KEM hybrid first. OpenSSH 9.2 shares curve25519-sha256,
// chacha20-poly1305 and the SHA-2 MACs with these lists, OpenSSH >= 9.9
// also mlkem768x25519-sha256.
//
// In FIPS 140 mode x/crypto drops what is not approved from any list it is
// given (curve25519, chacha20-poly1305), which leaves ML-KEM, the NIST
// curves, AES and HMAC-SHA2: the NIST curves are listed for that reason,
// and OpenSSH 9.2 still finds ecdh-sha2-nistp256 in common with a FIPS-mode
// worker-agent.
var (
	KeyExchanges = []string{
		ssh.KeyExchangeMLKEM768X25519,
		ssh.KeyExchangeCurve25519,
		"curve25519-sha256@libssh.org",
		ssh.KeyExchangeECDHP256,
		ssh.KeyExchangeECDHP384,
		ssh.KeyExchangeECDHP521,
	}
	// Ciphers keep x/crypto's own preference, AES-GCM first: with AES
	// instructions it moves about twice the bytes per second of
	// chacha20-poly1305 here (make bench, throughput).
	Ciphers = []string{
		ssh.CipherAES128GCM,
		ssh.CipherAES256GCM,
		ssh.CipherChaCha20Poly1305,
		ssh.CipherAES128CTR,
		ssh.CipherAES192CTR,
		ssh.CipherAES256CTR,
	}
	MACs = []string{
		ssh.HMACSHA256ETM,
		ssh.HMACSHA512ETM,
		ssh.HMACSHA256,
		ssh.HMACSHA512,
	}
	// PublicKeyAuthAlgorithms are the client-key signature algorithms the
	// server accepts (and announces in server-sig-algs): no ssh-rsa (SHA-1)
	// and no ssh-dss.
	PublicKeyAuthAlgorithms = []string{
		ssh.KeyAlgoED25519,
		ssh.KeyAlgoSKED25519,
		ssh.KeyAlgoSKECDSA256,
		ssh.KeyAlgoECDSA256,
		ssh.KeyAlgoECDSA384,
		ssh.KeyAlgoECDSA521,
		ssh.KeyAlgoRSASHA512,
		ssh.KeyAlgoRSASHA256,
	}
	// RSASignatureAlgorithms are the signature algorithms of an RSA host
	// key: the SHA-2 variants only.
	RSASignatureAlgorithms = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
)

// SetAlgorithms sets c's key exchanges, ciphers and MACs to podmpi's lists.
// Each call gets fresh copies (x/crypto filters the slices it is given).
func SetAlgorithms(c *ssh.Config) {
	c.KeyExchanges = append([]string(nil), KeyExchanges...)
	c.Ciphers = append([]string(nil), Ciphers...)
	c.MACs = append([]string(nil), MACs...)
}

// HostSigner restricts an RSA host key to SHA-2 signatures (x/crypto would
// also offer ssh-rsa, SHA-1); other keys are returned as they are.
func HostSigner(s ssh.Signer) (ssh.Signer, error) {
	if s == nil || s.PublicKey().Type() != ssh.KeyAlgoRSA {
		return s, nil
	}
	as, ok := s.(ssh.AlgorithmSigner)
	if !ok {
		return s, nil
	}
	return ssh.NewSignerWithAlgorithms(as, RSASignatureAlgorithms)
}

// TCPKeepAlive is the TCP keepalive of both ends of a job's SSH connections
// (worker-agent's listener, the launcher's probe and podmpi-rsh): on, with
// the kernel's settings (net.ipv4.tcp_keepalive_time, _intvl, _probes;
// 7200 s, 75 s and 9 unless the pod changes them), which is what OpenSSH's
// TCPKeepAlive yes does on either end. Go's own default (15 s idle, 15 s
// between probes, 9 probes) would drop a connection to a healthy worker
// after about 150 s of network partition that OpenSSH carries through;
// neither end sends SSH-level keepalives by default either (see
// sshd.Config.KeepAliveInterval). A dead peer is found by what owns the
// pods instead: the job controller deletes them, and the launcher's watch
// sees the worker's name vanish or another agent answer under it.
var TCPKeepAlive = net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}
