package docs

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// benchTargetsTitle is the level-2 heading of BENCHMARKS.md whose table
// holds the figures of the latest recorded run, the only ones the README
// may quote.
const benchTargetsTitle = "Targets (this run)"

// figureRe is a measured figure as the README quotes one: a ratio (0.016x)
// or a value with its unit (3.83 ms, 1.054 s, 15.14 MB).
var figureRe = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:x| ms| s| MB)\b`)

// benchParagraphs are the paragraphs of md that cite BENCHMARKS.md: where
// the README quotes measurements.
func benchParagraphs(md string) []string {
	var out []string
	for p := range strings.SplitSeq(md, "\n\n") {
		if strings.Contains(p, "](BENCHMARKS.md)") {
			out = append(out, p)
		}
	}
	return out
}

// staleFigures returns the figures of text that the targets section does not
// hold, and how many figures text quotes.
func staleFigures(text, targets string) (stale []string, n int) {
	figs := figureRe.FindAllString(text, -1)
	for _, f := range figs {
		if !strings.Contains(targets, f) {
			stale = append(stale, f)
		}
	}
	return stale, len(figs)
}

// TestReadmeFiguresFromBenchmarks: every figure the README quotes next to a
// link to BENCHMARKS.md is in that file's table of the latest run. A new
// run rewrites the table; a README left quoting the run before (it once
// said 0.046x and 1.4x the memory after the table had 0.016x and 0.94x)
// fails here until it is brought up to date.
func TestReadmeFiguresFromBenchmarks(t *testing.T) {
	readme := readPage(t, filepath.Join(root, "README.md"))
	bench := readPage(t, filepath.Join(root, "BENCHMARKS.md"))
	targets := findSection(t, parseSections(bench), 2, benchTargetsTitle, "BENCHMARKS.md").text()
	paras := benchParagraphs(readme)
	if len(paras) == 0 {
		t.Fatal("README.md: no paragraph links BENCHMARKS.md; the figures it quotes are checked in that paragraph")
	}
	total := 0
	for _, p := range paras {
		stale, n := staleFigures(p, targets)
		total += n
		for _, f := range stale {
			t.Errorf("README.md quotes %q, which BENCHMARKS.md's %q table does not hold: take the README's figures from that table", f, benchTargetsTitle)
		}
	}
	if total == 0 {
		t.Errorf("README.md's paragraphs that link BENCHMARKS.md quote no figure; the check would pass on anything")
	}
	// The check catches what it is for: the README's text before the run
	// of BENCHMARKS.md's table.
	old := "one remote command 12.0 ms vs 263.9 ms (0.046x); `mpirun -np 6 hostname` over 3 pods 0.39x (OpenMPI)"
	if stale, _ := staleFigures(old, targets); !slices.Equal(stale, []string{"12.0 ms", "263.9 ms", "0.046x", "0.39x"}) {
		t.Errorf("staleFigures on the README of an earlier run = %q, want its four old figures", stale)
	}
}
