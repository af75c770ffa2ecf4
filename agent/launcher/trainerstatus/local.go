package trainerstatus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podmpi/podmpi/agent/statusfwd"
)

// Local is podmpi's own status endpoint for the ranks: https on loopback
// with a certificate made for this run (its CA in CAFile) and a token of
// its own (in TokenFile), which gives nothing but the right to post this
// job's status through the launcher. Trainer's token stays in the
// launcher's process.
type Local struct {
	Dir       string
	TokenFile string
	CAFile    string
	// CAPEM is the CA certificate, to be written beside the ranks on other
	// pods; Token is the token they must send.
	CAPEM []byte
	Token string

	cert tls.Certificate
}

// NewLocal makes the run's certificate and token and writes the token
// (0600) and the CA certificate (0644) into dir, which it creates (0700).
func NewLocal(dir string) (*Local, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caPEM, cert, err := newCertificate(time.Now())
	if err != nil {
		return nil, fmt.Errorf("making the status endpoint's certificate: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	l := &Local{Dir: dir, TokenFile: filepath.Join(dir, statusfwd.TokenFileName), CAFile: filepath.Join(dir, statusfwd.CAFileName),
		CAPEM: caPEM, Token: hex.EncodeToString(b[:]), cert: cert}
	if err := statusfwd.WriteFiles(dir, l.Token, caPEM); err != nil {
		return nil, err
	}
	return l, nil
}

// newCertificate makes a CA and a server certificate it signs for
// 127.0.0.1, ::1 and localhost (ECDSA P-256, valid a year).
func newCertificate(now time.Time) (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
		return n
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "podmpi launcher status endpoint CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	ca, err = x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return caPEM, cert, nil
}

// TLSConfig is the server side of the local endpoint.
func (l *Local) TLSConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{l.cert}, MinVersion: tls.VersionTLS12}
}

// Server is the local endpoint's HTTP server: TLS with the run's
// certificate, bounded reads, writes and headers.
func (l *Local) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         l.TLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      requestTimeout + 10*time.Second,
		IdleTimeout:       2 * MinInterval,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          nil,
	}
}

// Proxy is the local endpoint's handler: it takes what Trainer's endpoint
// takes, at path only, from a client with the local token, and hands it
// to rep (Reporter.Forward), answering at once, before Trainer does: 200
// and the request echoed, as Trainer answers one it applied, when rep
// will send it; a Kubernetes Status, as Trainer's, when it will not (an
// invalid body, a metric named with Prefix, Trainer's refusal of the job).
func Proxy(rep *Reporter, path, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != path:
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "not found: this endpoint takes the job's status at "+path)
			return
		case r.Method != http.MethodPost:
			w.Header().Set("Allow", http.MethodPost)
			status(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "only POST")
			return
		case !statusfwd.Bearer(r.Header.Get("Authorization"), token):
			status(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				"forbidden: send the token in the file "+statusfwd.EnvToken+" names (podmpi's endpoint does not take Trainer's token)")
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil {
			status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "reading the body: "+err.Error())
			return
		}
		if len(b) > MaxBody {
			status(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
				fmt.Sprintf("the body is over the %d bytes the status endpoint takes", MaxBody))
			return
		}
		req, err := DecodeRequest(b)
		if err == nil {
			err = checkReserved(req.TrainerStatus)
		}
		if err != nil {
			status(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
			return
		}
		if req.TrainerStatus != nil {
			if err := rep.Forward(req.TrainerStatus); err != nil {
				var ref *Refusal
				code := http.StatusForbidden
				if errors.As(err, &ref) {
					code = ref.Code
				}
				status(w, code, reasonOf(code), err.Error())
				return
			}
		}
		// Trainer's answer to a request it applied, or to an empty one
		// (nothing applied): the request echoed.
		writeJSON(w, http.StatusOK, req)
	})
}

// reasonOf is the Kubernetes Status reason of a refusal's code.
func reasonOf(code int) metav1.StatusReason {
	switch code {
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	}
	return metav1.StatusReasonForbidden
}

func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
