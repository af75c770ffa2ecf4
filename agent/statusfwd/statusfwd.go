// Package statusfwd is the status forward: the wire contract between the
// launcher and the worker-agents that gives the ranks of an MPI job
// Kubeflow Trainer's status API (gate TrainJobStatus), and the home of the
// three variables a rank reads (EnvURL, EnvCACert, EnvToken).
//
// Trainer gives the variables to the launcher's pod only, and a rank on a
// worker pod gets nothing; its token must not reach the workers either. So
// the launcher serves the ranks an endpoint of its own (package
// trainerstatus: https with a certificate and a token made for the run)
// and asks each worker-agent, on the connection its probe made and shares
// with mpirun's sessions, with a global request of type RequestType, to
// serve the ranks' endpoint in the worker's pod: to listen on loopback with
// the certificate the request carries (for 127.0.0.1, signed by the run's
// CA; the CA's key stays with the launcher) and write the run's token and
// CA certificate into a directory there. From then on, every session the
// agent starts has the three variables (Env) pointing at that listener;
// the agent checks each rank's request (path, method, size, bearer token)
// and carries it, as plain HTTP/1.1, in a channel of type ChannelType on
// the same SSH connection, where the launcher's endpoint answers it; what
// it posts reaches Trainer with the launcher's token. The launcher and the
// agent read and write such channels through ChannelConn, which gives them
// deadlines. OpenSSH's sshd carries a forward a client asks for (ssh -R);
// worker-agent refuses every such forward, and serves only this endpoint,
// of the job's own launcher, on loopback.
//
// The launcher asks for the port and directory its own pod uses, so that a
// rank that gets the launcher's environment from its MPI (MPICH and Intel
// MPI's Hydra pass mpiexec's whole environment to the ranks) finds the same
// port and files on a worker; an agent that cannot have them takes others
// and says which in its reply.
package statusfwd

import (
	"bytes"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The variables Trainer gives the trainer step's containers (in MPI
// runtimes, the launcher's), and the ranks get from podmpi: the URL of the
// status endpoint, the path of the CA certificate that signed its
// certificate, and the path of the token to send.
const (
	EnvURL    = "KUBEFLOW_TRAINER_SERVER_URL"
	EnvCACert = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
	EnvToken  = "KUBEFLOW_TRAINER_SERVER_TOKEN"
)

// Variables lists the three variables.
var Variables = []string{EnvURL, EnvCACert, EnvToken}

// File names of the token and CA certificate in an endpoint's directory.
const (
	TokenFileName = "token"
	CAFileName    = "ca.crt"
)

// Env is the three variables of an endpoint on loopback port, taking
// requests at path, with its token and CA certificate in dir.
func Env(port int, path, dir string) []string {
	u := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	return []string{EnvURL + "=" + u, EnvToken + "=" + filepath.Join(dir, TokenFileName), EnvCACert + "=" + filepath.Join(dir, CAFileName)}
}

// WriteFiles writes an endpoint's token (0600) and CA certificate (0644)
// into dir, each through a temporary file of its own and a rename: a
// reader never sees half a file, and writers that share the directory (a
// worker-agent on the launcher's file system) never meet.
func WriteFiles(dir, token string, caPEM []byte) error {
	if err := writeFile(dir, TokenFileName, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	return writeFile(dir, CAFileName, caPEM, 0o644)
}

func writeFile(dir, name string, b []byte, mode os.FileMode) error {
	path := filepath.Join(dir, name)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() == mode {
			return nil
		}
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, mode)); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// RequestType is the global request a launcher sends a worker-agent on
// its SSH connection; ChannelType the channel the agent opens to the
// launcher for each request it carries.
const (
	RequestType = "podmpi-trainer-status@podmpi.io"
	ChannelType = "podmpi-trainer-status@podmpi.io"
)

// Version of Request's wire form. Version 1 carried each rank's connection,
// TLS and all, to the launcher; version 2 gives the agent a certificate
// for loopback, and each channel carries one request the agent checked, in
// plain HTTP/1.1 (the SSH connection encrypts and authenticates it). An
// agent refuses a request of another version, saying which it speaks.
const Version = 2

// Limits of a request's fields.
const (
	maxPath    = 1024
	maxDir     = 512
	maxToken   = 256
	minToken   = 16
	maxPEM     = 16 << 10
	maxMaxBody = 1 << 20
)

// Request is the launcher's request, in SSH's wire form (ssh.Marshal).
type Request struct {
	Version uint32
	// Port is the loopback port the launcher's pod uses; 0 lets the agent
	// choose.
	Port uint32
	// Path is the path the ranks post to (Trainer's, with the TrainJob's
	// namespace and name).
	Path string
	// Dir is the directory, absolute, for the token and CA files.
	Dir string
	// Token is the run's endpoint token (hex), CA its CA certificate (PEM).
	Token string
	CA    string
	// Cert and Key are the certificate (PEM) the agent serves the ranks,
	// for 127.0.0.1 and signed by CA, and its private key (PEM, PKCS #8):
	// the launcher's own endpoint's, never the CA's key.
	Cert string
	Key  string
	// MaxBody bounds the body of a rank's request, in bytes.
	MaxBody uint32
}

// NewRequest is the request for an endpoint on loopback port (0: any)
// taking requests at path, with its files in dir, the run's token and CA
// certificate (PEM), cert its certificate for loopback (signed by the CA),
// and bodies of at most maxBody bytes.
func NewRequest(port int, path, dir, token string, caPEM []byte, cert tls.Certificate, maxBody int) (Request, error) {
	if len(cert.Certificate) == 0 {
		return Request{}, errors.New("no certificate for the ranks' endpoint")
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return Request{}, fmt.Errorf("the endpoint's key: %w", err)
	}
	return Request{Version: Version, Port: uint32(port), Path: path, Dir: dir, Token: token, CA: string(caPEM),
		Cert:    string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})),
		Key:     string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})),
		MaxBody: uint32(maxBody)}, nil
}

