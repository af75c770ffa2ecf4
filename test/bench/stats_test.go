package bench

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	cases := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{3}, Summary{N: 1, Median: 3, P95: 3, Min: 3, Max: 3, Mean: 3}},
		{"even", []float64{4, 1, 3, 2}, Summary{N: 4, Median: 2.5, P95: 4, Min: 1, Max: 4, Mean: 2.5}},
		{"nan ignored", []float64{math.NaN(), 1, 2, 3}, Summary{N: 3, Median: 2, P95: 3, Min: 1, Max: 3, Mean: 2}},
	}
	for _, c := range cases {
		if got := Summarize(c.in); got != c.want {
			t.Errorf("%s: Summarize(%v) = %+v, want %+v", c.name, c.in, got, c.want)
		}
	}
	// 20 values 1..20: nearest-rank p95 is the 19th.
	var xs []float64
	for i := 20; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	if s := Summarize(xs); s.P95 != 19 || s.Median != 10.5 {
		t.Errorf("1..20: p95 %v median %v, want 19 and 10.5", s.P95, s.Median)
	}
}

func TestLogSlope(t *testing.T) {
	x := []float64{16, 64, 256, 1024}
	lin := []float64{0.016, 0.064, 0.256, 1.024}
	if s := LogSlope(x, lin); math.Abs(s-1) > 1e-9 {
		t.Errorf("linear slope = %v, want 1", s)
	}
	quad := []float64{1, 16, 256, 4096}
	if s := LogSlope(x, quad); math.Abs(s-2) > 1e-9 {
		t.Errorf("quadratic slope = %v, want 2", s)
	}
	if s := LogSlope([]float64{1}, []float64{1}); !math.IsNaN(s) {
		t.Errorf("one point: slope %v, want NaN", s)
	}
}

func TestMs(t *testing.T) {
	for in, want := range map[float64]string{0.0012: "1.20 ms", 0.2: "200.0 ms", 2.5: "2.500 s", math.NaN(): "n/a"} {
		if got := Ms(in); got != want {
			t.Errorf("Ms(%v) = %q, want %q", in, got, want)
		}
	}
}
