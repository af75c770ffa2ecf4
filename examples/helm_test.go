package examples

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The Helm chart (charts/podmpi) renders the files of deploy/ (its files/
// are links to them) with the values applied, so it installs what the
// kustomize bases install. These tests run the real helm, at the version
// test/cluster/versions.txt pins, built from the Go module proxy once per
// machine and cached.

// chartDir is the chart, relative to examples/.
const chartDir = "../charts/podmpi"

// helmBuildTimeout bounds building helm (about 20 minutes from an empty
// module cache on a loaded 2-core machine) and the wait for another test
// process that builds it.
const helmBuildTimeout = 45 * time.Minute

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns the pinned helm: $PODMPI_HELM when set, else
// <cache>/helm/<version>/helm, built there with go install when missing
// (<cache> is /var/cache/podmpi when writable, else the user's cache
// folder). Under -short a missing helm skips the test instead.
func helmBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("PODMPI_HELM"); p != "" {
		return p
	}
	v, err := pinnedVersion("helm")
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		dir, err := helmCacheDir(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "helm")); err != nil {
			t.Skipf("-short: helm %s is not built yet (%s); go test without -short builds it", v, dir)
		}
	}
	helmOnce.Do(func() { helmPath, helmErr = buildHelm(t, v) })
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// versionsFile pins every version the cluster's parts use, helm's too (its
// own module, test/cluster, parses it for the cluster).
const versionsFile = "../test/cluster/versions.txt"

// pinnedVersion returns the version of component in versionsFile (lines
// "component version why").
func pinnedVersion(component string) (string, error) {
	b, err := os.ReadFile(versionsFile)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == component {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s: no %q line", repoName(versionsFile), component)
}

// helmCacheDir is where helm version v is kept.
func helmCacheDir(v string) (string, error) {
	root := "/var/cache/podmpi"
	if err := os.MkdirAll(root, 0o755); err != nil || syscall.Access(root, 2 /* W_OK */) != nil {
		user, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache folder for helm: /var/cache/podmpi is not writable and %w", err)
		}
		root = filepath.Join(user, "podmpi")
	}
	return filepath.Join(root, "helm", v), nil
}

func buildHelm(t testing.TB, v string) (string, error) {
	dir, err := helmCacheDir(v)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), helmBuildTimeout)
	defer cancel()
	// Another test process may be building it: one build, the other waits.
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", fmt.Errorf("lock %s.lock: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("another process has built helm into %s for %s (lock %s.lock): stuck? %w", dir, helmBuildTimeout, dir, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // the other process built it
	}
	t.Logf("building helm %s into %s (go install from the module proxy; once per machine)", v, dir)
	cmd := exec.CommandContext(ctx, "go", "install", "helm.sh/helm/v4/cmd/helm@"+v)
	cmd.Dir = os.TempDir() // outside this module: helm's own go.mod decides
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go install helm.sh/helm/v4/cmd/helm@%s (into %s): %v\n%s", v, dir, err, out)
	}
	return bin, nil
}

