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

// The manifests live in two trees: deploy/ installs podmpi (kustomize bases
// and Components; charts/podmpi renders the same files with Helm), and
// examples/ holds the samples (a TrainJob, MPIJobs, the migration pairs, the
// compose file). Paths below are relative to examples/, where the tests run.
const (
	// deployDir holds the install manifests.
	deployDir = "../deploy"
	// migrationDir holds the MPIJob -> TrainJob migration pairs, one
	// directory per pair, plain manifests (no kustomization).
	migrationDir = "migration"
	// componentsDir holds the Components the entry points of deploy/ are
	// made of; nothing outside deploy/ names them but the samples.
	componentsDir = deployDir + "/components"
)

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

// manifestSet is what one "kubectl apply" (or helm install) creates: the
// rendered objects of a kustomization, of an MPIJob Component applied to the
// sample MPIJobs, of the chart with some values, or the files of one
// migration pair.
type manifestSet struct {
	Name string // repository-relative: "deploy/runtimes", "examples/migration/openmpi"
	Docs []document
}

// repoName is a path relative to examples/ as the repository names it.
func repoName(path string) string {
	p := filepath.ToSlash(filepath.Clean(path))
	if rest, ok := strings.CutPrefix(p, "../"); ok {
		return rest
	}
	return "examples/" + p
}

// isMigration reports whether a set is a migration pair: plain manifests
// that mirror an MPIJob, with podmpi's images in them (they carry no init
// container and no fixed UID; docs/migration.md shows that change).
func (s manifestSet) isMigration() bool {
	return strings.HasPrefix(s.Name, "examples/"+migrationDir+"/")
}

// isMigrationDoc reports whether d was read from a migration pair.
func isMigrationDoc(d document) bool {
	return strings.HasPrefix(filepath.ToSlash(d.File), migrationDir+"/")
}

// runtimes returns the names of the (Cluster)TrainingRuntimes in the set,
// which TrainJobs may reference.
func (s manifestSet) runtimes() map[string]bool {
	r := map[string]bool{}
	for _, d := range s.Docs {
		if d.GVK.APIVersion == "trainer.kubeflow.org/v1alpha1" && (d.GVK.Kind == "ClusterTrainingRuntime" || d.GVK.Kind == "TrainingRuntime") {
			r[d.Name] = true
		}
	}
	return r
}

// kustomization is the part of a kustomization.yaml the tests read.
type kustomization struct {
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Components []string `json:"components"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches"`
	Configurations []string `json:"configurations"`
	Labels         []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
}

// isComponent reports whether k is a kustomize Component (built only as a
// part of a kustomization that includes it).
func (k kustomization) isComponent() bool { return k.Kind == "Component" }

// paths returns every file or folder k names, relative to its folder.
func (k kustomization) paths() []string {
	out := slices.Concat(k.Resources, k.Components, k.Configurations)
	for _, p := range k.Patches {
		if p.Path != "" {
			out = append(out, p.Path)
		}
	}
	return out
}

