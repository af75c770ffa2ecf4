package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// scrape reads a pod's /metrics on port 9022 through the API server's pod
// proxy (GET /api/v1/namespaces/NS/pods/POD:9022/proxy/metrics).
func scrape(ctx context.Context, ns, pod string) (string, error) {
	b, err := e.cs.CoreV1().Pods(ns).ProxyGet("http", pod, "9022", "metrics", nil).DoRaw(ctx)
	return string(b), err
}

// TestMetrics scrapes the launcher's and a worker's /metrics through the
// API server while an MPIJob runs.
func TestMetrics(t *testing.T) {
	need(t)
	ns := namespace(t, "metrics", true)
	job := mpiJob(t, "openmpi", func(job *unstructured.Unstructured) {
		// Long enough to scrape the launcher while mpirun runs.
		setLauncherArgs(t, job, "mpirun", "-np", "4", "bash", "-c", "podmpi-allreduce && sleep 60")
	})
	apply(t, ns, job)
	ctx := ctxT(t, 5*time.Minute)
	var launcher string
	waitFor(t, 3*time.Minute, "the launcher to run mpirun", func() (bool, error) {
		pods, err := podsWith(ctx, ns, "training.kubeflow.org/job-role=launcher,training.kubeflow.org/job-name="+job.GetName())
		if err != nil || len(pods) == 0 {
			return false, err
		}
		launcher = pods[0].Name
		return strings.Contains(podLogs(ctx, ns, launcher, false), "podmpi-allreduce: OK"), nil
	})
	var lm string
	waitFor(t, 30*time.Second, "launcher /metrics", func() (bool, error) {
		var err error
		lm, err = scrape(ctx, ns, launcher)
		return err == nil, err
	})
	for _, re := range []string{
		`(?m)^podmpi_launcher_phase_success\{phase="probe"\} 1$`,
		`(?m)^podmpi_launcher_workers_reachable 2$`,
		`(?m)^podmpi_launcher_workers_expected 2$`,
		`(?m)^podmpi_launcher_init_duration_seconds [0-9.e+-]+$`,
		`(?m)^podmpi_launcher_probe_latency_seconds_count 2$`,
	} {
		if !regexp.MustCompile(re).MatchString(lm) {
			t.Errorf("launcher /metrics has no line matching %s", re)
		}
	}
	worker := job.GetName() + "-worker-0"
	wm, err := scrape(ctx, ns, worker)
	if err != nil {
		t.Fatalf("worker %s /metrics through the API server: %v", worker, err)
	}
	for _, re := range []string{
		`(?m)^podmpi_worker_ready 1$`,
		`(?m)^podmpi_worker_slots [1-9]`,
		`(?m)^podmpi_worker_ssh_connections_total\{[^}]*\} [1-9]`,
		`(?m)^podmpi_worker_ssh_sessions_active [1-9]`,
	} {
		if !regexp.MustCompile(re).MatchString(wm) {
			t.Errorf("worker /metrics has no line matching %s", re)
		}
	}
	t.Logf("scraped %s (%d bytes) and %s (%d bytes) through the API server's pod proxy", launcher, len(lm), worker, len(wm))

	t.Run("monitoring-pack", func(t *testing.T) {
		checkMonitoringPack(t, ns, []string{launcher, worker})
	})
}

// checkMonitoringPack finds the PodMonitors and ServiceMonitors shipped in
// the repository and checks that they select the job's pods and name ports
// the pods (or Services) have.
func checkMonitoringPack(t *testing.T, ns string, pods []string) {
	t.Helper()
	monitors := shippedMonitors(t)
	n := 0
	for _, m := range monitors {
		if m.GetKind() != "Service" {
			n++
		}
	}
	if n == 0 {
		t.Skip("waits for issue 13: no PodMonitor or ServiceMonitor is shipped in the tree yet")
	}
	ctx := ctxT(t, time.Minute)
	selected := 0
	for _, m := range monitors {
		if m.GetKind() != "PodMonitor" {
			continue
		}
		sel, err := selectorOf(m)
		if err != nil {
			t.Errorf("%s %s: %v", m.GetKind(), m.GetName(), err)
			continue
		}
		eps, _, _ := unstructured.NestedSlice(m.Object, "spec", "podMetricsEndpoints")
		for _, name := range pods {
			p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			selected++
			ports := map[string]bool{}
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					ports[cp.Name] = true
				}
			}
			for _, ep := range eps {
				port, _ := ep.(map[string]any)["port"].(string)
				if port != "" && !ports[port] {
					t.Errorf("PodMonitor %s selects pod %s but it has no port named %q (ports: %v)", m.GetName(), name, port, ports)
				}
			}
		}
	}
	// A ServiceMonitor selects a Service the pack ships, which must select
	// the pods and have the named port.
	for _, m := range monitors {
		if m.GetKind() != "ServiceMonitor" {
			continue
		}
		sel, err := selectorOf(m)
		if err != nil {
			t.Errorf("ServiceMonitor %s: %v", m.GetName(), err)
			continue
		}
		eps, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
		for _, svc := range monitors {
			if svc.GetKind() != "Service" || !sel.Matches(labels.Set(svc.GetLabels())) {
				continue
			}
			podSel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			names := map[string]bool{}
			for _, x := range ports {
				n, _ := x.(map[string]any)["name"].(string)
				names[n] = true
			}
			for _, ep := range eps {
				port, _ := ep.(map[string]any)["port"].(string)
				if port != "" && !names[port] {
					t.Errorf("ServiceMonitor %s wants port %q, Service %s has %v", m.GetName(), port, svc.GetName(), names)
				}
			}
			for _, name := range pods {
				p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err == nil && len(podSel) > 0 && labels.SelectorFromSet(podSel).Matches(labels.Set(p.Labels)) {
					selected++
				}
			}
		}
	}
	if selected == 0 {
		t.Errorf("no shipped PodMonitor or ServiceMonitor (through a shipped Service) selects the launcher or worker pods %v", pods)
	}
}

func selectorOf(m *unstructured.Unstructured) (labels.Selector, error) {
	raw, ok, _ := unstructured.NestedMap(m.Object, "spec", "selector")
	if !ok {
		return nil, fmt.Errorf("no spec.selector")
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		return nil, err
	}
	return metav1.LabelSelectorAsSelector(&ls)
}

// shippedMonitors reads every PodMonitor and ServiceMonitor in the
// repository's YAML files outside test/, and the Services in those files.
func shippedMonitors(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	_ = filepath.WalkDir(e.repo, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(e.repo, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || rel == "test" || d.Name() == "testdata" || d.Name() == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || !regexp.MustCompile(`(?m)^kind:\s*(PodMonitor|ServiceMonitor)\s*$`).Match(b) {
			return nil
		}
		for _, o := range readObjects(t, rel) {
			if o.GetKind() == "PodMonitor" || o.GetKind() == "ServiceMonitor" || o.GetKind() == "Service" {
				out = append(out, o)
			}
		}
		return nil
	})
	return out
}
