package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the cluster's certificate authority and the certificates every
// component uses, in <state>/pki: one CA signs the API server's and the
// kubelet's serving certificates and every client certificate (the
// components authenticate as the users the Node and RBAC authorizers know:
// system:kube-controller-manager, system:node:<node>, ...). ECDSA P-256
// throughout; the service-account token key too.
type PKI struct {
	Dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

// Cert names a certificate and key pair in the PKI folder.
type Cert struct {
	Name string // file stem: <name>.crt, <name>.key
	CN   string
	Orgs []string
	// Server certificates get these SANs; client ones have none.
	DNS []string
	IPs []net.IP
}

func (p *PKI) path(name, ext string) string { return filepath.Join(p.Dir, name+"."+ext) }

// CAFile is the CA certificate (client CA of every server, and the CA the
// kubeconfigs trust).
func (p *PKI) CAFile() string { return p.path("ca", "crt") }

// CertFile and KeyFile locate a pair.
func (p *PKI) CertFile(name string) string { return p.path(name, "crt") }
func (p *PKI) KeyFile(name string) string  { return p.path(name, "key") }

// Ensure creates the CA (once) and every certificate not there yet.
func (p *PKI) Ensure(certs []Cert) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	if err := p.loadOrCreateCA(); err != nil {
		return err
	}
	for _, c := range certs {
		if _, err := os.Stat(p.CertFile(c.Name)); err == nil {
			continue
		}
		if err := p.issue(c); err != nil {
			return fmt.Errorf("certificate %s: %w", c.Name, err)
		}
	}
	// The service-account token signing key (public half for the API server).
	if _, err := os.Stat(p.path("sa", "key")); errors.Is(err, os.ErrNotExist) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		if err := writeKey(p.path("sa", "key"), k); err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p.path("sa", "pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (p *PKI) loadOrCreateCA() error {
	if b, err := os.ReadFile(p.CAFile()); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return fmt.Errorf("%s: no PEM block", p.CAFile())
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return err
		}
		kb, err := os.ReadFile(p.path("ca", "key"))
		if err != nil {
			return err
		}
		kblk, _ := pem.Decode(kb)
		if kblk == nil {
			return fmt.Errorf("%s: no PEM block", p.path("ca", "key"))
		}
		key, err := x509.ParseECPrivateKey(kblk.Bytes)
		if err != nil {
			return err
		}
		p.caCert, p.caKey = cert, key
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "podmpi-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	if err := writeKey(p.path("ca", "key"), key); err != nil {
		return err
	}
	if err := os.WriteFile(p.CAFile(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	p.caCert, p.caKey = cert, key
	return nil
}

func (p *PKI) issue(c Cert) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: c.CN, Organization: c.Orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(5 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     c.DNS,
		IPAddresses:  c.IPs,
	}
	if len(c.DNS)+len(c.IPs) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	if err := writeKey(p.KeyFile(c.Name), key); err != nil {
		return err
	}
	return os.WriteFile(p.CertFile(c.Name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(file string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Kubeconfig writes a kubeconfig for server authenticating with the named
// client certificate, or with a bearer token when token is set.
func (p *PKI) Kubeconfig(file, server, user, certName, token string) error {
	auth := fmt.Sprintf("    client-certificate: %s\n    client-key: %s\n", p.CertFile(certName), p.KeyFile(certName))
	if token != "" {
		auth = fmt.Sprintf("    token: %s\n", token)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: podmpi
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
%scontexts:
- name: podmpi
  context:
    cluster: podmpi
    user: %s
current-context: podmpi
`, server, p.CAFile(), user, auth, user)
	return os.WriteFile(file, []byte(kc), 0o600)
}
