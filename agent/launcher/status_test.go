package launcher

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/trainerstatus"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/statusfwd"
	"github.com/podmpi/podmpi/agent/worker/api"
)

// fakeTrainer is Trainer's status endpoint as the launcher sees it: TLS
// with a CA of its own, the job's token, and each request it took.
type fakeTrainer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []*trainerstatus.Status
	auth []string
	env  map[string]string // the three variables, as Trainer gives them
	// delay holds each answer (a busy controller); a request given up
	// meanwhile is not applied.
	delay time.Duration
}

const statusPath = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/tj/status"

func newFakeTrainer(t *testing.T) *fakeTrainer {
	tr := &fakeTrainer{}
	tr.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req trainerstatus.Request
		if r.URL.Path != statusPath || json.Unmarshal(b, &req) != nil || req.TrainerStatus == nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		tr.mu.Lock()
		delay := tr.delay
		tr.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		tr.mu.Lock()
		tr.got = append(tr.got, req.TrainerStatus)
		tr.auth = append(tr.auth, r.Header.Get("Authorization"))
		tr.mu.Unlock()
		_, _ = w.Write(b)
	}))
	t.Cleanup(tr.srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tr.srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("the-job-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.env = map[string]string{
		statusfwd.EnvURL:    tr.srv.URL + statusPath,
		statusfwd.EnvToken:  filepath.Join(dir, "token"),
		statusfwd.EnvCACert: filepath.Join(dir, "ca.crt"),
	}
	return tr
}

func (tr *fakeTrainer) requests() []*trainerstatus.Status {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, a := range tr.auth {
		if a != "Bearer the-job-token" {
			panic("a request without the job's token: " + a)
		}
	}
	return append([]*trainerstatus.Status(nil), tr.got...)
}

func metricMap(st *trainerstatus.Status) map[string]string {
	m := map[string]string{}
	for _, x := range st.Metrics {
		m[x.Name] = x.Value
	}
	return m
}

// statusJobConfig is a one-worker job whose command (script, sh -c) runs
// with the launcher's environment.
func statusJobConfig(t *testing.T, getenv func(string) string, script string, logs io.Writer) Config {
	cfg, _ := statusJob(t, getenv, script, logs)
	return cfg
}

