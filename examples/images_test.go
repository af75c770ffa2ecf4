package examples

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// imagesComponent names every podmpi image, with its registry and tag, for
// every kustomization of deploy/ and examples/: the one place.
const imagesComponent = componentsDir + "/images"

// podmpiImages are the images podmpi releases and the install names: the
// binaries-only one and one per MPI.
var podmpiImages = []string{"podmpi", "openmpi", "mpich", "intelmpi"}

// imageName is an image reference without its tag or digest.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// imageTag is an image reference's tag ("" without one).
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return ""
}

// containerImages returns the image of every container and init container,
// and of every image volume, of every pod template in docs.
func containerImages(t testing.TB, docs []document) []string {
	t.Helper()
	var out []string
	for _, d := range docs {
		pts, errs := podTemplates(d)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", d, errs)
		}
		for _, p := range pts {
			for _, c := range slices.Concat(p.Spec.Spec.InitContainers, p.Spec.Spec.Containers) {
				out = append(out, c.Image)
			}
			for _, v := range p.Spec.Spec.Volumes {
				if v.Image != nil {
					out = append(out, v.Image.Reference)
				}
			}
		}
	}
	return out
}

// releaseImages reads the images Component: image name -> tagged reference.
func releaseImages(t testing.TB) map[string]string {
	t.Helper()
	k := readKustomization(t, imagesComponent)
	if !k.isComponent() {
		t.Fatalf("%s: want a kustomize Component", repoName(imagesComponent))
	}
	out := map[string]string{}
	for _, im := range k.Images {
		if _, dup := out[im.Name]; dup {
			t.Errorf("%s: image %s named twice", repoName(imagesComponent), im.Name)
		}
		if im.NewName == "" || im.NewTag == "" {
			t.Errorf("%s: image %s: want newName and newTag, both, so that the entry is the one place that names it", repoName(imagesComponent), im.Name)
		}
		out[im.Name] = im.NewName + ":" + im.NewTag
	}
	for _, n := range podmpiImages {
		if _, ok := out["ghcr.io/podmpi/"+n]; !ok {
			t.Errorf("%s names no ghcr.io/podmpi/%s (has %v)", repoName(imagesComponent), n, sortedKeys(out))
		}
	}
	return out
}

// releaseTag is the one tag of the release images.
func releaseTag(t testing.TB) string {
	t.Helper()
	tags := map[string]bool{}
	for _, ref := range releaseImages(t) {
		tags[imageTag(ref)] = true
	}
	if len(tags) != 1 {
		t.Fatalf("%s: want one tag for every podmpi image, have %v", repoName(imagesComponent), sortedKeys(tags))
	}
	return sortedKeys(tags)[0]
}

// TestImagesOnePlace: deploy/components/images names every podmpi image
// once; no other kustomization names an image; every pod of deploy/ and of
// the samples runs exactly those references; and an images: list of one
// entry per image in a kustomization of yours moves every container, init
// container and image volume of every set to your registry.
func TestImagesOnePlace(t *testing.T) {
	release := releaseImages(t)
	for _, dir := range slices.Concat(kustomizationDirs(t, deployDir), kustomizationDirs(t, ".")) {
		if filepath.Clean(dir) != filepath.Clean(imagesComponent) && len(readKustomization(t, dir).Images) > 0 {
			t.Errorf("%s/kustomization.yaml has images: entries: %s is the one place that names podmpi's images", repoName(dir), repoName(imagesComponent))
		}
	}
	for _, set := range loadManifestSets(t) {
		if set.isMigration() {
			continue
		}
		t.Run(set.Name, func(t *testing.T) {
			used := containerImages(t, set.Docs)
			if len(used) == 0 {
				return // no pods (RBAC, NetworkPolicies, monitoring, a TrainJob)
			}
			for _, ref := range used {
				if release[imageName(ref)] != ref {
					t.Errorf("runs %s, which %s does not name so (it names %v)", ref, repoName(imagesComponent), release)
				}
			}
			// Your registry: one entry per image in your kustomization.
			var extra strings.Builder
			extra.WriteString("images:\n")
			for _, n := range sortedKeys(release) {
				fmt.Fprintf(&extra, "  - name: %s\n    newName: registry.example.com:5000/mirror/%s\n    newTag: v9.9.9\n", n, path.Base(n))
			}
			var moved []document
			if dir, ok := strings.CutSuffix(set.Name, " on examples/"+sampleMPIJobs); ok {
				moved = renderComponent(t, "../"+dir, extra.String())
			} else {
				var err error
				if moved, err = render(overlayOf(t, []string{setDir(set.Name)}, nil, extra.String())); err != nil {
					t.Fatal(err)
				}
			}
			for _, ref := range containerImages(t, moved) {
				if !strings.HasPrefix(ref, "registry.example.com:5000/mirror/") || imageTag(ref) != "v9.9.9" {
					t.Errorf("with every image moved in a kustomization over it, a pod still runs %s", ref)
				}
			}
		})
	}
}