func readKustomization(t testing.TB, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := strictYAML(b, &k); err != nil {
		// Fields the tests do not read (apiVersion, replacements, ...) are fine.
		if !strings.Contains(err.Error(), "unknown field") {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
	}
	return k
}

// kustomizationDirs returns every folder under root that holds a
// kustomization.yaml (testdata and compose have none).
func kustomizationDirs(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && e.Name() == "kustomization.yaml" {
			out = append(out, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// kustomizations returns the folders under root whose kustomization.yaml is
// a Kustomization (what kubectl apply -k takes).
func kustomizations(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	for _, d := range kustomizationDirs(t, root) {
		if !readKustomization(t, d).isComponent() {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no kustomizations under %s", root)
	}
	return out
}

// mpiJobComponents are the Components of deploy/ a user includes beside
// their MPIJobs (every Component outside deploy/components).
func mpiJobComponents(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, d := range kustomizationDirs(t, deployDir) {
		if readKustomization(t, d).isComponent() && !strings.HasPrefix(filepath.ToSlash(d), componentsDir+"/") {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no MPIJob Components under %s", deployDir)
	}
	return out
}

// sampleMPIJobs are the sample MPIJobs the MPIJob Components are tried on.
const sampleMPIJobs = "mpi-operator"

var (
	renderMu    sync.Mutex
	renderCache = map[string][]document{}
)

// render runs kustomize (the Go API kubectl kustomize embeds) on dir and
// returns the objects as documents named after dir. Renders of the
// repository's own folders are cached: the files do not change during a run.
func render(dir string) ([]document, error) {
	cache := !filepath.IsAbs(dir)
	if cache {
		renderMu.Lock()
		docs, ok := renderCache[dir]
		renderMu.Unlock()
		if ok {
			return slices.Clone(docs), nil
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	docs, err := parseStream(repoName(dir), out)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no objects", dir)
	}
	if cache {
		renderMu.Lock()
		renderCache[dir] = docs
		renderMu.Unlock()
	}
	return slices.Clone(docs), nil
}

// parseStream parses a multi-document YAML stream; every document is named
// after name.
func parseStream(name string, b []byte) ([]document, error) {
	var docs []document
	for i, raw := range splitYAML(b) {
		d, err := parseDocument(name, i, raw)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// overlayOf writes a kustomization into a new temporary folder that holds
// resources (paths relative to examples/, made relative to the folder:
// kustomize wants relative ones), the given components and the extra YAML
// lines, and returns the folder.
func overlayOf(t testing.TB, resources, components []string, extra string) string {
	t.Helper()
	tmp := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(tmp, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if len(resources) > 0 {
		b.WriteString("resources:\n")
		for _, r := range resources {
			fmt.Fprintf(&b, "  - %s\n", rel(r))
		}
	}
	if len(components) > 0 {
		b.WriteString("components:\n")
		for _, c := range components {
			fmt.Fprintf(&b, "  - %s\n", rel(c))
		}
	}
	b.WriteString(extra)
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// renderComponent applies an MPIJob Component of deploy/ to the sample
// MPIJobs (the files of examples/mpi-operator, copied beside a kustomization
// that includes only it, and the extra lines) and returns the objects.
func renderComponent(t testing.TB, component, extra string) []document {
	t.Helper()
	k := readKustomization(t, sampleMPIJobs)
	dir := overlayOf(t, nil, []string{component}, extra)
	var res strings.Builder
	res.WriteString("resources:\n")
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(sampleMPIJobs, r))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, r), b, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&res, "  - %s\n", r)
	}
	f, err := os.OpenFile(filepath.Join(dir, "kustomization.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(res.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	docs, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		docs[i].File = repoName(component) + " on examples/" + sampleMPIJobs
	}
	return docs
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

// loadManifestSets renders every kustomization of deploy/ and examples/,
// every MPIJob Component of deploy/ on the sample MPIJobs, and reads every
// migration pair. (The chart's renders are helm_test.go's.)
func loadManifestSets(t testing.TB) []manifestSet {
	t.Helper()
	var sets []manifestSet
	for _, dir := range slices.Concat(kustomizations(t, deployDir), kustomizations(t, ".")) {
		docs, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, manifestSet{Name: repoName(dir), Docs: docs})
	}
	for _, c := range mpiJobComponents(t) {
		sets = append(sets, manifestSet{Name: repoName(c) + " on examples/" + sampleMPIJobs, Docs: renderComponent(t, c, "")})
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
		sets = append(sets, manifestSet{Name: repoName(dir), Docs: docs})
	}
	return sets
}

// setNamed returns the set of that name.
func setNamed(t testing.TB, sets []manifestSet, name string) manifestSet {
	t.Helper()
	for _, s := range sets {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no manifest set %s", name)
	return manifestSet{}
}

// allRuntimes is every runtime any set installs: the ones a TrainJob of any
// set may reference.
func allRuntimes(sets []manifestSet) map[string]bool {
	r := map[string]bool{}
	for _, s := range sets {
		for n := range s.runtimes() {
			r[n] = true
		}
	}
	return r
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

// TestEveryManifestIsChecked: every YAML file under examples/ and deploy/ is
// reached by a check: a file a kustomization or Component names (resources,
// patches, configurations), a migration pair, the compose file or the
// test's CRDs. A file outside these would ship unvalidated.
func TestEveryManifestIsChecked(t *testing.T) {
	covered := map[string]string{}
	var visit func(dir, via string)
	visit = func(dir, via string) {
		dir = filepath.Clean(dir)
		if _, seen := covered[filepath.Join(dir, "kustomization.yaml")]; seen {
			return
		}
		covered[filepath.Join(dir, "kustomization.yaml")] = via
		for _, r := range readKustomization(t, dir).paths() {
			p := filepath.Clean(filepath.Join(dir, r))
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				visit(p, via)
				continue
			}
			covered[p] = via
		}
	}
	for _, d := range slices.Concat(kustomizations(t, deployDir), kustomizations(t, "."), mpiJobComponents(t)) {
		visit(d, d)
	}
	for _, root := range []string{".", deployDir} {
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (path == "testdata" || path == "compose") {
				return fs.SkipDir
			}
			if e.IsDir() && path == filepath.Join(deployDir, "monitoring", "base", "tests") {
				return fs.SkipDir // promtool's rule tests, run by TestMonitoringRules
			}
			if e.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				return nil
			}
			if strings.HasPrefix(path, migrationDir+string(filepath.Separator)) && strings.Count(path, string(filepath.Separator)) == 2 {
				return nil // a migration pair's manifest
			}
			if _, ok := covered[path]; !ok {
				t.Errorf("%s is in no kustomization, migration pair or test: list it in a kustomization.yaml (or remove it)", repoName(path))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"../deploy/runtimes/clustertrainingruntime-openmpi.yaml", "mpi-operator/mpijob-openmpi.yaml",
		"../deploy/networkpolicy/networkpolicy.yaml", "trainer/trainjob-allreduce.yaml"} {
		if _, ok := covered[filepath.Clean(want)]; !ok {
			t.Errorf("%s is not reached from any kustomization", repoName(want))
		}
	}
}

// TestSetsRender: each kustomization (and each MPIJob Component on the
// sample MPIJobs) renders what its name promises, and nothing of what it
// must leave to another one.
func TestSetsRender(t *testing.T) {
	type want struct{ has, hasNot []string }
	install := []string{"TrainJob", "MPIJob"} // no install base starts a job
	wants := map[string]want{
		"deploy/runtimes":                                           {[]string{"ClusterTrainingRuntime"}, slices.Concat(install, []string{"NetworkPolicy", "Role"})},
		"deploy/openshift/runtimes":                                 {[]string{"ClusterTrainingRuntime"}, slices.Concat(install, []string{"NetworkPolicy", "Role"})},
		"deploy/image-volume/runtimes":                              {[]string{"ClusterTrainingRuntime"}, slices.Concat(install, []string{"NetworkPolicy", "Role"})},
		"deploy/namespace":                                          {[]string{"NetworkPolicy", "Role", "RoleBinding"}, slices.Concat(install, []string{"ClusterTrainingRuntime"})},
		"deploy/rbac":                                               {[]string{"Role", "RoleBinding"}, slices.Concat(install, []string{"ClusterTrainingRuntime", "NetworkPolicy"})},
		"deploy/networkpolicy":                                      {[]string{"NetworkPolicy"}, slices.Concat(install, []string{"ClusterTrainingRuntime", "Role"})},
		"deploy/monitoring/base":                                    {[]string{"PrometheusRule", "ConfigMap"}, slices.Concat(install, []string{"PodMonitor", "ServiceMonitor"})},
		"deploy/monitoring/podmonitor":                              {[]string{"PodMonitor", "PrometheusRule", "ConfigMap"}, slices.Concat(install, []string{"ServiceMonitor"})},
		"deploy/monitoring/servicemonitor":                          {[]string{"ServiceMonitor", "Service", "PrometheusRule", "ConfigMap"}, slices.Concat(install, []string{"PodMonitor"})},
		"examples/trainer":                                          {[]string{"TrainJob"}, []string{"ClusterTrainingRuntime", "NetworkPolicy", "Role"}},
		"examples/mpi-operator":                                     {[]string{"MPIJob"}, []string{"ClusterTrainingRuntime", "NetworkPolicy", "Role"}},
		"examples/openshift":                                        {[]string{"MPIJob"}, []string{"ClusterTrainingRuntime", "NetworkPolicy", "Role"}},
		"deploy/mpi-operator on examples/mpi-operator":              {[]string{"MPIJob"}, []string{"PodmpiValues"}},
		"deploy/openshift/mpi-operator on examples/mpi-operator":    {[]string{"MPIJob"}, []string{"PodmpiValues"}},
		"deploy/image-volume/mpi-operator on examples/mpi-operator": {[]string{"MPIJob"}, []string{"PodmpiValues"}},
	}
	seen := map[string]bool{}
	for _, set := range loadManifestSets(t) {
		if set.isMigration() {
			continue
		}
		seen[set.Name] = true
		kinds := map[string]int{}
		for _, d := range set.Docs {
			kinds[d.GVK.Kind]++
		}
		w, ok := wants[set.Name]
		if !ok {
			t.Errorf("%s: a new kustomization or Component: add what it must hold to this test", set.Name)
			continue
		}
		for _, k := range w.has {
			if kinds[k] == 0 {
				t.Errorf("%s renders no %s (has %v)", set.Name, k, kinds)
			}
		}
		for _, k := range w.hasNot {
			if kinds[k] > 0 {
				t.Errorf("%s renders %d %s, which is not its business (has %v)", set.Name, kinds[k], k, kinds)
			}
		}
		t.Logf("%s: %v", set.Name, kinds)
	}
	for name := range wants {
		if !seen[name] {
			t.Errorf("%s is missing", name)
		}
	}
}

// TestKubectlKustomizeAgrees: "kubectl kustomize", what users run, renders
// every kustomization to the same objects as the kustomize Go API the other
// tests use. Skipped when kubectl is not installed.
func TestKubectlKustomizeAgrees(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: the kustomize Go API alone renders the kustomizations")
	}
	for _, dir := range slices.Concat(kustomizations(t, deployDir), kustomizations(t, ".")) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, kubectl, "kustomize", dir).Output()
		cancel()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		theirs, err := parseStream(repoName(dir), out)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		a, b := objectsByKey(ours), objectsByKey(theirs)
		for k, v := range a {
			if b[k] != v {
				t.Errorf("%s: %s differs between the kustomize Go API and kubectl kustomize", repoName(dir), k)
			}
		}
		if len(a) != len(b) {
			t.Errorf("%s: %d objects from the Go API, %d from kubectl kustomize", repoName(dir), len(a), len(b))
		}
	}
}
