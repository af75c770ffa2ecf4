package docs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/exitcode"
)

// runHeadingRe is the level-2 heading of one `make bench` run in
// BENCHMARKS.md: "Run of 2026-12-06 ...". The newest date is the run the
// README quotes.
var runHeadingRe = regexp.MustCompile(`^Run of (\d{4}-\d{2}-\d{2})\b`)

// headlineTitlePrefix starts the level-3 heading of a run's headline table,
// as make bench writes it into docs/bench/summary.md.
const headlineTitlePrefix = "Headline"

// readmeMeasuredTitle is the README's level-2 section that quotes the
// headline.
const readmeMeasuredTitle = "Measured"

// headlineHeader is the header row of a headline table.
var headlineHeader = []string{"figure", "podmpi", "baselines (same run)", "podmpi / best baseline"}

// figureRe is a measured figure as the docs quote one: a ratio (0.016x) or
// a value with its unit (3.83 ms, 1.054 s, 15.14 MB).
var figureRe = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:x| ms| s| MB)\b`)

// newestRun is BENCHMARKS.md's run section with the latest date, and that
// date.
func newestRun(t *testing.T, secs []section) (section, string) {
	t.Helper()
	var best section
	date := ""
	for _, s := range secs {
		m := runHeadingRe.FindStringSubmatch(s.title)
		if s.level != 2 || m == nil {
			continue
		}
		switch {
		case m[1] > date:
			best, date = s, m[1]
		case m[1] == date:
			t.Fatalf("BENCHMARKS.md: two runs of %s (%q, %q): give each run its own date", date, best.title, s.title)
		}
	}
	if date == "" {
		t.Fatalf("BENCHMARKS.md: no %q section", "## Run of YYYY-MM-DD")
	}
	return best, date
}

// headlineRows are the rows of the headline table under parent (a run's
// section, or the whole summary.md when parent is nil), header first.
func headlineRows(t *testing.T, page string, secs []section, parent *section) [][]string {
	t.Helper()
	for _, s := range secs {
		if s.level != 3 || !strings.HasPrefix(s.title, headlineTitlePrefix) {
			continue
		}
		if parent != nil && (s.line <= parent.line || s.line > parent.line+len(parent.body)) {
			continue
		}
		rows := tableRows(s.text())
		if len(rows) < 2 || !slices.Equal(rows[0], headlineHeader) {
			t.Fatalf("%s: the %q table's header is %q, want %q", page, s.title, rowOr(rows), headlineHeader)
		}
		return rows
	}
	t.Fatalf("%s: no ### %s... table", page, headlineTitlePrefix)
	return nil
}

func rowOr(rows [][]string) []string {
	if len(rows) == 0 {
		return nil
	}
	return rows[0]
}

// rowMismatches compares the quoted rows with the headline's, matched by
// their first cell: every quoted row must be the headline's row of that
// name, cell for cell.
func rowMismatches(quoted, headline [][]string) []string {
	byName := map[string][]string{}
	for _, r := range headline {
		byName[r[0]] = r
	}
	var bad []string
	for _, r := range quoted {
		h, ok := byName[r[0]]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("the row %q is not in the newest run's headline", r[0]))
		case !slices.Equal(r, h):
			bad = append(bad, fmt.Sprintf("the row %q says %q; the newest run's headline says %q", r[0], r[1:], h[1:]))
		}
	}
	return bad
}

// TestReadmeFiguresFromBenchmarks: the README quotes the benchmarks only in
// its headline table, and every row of it is, cell for cell, the row of the
// same name in the headline of BENCHMARKS.md's newest run (the section
// "Run of <latest date>"), whose headline is the one make bench last wrote
// into docs/bench/summary.md. A figure anywhere else in a README paragraph
// that cites BENCHMARKS.md is an error: it would be checked against
// nothing. A new run rewrites the headline; a README left with an earlier
// run's rows fails here until it is brought up to date.
func TestReadmeFiguresFromBenchmarks(t *testing.T) {
	bench := readPage(t, filepath.Join(root, "BENCHMARKS.md"))
	bsecs := parseSections(bench)
	run, date := newestRun(t, bsecs)
	headline := headlineRows(t, "BENCHMARKS.md", bsecs, &run)
	if len(headline) < 6 {
		t.Fatalf("BENCHMARKS.md, %q: the headline has %d rows, want the figures the README quotes", run.title, len(headline)-1)
	}

	summary := readPage(t, filepath.Join("bench", "summary.md"))
	recorded := headlineRows(t, "docs/bench/summary.md", parseSections(summary), nil)
	if !slices.EqualFunc(headline, recorded, slices.Equal[[]string]) {
		t.Errorf("BENCHMARKS.md's newest run (%s) has another headline than docs/bench/summary.md, which make bench wrote last: copy the run into BENCHMARKS.md as a new \"## Run of <date>\" section", date)
	}

	readme := readPage(t, filepath.Join(root, "README.md"))
	measured := findSection(t, parseSections(readme), 2, readmeMeasuredTitle, "README.md")
	quoted := tableRows(measured.text())
	if len(quoted) < 6 || !slices.Equal(quoted[0], headlineHeader) {
		t.Fatalf("README.md, ## %s: want the headline table (header %q and at least 5 rows), got %q", readmeMeasuredTitle, headlineHeader, quoted)
	}
	for _, m := range rowMismatches(quoted[1:], headline[1:]) {
		t.Errorf("README.md, ## %s: %s: copy the rows from BENCHMARKS.md's %q", readmeMeasuredTitle, m, run.title)
	}
	if !strings.Contains(measured.text(), date) {
		t.Errorf("README.md, ## %s does not name the run it quotes (%s)", readmeMeasuredTitle, date)
	}

	// Figures outside the table: in the Measured section, or in any
	// paragraph that cites BENCHMARKS.md.
	prose := strings.Split(measured.text(), "\n\n")
	for p := range strings.SplitSeq(readme, "\n\n") {
		if strings.Contains(p, "](BENCHMARKS.md") {
			prose = append(prose, p)
		}
	}
	for _, p := range prose {
		for _, l := range strings.Split(p, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "|") {
				continue // the table, checked above
			}
			for _, f := range figureRe.FindAllString(l, -1) {
				t.Errorf("README.md quotes %q outside its headline table (%q): quote measurements as rows of the table, which is checked against BENCHMARKS.md", f, strings.TrimSpace(l))
			}
		}
	}

	// The comparison catches what it is for: a row of an earlier run.
	old := [][]string{{headline[1][0], "12.0 ms", "OpenSSH 263.9 ms", "0.046x (OpenSSH)"}}
	if bad := rowMismatches(old, headline[1:]); len(bad) != 1 {
		t.Errorf("rowMismatches on a row of an earlier run = %q, want one mismatch", bad)
	}
	if bad := rowMismatches(headline[1:], headline[1:]); len(bad) != 0 {
		t.Errorf("rowMismatches on the headline itself = %q, want none", bad)
	}
}

// TestReadmeExitCodes: the README's exit code table has a row for every
// code of agent/exitcode's table, with its name and binary.
func TestReadmeExitCodes(t *testing.T) {
	readme := readPage(t, filepath.Join(root, "README.md"))
	rows := tableRows(findSection(t, parseSections(readme), 2, "Exit codes", "README.md").text())
	for _, e := range exitcode.Table {
		found := false
		for _, r := range rows {
			if len(r) >= 3 && r[0] == strconv.Itoa(int(e.Code)) {
				found = true
				if r[1] != e.Name || r[2] != e.Binary {
					t.Errorf("README.md, ## Exit codes: code %d is %q for %q; agent/exitcode says %q for %q", e.Code, r[1], r[2], e.Name, e.Binary)
				}
			}
		}
		if !found {
			t.Errorf("README.md, ## Exit codes: no row for code %d (%s)", e.Code, e.Name)
		}
	}
}
