package examples

import (
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/common/expfmt"
	"sigs.k8s.io/yaml"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// TestMonitoringRules checks the alerts of the monitoring pack with
// Prometheus' own tool: the rule groups of the PrometheusRule pass `promtool
// check rules`, and `promtool test rules` runs tests/rules_test.yaml, where
// every alert fires in its case and stays quiet in the others.
func TestMonitoringRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "monitoring", "base", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &rule); err != nil || rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: kind %q, %d groups, %v", rule.Kind, len(rule.Spec.Groups), err)
	}
	groups, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), groups, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(deployDir, "monitoring", "base", "tests", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		} else {
			t.Logf("promtool %v:\n%s", args, out)
		}
	}
}

// packMetricNames returns every podmpi_* metric the monitoring pack's
// alerts and dashboard query, a histogram's _bucket/_sum/_count series
// under the histogram's name.
func packMetricNames(t *testing.T) []string {
	t.Helper()
	var text []byte
	for _, f := range []string{"prometheusrule.yaml", "podmpi-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(deployDir, "monitoring", "base", f))
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, b...)
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bpodmpi_[a-z0-9_]+`).FindAllString(string(text), -1) {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if n, ok := strings.CutSuffix(m, suf); ok && strings.HasSuffix(n, "_seconds") {
				m = n
			}
		}
		seen[m] = true
	}
	names := slices.Sorted(maps.Keys(seen))
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in the pack: %v", len(names), names)
	}
	return names
}

// TestMonitoringMetricsExist runs the real binaries and checks that every
// metric the pack's alerts and dashboard name is one they export: a
// worker-agent's /metrics, and what a launcher pushes to a Pushgateway at
// the end of a run against it.
func TestMonitoringMetricsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs both binaries")
	}
	want := packMetricNames(t)
	bin := t.TempDir()
	for _, b := range []string{"launcher", "worker-agent"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, b), "../cmd/"+b).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b, err, out)
		}
	}
	auth := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	agent := sshtest.StartAgent(t, exec.Command(filepath.Join(bin, "worker-agent"),
		"--ssh.listen-address", "127.0.0.1:0", "--web.listen-address", "127.0.0.1:0", "--ssh.auth-dir", auth,
		"--ssh.state-dir", t.TempDir(), "--slots", "2", "--gpu.detect", "none", "--log.format=json"))
	agent.WaitReady(t, 30*time.Second)
	code, body := agent.Get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("worker-agent /metrics: %d %s", code, body)
	}
	exported := map[string]bool{}
	for _, name := range families(t, strings.NewReader(body), expfmt.NewFormat(expfmt.TypeTextPlain)) {
		exported[name] = true
	}

	pushed := make(chan []string, 1)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case pushed <- families(t, r.Body, expfmt.ResponseFormat(r.Header)):
		default:
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()
	_, sshPort, _ := net.SplitHostPort(agent.SSHAddr)
	_, webPort, _ := net.SplitHostPort(agent.WebAddr)
	// Whether the probe passes (orted on PATH) does not matter: the launcher
	// pushes its metrics at the end either way.
	out, err := exec.Command(filepath.Join(bin, "launcher"), "--workers", "127.0.0.1", "--ssh.auth-dir", auth,
		"--ssh.port", sshPort, "--worker.web-port", webPort, "--probe.timeout", "10s", "--mpi.implementation", "openmpi4",
		"--web.listen-address", "", "--termination-log", "", "--metrics.push-url", gw.URL, "--", "true").CombinedOutput()
	select {
	case names := <-pushed:
		for _, n := range names {
			exported[n] = true
		}
	default:
		t.Fatalf("the launcher pushed nothing (%v):\n%s", err, out)
	}
	for _, n := range want {
		if !exported[n] {
			t.Errorf("the monitoring pack queries %s, which neither binary exports", n)
		}
	}
	t.Logf("%d metrics named by the pack, all exported", len(want))
}

// families reads the metric family names of an exposition.
func families(t *testing.T, r io.Reader, f expfmt.Format) []string {
	t.Helper()
	dec := expfmt.NewDecoder(r, f)
	var out []string
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("decoding metrics: %v", err)
			}
			return out
		}
		out = append(out, mf.GetName())
	}
}
