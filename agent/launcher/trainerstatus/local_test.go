package trainerstatus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/statusfwd"
)

// trainer is a stand-in for Trainer's status endpoint: TLS with its own
// CA, a bearer token it expects, and every request it took.
type trainer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	token string
	code  int
	got   []recorded
	// retryAfter is the Retry-After of its answers ("" for none).
	retryAfter string
	// hold, when set, keeps each request from its answer until it gets a
	// value (or the client gives up).
	hold chan struct{}
}

type recorded struct {
	auth string
	body Request
}

func newTrainer(t *testing.T) *trainer {
	tr := &trainer{code: 200}
	tr.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req Request
		_ = json.Unmarshal(b, &req)
		tr.mu.Lock()
		tr.got = append(tr.got, recorded{r.Header.Get("Authorization"), req})
		code, token, hold, retry := tr.code, tr.token, tr.hold, tr.retryAfter
		tr.mu.Unlock()
		if retry != "" {
			w.Header().Set("Retry-After", retry)
		}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			code = http.StatusForbidden
		}
		w.WriteHeader(code)
		_, _ = w.Write(b)
	}))
	t.Cleanup(tr.srv.Close)
	return tr
}

func (tr *trainer) requests() []recorded {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]recorded(nil), tr.got...)
}

// endpoint writes the trainer's CA and a token into dir, as the kubelet
// mounts them, and returns the endpoint the variables would name.
func (tr *trainer) endpoint(t *testing.T, dir, token string) Endpoint {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tr.srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	tr.rotate(t, dir, token)
	u, _ := url.Parse(tr.srv.URL + "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status")
	return Endpoint{URL: u, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt")}
}

// rotate writes a new token, as the kubelet does before the old expires.
func (tr *trainer) rotate(t *testing.T, dir, token string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	tr.token = token
	tr.mu.Unlock()
}

func TestClientPost(t *testing.T) {
	t.Parallel()
	tr := newTrainer(t)
	dir := t.TempDir()
	c := NewClient(tr.endpoint(t, dir, "first"))
	ctx := context.Background()
	st := &Status{Metrics: []Metric{{Name: "podmpi_phase", Value: "probe"}}, LastUpdatedTime: "2026-11-27T22:00:00Z"}
	if a, err := c.Post(ctx, st); err != nil || a.Code != 200 {
		t.Fatalf("post: %v %+v", err, a)
	}
	// The kubelet rotates the token: the next request carries the new one.
	tr.rotate(t, dir, "second")
	if a, err := c.Post(ctx, st); err != nil || a.Code != 200 {
		t.Fatalf("post after rotation: %v %+v", err, a)
	}
	got := tr.requests()
	if len(got) != 2 || got[0].auth != "Bearer first" || got[1].auth != "Bearer second" {
		t.Fatalf("requests %+v", got)
	}
	if m := got[1].body.TrainerStatus.Metrics; len(m) != 1 || m[0].Name != "podmpi_phase" {
		t.Fatalf("body %+v", got[1].body)
	}

	// Trainer throttles: the answer says when to come back.
	tr.mu.Lock()
	tr.code, tr.retryAfter = http.StatusTooManyRequests, "7"
	tr.mu.Unlock()
	if a, err := c.Post(ctx, st); err != nil || a.Code != 429 || a.RetryAfter != 7*time.Second {
		t.Fatalf("post answered 429, Retry-After 7: %v %+v", err, a)
	}

	// A missing token is an error that names the file, never a request.
	os.Remove(filepath.Join(dir, "token"))
	if _, err := c.Post(ctx, st); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "token")) {
		t.Fatalf("missing token: %v", err)
	}
	if n := len(tr.requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	// A CA that did not sign the server's certificate: no request gets
	// through, and the error says why.
	tr.rotate(t, dir, "third")
	// (httptest's servers all share one certificate: make another CA.)
	ca, _, err := newCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(ctx, st); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("wrong CA: %v", err)
	}
}