// statusJob is statusJobConfig with its worker-agent.
func statusJob(t *testing.T, getenv func(string) string, script string, logs io.Writer) (Config, *fakeAgent) {
	a := startAgent(t)
	var out bytes.Buffer
	return Config{
		Discovery: discovery.Spec{Workers: []string{"127.0.0.1=1"}, Self: "x"}, DiscoveryTimeout: 5 * time.Second,
		Implementation: "openmpi4", WorkerWebPort: a.port, SkipProbe: true, Slots: 2,
		HostfilePath: filepath.Join(t.TempDir(), "hostfile"), TempDir: t.TempDir(), Executable: "/bin/true",
		Command: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Getenv: getenv,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, a
}

// TestStatusReportsTheJob: with Trainer's variables, the launcher reports
// its phase while it starts, its end, and carries what a rank posts to
// its own endpoint to Trainer with the job's token, the rank's progress
// kept beside podmpi's metrics; the rank never sees Trainer's token file.
func TestStatusReportsTheJob(t *testing.T) {
	tr := newFakeTrainer(t)
	script, envFile, done := rankCommand(t, "")
	var logs bytes.Buffer
	cfg := statusJobConfig(t, func(k string) string { return tr.env[k] }, script, &logs)
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		code, err := RunJob(t.Context(), cfg)
		res <- result{int(code), err}
	}()

	// The rank: reads the variables its environment holds and posts as
	// the SDK does.
	env := commandEnv(t, envFile)
	if env[statusfwd.EnvToken] == tr.env[statusfwd.EnvToken] || !strings.HasPrefix(env[statusfwd.EnvURL], "https://127.0.0.1:") ||
		!strings.HasSuffix(env[statusfwd.EnvURL], statusPath) {
		t.Fatalf("the command's variables: %v", env)
	}
	if code, body := rankPost(t, env, `{"trainerStatus":{"lastUpdatedTime":"2026-11-27T22:00:00Z","progressPercentage":50,"metrics":[{"name":"loss","value":"0.25"}]}}`); code != 200 {
		t.Fatalf("the rank's post: %d %s", code, body)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.code != 0 || r.err != nil {
		t.Fatalf("RunJob = %d, %v\n%s", r.code, r.err, logs.String())
	}

	got := tr.requests()
	if len(got) < 2 || len(got) > 4 {
		t.Fatalf("%d requests to Trainer, want 2 to 4 (the start, the rank's, the end):\n%s", len(got), logs.String())
	}
	first, last := metricMap(got[0]), got[len(got)-1]
	if first["podmpi_phase"] == "" {
		t.Errorf("the first request has no phase: %v", first)
	}
	lm := metricMap(last)
	if lm["podmpi_phase"] != "succeeded" || lm["podmpi_exit_code"] != "0" || lm["podmpi_slots"] != "2" || lm["loss"] != "0.25" ||
		last.ProgressPercentage == nil || *last.ProgressPercentage != 50 || lm["podmpi_init_seconds"] == "" {
		t.Errorf("the last request: progress %v, metrics %v", last.ProgressPercentage, lm)
	}
	if last.Metrics[0].Name != "loss" {
		t.Errorf("the rank's metrics go first while the job runs well: %v", last.Metrics)
	}
	if strings.Contains(logs.String(), "the-job-token") {
		t.Errorf("the token was logged:\n%s", logs.String())
	}
}

// TestStatusNamesTheFailure: a failed job's last request says why, first.
func TestStatusNamesTheFailure(t *testing.T) {
	tr := newFakeTrainer(t)
	var logs bytes.Buffer
	code, err := RunJob(t.Context(), statusJobConfig(t, func(k string) string { return tr.env[k] }, "exit 3", &logs))
	if code != 3 || err == nil {
		t.Fatalf("RunJob = %d, %v", code, err)
	}
	got := tr.requests()
	if len(got) == 0 {
		t.Fatal("no request to Trainer")
	}
	last := got[len(got)-1]
	lm := metricMap(last)
	if lm["podmpi_phase"] != "failed" || lm["podmpi_exit_code"] != "3" || lm["podmpi_reason"] == "" ||
		!strings.HasPrefix(lm["podmpi_root_cause"], "mpirun: sh exited with 3") || last.Metrics[0].Name != "podmpi_exit_code" {
		t.Errorf("the last request: %v", last.Metrics)
	}
	for _, m := range last.Metrics {
		if len([]rune(m.Value)) > trainerstatus.MaxField || len([]rune(m.Name)) > trainerstatus.MaxField {
			t.Errorf("metric over the API's limit: %+v", m)
		}
	}

	// A diagnosed root cause names its host and rank.
	cfg, a := statusJob(t, func(k string) string { return tr.env[k] }, "exit 137", &logs)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindOOMKill, Rank: 1, PID: 7, ExitCode: -1,
		Memory: &api.Memory{Version: 2, LimitBytes: 1 << 30, PeakBytes: 1 << 30, AtLimit: true}})
	if code, _ := RunJob(t.Context(), cfg); code != 137 {
		t.Fatalf("RunJob = %d", code)
	}
	got = tr.requests()
	lm = metricMap(got[len(got)-1])
	if lm["podmpi_reason"] != "OOMKilled" || lm["podmpi_root_cause_host"] != "127.0.0.1" || lm["podmpi_root_cause_rank"] != "1" ||
		!strings.HasPrefix(lm["podmpi_root_cause"], "OOM: rank 1 on 127.0.0.1") {
		t.Errorf("the last request of an OOM-killed job: %v", lm)
	}

	// The first rank an agent saw end, its status unseen, is what the
	// diagnosis can say when the MPI named no failed rank: never given as
	// the root cause's host and rank (it may have been ended by another's
	// failure; Open MPI 4 once named no process when a rank on another pod
	// exited 5 at once, and the status blamed the launcher's pod).
	cfg, a = statusJob(t, func(k string) string { return tr.env[k] }, "exit 5", &logs)
	a.set(api.Event{Seq: 1, Time: time.Now(), Kind: api.KindRankExit, Rank: 0, PID: 7, ExitCode: -1, Comm: "sleep"})
	if code, _ := RunJob(t.Context(), cfg); code != 5 {
		t.Fatalf("RunJob = %d", code)
	}
	got = tr.requests()
	lm = metricMap(got[len(got)-1])
	if !strings.Contains(lm["podmpi_root_cause"], "the first rank a worker-agent saw end") {
		t.Fatalf("the diagnosis did not fall back on the first rank an agent saw end: %v", lm)
	}
	if h, r := lm["podmpi_root_cause_host"], lm["podmpi_root_cause_rank"]; h != "" || r != "" {
		t.Errorf("a rank whose status nobody saw is given as the root cause: host %q, rank %q (%v)", h, r, lm)
	}
}