// helmRun runs helm with args, within a minute, and returns stdout; stderr
// goes into the error.
func helmRun(t testing.TB, args ...string) (string, error) {
	t.Helper()
	// The binary first: on a machine without it, the first call builds it
	// (minutes), which the run's minute must not include.
	helm := helmBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	// No kube config: everything here runs without a cluster.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"), "HELM_CACHE_HOME="+t.TempDir(),
		"HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// chartValues is one set of --set values and the kustomizations that
// install the same objects.
type chartValues struct {
	name string
	set  []string
	// same are the kustomizations (relative to examples/) whose objects the
	// chart renders with these values, labels of the packaging aside; nil
	// when the values have no kustomize twin.
	same []string
}

var chartCases = []chartValues{
	{"default", nil, []string{deployDir + "/runtimes", deployDir + "/namespace"}},
	{"openshift", []string{"openshift=true"}, []string{deployDir + "/openshift/runtimes", deployDir + "/namespace"}},
	{"image volume", []string{"podmpiVolume=image"}, []string{deployDir + "/image-volume/runtimes", deployDir + "/namespace"}},
	{"second namespace", []string{"runtimes.enabled=false"}, []string{deployDir + "/namespace"}},
	{"PodMonitor", []string{"runtimes.enabled=false", "rbac.enabled=false", "networkPolicy.enabled=false", "monitoring.enabled=true"},
		[]string{deployDir + "/monitoring/podmonitor"}},
	{"ServiceMonitor", []string{"runtimes.enabled=false", "rbac.enabled=false", "networkPolicy.enabled=false", "monitoring.enabled=true", "monitoring.scrape=ServiceMonitor"},
		[]string{deployDir + "/monitoring/servicemonitor"}},
	{"own registry", []string{"image.registry=registry.example.com:5000/podmpi", "image.tag=v9.9.9-rc.1"}, nil},
	{"one runtime, no namespace parts", []string{"runtimes.mpis={openmpi}", "rbac.enabled=false", "networkPolicy.enabled=false"}, nil},
	{"Trainer elsewhere", []string{"networkPolicy.trainerNamespace=trainer", "runtimes.enabled=false"}, nil},
	{"everything", []string{"openshift=true", "podmpiVolume=image", "monitoring.enabled=true", "image.registry=localhost:5000/podmpi"}, nil},
}

// helmTemplate renders the chart as release "podmpi" in namespace team-a.
func helmTemplate(t testing.TB, set []string) ([]document, error) {
	t.Helper()
	args := []string{"template", "podmpi", chartDir, "--namespace", "team-a"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helmRun(t, args...)
	if err != nil {
		return nil, err
	}
	return parseStream("charts/podmpi", []byte(out))
}

// TestChartVersion: the chart's appVersion is the images' tag (the tag it
// names by default), and its version the same without the "v".
func TestChartVersion(t *testing.T) {
	tag := releaseTag(t)
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatalf("charts/podmpi/Chart.yaml: %v", err)
	}
	if chart.AppVersion != tag || "v"+chart.Version != tag {
		t.Errorf("charts/podmpi/Chart.yaml: version %q, appVersion %q; want %q and %q (the images' tag in %s)",
			chart.Version, chart.AppVersion, strings.TrimPrefix(tag, "v"), tag, repoName(imagesComponent))
	}
}

// TestChartLint: helm lint --strict passes with the default values and with
// every other set.
func TestChartLint(t *testing.T) {
	for _, c := range chartCases {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		if out, err := helmRun(t, args...); err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, out)
		}
	}
}

