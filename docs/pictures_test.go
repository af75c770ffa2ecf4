package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// picturesDir holds the pictures: each a Graphviz source (.dot) and the SVG
// `make pictures` renders from it, committed side by side so that the forge
// and any Markdown viewer show them without Graphviz.
const picturesDir = "docs/pictures"

// graphvizVersionRe is the version dot writes into the SVGs it renders, and
// prints for -V.
var graphvizVersionRe = regexp.MustCompile(`graphviz version ([0-9][^ \n]*(?: \([^)]*\))?)`)

// TestPictures: every picture has its source and its rendering side by
// side; the source still renders to the committed SVG byte for byte (with
// the Graphviz version that rendered it; with another one only that it
// renders), so a picture cannot drift from its source; and some doc links
// each SVG, so none is left unseen.
func TestPictures(t *testing.T) {
	dir := filepath.Join(root, picturesDir)
	srcs, err := filepath.Glob(filepath.Join(dir, "*.dot"))
	if err != nil {
		t.Fatal(err)
	}
	svgs, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) < 6 {
		t.Fatalf("%s holds %d sources, want the six pictures at least", picturesDir, len(srcs))
	}
	for _, s := range srcs {
		if _, err := os.Stat(strings.TrimSuffix(s, ".dot") + ".svg"); err != nil {
			t.Errorf("%s has no SVG beside it: run make pictures", rel(s))
		}
	}
	for _, s := range svgs {
		if _, err := os.Stat(strings.TrimSuffix(s, ".svg") + ".dot"); err != nil {
			t.Errorf("%s has no source beside it (.dot): a picture is made from its source", rel(s))
		}
	}

	linked := linkedFiles(t)
	for _, s := range svgs {
		if !linked[filepath.Clean(s)] {
			t.Errorf("no doc links %s: show it where a reader would rather look than read", rel(s))
		}
	}

	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Skip("no dot on PATH, so the sources are not rendered again (apt-get install -y graphviz)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, _ := exec.CommandContext(ctx, dot, "-V").CombinedOutput()
	have := graphvizVersionRe.FindStringSubmatch(string(v))
	for _, s := range srcs {
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, dot, "-Tsvg", s)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil || errOut.Len() > 0 {
			t.Errorf("dot -Tsvg %s: %v %s", rel(s), err, errOut.String())
			continue
		}
		svg := strings.TrimSuffix(s, ".dot") + ".svg"
		committed, err := os.ReadFile(svg)
		if err != nil {
			continue // reported above
		}
		made := graphvizVersionRe.FindStringSubmatch(string(committed))
		if have == nil || made == nil || have[1] != made[1] {
			t.Logf("%s was rendered by Graphviz %v, this is %v: only checked that its source renders", rel(svg), made, have)
			continue
		}
		if !bytes.Equal(out.Bytes(), committed) {
			t.Errorf("%s is not what %s renders: run make pictures and commit both", rel(svg), rel(s))
		}
	}
}

// linkedFiles are the files the repository's Markdown links (links and
// images, outside code blocks), as cleaned paths from the package dir.
func linkedFiles(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	// Pages not committed yet count too (a test run before the commit).
	for _, p := range []string{"README.md", "BENCHMARKS.md", "CONTRIBUTING.md", "CHANGELOG.md"} {
		if !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	linked := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		inFence := false
		for _, l := range strings.Split(string(b), "\n") {
			if isFence(l) {
				inFence = !inFence
				continue
			}
			if inFence {
				continue
			}
			for _, m := range linkRe.FindAllStringSubmatch(l, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") {
					continue
				}
				linked[filepath.Clean(filepath.Join(root, filepath.Dir(f), target))] = true
			}
		}
	}
	return linked
}

// rel names a path from the repository root.
func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}
