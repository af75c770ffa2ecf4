package examples

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// overlayDir holds the kustomize overlays users apply; each renders to a
// complete set of objects.
const overlayDir = "overlays"

// migrationDir holds the MPIJob -> TrainJob migration pairs, one directory
// per pair, plain manifests (no kustomization).
const migrationDir = "migration"

// crdSchema is one CRD version's schema and the release set it came from.
type crdSchema struct {
	set    string // e.g. "trainer-v2.3.0"
	schema *schema
}

// crdSets maps each custom kind to its schema in every release under
// testdata/crds that defines it.
type crdSets map[gvk][]crdSchema

// schemasFor returns g's schema in every release that has it.
func (c crdSets) schemasFor(g gvk) []crdSchema { return c[g] }

// namesFor returns the release sets that define g, or "core" for built-in
// kinds.
func (c crdSets) namesFor(g gvk) []string {
	var names []string
	for _, s := range c[g] {
		names = append(names, s.set)
	}
	if len(names) == 0 {
		return []string{"core/v1 types"}
	}
	return names
}

var (
	crdOnce  sync.Once
	crdCache crdSets
	crdErr   error
)

// loadCRDs reads every CRD of every release directory under testdata/crds,
// once per test binary (the files are large).
func loadCRDs(t testing.TB) crdSets {
	t.Helper()
	crdOnce.Do(func() {
		dirs, err := os.ReadDir(crdDir)
		if err != nil {
			crdErr = fmt.Errorf("reading examples/%s: %w", crdDir, err)
			return
		}
		all := crdSets{}
		var n int
		for _, d := range dirs {
			if !d.IsDir() {
				crdErr = fmt.Errorf("examples/%s/%s: want only release directories (e.g. trainer-v2.3.0) here", crdDir, d.Name())
				return
			}
			files, err := filepath.Glob(filepath.Join(crdDir, d.Name(), "*.yaml"))
			if err != nil || len(files) == 0 {
				crdErr = fmt.Errorf("no CRDs in examples/%s/%s (err %v)", crdDir, d.Name(), err)
				return
			}
			for _, f := range files {
				m, err := loadCRD(f)
				if err != nil {
					crdErr = err
					return
				}
				for k, v := range m {
					all[k] = append(all[k], crdSchema{set: d.Name(), schema: v})
				}
				n++
			}
		}
		if n == 0 {
			crdErr = fmt.Errorf("no CRDs under examples/%s", crdDir)
			return
		}
		crdCache = all
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
	return crdCache
}

// manifestSet is what one "kubectl apply" creates: the rendered objects of
// an overlay, or the files of one migration pair.
type manifestSet struct {
	Name string // "overlays/trainer", "migration/openmpi"
	Docs []document
}

// runtimes returns the names of the (Cluster)TrainingRuntimes in the set,
// which its TrainJobs may reference.
func (s manifestSet) runtimes() map[string]bool {
	r := map[string]bool{}
	for _, d := range s.Docs {
		if d.GVK.APIVersion == "trainer.kubeflow.org/v1alpha1" && (d.GVK.Kind == "ClusterTrainingRuntime" || d.GVK.Kind == "TrainingRuntime") {
			r[d.Name] = true
		}
	}
	return r
}

// isMonitoring reports whether an overlay is the monitoring pack's
// (overlays/monitoring*): it runs no pods, so it has no images: entries and
// no NetworkPolicy of its own (the workload overlays' policy admits the
// scrapes).
func isMonitoring(dir string) bool {
	return strings.HasPrefix(filepath.Base(dir), "monitoring")
}

// overlays returns the overlay directories under examples/overlays.
func overlays(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(overlayDir)
	if err != nil {
		t.Fatalf("reading examples/%s: %v", overlayDir, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(overlayDir, e.Name()))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no overlays under examples/%s", overlayDir)
	}
	return out
}

// render runs kustomize (the Go API kubectl kustomize embeds) on dir and
// returns the objects as documents named after dir.
func render(dir string) ([]document, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var docs []document
	for i, raw := range splitYAML(out) {
		d, err := parseDocument(dir, i, raw)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no objects", dir)
	}
	return docs, nil
}

// readManifests parses every *.yaml file directly in dir.
func readManifests(dir string) ([]document, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var docs []document
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for i, raw := range splitYAML(b) {
			d, err := parseDocument(f, i, raw)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d)
		}
	}
	return docs, nil
}

// loadManifestSets renders every overlay and reads every migration pair.
func loadManifestSets(t *testing.T) []manifestSet {
	t.Helper()
	var sets []manifestSet
	for _, dir := range overlays(t) {
		docs, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, manifestSet{Name: dir, Docs: docs})
	}
	pairs, err := os.ReadDir(migrationDir)
	if err != nil {
		t.Fatalf("reading examples/%s: %v", migrationDir, err)
	}
	for _, p := range pairs {
		if !p.IsDir() {
			continue
		}
		dir := filepath.Join(migrationDir, p.Name())
		docs, err := readManifests(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) == 0 {
			t.Fatalf("examples/%s: no manifests", dir)
		}
		sets = append(sets, manifestSet{Name: dir, Docs: docs})
	}
	return sets
}