// TestProxy drives the local endpoint as a rank does, over TLS verified
// with the CA file it wrote, and checks what reaches Trainer.
func TestProxy(t *testing.T) {
	t.Parallel()
	tr := newTrainer(t)
	var logs sshtest.Buffer
	clk := newFakeClock()
	rep := newReporter(NewClient(tr.endpoint(t, t.TempDir(), "trainer-token")), slog.New(slog.NewTextHandler(&logs, nil)), clk)
	rep.Set([]Metric{{Name: "podmpi_phase", Value: "mpirun"}, {Name: "podmpi_workers_reachable", Value: "2"}})
	run(t, rep)
	waitFor(t, "the launcher's first request", rep.settledNow)
	clk.add(MinInterval) // a rank's request is sent at once

	local, ln, path := serveLocal(t, rep)

	// What a rank sees: the three variables, files it can read.
	env := statusfwd.Env(ln.Addr().(*net.TCPAddr).Port, path, local.Dir)
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	caPEM, err := os.ReadFile(vars[statusfwd.EnvCACert])
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(vars[statusfwd.EnvToken])
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(vars[statusfwd.EnvToken]); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA file holds no certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	post := func(url, tok, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tok := strings.TrimSpace(string(token))
	u := vars[statusfwd.EnvURL]
	if !strings.HasPrefix(u, "https://127.0.0.1:") {
		t.Fatalf("URL %s", u)
	}

	// Refusals: each with its reason, none reaches Trainer.
	for _, tc := range []struct {
		name, url, tok, body string
		code                 int
		says                 string
	}{
		{"Trainer's token", u, "trainer-token", `{}`, 403, "does not take Trainer's token"},
		{"no token", u, "", `{}`, 403, "forbidden"},
		{"other path", strings.TrimSuffix(u, "/status"), tok, `{}`, 404, "takes the job's status at"},
		{"bad body", u, tok, `{"trainerStatus":{"progressPercentage":200}}`, 422, "not between 0 and 100"},
		{"too big", u, tok, `{"a":"` + strings.Repeat("a", MaxBody) + `"}`, 413, "over the 65536"},
		{"podmpi's name", u, tok, `{"trainerStatus":{"metrics":[{"name":"loss","value":"1"},{"name":"podmpi_phase","value":"running"}]}}`, 422,
			`metric 1 (podmpi_phase): names starting with \"podmpi_\" are reserved for podmpi's own metrics`},
		{"empty request", u, tok, `{}`, 200, "{}"},
	} {
		code, body := post(tc.url, tc.tok, tc.body)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, body, tc.code, tc.says)
		}
	}
	if n := len(tr.requests()); n != 1 {
		t.Fatalf("%d requests reached Trainer, want the launcher's only", n)
	}

	// What the SDK sends: answered at once, as Trainer answers one it
	// applied, and it reaches Trainer with Trainer's token, the rank's
	// progress and metrics first, podmpi's after.
	code, body := post(u, tok, `{"trainerStatus":{"lastUpdatedTime":"2026-11-27T22:00:00.123456+00:00","progressPercentage":50,"metrics":[{"name":"loss","value":"0.25"}]}}`)
	if code != 200 || !strings.Contains(body, `"progressPercentage":50`) {
		t.Fatalf("status post: %d %s", code, body)
	}
	waitFor(t, "Trainer's answer", rep.settledNow)
	got := tr.requests()
	if len(got) != 2 || got[1].auth != "Bearer trainer-token" {
		t.Fatalf("Trainer got %+v", got)
	}
	st := got[1].body.TrainerStatus
	if st == nil || *st.ProgressPercentage != 50 || st.LastUpdatedTime != "2026-11-27T22:00:00.123456+00:00" || len(st.Metrics) != 3 ||
		st.Metrics[0].Name != "loss" || st.Metrics[1].Name != "podmpi_phase" {
		t.Fatalf("Trainer got status %+v", st)
	}

	// Trainer refuses the job (403): the rank's request that met it was
	// answered 200 (podmpi meant to send it); the next ones get the
	// refusal, with Trainer's reason, and the launcher warns once.
	tr.mu.Lock()
	tr.code = http.StatusForbidden
	tr.mu.Unlock()
	clk.add(MinInterval)
	if code, _ := post(u, tok, `{"trainerStatus":{"progressPercentage":60}}`); code != 200 {
		t.Fatalf("the rank's post before Trainer refused: %d", code)
	}
	waitFor(t, "Trainer's refusal", rep.settledNow)
	if code, body := post(u, tok, `{"trainerStatus":{"progressPercentage":70}}`); code != http.StatusForbidden || !strings.Contains(body, "Trainer refused") {
		t.Fatalf("the rank's post after Trainer refused the job: %d %s", code, body)
	}
	if n := len(tr.requests()); n != 3 {
		t.Fatalf("%d requests reached Trainer, want 3", n)
	}
	waitFor(t, "the launcher's warning", func() bool { return strings.Contains(logs.String(), "level=WARN") })
	if l := logs.String(); strings.Contains(l, "trainer-token") {
		t.Fatalf("launcher log: %s", l)
	}
}

