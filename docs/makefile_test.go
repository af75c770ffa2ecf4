package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
