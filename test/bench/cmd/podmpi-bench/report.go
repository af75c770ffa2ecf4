package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/test/bench"
)

// report collects every figure: it prints each table as it is made and
// keeps the markdown and the raw samples for the files under --out.
type report struct {
	md        strings.Builder
	raw       [][]string // section, name, rep, value, unit
	targets   []target
	headlines []headline
}

// headline is one row of the table the README quotes: a podmpi figure
// against every baseline measured beside it, and its ratio to the best
// (lowest) of them.
type headline struct {
	what, podmpi, baselines, ratio string
}

// measure is one figure of a headline: what it is, its value, and how the
// value is printed (bench.Ms for seconds, mb for bytes).
type measure struct {
	name   string
	value  float64
	format func(float64) string
}

type target struct {
	what, value, goal string
	met               bool
	known             bool // false: the figure could not be taken
}

// row is one line of a table: a command, its samples and its baseline.
type row struct {
	name     string
	samples  []float64
	baseline string // name of the baseline row; "" for a baseline itself
}

func (r *report) heading(title, text string) {
	fmt.Printf("\n== %s\n", title)
	if text != "" {
		fmt.Println("   " + strings.ReplaceAll(text, "\n", "\n   "))
	}
	fmt.Fprintf(&r.md, "\n### %s\n\n", title)
	if text != "" {
		fmt.Fprintf(&r.md, "%s\n\n", text)
	}
}

func (r *report) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Println("   " + s)
	fmt.Fprintf(&r.md, "%s\n\n", s)
}

// timeTable prints rows of wall times (seconds) with median, p95 and the
// ratio of the medians to each row's baseline.
func (r *report) timeTable(section string, rows []row) map[string]bench.Summary {
	sum := map[string]bench.Summary{}
	for _, x := range rows {
		sum[x.name] = bench.Summarize(x.samples)
		r.addRaw(section, x.name, x.samples, "s")
	}
	w := 0
	for _, x := range rows {
		w = max(w, len(x.name))
	}
	fmt.Printf("   %-*s  %10s  %10s  %10s  %3s  %s\n", w, "command", "median", "p95", "min", "n", "ratio (median / baseline median)")
	fmt.Fprintf(&r.md, "| command | median | p95 | min | n | ratio to baseline |\n|---|---:|---:|---:|---:|---|\n")
	for _, x := range rows {
		s := sum[x.name]
		ratio := "baseline"
		if x.baseline == "-" {
			ratio = ""
		} else if x.baseline != "" {
			ratio = fmt.Sprintf("%.3f x %s", bench.Ratio(s.Median, sum[x.baseline].Median), x.baseline)
		}
		fmt.Printf("   %-*s  %10s  %10s  %10s  %3d  %s\n", w, x.name, bench.Ms(s.Median), bench.Ms(s.P95), bench.Ms(s.Min), s.N, ratio)
		fmt.Fprintf(&r.md, "| %s | %s | %s | %s | %d | %s |\n", x.name, bench.Ms(s.Median), bench.Ms(s.P95), bench.Ms(s.Min), s.N, ratio)
	}
	r.md.WriteString("\n")
	return sum
}

func (r *report) addRaw(section, name string, xs []float64, unit string) {
	for i, v := range xs {
		r.raw = append(r.raw, []string{section, name, strconv.Itoa(i), strconv.FormatFloat(v, 'g', 8, 64), unit})
	}
}

// check records a target.
func (r *report) check(what, value, goal string, met bool) {
	r.targets = append(r.targets, target{what: what, value: value, goal: goal, met: met, known: true})
}

// missing records a target whose figure could not be taken.
func (r *report) missing(what, goal string, err error) {
	r.targets = append(r.targets, target{what: what, value: "not measured: " + err.Error(), goal: goal})
}

// headline records a podmpi figure against its baselines (lower is better
// for every headline figure: times and memory).
func (r *report) headline(what string, podmpi measure, baselines ...measure) {
	best := -1
	var bs []string
	for i, b := range baselines {
		if !finite(b.value) || b.value <= 0 {
			continue
		}
		if best < 0 || b.value < baselines[best].value {
			best = i
		}
	}
	for _, b := range baselines {
		bs = append(bs, fmt.Sprintf("%s %s", b.name, b.format(b.value)))
	}
	h := headline{what: what, podmpi: podmpi.format(podmpi.value), baselines: strings.Join(bs, "; "), ratio: "n/a"}
	if best >= 0 && finite(podmpi.value) {
		h.ratio = fmt.Sprintf("%s (%s)", ratioStr(podmpi.value/baselines[best].value), baselines[best].name)
	}
	r.headlines = append(r.headlines, h)
}

// ratioStr prints a ratio with two significant digits below 0.1 (0.016x)
// and two decimals above (0.75x, 1.57x).
func ratioStr(x float64) string {
	if x < 0.1 {
		return fmt.Sprintf("%.3fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}

// printHeadlines prints and appends the headline table.
func (r *report) printHeadlines() {
	if len(r.headlines) == 0 {
		return
	}
	r.heading("Headline: podmpi against the best baseline of the same run",
		"Every figure below is a median (memory: the peak, or the median of the repetitions) from a table above; the ratio is podmpi's figure over the best (lowest) baseline measured beside it, so below 1 is better for podmpi. README.md quotes these rows.")
	fmt.Fprintf(&r.md, "| figure | podmpi | baselines (same run) | podmpi / best baseline |\n|---|---:|---|---|\n")
	for _, h := range r.headlines {
		fmt.Printf("   %-60s %12s  %s  [%s]\n", h.what, h.podmpi, h.ratio, h.baselines)
		fmt.Fprintf(&r.md, "| %s | %s | %s | %s |\n", h.what, h.podmpi, h.baselines, h.ratio)
	}
	r.md.WriteString("\n")
}

// printTargets prints and appends the target table.
func (r *report) printTargets() {
	r.heading("Targets", "")
	fmt.Fprintf(&r.md, "| target | goal | measured | met |\n|---|---|---|---|\n")
	for _, t := range r.targets {
		met := "NOT MET"
		switch {
		case !t.known:
			met = "NOT MEASURED"
		case t.met:
			met = "met"
		}
		fmt.Printf("   %-12s %-44s goal %-28s %s\n", met, t.what, t.goal, t.value)
		fmt.Fprintf(&r.md, "| %s | %s | %s | %s |\n", t.what, t.goal, strings.ReplaceAll(t.value, "|", "/"), met)
	}
	r.md.WriteString("\n")
}

// write stores raw.csv and summary.md in dir.
func (r *report) write(dir, header string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "raw.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"section", "name", "rep", "value", "unit"})
	_ = w.WriteAll(r.raw)
	if err := f.Close(); err != nil {
		return err
	}
	if err := w.Error(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(header+r.md.String()), 0o644)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