// allDocuments is every object of every set.
func allDocuments(t *testing.T) []document {
	t.Helper()
	var docs []document
	for _, s := range loadManifestSets(t) {
		docs = append(docs, s.Docs...)
	}
	return docs
}

// objectsByKey maps "kind/name" of each document to its canonical form.
func objectsByKey(docs []document) map[string]string {
	m := map[string]string{}
	for _, d := range docs {
		m[d.GVK.String()+"/"+d.Name] = canonical(d.Obj)
	}
	return m
}

// kustomization is the part of a kustomization.yaml the tests read.
type kustomization struct {
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := strictYAML(b, &k); err != nil {
		// Fields the tests do not read (apiVersion, kind) are fine.
		if !strings.Contains(err.Error(), "unknown field") {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
	}
	return k
}

// TestEveryManifestIsChecked: every YAML file under examples/ is reached by a
// check: a resource of a kustomization that an overlay includes, a patch of
// an overlay, a migration pair, the compose file or the test's CRDs. A file
// outside these would ship unvalidated.
func TestEveryManifestIsChecked(t *testing.T) {
	covered := map[string]string{}
	var visit func(dir, via string)
	visit = func(dir, via string) {
		dir = filepath.Clean(dir)
		covered[filepath.Join(dir, "kustomization.yaml")] = via
		k := readKustomization(t, dir)
		for _, r := range k.Resources {
			p := filepath.Clean(filepath.Join(dir, r))
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				visit(p, via)
				continue
			}
			covered[p] = via
		}
		for _, pt := range k.Patches {
			covered[filepath.Clean(filepath.Join(dir, pt.Path))] = via
		}
	}
	for _, o := range overlays(t) {
		visit(o, o)
	}
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (path == "testdata" || path == "compose") {
			return fs.SkipDir
		}
		if e.IsDir() && path == filepath.Join("monitoring", "base", "tests") {
			return fs.SkipDir // promtool's rule tests, run by TestMonitoringRules
		}
		if e.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		if strings.HasPrefix(path, migrationDir+string(filepath.Separator)) && strings.Count(path, string(filepath.Separator)) == 2 {
			return nil // a migration pair's manifest
		}
		if _, ok := covered[path]; !ok {
			t.Errorf("examples/%s is in no overlay, migration pair or test: list it in a kustomization.yaml (or remove it)", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"trainer/clustertrainingruntime-openmpi.yaml", "mpi-operator/mpijob-openmpi.yaml", "networkpolicy/networkpolicy.yaml"} {
		if _, ok := covered[want]; !ok {
			t.Errorf("examples/%s is not reached from any overlay", want)
		}
	}
}

// TestOverlaysRender: each overlay kustomize builds holds what its name
// promises.
func TestOverlaysRender(t *testing.T) {
	want := map[string][]string{
		"overlays/trainer":                   {"ClusterTrainingRuntime", "TrainJob", "NetworkPolicy", "Role", "RoleBinding"},
		"overlays/mpi-operator":              {"MPIJob", "NetworkPolicy", "Role", "RoleBinding"},
		"overlays/openshift":                 {"ClusterTrainingRuntime", "TrainJob", "MPIJob", "NetworkPolicy", "Role", "RoleBinding"},
		"overlays/monitoring":                {"PodMonitor", "PrometheusRule", "ConfigMap"},
		"overlays/monitoring-servicemonitor": {"ServiceMonitor", "Service", "PrometheusRule", "ConfigMap"},
	}
	for _, dir := range overlays(t) {
		docs, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, d := range docs {
			kinds[d.GVK.Kind]++
		}
		w, ok := want[filepath.ToSlash(dir)]
		if !ok {
			t.Errorf("%s: a new overlay: add what it must hold to this test", dir)
			continue
		}
		for _, k := range w {
			if kinds[k] == 0 {
				t.Errorf("%s renders no %s (has %v)", dir, k, kinds)
			}
		}
		if kinds["NetworkPolicy"] != 2 && !isMonitoring(dir) {
			t.Errorf("%s renders %d NetworkPolicies, want the namespace-wide policy and the launcher's to Trainer", dir, kinds["NetworkPolicy"])
		}
		t.Logf("%s: %v", dir, kinds)
	}
	for d := range want {
		if !slices.Contains(overlays(t), filepath.FromSlash(d)) {
			t.Errorf("overlay %s is missing", d)
		}
	}
}

// TestKubectlKustomizeAgrees: "kubectl kustomize", what users run, renders
// every overlay to the same objects as the kustomize Go API the other tests
// use. Skipped when kubectl is not installed.
func TestKubectlKustomizeAgrees(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: the kustomize Go API alone renders the overlays")
	}
	for _, dir := range overlays(t) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, kubectl, "kustomize", dir).Output()
		cancel()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		var theirs []document
		for i, raw := range splitYAML(out) {
			d, err := parseDocument(dir, i, raw)
			if err != nil {
				t.Fatal(err)
			}
			theirs = append(theirs, d)
		}
		ours, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		a, b := objectsByKey(ours), objectsByKey(theirs)
		for k, v := range a {
			if b[k] != v {
				t.Errorf("%s: %s differs between the kustomize Go API and kubectl kustomize", dir, k)
			}
		}
		if len(a) != len(b) {
			t.Errorf("%s: %d objects from the Go API, %d from kubectl kustomize", dir, len(a), len(b))
		}
	}
}
