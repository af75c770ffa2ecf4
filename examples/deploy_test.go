package examples

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// deploy/ is what users install, from a checkout or remotely
// (kubectl apply -k "github.com/podmpi/podmpi/deploy/<x>?ref=<tag>", which
// kustomize fetches whole and builds in place): its kustomizations may name
// only relative paths that stay inside deploy/.

// clusterScoped are the kinds deploy/ may create outside a namespace.
var clusterScoped = map[string]bool{"ClusterTrainingRuntime": true, "ClusterRole": true, "ClusterRoleBinding": true, "Namespace": true}

// deployPathProblems checks the paths the kustomization in dir names:
// relative, no URL, and inside root once resolved.
func deployPathProblems(t testing.TB, dir, root string) []string {
	t.Helper()
	var errs []string
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readKustomization(t, dir).paths() {
		where := repoName(dir) + "/kustomization.yaml: " + p
		switch {
		case strings.Contains(p, "://") || strings.HasPrefix(p, "github.com/") || strings.Contains(p, "?ref="):
			errs = append(errs, where+": a remote reference; deploy/ must build from its own files (a remote install fetches them at one tag)")
			continue
		case filepath.IsAbs(p):
			errs = append(errs, where+": an absolute path")
			continue
		}
		abs, err := filepath.Abs(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if rel, err := filepath.Rel(absRoot, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			errs = append(errs, where+": leaves deploy/")
		}
		if _, err := os.Stat(abs); err != nil {
			errs = append(errs, where+": "+err.Error())
		}
	}
	return errs
}

// TestDeploySelfContained: every kustomization and Component of deploy/
// names only relative paths inside deploy/, and a copy of deploy/ alone
// (what a remote install builds from, with nothing around it) renders every
// kustomization to the same objects as the checkout.
func TestDeploySelfContained(t *testing.T) {
	for _, dir := range kustomizationDirs(t, deployDir) {
		for _, e := range deployPathProblems(t, dir, deployDir) {
			t.Error(e)
		}
	}
	tmp := filepath.Join(t.TempDir(), "deploy")
	if err := os.CopyFS(tmp, os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	for _, dir := range kustomizations(t, deployDir) {
		rel, err := filepath.Rel(deployDir, dir)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := render(filepath.Join(tmp, rel))
		if err != nil {
			t.Errorf("%s does not build from a copy of deploy/ alone: %v", repoName(dir), err)
			continue
		}
		here, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		a, b := objectsByKey(here), objectsByKey(alone)
		for k, v := range a {
			if b[k] != v {
				t.Errorf("%s: %s differs when deploy/ is alone", repoName(dir), k)
			}
		}
		if len(a) != len(b) {
			t.Errorf("%s: %d objects in the checkout, %d from deploy/ alone", repoName(dir), len(a), len(b))
		}
	}
}

// TestDeployPathChecksReject proves deployPathProblems can fail.
func TestDeployPathChecksReject(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	k := "resources:\n  - github.com/podmpi/podmpi/deploy/rbac?ref=v0.1.0\n  - " + outside + "\n  - ../../" + filepath.Base(filepath.Dir(outside)) + "/elsewhere\n  - missing.yaml\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := deployPathProblems(t, dir, root)
	for _, want := range []string{"a remote reference", "an absolute path", "leaves deploy/", "missing.yaml: stat"} {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("want a problem containing %q, got %q", want, errs)
		}
	}
}

// TestDeployScope: the runtimes (cluster-scoped) and a namespace's parts
// never share a kustomization, so that installing into another namespace
// never applies the runtimes again; nothing of deploy/ names a namespace
// (kubectl apply -n chooses it); nothing starts a job.
func TestDeployScope(t *testing.T) {
	for _, dir := range kustomizations(t, deployDir) {
		docs, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		var cluster, namespaced []string
		for _, d := range docs {
			if clusterScoped[d.GVK.Kind] {
				cluster = append(cluster, d.GVK.Kind+"/"+d.Name)
			} else {
				namespaced = append(namespaced, d.GVK.Kind+"/"+d.Name)
			}
			if md, _ := d.Obj["metadata"].(map[string]any); md["namespace"] != nil {
				t.Errorf("%s: metadata.namespace %v: leave it to kubectl apply -n", d, md["namespace"])
			}
			if d.GVK.Kind == "TrainJob" || d.GVK.Kind == "MPIJob" || d.GVK.Kind == "Job" || d.GVK.Kind == "Pod" {
				t.Errorf("%s: deploy/ installs podmpi and starts no job: samples go to examples/", d)
			}
		}
		if len(cluster) > 0 && len(namespaced) > 0 {
			t.Errorf("%s mixes cluster-scoped %v with namespaced %v: applying it into a second namespace would apply the cluster's objects again",
				repoName(dir), cluster, namespaced)
		}
	}
}

// TestDeployLabels: every object deploy/ installs carries the
// app.kubernetes.io labels, its version the images' tag; the MPIJob
// Components add none of them to your MPIJobs.
func TestDeployLabels(t *testing.T) {
	tag := releaseTag(t)
	want := map[string]string{
		"app.kubernetes.io/name": "podmpi", "app.kubernetes.io/instance": "podmpi", "app.kubernetes.io/part-of": "podmpi",
		"app.kubernetes.io/managed-by": "kustomize", "app.kubernetes.io/version": tag,
	}
	components := map[string]bool{"runtime": true, "rbac": true, "networkpolicy": true, "monitoring": true}
	for _, dir := range kustomizations(t, deployDir) {
		docs, err := render(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			labels, _ := dig(d.Obj, "metadata", "labels").(map[string]any)
			for k, v := range want {
				if labels[k] != v {
					t.Errorf("%s: label %s %v, want %q", d, k, labels[k], v)
				}
			}
			if c, _ := labels["app.kubernetes.io/component"].(string); !components[c] {
				t.Errorf("%s: label app.kubernetes.io/component %q, want one of %v", d, c, sortedKeys(components))
			}
		}
	}
	for _, c := range mpiJobComponents(t) {
		for _, d := range renderComponent(t, c, "") {
			labels, _ := dig(d.Obj, "metadata", "labels").(map[string]any)
			for k := range labels {
				if strings.HasPrefix(k, "app.kubernetes.io/") {
					t.Errorf("%s: %s puts %s on your MPIJob: the MPIJob is yours, not podmpi's", d, repoName(c), k)
				}
			}
		}
	}
}

// TestMPIJobComponentKeepsYours: the Component adds podmpi to an MPIJob
// that has lists of its own (an init container, env, mounts, volumes) and
// one that has none, keeping everything of the MPIJob's, replacing only
// PATH; and leaves a non-MPIJob object alone.
func TestMPIJobComponentKeepsYours(t *testing.T) {
	dir := t.TempDir()
	const mpijob = `apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: mine
spec:
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          initContainers:
            - name: fetch-data
              image: registry.example.com/fetch:1
          containers:
            - name: launcher
              image: registry.example.com/train:2
              command: [launcher, --, mpirun, python3, train.py]
              env:
                - {name: EPOCHS, value: "3"}
                - {name: PATH, value: /usr/bin:/bin}
              volumeMounts:
                - {name: data, mountPath: /data}
            - name: sidecar
              image: registry.example.com/sidecar:1
          volumes:
            - {name: data, emptyDir: {}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: worker
              image: registry.example.com/train:2
              command: [worker-agent]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: untouched
data:
  a: b
`
	if err := os.WriteFile(filepath.Join(dir, "mine.yaml"), []byte(mpijob), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(deployDir + "/mpi-operator")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	k := "resources:\n  - mine.yaml\ncomponents:\n  - " + rel + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var job document
	for _, d := range docs {
		switch d.GVK.Kind {
		case "MPIJob":
			job = d
		case "ConfigMap":
			if canonical(d.Obj["data"]) != `{"a":"b"}` || dig(d.Obj, "metadata", "labels") != nil {
				t.Errorf("the Component changed a ConfigMap: %s", canonical(d.Obj))
			}
		}
	}
	pts, errs := podTemplates(job)
	if len(errs) > 0 || len(pts) != 2 {
		t.Fatalf("%d pod templates, %v", len(pts), errs)
	}
	names := func(l any, key string) []string {
		var out []string
		for _, x := range l.([]any) {
			out = append(out, dig(x, key).(string))
		}
		return out
	}
	launcher := dig(job.Obj, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec").(map[string]any)
	for _, tc := range []struct {
		what string
		got  []string
		want []string
	}{
		{"launcher init containers", names(launcher["initContainers"], "name"), []string{"fetch-data", "podmpi"}},
		{"launcher containers", names(launcher["containers"], "name"), []string{"launcher", "sidecar"}},
		{"launcher volumes", names(launcher["volumes"], "name"), []string{"data", "podmpi"}},
		{"launcher env", names(dig(launcher["containers"].([]any)[0], "env"), "name"), []string{"EPOCHS", "PATH"}},
		{"launcher mounts", names(dig(launcher["containers"].([]any)[0], "volumeMounts"), "mountPath"), []string{"/data", "/opt/podmpi"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	if dig(launcher["containers"].([]any)[1], "volumeMounts") != nil || dig(launcher["containers"].([]any)[1], "env") != nil {
		t.Errorf("the Component changed the second container: %s", canonical(launcher["containers"].([]any)[1]))
	}
	for _, p := range pts {
		for _, e := range checkBringsPodmpi(p) {
			t.Error(e)
		}
		for _, e := range checkRunAs(p) {
			t.Error(e)
		}
		want := map[string][]string{"launcher": {"launcher", "--", "mpirun", "python3", "train.py"}, "worker": {"worker-agent"}}[p.Role]
		if c := p.Spec.Spec.Containers[0]; !slices.Equal(c.Command, want) {
			t.Errorf("%s: the Component changed the command to %q, want %q as it was", p.Path, c.Command, want)
		}
	}

	// Included twice in one build, kustomize stops with a clear error.
	k2 := "resources:\n  - mine.yaml\ncomponents:\n  - " + rel + "\n  - " + rel + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k2), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := render(dir); err == nil || !strings.Contains(err.Error(), "already registered id") {
		t.Errorf("the Component twice: err %v, want kustomize's \"already registered id\"", err)
	}
}

// TestDeployHasNoStrayFiles: deploy/ holds manifests and kustomizations
// (and the monitoring pack's dashboard JSON and rule tests) only, since a
// remote install fetches it whole.
func TestDeployHasNoStrayFiles(t *testing.T) {
	err := filepath.WalkDir(deployDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".json", ".md":
			return nil
		}
		t.Errorf("%s: not a manifest: deploy/ holds what kustomize and the chart read", repoName(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
