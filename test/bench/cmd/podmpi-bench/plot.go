package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/podmpi/podmpi/test/e2e"
)

// plot writes init-vs-n.csv and renders init-vs-n.png from it with
// test/bench/plot.py (python3 with matplotlib).
func plot(ctx context.Context, outDir string, points []scalePoint) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	csvPath := filepath.Join(outDir, "init-vs-n.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"series", "n", "median_s", "p95_s", "kind"})
	for _, p := range points {
		kind := "measured"
		if p.extrapolate {
			kind = "extrapolated"
		}
		_ = w.Write([]string{p.series, strconv.Itoa(p.n), strconv.FormatFloat(p.median, 'g', 6, 64), strconv.FormatFloat(p.p95, 'g', 6, 64), kind})
	}
	w.Flush()
	if err := f.Close(); err != nil {
		return err
	}
	if err := w.Error(); err != nil {
		return err
	}
	root, err := e2e.ModuleRoot()
	if err != nil {
		return err
	}
	png := filepath.Join(outDir, "init-vs-n.png")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if b, err := exec.CommandContext(ctx, py, filepath.Join(root, "test/bench/plot.py"), csvPath, png).CombinedOutput(); err != nil {
		return fmt.Errorf("plot %s (needs python3-matplotlib): %w: %s", png, err, b)
	}
	fmt.Printf("\n== plot written: %s\n", png)
	return nil
}
