package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/podmpi/podmpi/test/cluster"
)

// The install manifests and the Helm chart, as a user installs them.
const (
	runtimesBase  = "deploy/runtimes"     // the cluster-scoped runtimes (kustomize)
	namespaceBase = "deploy/namespace"    // what each namespace that runs jobs gets
	mpiComponent  = "deploy/mpi-operator" // the Component an MPIJob's kustomization includes
	chartDir      = "charts/podmpi"
	helmRelease   = "podmpi"
)

// partOf selects what podmpi's install manifests label as theirs.
const partOf = "app.kubernetes.io/part-of=podmpi"

// TestInstall installs podmpi into the cluster the two ways a user does,
// with the images make release pushed into the cluster's registry, runs a
// job on what each installed, and uninstalls it:
//
//   - kustomize: deploy/runtimes under a kustomization of the test's own
//     that names the registry and tag (kustomize's images list, as
//     deploy/components/images says to do), deploy/namespace into the job's
//     namespace, and an MPIJob whose kustomization includes
//     deploy/mpi-operator; kubectl delete of the same removes them;
//   - helm: helm install charts/podmpi with image.registry and image.tag,
//     a TrainJob, helm upgrade to another tag of the same release, a
//     TrainJob on it, helm uninstall.
//
// Every job completes on images the node pulled from the registry (their
// references name it, their image IDs are its digests). After each
// uninstall nothing of the install is left: every object it made is gone,
// and no object of any listable kind, cluster-scoped or in the job's
// namespace, carries its labels (the same sweep, before the uninstall,
// finds every object it made: it can fail). The runtimes make cluster-up
// installed have the names the install makes: they are set aside while
// this runs and put back after.
func TestInstall(t *testing.T) {
	need(t)
	for _, p := range []string{runtimesBase, namespaceBase, mpiComponent, chartDir} {
		if _, err := os.Stat(filepath.Join(e.repo, p)); err != nil {
			t.Skipf("no %s in this tree: the install manifests and the chart are not here (%v)", p, err)
		}
	}
	if e.info.ImageTag == "" || e.info.Registry == "" {
		t.Skip("the cluster runs no podmpi images (podmpi-cluster up --no-images)")
	}
	// helm, which make cluster-test's up leaves to the build behind the
	// tests: built, or waited for, here.
	tool(t, "build")
	setAsideRuntimes(t)
	t.Run("kustomize", installKustomize)
	t.Run("helm", installHelm)
}

// registryPrefix is image.registry: where make release put the images.
func registryPrefix() string { return e.info.Registry + "/" + cluster.RegistryPrefix }

// setAsideRuntimes deletes the podmpi runtimes make cluster-up installed
// and puts them back when the test ends.
func setAsideRuntimes(t *testing.T) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	for _, f := range cluster.RuntimeFiles {
		for _, o := range readObjects(t, f) {
			if o.GetKind() != "ClusterTrainingRuntime" {
				continue
			}
			if _, err := kubectl(ctx, nil, "delete", "clustertrainingruntimes.trainer.kubeflow.org", o.GetName(), "--ignore-not-found", "--wait"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { installRuntimes(t, nil) })
}

// installNamespace is a namespace under the restricted Pod Security
// Standard without the shipped NetworkPolicies (the install brings them):
// only this cluster's stand-ins for the DNS and Trainer pods it runs on the
// node instead (see nodeDNSPolicy).
func installNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := namespace(t, prefix, false)
	args := []string{"label", "namespace", ns}
	for _, mode := range []string{"enforce", "audit", "warn"} {
		args = append(args, "pod-security.kubernetes.io/"+mode+"=restricted", "pod-security.kubernetes.io/"+mode+"-version=latest")
	}
	if _, err := kubectl(ctxT(t, time.Minute), nil, args...); err != nil {
		t.Fatal(err)
	}
	apply(t, ns, nodeDNSPolicy(), nodeTrainerStatusPolicy())
	return ns
}