// TestStatusOffChangesNothing: without the variables (the gate off, or not
// a trainer step) no request is made, the command's environment has none
// of them, and nothing is logged above INFO about it.
func TestStatusOffChangesNothing(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	var logs bytes.Buffer
	code, err := RunJob(t.Context(), statusJobConfig(t, func(string) string { return "" }, "env > "+envFile, &logs))
	if code != 0 || err != nil {
		t.Fatalf("RunJob = %d, %v", code, err)
	}
	b, _ := os.ReadFile(envFile)
	if strings.Contains(string(b), "KUBEFLOW_TRAINER_SERVER") {
		t.Errorf("the command got status variables:\n%s", b)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "trainer-status") || strings.Contains(line, "TrainJob's status") {
			t.Errorf("logged about the status API with it off: %s", line)
		}
	}
}

// TestStatusUnreachableDoesNotHoldTheEnd: Trainer's endpoint takes
// connections and never answers (a NetworkPolicy that drops, a stalled
// controller): the job runs as without it, the launcher warns once with
// what to check, and its end is not held up for the last report.
func TestStatusUnreachableDoesNotHoldTheEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // never accepted: the TLS handshake gets no answer
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tr := newFakeTrainer(t)
	env := map[string]string{}
	for k, v := range tr.env {
		env[k] = v
	}
	env[statusfwd.EnvURL] = "https://" + ln.Addr().String() + statusPath
	var logs bytes.Buffer
	start := time.Now()
	code, err := RunJob(t.Context(), statusJobConfig(t, func(k string) string { return env[k] }, "exit 0", &logs))
	took := time.Since(start)
	if code != 0 || err != nil {
		t.Fatalf("RunJob = %d, %v", code, err)
	}
	// Init and the command take well under a second here; the first
	// request's 5 s runs in the background, the last one waits 1 s at most.
	if took > 3*time.Second {
		t.Errorf("the job took %s with Trainer out of reach", took.Round(time.Millisecond))
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"the TrainJob's status was not updated"); n > 1 {
		t.Errorf("%d warnings about the status, want at most one:\n%s", n, logs.String())
	}
}