// TestProxyAnswersAtOnce: a rank's request is answered before Trainer
// answers the launcher's: the SDK, which gives up after 5 s, returns True
// for what podmpi will send however slow Trainer is.
func TestProxyAnswersAtOnce(t *testing.T) {
	t.Parallel()
	tr := newTrainer(t)
	tr.hold = make(chan struct{})
	rep := NewReporter(NewClient(tr.endpoint(t, t.TempDir(), "trainer-token")), nil)
	run(t, rep)
	local, ln, path := serveLocal(t, rep)
	env := statusfwd.Env(ln.Addr().(*net.TCPAddr).Port, path, local.Dir)
	u := strings.TrimPrefix(env[0], statusfwd.EnvURL+"=")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(local.CAPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"trainerStatus":{"progressPercentage":50}}`))
	req.Header.Set("Authorization", "Bearer "+local.Token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("the rank's post while Trainer holds the launcher's request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"trainerStatus":{"progressPercentage":50}}` {
		t.Fatalf("the rank's post: %d %s, want 200 and the request echoed", resp.StatusCode, b)
	}
	waitFor(t, "the request at Trainer", func() bool { return len(tr.requests()) == 1 })
	tr.hold <- struct{}{}
	waitFor(t, "Trainer's answer", rep.settledNow)
	if st := tr.requests()[0].body.TrainerStatus; st == nil || st.ProgressPercentage == nil || *st.ProgressPercentage != 50 {
		t.Fatalf("Trainer got %+v", st)
	}
}

// TestSDKThroughLocalEndpoint: the Kubeflow SDK's own, unchanged
// update_trainjob_status, run as a rank runs it (the three variables
// pointing at podmpi's endpoint), moves the status at Trainer's. It needs
// a python3 with the SDK (package kubeflow): PODMPI_KUBEFLOW_SDK names it
// (.ci/run installs one).
func TestSDKThroughLocalEndpoint(t *testing.T) {
	t.Parallel()
	py := os.Getenv("PODMPI_KUBEFLOW_SDK")
	if py == "" {
		t.Skip("PODMPI_KUBEFLOW_SDK is not set: no python3 with the Kubeflow SDK to drive the endpoint")
	}
	tr := newTrainer(t)
	clk := newFakeClock()
	rep := newReporter(NewClient(tr.endpoint(t, t.TempDir(), "trainer-token")), nil, clk)
	rep.Set([]Metric{{Name: "podmpi_phase", Value: "mpirun"}})
	run(t, rep)
	waitFor(t, "the launcher's first request", rep.settledNow)
	clk.add(MinInterval) // the rank's request is sent at once
	local, ln, path := serveLocal(t, rep)

	// The SDK's import takes 3 s of CPU (the Kubernetes client): a loaded
	// machine makes that a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", `
import sys
from kubeflow.trainer import update_trainjob_status
ok = update_trainjob_status(progress_percent=50, metrics={"loss": 0.25, "epoch": 2})
print("sent" if ok else "not sent")
sys.exit(0 if ok else 1)
`)
	cmd.Env = append(os.Environ(), statusfwd.Env(ln.Addr().(*net.TCPAddr).Port, path, local.Dir)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the SDK's update_trainjob_status: %v\n%s", err, out)
	}
	waitFor(t, "Trainer's answer", rep.settledNow)
	got := tr.requests()
	if len(got) != 2 || got[1].auth != "Bearer trainer-token" {
		t.Fatalf("Trainer got %+v", got)
	}
	st := got[1].body.TrainerStatus
	names := []string{}
	for _, m := range st.Metrics {
		names = append(names, m.Name+"="+m.Value)
	}
	if st.ProgressPercentage == nil || *st.ProgressPercentage != 50 || strings.Join(names, ",") != "loss=0.25,epoch=2,podmpi_phase=mpirun" {
		t.Fatalf("Trainer got progress %v, metrics %v", st.ProgressPercentage, names)
	}
}

// serveLocal serves the ranks' endpoint (a Local in a temporary folder,
// proxying to rep) on loopback until the test ends: the endpoint, its
// listener and the TrainJob's status path it forwards to.
func serveLocal(t *testing.T, rep *Reporter) (*Local, net.Listener, string) {
	t.Helper()
	local, err := NewLocal(filepath.Join(t.TempDir(), "status"))
	if err != nil {
		t.Fatal(err)
	}
	const path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := local.Server(Proxy(rep, path, local.Token))
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	return local, ln, path
}