// TestChartRenders: with every set of values, the chart renders objects
// that pass every check the kustomize install passes (CRD schemas of every
// pinned release, strict core decoding, restricted PSS, podmpi's rules,
// bringing podmpi into any image); with the values that have a kustomize
// twin, the same objects as it (labels aside: the chart's name Helm as
// manager); every podmpi image from image.registry at image.tag; the six
// app.kubernetes.io labels on everything.
func TestChartRenders(t *testing.T) {
	crds := loadCRDs(t)
	runtimes := allRuntimes(loadManifestSets(t))
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			docs, err := helmTemplate(t, c.set)
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) == 0 {
				t.Fatal("renders nothing")
			}
			registry, tag := "ghcr.io/podmpi", releaseTag(t)
			for _, s := range c.set {
				if v, ok := strings.CutPrefix(s, "image.registry="); ok {
					registry = v
				}
				if v, ok := strings.CutPrefix(s, "image.tag="); ok {
					tag = v
				}
			}
			for _, d := range docs {
				errs, _ := checkDocument(d, crds, runtimes)
				for _, e := range errs {
					t.Errorf("%s: %s", d, e)
				}
				labels, _ := dig(d.Obj, "metadata", "labels").(map[string]any)
				for _, l := range []string{"name", "instance", "version", "component", "part-of", "managed-by"} {
					if s, _ := labels["app.kubernetes.io/"+l].(string); s == "" {
						t.Errorf("%s: no label app.kubernetes.io/%s", d, l)
					}
				}
				if labels["app.kubernetes.io/version"] != tag || labels["app.kubernetes.io/managed-by"] != "Helm" {
					t.Errorf("%s: labels %v: want version %s, managed-by Helm", d, labels, tag)
				}
				if md, _ := d.Obj["metadata"].(map[string]any); md["namespace"] != nil {
					t.Errorf("%s: metadata.namespace %v: leave it to the release (helm install -n)", d, md["namespace"])
				}
			}
			for _, ref := range containerImages(t, docs) {
				if !strings.HasPrefix(ref, registry+"/") || imageTag(ref) != tag {
					t.Errorf("a pod runs %s, want %s/<image>:%s", ref, registry, tag)
				}
			}
			if c.same == nil {
				return
			}
			var want []document
			for _, dir := range c.same {
				d, err := render(dir)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, d...)
			}
			got, exp := objectsByKey(withoutPackagingLabels(docs)), objectsByKey(withoutPackagingLabels(want))
			for k, v := range exp {
				switch g, ok := got[k]; {
				case !ok:
					t.Errorf("%s is in %v but the chart does not render it", k, repoNames(c.same))
				case g != v:
					t.Errorf("%s differs between the chart and %v:\nchart:     %s\nkustomize: %s", k, repoNames(c.same), g, v)
				}
			}
			for k := range got {
				if _, ok := exp[k]; !ok {
					t.Errorf("the chart renders %s, which %v does not", k, repoNames(c.same))
				}
			}
		})
	}
}

// withoutPackagingLabels drops the labels that name the packaging (helm or
// kustomize), which alone may differ between the chart and deploy/.
func withoutPackagingLabels(docs []document) []document {
	out := make([]document, len(docs))
	for i, d := range docs {
		c := d
		obj, _ := decodeJSON([]byte(canonical(d.Obj)))
		c.Obj = obj.(map[string]any)
		if labels, ok := dig(c.Obj, "metadata", "labels").(map[string]any); ok {
			delete(labels, "app.kubernetes.io/managed-by")
			delete(labels, "helm.sh/chart")
		}
		out[i] = c
	}
	return out
}

func repoNames(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		out = append(out, repoName(d))
	}
	return out
}