// TestStatusEndLandsAfterALongJob is what users saw: a job that outlives
// the pace (5 s) with nothing to report meanwhile; at its end the
// launcher's end is due at once, and Trainer takes a moment to answer. It
// lands, whatever the paced loop was doing.
func TestStatusEndLandsAfterALongJob(t *testing.T) {
	tr := newFakeTrainer(t)
	tr.delay = 200 * time.Millisecond
	var logs sshtest.Buffer
	l, err := New(statusJobConfig(t, func(k string) string { return tr.env[k] }, "true", &logs))
	if err != nil {
		t.Fatal(err)
	}
	l.connectStatus(t.Context())
	deadline := time.Now().Add(20 * time.Second)
	for len(tr.requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(tr.requests()) == 0 {
		t.Fatalf("Trainer never got the launcher's first request:\n%s", logs.String())
	}
	time.Sleep(trainerstatus.MinInterval) // the job runs on, past the pace
	l.closeStatus(exitcode.OK, nil)
	got := tr.requests()
	if last := metricMap(got[len(got)-1]); last["podmpi_phase"] != "succeeded" || last["podmpi_exit_code"] != "0" {
		t.Fatalf("Trainer's last status %v, want the end (%d requests):\n%s", last, len(got), logs.String())
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("warned:\n%s", logs.String())
	}
}

// TestStatusRanksCannotClaimPodmpiNames: a rank that posts
// podmpi_phase=running and then exits 4 is told at once that the name is
// podmpi's, and the failed job's status says failed.
func TestStatusRanksCannotClaimPodmpiNames(t *testing.T) {
	tr := newFakeTrainer(t)
	script, envFile, done := rankCommand(t, "exit 4")
	var logs sshtest.Buffer
	cfg := statusJobConfig(t, func(k string) string { return tr.env[k] }, script, &logs)
	res := make(chan int, 1)
	go func() {
		code, _ := RunJob(t.Context(), cfg)
		res <- int(code)
	}()
	env := commandEnv(t, envFile)
	code, body := rankPost(t, env, `{"trainerStatus":{"progressPercentage":40,"metrics":[{"name":"podmpi_phase","value":"running"},{"name":"loss","value":"0.5"}]}}`)
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c := <-res; c != 4 {
		t.Fatalf("RunJob = %d, want 4:\n%s", c, logs.String())
	}
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `podmpi_`) || !strings.Contains(body, "reserved") {
		t.Errorf("the rank's post of podmpi_phase: %d %s, want 422 naming the reserved prefix", code, body)
	}
	got := tr.requests()
	last := metricMap(got[len(got)-1])
	if last["podmpi_phase"] != "failed" || last["podmpi_exit_code"] != "4" {
		t.Fatalf("the failed job's last status: %v", last)
	}
	for _, st := range got {
		if m := metricMap(st); m["podmpi_phase"] == "running" {
			t.Fatalf("a rank's podmpi_phase reached Trainer: %v", m)
		}
	}
}

// TestStatusTrainersVariablesNeverReachTheRanks: when the launcher does
// not report (Trainer's variables unusable, or only some of them), mpirun
// gets none of the three: never Trainer's token.
func TestStatusTrainersVariablesNeverReachTheRanks(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"plain http to a remote address", map[string]string{
			statusfwd.EnvURL:    "http://trainer.kubeflow-system.svc:10443" + statusPath,
			statusfwd.EnvToken:  "/var/run/secrets/trainer/token",
			statusfwd.EnvCACert: "/var/run/secrets/trainer/ca.crt",
		}},
		{"no URL", map[string]string{
			statusfwd.EnvToken:  "/var/run/secrets/trainer/token",
			statusfwd.EnvCACert: "/var/run/secrets/trainer/ca.crt",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v) // the launcher's own environment, which mpirun's comes from
			}
			envFile := filepath.Join(t.TempDir(), "env")
			var logs sshtest.Buffer
			code, err := RunJob(t.Context(), statusJobConfig(t, os.Getenv, "env > "+envFile, &logs))
			if code != 0 || err != nil {
				t.Fatalf("RunJob = %d, %v", code, err)
			}
			b, err := os.ReadFile(envFile)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "KUBEFLOW_TRAINER_SERVER") || strings.Contains(string(b), "/var/run/secrets/trainer") {
				t.Errorf("the command got Trainer's variables:\n%s", b)
			}
		})
	}
}

// rankCommand is a job's command that plays a rank: it writes its
// environment to envFile, waits (30 s at most) for the test to create
// done, then runs then.
func rankCommand(t *testing.T, then string) (script, envFile, done string) {
	dir := t.TempDir()
	envFile, done = filepath.Join(dir, "env"), filepath.Join(dir, "done")
	script = `env > ` + envFile + `.tmp && mv ` + envFile + `.tmp ` + envFile +
		`; i=0; while [ ! -e ` + done + ` ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; ` + then
	return script, envFile, done
}

// commandEnv waits for the command to write its environment to file, and
// reads it.
func commandEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(file); err == nil {
			env := map[string]string{}
			for _, kv := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
			return env
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rankPost posts body as a rank does, to the endpoint env names, with
// the CA and token its files hold.
func rankPost(t *testing.T, env map[string]string, body string) (int, string) {
	t.Helper()
	ca, _ := os.ReadFile(env[statusfwd.EnvCACert])
	token, _ := os.ReadFile(env[statusfwd.EnvToken])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, env[statusfwd.EnvURL], strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
