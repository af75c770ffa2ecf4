package examples

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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

// containerImages returns the image of every container of every pod
// template in docs.
func containerImages(t *testing.T, docs []document) []string {
	t.Helper()
	var out []string
	for _, d := range docs {
		pts, errs := podTemplates(d)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", d, errs)
		}
		for _, p := range pts {
			for _, c := range p.Spec.Spec.InitContainers {
				out = append(out, c.Image)
			}
			for _, c := range p.Spec.Spec.Containers {
				out = append(out, c.Image)
			}
		}
	}
	return out
}

// TestOverlayImagesOneEntry: in every overlay each image is named once, in
// its images: list, and changing that entry changes every container that
// runs the image. The test builds an overlay of the overlay that moves every
// image to another registry and tag, and checks that no container keeps the
// old reference.
func TestOverlayImagesOneEntry(t *testing.T) {
	for _, dir := range overlays(t) {
		if isMonitoring(dir) {
			continue
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			k := readKustomization(t, dir)
			if len(k.Images) == 0 {
				t.Fatalf("%s/kustomization.yaml has no images: entries", dir)
			}
			docs, err := render(dir)
			if err != nil {
				t.Fatal(err)
			}
			used := containerImages(t, docs)
			if len(used) == 0 {
				t.Fatal("no containers rendered")
			}
			after := map[string]bool{} // image names once the entries applied
			for _, im := range k.Images {
				n := im.NewName
				if n == "" {
					n = im.Name
				}
				if after[n] {
					t.Errorf("images: %s appears twice", n)
				}
				after[n] = true
				if im.NewTag == "" {
					t.Errorf("images: %s has no newTag: the rendered pods would use the base's tag silently", im.Name)
				}
			}
			for _, ref := range used {
				if !after[imageName(ref)] {
					t.Errorf("container image %s is not set by any images: entry of %s", ref, dir)
				}
			}
			for n := range after {
				if !slices.ContainsFunc(used, func(ref string) bool { return imageName(ref) == n }) {
					t.Errorf("images: entry %s matches no container", n)
				}
			}

			// Move every image to registry.example.com/mirror with one
			// entry each, in an overlay of this overlay.
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			tmp := t.TempDir()
			rel, err := filepath.Rel(tmp, abs) // kustomize wants a relative path
			if err != nil {
				t.Fatal(err)
			}
			var ks strings.Builder
			fmt.Fprintf(&ks, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\nimages:\n", rel)
			for _, n := range sortedKeys(after) {
				fmt.Fprintf(&ks, "  - name: %s\n    newName: registry.example.com/mirror/%s\n    newTag: v9.9.9\n", n, path.Base(n))
			}
			if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(ks.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			moved, err := render(tmp)
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range containerImages(t, moved) {
				if !strings.HasPrefix(ref, "registry.example.com/mirror/") || !strings.HasSuffix(ref, ":v9.9.9") {
					t.Errorf("after moving every images: entry, a container still runs %s", ref)
				}
			}
		})
	}
}

// TestOpenShiftOverlayPinsSCC: every pod of the OpenShift overlay asks for
// the restricted-v2 SCC, so a project whose service account may use a wider
// SCC (anyuid) still runs the pods as tested.
func TestOpenShiftOverlayPinsSCC(t *testing.T) {
	docs, err := render(filepath.Join(overlayDir, "openshift"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range docs {
		pts, _ := podTemplates(d)
		for _, p := range pts {
			n++
			if got := p.Spec.Annotations["openshift.io/required-scc"]; got != "restricted-v2" {
				t.Errorf("%s %s %s: openshift.io/required-scc %q, want restricted-v2", d.GVK.Kind, d.Name, p.Path, got)
			}
		}
	}
	if n < 8 {
		t.Errorf("%d pod templates in the OpenShift overlay, want every runtime's and MPIJob's (at least 8)", n)
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/podmpi/openmpi:v0.1.0":                  "ghcr.io/podmpi/openmpi",
		"localhost:5000/podmpi/mpich":                    "localhost:5000/podmpi/mpich",
		"localhost:5000/podmpi/mpich:v1":                 "localhost:5000/podmpi/mpich",
		"ghcr.io/podmpi/openmpi@sha256:0123456789abcdef": "ghcr.io/podmpi/openmpi",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}