// setDir is the folder (relative to examples/) of a kustomization's set.
func setDir(name string) string {
	if rest, ok := strings.CutPrefix(name, "examples/"); ok {
		return rest
	}
	return "../" + name
}

// TestReleaseVersionAgrees: the images' tag and the version label of
// everything deploy/ installs are one version, and every podmpi image reference with a tag in the repository's manifests
// and docs (the migration pairs, docs/) uses it.
func TestReleaseVersionAgrees(t *testing.T) {
	tag := releaseTag(t)
	labels := readKustomization(t, componentsDir+"/labels")
	var version string
	for _, l := range labels.Labels {
		if v, ok := l.Pairs["app.kubernetes.io/version"]; ok {
			version = v
		}
	}
	if version != tag {
		t.Errorf("%s/labels: app.kubernetes.io/version %q, but the images' tag is %q", repoName(componentsDir), version, tag)
	}
	ref := regexp.MustCompile(`ghcr\.io/podmpi/[a-z0-9-]+:([A-Za-z0-9_.-]+)`)
	var files []string
	for _, glob := range []string{migrationDir + "/*/*.yaml", "../docs/*.md", "../deploy/*/*.yaml", "../deploy/*/*/*.yaml", "../charts/podmpi/*.yaml", "README.md"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range ref.FindAllStringSubmatch(line, -1) {
				n++
				if m[1] != tag && !strings.Contains(m[1], "<") {
					t.Errorf("%s:%d names %s: the release's tag is %s", repoName(f), i+1, m[0], tag)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no tagged podmpi image reference found: the pattern no longer matches")
	}
}

// TestOpenShiftPinsSCC: every pod of the OpenShift sets asks for the
// restricted-v2 SCC (checkRunAs then refuses a fixed UID there), so a
// project whose service account may use a wider SCC (anyuid) still runs the
// pods as tested.
func TestOpenShiftPinsSCC(t *testing.T) {
	n := 0
	for _, set := range loadManifestSets(t) {
		if !strings.Contains(set.Name, "openshift") {
			continue
		}
		for _, d := range set.Docs {
			pts, _ := podTemplates(d)
			for _, p := range pts {
				n++
				if got := p.Spec.Annotations[requiredSCC]; got != "restricted-v2" {
					t.Errorf("%s: %s %s %s: %s %q, want restricted-v2", set.Name, d.GVK.Kind, d.Name, p.Path, requiredSCC, got)
				}
			}
		}
	}
	if n < 18 {
		t.Errorf("%d pod templates in the OpenShift sets, want every runtime's and sample MPIJob's of deploy/openshift/runtimes, examples/openshift and deploy/openshift/mpi-operator (18)", n)
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string][2]string{
		"ghcr.io/podmpi/openmpi:v0.1.0":                  {"ghcr.io/podmpi/openmpi", "v0.1.0"},
		"localhost:5000/podmpi/mpich":                    {"localhost:5000/podmpi/mpich", ""},
		"localhost:5000/podmpi/mpich:v1":                 {"localhost:5000/podmpi/mpich", "v1"},
		"ghcr.io/podmpi/openmpi@sha256:0123456789abcdef": {"ghcr.io/podmpi/openmpi", ""},
	} {
		if got := imageName(in); got != want[0] {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want[0])
		}
		if got := imageTag(in); got != want[1] {
			t.Errorf("imageTag(%q) = %q, want %q", in, got, want[1])
		}
	}
}
