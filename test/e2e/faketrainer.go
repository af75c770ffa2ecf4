package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// FakeTrainerPath is the path the fake Trainer takes status requests at:
// Trainer's own, for TrainJob "st" in namespace "ns".
const FakeTrainerPath = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/st/status"

// FakeTrainerToken is the job's token the fake Trainer expects.
const FakeTrainerToken = "the-trainjobs-token"

// FakeTrainer is Trainer's status endpoint as a launcher pod meets it
// (the TrainJobStatus gate on): https on loopback of that pod, with a CA of
// its own, the job's token in a file, and every request it took. Env is the
// three variables Trainer would give the launcher.
type FakeTrainer struct {
	Env []string
	srv *http.Server

	mu       sync.Mutex
	requests []FakeTrainerRequest
}

// FakeTrainerRequest is one request the fake Trainer took.
type FakeTrainerRequest struct {
	Auth   string
	Status struct {
		ProgressPercentage *int `json:"progressPercentage"`
		Metrics            []struct {
			Name, Value string
		} `json:"metrics"`
	} `json:"trainerStatus"`
}

// Metric is the value of the request's metric name, "" without one.
func (r FakeTrainerRequest) Metric(name string) string {
	for _, m := range r.Status.Metrics {
		if m.Name == name {
			return m.Value
		}
	}
	return ""
}

// StartFakeTrainer serves the fake Trainer on loopback of pod, with its CA
// and the job's token in dir (readable by any uid, as the kubelet's
// projection is by the pod's).
func StartFakeTrainer(c *harness.Cluster, pod int, dir string) (*FakeTrainer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubeflow-trainer-controller-manager"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if err := MakeDir(dir); err != nil {
		return nil, err
	}
	ca, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(token, []byte(FakeTrainerToken+"\n"), 0o644); err != nil {
		return nil, err
	}
	ln, err := ListenInPod(c, pod, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := &FakeTrainer{}
	tr.srv = &http.Server{
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			var req FakeTrainerRequest
			if r.URL.Path != FakeTrainerPath || json.Unmarshal(b, &req) != nil {
				w.WriteHeader(http.StatusUnprocessableEntity)
				return
			}
			req.Auth = r.Header.Get("Authorization")
			tr.mu.Lock()
			tr.requests = append(tr.requests, req)
			tr.mu.Unlock()
			_, _ = w.Write(b)
		}),
	}
	go func() { _ = tr.srv.ServeTLS(ln, "", "") }()
	tr.Env = []string{
		"KUBEFLOW_TRAINER_SERVER_URL=https://" + ln.Addr().String() + FakeTrainerPath,
		"KUBEFLOW_TRAINER_SERVER_TOKEN=" + token,
		"KUBEFLOW_TRAINER_SERVER_CA_CERT=" + ca,
	}
	return tr, nil
}

// Requests are the requests taken so far.
func (tr *FakeTrainer) Requests() []FakeTrainerRequest {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]FakeTrainerRequest(nil), tr.requests...)
}

// Close stops it.
func (tr *FakeTrainer) Close() { tr.srv.Close() }