// TestChartScope: the cluster-scoped runtimes come only with
// runtimes.enabled (a second release for another namespace leaves them to
// the first); only the values' parts render; the Trainer namespace value
// reaches the launcher's policy; helm uninstall removes everything the
// chart made: no hooks, no resource policy that keeps an object, only kinds
// the install test lists.
func TestChartScope(t *testing.T) {
	kinds := map[string]bool{"ClusterTrainingRuntime": true, "Role": true, "RoleBinding": true, "NetworkPolicy": true,
		"PrometheusRule": true, "PodMonitor": true, "ServiceMonitor": true, "Service": true, "ConfigMap": true}
	for _, c := range chartCases {
		docs, err := helmTemplate(t, c.set)
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, d := range docs {
			count[d.GVK.Kind]++
			if !kinds[d.GVK.Kind] {
				t.Errorf("%s: renders a %s: add the kind to this test's list, and to the cluster's install test that checks helm uninstall leaves none", c.name, d.GVK.Kind)
			}
			annotations, _ := dig(d.Obj, "metadata", "annotations").(map[string]any)
			for k := range annotations {
				if strings.HasPrefix(k, "helm.sh/") {
					t.Errorf("%s: %s carries %s: no hooks or resource policies, so that helm uninstall removes exactly what helm install made", c.name, d, k)
				}
			}
		}
		enabled := func(key string, dflt bool) bool {
			for _, s := range c.set {
				if v, ok := strings.CutPrefix(s, key+"="); ok {
					return v == "true"
				}
			}
			return dflt
		}
		if enabled("runtimes.enabled", true) != (count["ClusterTrainingRuntime"] > 0) {
			t.Errorf("%s: %d ClusterTrainingRuntimes with runtimes.enabled %t", c.name, count["ClusterTrainingRuntime"], enabled("runtimes.enabled", true))
		}
		if enabled("rbac.enabled", true) != (count["Role"] == 1 && count["RoleBinding"] == 1) {
			t.Errorf("%s: %d Roles, %d RoleBindings with rbac.enabled %t", c.name, count["Role"], count["RoleBinding"], enabled("rbac.enabled", true))
		}
		if enabled("networkPolicy.enabled", true) != (count["NetworkPolicy"] == 2) {
			t.Errorf("%s: %d NetworkPolicies with networkPolicy.enabled %t", c.name, count["NetworkPolicy"], enabled("networkPolicy.enabled", true))
		}
		if enabled("monitoring.enabled", false) != (count["PrometheusRule"] == 1 && count["ConfigMap"] == 1) {
			t.Errorf("%s: %v with monitoring.enabled %t", c.name, count, enabled("monitoring.enabled", false))
		}
		if slices.Contains(c.set, "runtimes.mpis={openmpi}") && count["ClusterTrainingRuntime"] != 1 {
			t.Errorf("%s: %d runtimes, want podmpi-openmpi alone", c.name, count["ClusterTrainingRuntime"])
		}
		if slices.Contains(c.set, "networkPolicy.trainerNamespace=trainer") {
			set := manifestSet{Name: "charts/podmpi " + c.name, Docs: docs}
			np := policyNamed(t, set, "podmpi-trainer-status")
			if got := np.Spec.Egress[0].To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != "trainer" {
				t.Errorf("%s: the launcher's policy admits Trainer in namespace %q, want trainer", c.name, got)
			}
		}
	}
}

// TestChartRefusesBadValues: values.schema.json turns a wrong value into an
// error naming it before anything renders.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"podmpiVolume=hostPath", "/podmpiVolume"},
		{"image.registry=Registry.example.com/", "/image/registry"},
		{"image.tag=:v1", "/image/tag"},
		{"runtimes.mpis={openmpi5}", "/runtimes/mpis/0"},
		{"monitoring.scrape=Probe", "/monitoring/scrape"},
		{"imag.tag=v1", "additional properties 'imag'"},
		{"networkPolicy.trainerNamespace=Kubeflow_System", "/networkPolicy/trainerNamespace"},
	} {
		_, err := helmTemplate(t, []string{tc.set})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: err %v, want one naming %s", tc.set, err, tc.want)
		}
	}
}

// TestChartNotes: helm install prints where the images come from, and
// warns while they are the default ghcr.io/podmpi, which podmpi does not
// publish to yet.
func TestChartNotes(t *testing.T) {
	notes := func(set ...string) string {
		args := []string{"install", "podmpi", chartDir, "--dry-run=client", "--namespace", "team-a"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := helmRun(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		_, n, ok := strings.Cut(out, "NOTES:")
		if !ok {
			t.Fatalf("helm install --dry-run printed no NOTES:\n%s", out)
		}
		return n
	}
	tag := releaseTag(t)
	def := notes()
	for _, want := range []string{"ghcr.io/podmpi/podmpi:" + tag, "publishes no images", "make release VERSION=" + tag, "--set runtimes.enabled=false"} {
		if !strings.Contains(def, want) {
			t.Errorf("NOTES with the default values lack %q:\n%s", want, def)
		}
	}
	own := notes("image.registry=registry.example.com:5000/podmpi")
	if strings.Contains(own, "publishes no images") || !strings.Contains(own, "registry.example.com:5000/podmpi/openmpi:"+tag) {
		t.Errorf("NOTES with image.registry set:\n%s", own)
	}
}
