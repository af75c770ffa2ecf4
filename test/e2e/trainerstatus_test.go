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
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvKubeflowSDK names a python3 with the Kubeflow SDK (package kubeflow,
// .ci/run installs one with scripts/sdk-venv.sh): the ranks of the status
// test call its update_trainjob_status unchanged.
const EnvKubeflowSDK = "PODMPI_KUBEFLOW_SDK"

// fakeTrainer is Trainer's status endpoint in the launcher's pod: https on
// loopback with a CA of its own, the job's token in a file, and each
// request it took.
type fakeTrainer struct {
	srv      *http.Server
	env      []string // the three variables, as Trainer gives the launcher
	mu       sync.Mutex
	requests []fakeTrainerRequest
}

type fakeTrainerRequest struct {
	Auth   string
	Status struct {
		ProgressPercentage *int `json:"progressPercentage"`
		Metrics            []struct {
			Name, Value string
		} `json:"metrics"`
	} `json:"trainerStatus"`
}

func (r fakeTrainerRequest) metric(name string) string {
	for _, m := range r.Status.Metrics {
		if m.Name == name {
			return m.Value
		}
	}
	return ""
}

const fakeTrainerPath = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/st/status"

func startFakeTrainer(t *testing.T, f *fixture, dir string) *fakeTrainer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubeflow-trainer-controller-manager"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	ca, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("the-trainjobs-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := ListenInPod(f.c, 0, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &fakeTrainer{}
	tr.srv = &http.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			var req fakeTrainerRequest
			if r.URL.Path != fakeTrainerPath || json.Unmarshal(b, &req) != nil {
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
	t.Cleanup(func() { tr.srv.Close() })
	tr.env = []string{
		"KUBEFLOW_TRAINER_SERVER_URL=https://" + ln.Addr().String() + fakeTrainerPath,
		"KUBEFLOW_TRAINER_SERVER_TOKEN=" + token,
		"KUBEFLOW_TRAINER_SERVER_CA_CERT=" + ca,
	}
	return tr
}

func (tr *fakeTrainer) got() []fakeTrainerRequest {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]fakeTrainerRequest(nil), tr.requests...)
}

// TestTrainerStatus: Trainer's status API gives its variables to the
// launcher's pod only; with podmpi, rank 0 on a worker pod calls the
// Kubeflow SDK's own update_trainjob_status, unchanged, and its progress
// reaches Trainer with the launcher's token, beside the launcher's own
// metrics; the rank never sees Trainer's token file. Under Open MPI (the
// ranks get the worker-agent's session variables) and MPICH (Hydra gives
// them mpiexec's, which name the launcher's port and files).
func TestTrainerStatus(t *testing.T) {
	py := os.Getenv(EnvKubeflowSDK)
	if py == "" {
		t.Skip(EnvKubeflowSDK + " is not set: no python3 with the Kubeflow SDK for the ranks (scripts/sdk-venv.sh prints one)")
	}
	ctx := testCtx(t, 6*time.Minute)
	f := newFixture(t, "st", 2)
	f.startAgents(t, ctx, 1, 2)
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"openmpi", []string{"mpirun.openmpi", "-np", "2", "--map-by", "node"}},
		{"mpich", []string{"mpiexec.hydra", "-np", "2", "-ppn", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := startFakeTrainer(t, f, filepath.Join(work, "trainer-"+tc.name))
			// Each rank prints where its variables point; rank 0 (on
			// st-node-0-0) reports 50 % and a loss through the SDK.
			script := `echo "rank ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} on $(hostname): url=$KUBEFLOW_TRAINER_SERVER_URL token=$KUBEFLOW_TRAINER_SERVER_TOKEN"
if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 0 ]; then
  ` + py + ` -c 'from kubeflow.trainer import update_trainjob_status as u; import sys; ok = u(progress_percent=50, metrics={"loss": 0.25}); print("sdk sent" if ok else "sdk not sent"); sys.exit(0 if ok else 1)'
fi`
			f.seq++
			run := filepath.Join(work, fmt.Sprintf("run-%s-%d", f.job, f.seq))
			start := time.Now()
			p, err := StartLauncher(ctx, f.c, 0, bin, LauncherOptions{
				AuthDir: authDir, RunDir: run, Flags: f.workersFlag(2), Env: tr.env,
				Command: append(append([]string{}, tc.argv...), "sh", "-c", script),
				Log:     filepath.Join(f.c.LogDir(), fmt.Sprintf("launcher-%d.log", f.seq)),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop() })
			r := wait(t, p, start, 4*time.Minute)
			mustSucceed(t, r)
			if !strings.Contains(r.out, "sdk sent") {
				t.Fatalf("the SDK on rank 0 did not send its status:\n%s", r.out)
			}
			for _, l := range strings.Split(r.out, "\n") {
				if strings.HasPrefix(l, "rank ") && (!strings.Contains(l, "url=https://127.0.0.1:") || strings.Contains(l, "token="+filepath.Join(work, "trainer-"+tc.name))) {
					t.Errorf("a rank's variables: %s", l)
				}
			}
			got := tr.got()
			var rank0, last *fakeTrainerRequest
			for i := range got {
				if got[i].Auth != "Bearer the-trainjobs-token" {
					t.Errorf("a request reached Trainer without the job's token: %q", got[i].Auth)
				}
				if got[i].metric("loss") == "0.25" && rank0 == nil {
					rank0 = &got[i]
				}
			}
			if len(got) > 0 {
				last = &got[len(got)-1]
			}
			// The launcher paces its requests (one per 5 s): rank 0's
			// status goes at once or with the next request, the end's.
			if rank0 == nil || rank0.Status.ProgressPercentage == nil || *rank0.Status.ProgressPercentage != 50 || rank0.metric("podmpi_phase") == "" {
				t.Fatalf("Trainer never got rank 0's status with the launcher's metrics: %+v", got)
			}
			if last.metric("podmpi_phase") != "succeeded" || last.metric("loss") != "0.25" || last.Status.ProgressPercentage == nil {
				t.Errorf("the last request lost the rank's progress or lacks the end: %+v", *last)
			}
			if n := len(got); n > 6 {
				t.Errorf("%d requests to Trainer for a job of a few seconds", n)
			}
			t.Logf("%s: %d requests to Trainer; rank 0's progress %d reached it (launcher phase %s); last phase %s, exit code %s", tc.name, len(got),
				*rank0.Status.ProgressPercentage, rank0.metric("podmpi_phase"), last.metric("podmpi_phase"), last.metric("podmpi_exit_code"))
		})
	}
}