// objRef names one object an install made.
type objRef struct{ kind, ns, name string }

func (o objRef) String() string {
	if o.ns == "" {
		return o.kind + "/" + o.name
	}
	return o.kind + " " + o.ns + "/" + o.name
}

// refsOf names the objects of a rendered install; namespaced ones without
// a namespace go to ns.
func refsOf(objs []*unstructured.Unstructured, ns string) []objRef {
	var out []objRef
	for _, o := range objs {
		r := objRef{kind: o.GetKind(), ns: o.GetNamespace(), name: o.GetName()}
		if gv := o.GetAPIVersion(); strings.Contains(gv, "/") {
			r.kind += "." + strings.Split(gv, "/")[0]
		}
		if r.ns == "" && !clusterScoped(o.GetKind()) {
			r.ns = ns
		}
		out = append(out, r)
	}
	return out
}

// clusterScoped: the cluster-scoped kinds an install may make.
func clusterScoped(kind string) bool {
	return slices.Contains([]string{"ClusterTrainingRuntime", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
		"Namespace", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass"}, kind)
}

// exists reports whether the object is in the cluster.
func exists(t *testing.T, r objRef) bool {
	t.Helper()
	args := []string{"get", r.kind, r.name, "--ignore-not-found", "-o", "name"}
	if r.ns != "" {
		args = append(args, "-n", r.ns)
	}
	out, err := kubectl(ctxT(t, time.Minute), nil, args...)
	if err != nil {
		t.Fatalf("%s: %v", r, err)
	}
	return strings.TrimSpace(out) != ""
}

// labelled lists every object, of every listable kind, cluster-scoped or
// in ns, that selector selects.
func labelled(t *testing.T, ns, selector string) []string {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	var found []string
	for _, namespaced := range []bool{false, true} {
		out, err := kubectl(ctx, nil, "api-resources", "--verbs=list", fmt.Sprintf("--namespaced=%t", namespaced), "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, k := range strings.Fields(out) {
			// Events name objects, they are not made by the install.
			if k != "events" && k != "events.events.k8s.io" {
				kinds = append(kinds, k)
			}
		}
		args := []string{"get", strings.Join(kinds, ","), "-l", selector, "-o", "name", "--ignore-not-found"}
		if namespaced {
			args = append(args, "-n", ns)
		}
		out, err = kubectl(ctx, nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Fields(out) {
			if namespaced {
				l = ns + " " + l
			}
			found = append(found, l)
		}
	}
	sort.Strings(found)
	return found
}

// checkInstalled fails unless every object of refs exists and the sweep by
// selector finds at least as many (the sweep sees what it must not find
// after the uninstall).
func checkInstalled(t *testing.T, refs []objRef, ns, selector string) {
	t.Helper()
	for _, r := range refs {
		if !exists(t, r) {
			t.Errorf("installed, but not in the cluster: %s", r)
		}
	}
	if got := labelled(t, ns, selector); len(got) < len(refs) {
		t.Errorf("%d objects carry %s, fewer than the %d installed: the check after the uninstall could miss what is left; found %v, installed %v",
			len(got), selector, len(refs), got, refs)
	}
}

// checkUninstalled fails if any object of refs, or anything carrying
// selector, is still there.
func checkUninstalled(t *testing.T, refs []objRef, ns, selector string) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(time.Minute)
	for {
		left = nil
		for _, r := range refs {
			if exists(t, r) {
				left = append(left, r.String())
			}
		}
		left = append(left, labelled(t, ns, selector)...)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if len(left) > 0 {
		t.Errorf("left after the uninstall (a minute later):\n  %s", strings.Join(left, "\n  "))
	}
}

// checkPulled fails unless every container of the pods runs an image of
// the cluster's registry, pulled from it (its image ID is the registry's
// digest of it), with tag.
func checkPulled(t *testing.T, pods []corev1.Pod, tag string) {
	t.Helper()
	if len(pods) == 0 {
		t.Fatal("no pods to check the images of")
	}
	for _, p := range pods {
		var specs []corev1.Container
		specs = append(specs, p.Spec.InitContainers...)
		specs = append(specs, p.Spec.Containers...)
		for _, c := range specs {
			if !strings.HasPrefix(c.Image, registryPrefix()+"/") || !strings.HasSuffix(c.Image, ":"+tag) {
				t.Errorf("pod %s container %s runs %s, not an image of %s with tag %s", p.Name, c.Name, c.Image, registryPrefix(), tag)
			}
		}
		var sts []corev1.ContainerStatus
		sts = append(sts, p.Status.InitContainerStatuses...)
		sts = append(sts, p.Status.ContainerStatuses...)
		for _, st := range sts {
			if !strings.HasPrefix(st.ImageID, registryPrefix()+"/") || !strings.Contains(st.ImageID, "@sha256:") {
				t.Errorf("pod %s container %s: image ID %q is not a digest in %s", p.Name, st.Name, st.ImageID, registryPrefix())
			}
		}
	}
}

// imagesIn lists every image reference of objs (containers, init
// containers, image volumes).
func imagesIn(objs []*unstructured.Unstructured) []string {
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				if s, ok := y.(string); ok && (k == "image" || k == "reference") && s != "" {
					seen[s] = true
				}
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	for _, o := range objs {
		walk(o.Object)
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// kustomization writes dir/kustomization.yaml: resources and components
// (paths, made relative to dir), and every image of images moved to the
// cluster's registry with tag, as a user's kustomization names their
// registry.
func kustomization(t *testing.T, dir string, resources, components, images []string, tag string) {
	t.Helper()
	rel := func(ps []string) []any {
		var out []any
		for _, p := range ps {
			r, err := filepath.Rel(dir, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	k := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": rel(resources)}
	if len(components) > 0 {
		k["components"] = rel(components)
	}
	var imgs []any
	for _, ref := range images {
		name := ref
		if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
			name = ref[:i]
		}
		imgs = append(imgs, map[string]any{"name": name, "newName": registryPrefix() + "/" + name[strings.LastIndex(name, "/")+1:], "newTag": tag})
	}
	if len(imgs) > 0 {
		k["images"] = imgs
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// render is kubectl kustomize of dir.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := kubectl(ctxT(t, time.Minute), nil, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, "kubectl kustomize "+dir, out)
}

// runtimeNamed picks the ClusterTrainingRuntime of objs whose name has mpi.
func runtimeNamed(t *testing.T, objs []*unstructured.Unstructured, mpi string) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ClusterTrainingRuntime" && strings.Contains(o.GetName(), mpi) {
			return o.GetName()
		}
	}
	t.Fatalf("no ClusterTrainingRuntime for %s among what was installed", mpi)
	return ""
}

// installedJob runs the example TrainJob on runtime rt in ns and checks it
// ran from the registry's images of tag.
func installedJob(t *testing.T, ns, rt, tag string) {
	t.Helper()
	r := runTrainJob(t, ns, trainJob(t, rt), 4*time.Minute)
	checkTrainJob(t, ns, r, 3, 6)
	checkPulled(t, append(r.launchers, r.nodes...), tag)
}

func installKustomize(t *testing.T) {
	tag := e.info.ImageTag
	ns := installNamespace(t, "install-kustomize")
	// The runtimes, with the registry named in the user's own kustomization.
	dir := t.TempDir()
	kustomization(t, dir, []string{filepath.Join(e.repo, runtimesBase)}, nil, imagesIn(render(t, filepath.Join(e.repo, runtimesBase))), tag)
	runtimes := render(t, dir)
	if imgs := imagesIn(runtimes); len(imgs) == 0 {
		t.Fatalf("%s names no image", runtimesBase)
	}
	for _, img := range imagesIn(runtimes) {
		if !strings.HasPrefix(img, registryPrefix()+"/") {
			t.Errorf("the kustomization's images list left %s unmoved: the runtimes would pull it from elsewhere", img)
		}
	}
	ctx := ctxT(t, 3*time.Minute)
	if _, err := kubectl(ctx, nil, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl(ctx, nil, "apply", "-n", ns, "-k", filepath.Join(e.repo, namespaceBase)); err != nil {
		t.Fatal(err)
	}
	refs := append(refsOf(runtimes, ns), refsOf(render(t, filepath.Join(e.repo, namespaceBase)), ns)...)
	checkInstalled(t, refs, ns, partOf)

	t.Run("trainjob", func(t *testing.T) { installedJob(t, ns, runtimeNamed(t, runtimes, "openmpi"), tag) })
	t.Run("mpijob", func(t *testing.T) {
		// An MPIJob in a kustomization of its own that includes the
		// Component, as a user's kustomization does.
		jdir := t.TempDir()
		job := mpiJob(t, "openmpi", nil)
		b, err := yaml.Marshal(job.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(jdir, "mpijob.yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		kustomization(t, jdir, []string{filepath.Join(jdir, "mpijob.yaml")}, []string{filepath.Join(e.repo, mpiComponent)}, nil, tag)
		objs := render(t, jdir)
		kustomization(t, jdir, []string{filepath.Join(jdir, "mpijob.yaml")}, []string{filepath.Join(e.repo, mpiComponent)}, imagesIn(objs), tag)
		objs = render(t, jdir)
		if len(objs) != 1 || objs[0].GetKind() != "MPIJob" {
			t.Fatalf("kustomize with %s made %d objects, want the one MPIJob", mpiComponent, len(objs))
		}
		r := runMPIJobOnce(t, ns, func() *unstructured.Unstructured { return objs[0] })
		if !r.ok {
			t.Fatalf("MPIJob %s: %s; launcher log:\n%s", r.name, r.message, lastLines(r.log, 40))
		}
		checkRanks(t, r.log, 4)
		pods, err := podsWith(ctxT(t, time.Minute), ns, "training.kubeflow.org/job-name="+r.name)
		if err != nil {
			t.Fatal(err)
		}
		checkPulled(t, pods, tag)
		_ = e.dyn.Resource(mpiJobGVR).Namespace(ns).Delete(context.Background(), r.name, metav1.DeleteOptions{})
	})

	// The uninstall a user runs: the same kustomizations, deleted.
	if _, err := kubectl(ctx, nil, "delete", "-n", ns, "-k", filepath.Join(e.repo, namespaceBase), "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl(ctx, nil, "delete", "-k", dir, "--wait"); err != nil {
		t.Fatal(err)
	}
	checkUninstalled(t, refs, ns, partOf)
}

// helmCmd runs the cluster's helm against the cluster, with its own
// configuration and cache folders (nothing of it stays on the machine).
func helmCmd(t *testing.T, home string, args ...string) string {
	t.Helper()
	if e.info.Helm == "" {
		t.Fatal("cluster.json names no helm (make cluster-up builds it)")
	}
	ctx := ctxT(t, 5*time.Minute)
	cmd := exec.CommandContext(ctx, e.info.Helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.info.Kubeconfig, "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	t.Logf("helm %s (%s)", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
	return out.String()
}

// helmManifest is what the release installed (helm get manifest).
func helmManifest(t *testing.T, home, ns string) []*unstructured.Unstructured {
	t.Helper()
	objs := parseObjects(t, "helm get manifest", helmCmd(t, home, "get", "manifest", helmRelease, "-n", ns))
	if len(objs) == 0 {
		t.Fatalf("helm get manifest %s: no objects", helmRelease)
	}
	return objs
}

// retag gives the registry's image name:from the tag to as well (its
// manifest or manifest list put again under to): another release of the
// same images, for an upgrade.
func retag(t *testing.T, name, from, to string) {
	t.Helper()
	base := "http://" + e.info.Registry + "/v2/" + cluster.RegistryPrefix + "/" + name + "/manifests/"
	req, _ := http.NewRequest(http.MethodGet, base+from, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "+
		"application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s: %s", base, from, resp.Status, body)
	}
	put, _ := http.NewRequest(http.MethodPut, base+to, bytes.NewReader(body))
	put.Header.Set("Content-Type", resp.Header.Get("Content-Type"))
	resp, err = http.DefaultClient.Do(put)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s%s: %s: %s", base, to, resp.Status, b)
	}
}

// helmSelector selects what the chart made for the release.
const helmSelector = "app.kubernetes.io/instance=" + helmRelease

func installHelm(t *testing.T) {
	tag := e.info.ImageTag
	home := t.TempDir()
	ns := installNamespace(t, "install-helm")
	chart := filepath.Join(e.repo, chartDir)
	helmCmd(t, home, "install", helmRelease, chart, "-n", ns, "--set", "image.registry="+registryPrefix(), "--set", "image.tag="+tag, "--wait", "--timeout", "3m")
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_ = exec.Command(e.info.Helm, "uninstall", helmRelease, "-n", ns, "--kubeconfig", e.info.Kubeconfig).Run()
		}
	})
	first := helmManifest(t, home, ns)
	for _, img := range imagesIn(first) {
		if !strings.HasPrefix(img, registryPrefix()+"/") || !strings.HasSuffix(img, ":"+tag) {
			t.Errorf("the chart with image.registry=%s image.tag=%s names %s", registryPrefix(), tag, img)
		}
	}
	refs := refsOf(first, ns)
	checkInstalled(t, refs, ns, helmSelector)
	t.Run("trainjob", func(t *testing.T) { installedJob(t, ns, runtimeNamed(t, first, "openmpi"), tag) })

	// An upgrade to another tag (the same images under a second tag in
	// the registry, as a new release would be).
	tag2 := tag + "-upgrade"
	names := map[string]bool{}
	for _, img := range imagesIn(first) {
		name := strings.TrimPrefix(img, registryPrefix()+"/")
		names[name[:strings.LastIndex(name, ":")]] = true
	}
	for name := range names {
		retag(t, name, tag, tag2)
	}
	helmCmd(t, home, "upgrade", helmRelease, chart, "-n", ns, "--reuse-values", "--set", "image.tag="+tag2, "--wait", "--timeout", "3m")
	second := helmManifest(t, home, ns)
	for _, img := range imagesIn(second) {
		if !strings.HasSuffix(img, ":"+tag2) {
			t.Errorf("after helm upgrade --set image.tag=%s the chart names %s", tag2, img)
		}
	}
	for _, o := range second {
		if o.GetKind() != "ClusterTrainingRuntime" {
			continue
		}
		live, err := kubectl(ctxT(t, time.Minute), nil, "get", "clustertrainingruntimes.trainer.kubeflow.org", o.GetName(), "-o", "yaml")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(live, ":"+tag2) || strings.Contains(live, ":"+tag+"\n") {
			t.Errorf("after the upgrade the runtime %s in the cluster does not name the tag %s only", o.GetName(), tag2)
		}
	}
	refs2 := refsOf(second, ns)
	t.Run("trainjob-after-upgrade", func(t *testing.T) { installedJob(t, ns, runtimeNamed(t, second, "mpich"), tag2) })

	checkInstalled(t, refs2, ns, helmSelector)
	helmCmd(t, home, "uninstall", helmRelease, "-n", ns, "--wait", "--timeout", "3m")
	uninstalled = true
	checkUninstalled(t, append(refs, refs2...), ns, helmSelector)
	// Nor helm's own record of the release.
	if out, err := kubectl(ctxT(t, time.Minute), nil, "get", "secrets", "-n", ns, "-l", "owner=helm,name="+helmRelease, "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("helm's release record is left after the uninstall: %q %v", out, err)
	}
}
