package bench

import (
	"fmt"
	"math"
	"slices"
)

// Summary describes a sample.
type Summary struct {
	N      int
	Median float64
	P95    float64 // nearest-rank 95th percentile
	Min    float64
	Max    float64
	Mean   float64
}

// Summarize returns the summary of xs; the zero Summary when xs is empty.
// NaN values are ignored.
func Summarize(xs []float64) Summary {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	n := len(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{N: n, Median: med, P95: Percentile(s, 95), Min: s[0], Max: s[n-1], Mean: sum / float64(n)}
}

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted,
// which must be sorted ascending and non-empty.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Ratio is a/b, NaN when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// Ms formats seconds as milliseconds with a precision that suits the value.
func Ms(sec float64) string {
	ms := sec * 1000
	switch {
	case math.IsNaN(ms):
		return "n/a"
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.3f s", sec)
	}
}

// LogSlope is the least-squares slope of log(y) against log(x): 1 means y
// grows linearly with x, below 1 sub-linearly. Points with x or y <= 0 are
// skipped; NaN with fewer than two points.
func LogSlope(x, y []float64) float64 {
	var lx, ly []float64
	for i := range min(len(x), len(y)) {
		if x[i] > 0 && y[i] > 0 {
			lx = append(lx, math.Log(x[i]))
			ly = append(ly, math.Log(y[i]))
		}
	}
	n := float64(len(lx))
	if n < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range lx {
		sx += lx[i]
		sy += ly[i]
		sxx += lx[i] * lx[i]
		sxy += lx[i] * ly[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}