// Reply is the agent's answer: where it listens and wrote the files.
type Reply struct {
	Port uint32
	Dir  string
}

// Marshal is r in wire form.
func (r Request) Marshal() []byte { return ssh.Marshal(&r) }

// ParseRequest reads and checks a request: first its version, then a
// port, a path of printable characters starting with "/", an absolute
// clean directory, a hex token, a PEM CA certificate, a certificate and
// key that pair and that the CA signed for 127.0.0.1 (valid now on this
// host's clock, as the ranks here will check it), and a body limit, each
// within its bound. A request that is not one is an error saying what is
// wrong, never a panic.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < 4 {
		return Request{}, fmt.Errorf("not a %s request: %d bytes", RequestType, len(b))
	}
	if v := binary.BigEndian.Uint32(b); v != Version {
		return Request{}, fmt.Errorf("request version %d, this worker-agent speaks %d: the launcher and the worker-agent are of different podmpi releases (give both the same one)", v, Version)
	}
	var r Request
	if err := ssh.Unmarshal(b, &r); err != nil {
		return Request{}, fmt.Errorf("not a %s request: %w", RequestType, err)
	}
	switch {
	case r.Port > 65535:
		return Request{}, fmt.Errorf("port %d", r.Port)
	case len(r.Path) == 0 || len(r.Path) > maxPath || r.Path[0] != '/' || !printable(r.Path):
		return Request{}, fmt.Errorf("path %q is not a URL path of at most %d printable characters", clip(r.Path), maxPath)
	case len(r.Dir) == 0 || len(r.Dir) > maxDir || !filepath.IsAbs(r.Dir) || filepath.Clean(r.Dir) != r.Dir || !printable(r.Dir):
		return Request{}, fmt.Errorf("directory %q is not a clean absolute path of at most %d characters", clip(r.Dir), maxDir)
	case len(r.Token) < minToken || len(r.Token) > maxToken || strings.Trim(r.Token, "0123456789abcdef") != "":
		return Request{}, fmt.Errorf("the token is not %d to %d hex digits", minToken, maxToken)
	case len(r.CA) > maxPEM || len(r.Cert) > maxPEM || len(r.Key) > maxPEM:
		return Request{}, fmt.Errorf("a certificate or key of %d, %d, %d bytes, over %d", len(r.CA), len(r.Cert), len(r.Key), maxPEM)
	case r.MaxBody == 0 || r.MaxBody > maxMaxBody:
		return Request{}, fmt.Errorf("a body limit of %d bytes, not 1 to %d", r.MaxBody, maxMaxBody)
	}
	if _, err := r.KeyPair(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// KeyPair is the certificate and key the agent serves the ranks, checked:
// they pair, and r.CA signed the certificate for 127.0.0.1, valid now.
func (r Request) KeyPair() (tls.Certificate, error) {
	blk, _ := pem.Decode([]byte(r.CA))
	if blk == nil || blk.Type != "CERTIFICATE" {
		return tls.Certificate{}, errors.New("the CA is not a PEM certificate")
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("the CA certificate: %w", err)
	}
	cert, err := tls.X509KeyPair([]byte(r.Cert), []byte(r.Key))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("the endpoint's certificate and key: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		return tls.Certificate{}, fmt.Errorf("the endpoint's certificate is not the CA's for 127.0.0.1 now (the clocks of the launcher's node and this one may disagree): %w", err)
	}
	return cert, nil
}

// ParseReply reads a reply.
func ParseReply(b []byte) (Reply, error) {
	var r Reply
	if err := ssh.Unmarshal(b, &r); err != nil {
		return Reply{}, fmt.Errorf("not a %s reply: %w", RequestType, err)
	}
	if r.Port == 0 || r.Port > 65535 || !filepath.IsAbs(r.Dir) {
		return Reply{}, fmt.Errorf("a reply with port %d and directory %q", r.Port, clip(r.Dir))
	}
	return r, nil
}

// Marshal is r in wire form.
func (r Reply) Marshal() []byte { return ssh.Marshal(&r) }

// Bearer reports whether an Authorization header carries token as its one
// bearer credential (compared in constant time).
func Bearer(header, token string) bool {
	f := strings.Fields(header)
	if len(f) != 2 || !strings.EqualFold(f[0], "Bearer") || token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(f[1]), []byte(token)) == 1
}

func printable(s string) bool {
	for _, c := range s {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
