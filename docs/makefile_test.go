package docs

import (
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

// recipePathRe matches a repository path a Makefile recipe runs or builds:
// ./scripts/demo.sh, ./cmd/launcher, ./test/harness/cmd/harness-cleanup.
var recipePathRe = regexp.MustCompile(`(?:^|\s)\./((?:scripts|images|cmd|test|examples|agent)/[A-Za-z0-9._/-]*[A-Za-z0-9_-])`)

// TestMakefileRecipePaths: every repository path a Makefile recipe names
// exists, so that no target runs a path that was moved or never existed.
func TestMakefileRecipePaths(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "\t") {
			continue // only recipe lines
		}
		for _, m := range recipePathRe.FindAllStringSubmatch(l, -1) {
			p := strings.TrimSuffix(m[1], "/...")
			if strings.ContainsAny(p, "$*") {
				continue
			}
			n++
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("Makefile:%d: ./%s does not exist", i+1, p)
			}
		}
	}
	if n == 0 {
		t.Fatal("no repository path found in the Makefile's recipes: the pattern no longer matches")
	}
}

// makeHelpLineRe is a target's first line in `make help`: its name in the
// first column, what it does after.
var makeHelpLineRe = regexp.MustCompile(`^([a-z][a-z0-9-]*) +\S`)

// TestMakeHelp: `make help` lists every target of the Makefile, each with
// what it does (its ## comment), and nothing that is not a target.
func TestMakeHelp(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH (apt-get install -y make)")
	}
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range targetRe.FindAllStringSubmatch(string(b), -1) {
		targets = append(targets, m[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mk, "-s", "help")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	var listed []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := makeHelpLineRe.FindStringSubmatch(l); m != nil {
			listed = append(listed, m[1])
		}
	}
	for _, tg := range targets {
		if !slices.Contains(listed, tg) {
			t.Errorf("make help does not list the target %q: give it a \"## %s: what it does\" comment above it", tg, tg)
		}
	}
	for _, l := range listed {
		if !slices.Contains(targets, l) {
			t.Errorf("make help lists %q, which is no target of the Makefile", l)
		}
	}
	if len(targets) < 10 {
		t.Fatalf("found only %d targets in the Makefile: the pattern no longer matches", len(targets))
	}
}
