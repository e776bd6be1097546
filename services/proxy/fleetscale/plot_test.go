package main

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gonum.org/v1/plot/plotutil"
)

// decodePNG reads the PNG at path.
func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// hasColor reports whether some pixel of img left of maxX is c.
func hasColor(img image.Image, maxX int, c color.Color) bool {
	r0, g0, b0, _ := c.RGBA()
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < min(bd.Max.X, maxX); x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == r0 && g == g0 && b == b0 {
				return true
			}
		}
	}
	return false
}

// TestPlotRenders: a chart with a missing point and latencies spanning
// decades draws a PNG of the set size with each series' line and the goal
// in their colours in the plot area (the legend, on the right, has them
// too).
func TestPlotRenders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "latency.png")
	c := chart{title: "Observation to verdict", ylabel: "latency (ms)", goal: 10, goalName: "goal: p99 10 ms",
		xs: []float64{500, 2000, 5000, 20000}, xlabel: []string{"500 / 20", "2000 / 100", "5000 / 200", "20000 / 1000"},
		lines: []series{{"p50", []float64{3, 5, 7, 9}}, {"p99", []float64{8, 20, math.NaN(), 800}}}}
	if err := c.render(path); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	if img.Bounds().Dx() != plotW || img.Bounds().Dy() != plotH {
		t.Fatalf("latency.png is %v, want %dx%d", img.Bounds(), plotW, plotH)
	}
	for i, want := range []color.Color{plotutil.Color(0), plotutil.Color(1), color.RGBA{R: 0xaa, A: 0xff}} {
		if !hasColor(img, plotW-300, want) {
			t.Errorf("no pixel of colour %d (%v): a line is missing", i, want)
		}
	}
}

func TestLogScale(t *testing.T) {
	for _, tc := range []struct {
		name string
		vs   []float64
		log  bool
	}{
		{"latencies", []float64{3, 9, 800}, true},
		{"one_decade", []float64{10, 100}, true},
		{"narrow", []float64{20, 60, 90}, false},
		{"zeros_and_missing", []float64{0, math.NaN(), 2, 5}, false},
		{"nothing", []float64{0, math.NaN()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logScale(tc.vs); got != tc.log {
				t.Errorf("logScale(%v) = %v (%.2f decades)", tc.vs, got, decades(tc.vs))
			}
		})
	}
}

// TestLogTicks: powers of ten are labelled, and 2 and 5 times them too
// where the axis shows less than two decades.
func TestLogTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var ls []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				ls = append(ls, tk.Label)
			}
		}
		return ls
	}
	if got, want := labels(1.5, 120), []string{"2", "5", "10", "20", "50", "100"}; !slices.Equal(got, want) {
		t.Errorf("1.5..120: %q, want %q", got, want)
	}
	if got, want := labels(0.3, 2000), []string{"1", "10", "100", "1000"}; !slices.Equal(got, want) {
		t.Errorf("0.3..2000: %q, want %q", got, want)
	}
}

func TestSegments(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	if got := segments(xs, []float64{1, math.NaN(), 3, 4, 0}, true); len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 2 {
		t.Errorf("log: %v", got)
	}
	if got := segments(xs, []float64{1, 2, 3, 4, 0}, false); len(got) != 1 || len(got[0]) != 5 {
		t.Errorf("linear: %v", got)
	}
}

// TestReplot: --replot redraws every plot from the committed
// docs/scale/results.json, without running anything.
func TestReplot(t *testing.T) {
	b, err := os.ReadFile("../../../docs/scale/results.json")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "results.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"--replot", "--out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"latency.png", "fanout.png", "cpu.png", "memory.png", "watches.png", "watchsetup.png", "proxy.png", "storage.png"} {
		if img := decodePNG(t, filepath.Join(out, name)); img.Bounds().Dx() != plotW {
			t.Errorf("%s: %v", name, img.Bounds())
		}
	}
}
