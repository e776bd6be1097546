package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// series is one line of a chart; NaN is a point not measured.
type series struct {
	name string
	ys   []float64
}

// chart is a line chart over the simulated sizes, drawn with gonum/plot.
type chart struct {
	title  string
	ylabel string    // what is measured, with its unit
	xs     []float64 // servers
	xlabel []string  // "servers / proxies" of each size
	lines  []series
	// goal, when positive, is drawn as a dashed horizontal line named
	// goalName.
	goal     float64
	goalName string
}

// The size of the images, in pixels.
const (
	plotW, plotH = 1000, 600
	plotDPI      = 96
)

// decades is how many powers of ten the positive values of vs span.
func decades(vs []float64) float64 {
	lo, hi := math.Inf(1), 0.0
	for _, v := range vs {
		if v > 0 && !math.IsInf(v, 1) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi == 0 {
		return 0
	}
	return math.Log10(hi / lo)
}

// logScale: an axis is logarithmic where its data spans a decade or more
// (latencies from a few milliseconds to seconds, sizes from 500 to 20,000
// servers, memory from tens of MiB to GiB); on a linear axis the small
// values would be a flat line along the bottom.
func logScale(vs []float64) bool { return decades(vs) >= 1 }

func formatTick(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// logTicks labels each power of ten in [lo, hi] and marks 2..9 times it
// without a label; with less than two decades shown it labels 1, 2 and 5 times
// each power of ten.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	few := math.Log10(hi/lo) < 2
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1.0; m < 10; m++ {
			v := m * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || few && (m == 2 || m == 5) {
				t.Label = formatTick(v)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// render draws the chart as a PNG at path.
func (c chart) render(path string) error {
	p := plot.New()
	p.Title.Text = c.title
	p.Title.TextStyle.Font.Size = vg.Points(15)
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = "servers / proxies"
	p.Y.Label.Text = c.ylabel
	p.Add(plotter.NewGrid())

	// x: one labelled tick per size.
	var xticks []plot.Tick
	for i, x := range c.xs {
		xticks = append(xticks, plot.Tick{Value: x, Label: c.xlabel[i]})
	}
	p.X.Tick.Marker = plot.ConstantTicks(xticks)
	if logScale(c.xs) {
		p.X.Scale = plot.LogScale{}
		p.X.Label.Text += " (log scale)"
	}

	var all []float64
	for _, s := range c.lines {
		all = append(all, s.ys...)
	}
	if c.goal > 0 {
		all = append(all, c.goal)
	}
	logY := logScale(all)
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Label.Text += " (log scale)"
	} else {
		p.Y.Min = 0
	}

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(28)
	legend.Padding = vg.Points(5)
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	for i, s := range c.lines {
		col := plotutil.Color(i)
		shape := plotutil.Shape(i)
		var thumbs []plot.Thumbnailer
		// One line per run of measured points (a NaN, or a zero on a log
		// axis, is a gap).
		for _, seg := range segments(c.xs, s.ys, logY) {
			l, pts, err := plotter.NewLinePoints(seg)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			l.Color, l.Width = col, vg.Points(2)
			pts.Color, pts.Shape, pts.Radius = col, shape, vg.Points(3.5)
			p.Add(l, pts)
			if thumbs == nil {
				thumbs = []plot.Thumbnailer{l, pts}
			}
		}
		if thumbs != nil {
			legend.Add(s.name, thumbs...)
		}
	}
	if c.goal > 0 && len(c.xs) > 0 {
		lo, hi := c.xs[0], c.xs[len(c.xs)-1]
		g, err := plotter.NewLine(plotter.XYs{{X: lo, Y: c.goal}, {X: hi, Y: c.goal}})
		if err != nil {
			return err
		}
		g.Color = color.RGBA{R: 0xaa, A: 0xff}
		g.Width = vg.Points(1.5)
		g.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(g)
		legend.Add(c.goalName, g)
	}

	// Some room around the data, so that no point sits on an axis.
	if logY {
		p.Y.Min, p.Y.Max = p.Y.Min/1.3, p.Y.Max*1.3
	} else {
		p.Y.Max *= 1.08
	}
	if logScale(c.xs) {
		p.X.Min, p.X.Max = p.X.Min/1.15, p.X.Max*1.15
	} else {
		pad := (p.X.Max - p.X.Min) * 0.04
		p.X.Min, p.X.Max = p.X.Min-pad, p.X.Max+pad
	}

	// The legend beside the plot, as wide as its longest entry.
	names := []string{c.goalName}
	for _, s := range c.lines {
		names = append(names, s.name)
	}
	var textW vg.Length
	for _, n := range names {
		textW = max(textW, legend.TextStyle.Width(n))
	}
	legendW := legend.ThumbnailWidth + legend.TextStyle.Width(" ") + textW + px(20)
	img := vgimg.NewWith(vgimg.UseWH(px(plotW), px(plotH)), vgimg.UseDPI(plotDPI))
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendW, 0, 0))
	legend.Draw(draw.Crop(draw.Crop(dc, px(plotW)-legendW, 0, 0, 0), px(8), 0, 0, -px(40)))

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// px is n pixels of the images as a vg length (points, 1/72 inch).
func px(n int) vg.Length { return vg.Length(n) * vg.Inch / plotDPI }

// segments splits a series into its runs of points that can be drawn: a
// NaN (not measured) breaks it, and so does a value that is not positive on
// a log axis.
func segments(xs, ys []float64, logY bool) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i, y := range ys {
		if math.IsNaN(y) || math.IsInf(y, 0) || logY && y <= 0 {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, plotter.XY{X: xs[i], Y: y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// plotAll draws every curve of the results into out.
func plotAll(out string, all []*result) error {
	// A size that did not complete has nothing to draw.
	var rs []*result
	for _, r := range all {
		if len(r.Steady) > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	xs := make([]float64, len(rs))
	labels := make([]string, len(rs))
	for i, r := range rs {
		xs[i] = float64(r.Servers)
		labels[i] = fmt.Sprintf("%d / %d", r.Servers, r.Proxies)
	}
	col := func(f func(r *result) float64) []float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return v
	}
	comp := func(prefix string, cpu bool) []float64 {
		return col(func(r *result) float64 {
			u := r.Steady[0].sum(prefix)
			if cpu {
				return u.CPUPercent
			}
			return u.RSSMiB
		})
	}
	rate := func(i int) string { return formatTick(rs[0].Steady[i].ObsRateTarget) }
	at := func(i int, f func(st *steady) float64) []float64 {
		return col(func(r *result) float64 {
			if i >= len(r.Steady) {
				return math.NaN()
			}
			return f(r.Steady[i])
		})
	}
	var lat, fan []series
	for i := range rs[0].Steady {
		at := func(f func(st *steady) float64) []float64 { return at(i, f) }
		lat = append(lat,
			series{"verdict p50, " + rate(i) + " obs/s", at(func(st *steady) float64 { return st.ObsToVerdict.P50 })},
			series{"verdict p99, " + rate(i) + " obs/s", at(func(st *steady) float64 { return st.ObsToVerdict.P99 })},
			series{"fingerprint p99, " + rate(i) + " obs/s", at(func(st *steady) float64 { return st.ObsToFp.P99 })})
		fan = append(fan,
			series{"observation to every proxy p99, " + rate(i) + " obs/s", at(func(st *steady) float64 { return st.DriftAll.P99 })},
			series{"status write to a proxy p50, " + rate(i) + " obs/s", at(func(st *steady) float64 { return st.KVToProxy.P50 })},
			series{"status write to a proxy p99, " + rate(i) + " obs/s", at(func(st *steady) float64 { return st.KVToProxy.P99 })})
	}
	storage := func(name string) []float64 {
		return at(0, func(st *steady) float64 { return st.Storage[name].GiBPerDay })
	}
	services := func(cpu bool) []series {
		return []series{
			{"NATS (3 nodes)", comp("nats-", cpu)}, {"fingerprint", comp("fingerprint", cpu)}, {"drift (2 instances)", comp("drift-", cpu)},
			{"audit", comp("audit", cpu)}, {"ClickHouse", comp("clickhouse", cpu)}, {"proxy fleet", comp("fleet", cpu)},
		}
	}
	charts := map[string]chart{
		"latency.png": {title: "Observation to verdict", ylabel: "latency (ms)", goal: 10, goalName: "goal: p99 10 ms", lines: lat},
		"fanout.png":  {title: "A drift reaching every proxy", ylabel: "latency (ms)", goal: 50, goalName: "goal: p99 50 ms", lines: fan},
		"cpu.png":     {title: "CPU during the steady phase", ylabel: "CPU (% of one core)", lines: services(true)},
		"memory.png":  {title: "Resident memory (peak)", ylabel: "RSS (MiB)", lines: services(false)},
		"watches.png": {title: "KV watches on the status bucket", ylabel: "count", lines: []series{
			{"status bucket consumers (hub)", col(func(r *result) float64 { return float64(r.KVConsumers) })},
			{"gates (proxy, server)", col(func(r *result) float64 { return float64(r.Gates) })},
			{"watches per proxy", col(func(r *result) float64 { return r.WatchesPerProxy })},
		}},
		"watchsetup.png": {title: "Fleet start: every gate's watch set up", ylabel: "time (s)", lines: []series{
			{"watch set-up", col(func(r *result) float64 { return r.WatchSetupSec })},
		}},
		"proxy.png": {title: "Memory per proxy", ylabel: "memory (KiB)", lines: []series{
			{"RSS per proxy", col(func(r *result) float64 { return r.FleetRSSMiBPerProxy * 1024 })},
			{"heap per gate", col(func(r *result) float64 { return r.FleetHeapKiBPerGate })},
		}},
		"storage.png": {title: "JetStream storage at " + rate(0) + " obs/s, 1 replica", ylabel: "GiB per day", lines: []series{
			{"observations", storage(bus.StreamObservations)},
			{"fingerprints", storage(bus.StreamFingerprints)},
			{"verdicts", storage(bus.StreamVerdicts)},
			{"status KV", storage("KV_" + bus.BucketStatus)},
			{"manifests", storage("OBJ_" + bus.BucketManifests)},
		}},
	}
	for name, c := range charts {
		c.xs, c.xlabel = xs, labels
		if err := c.render(filepath.Join(out, name)); err != nil {
			return fmt.Errorf("plotting %s: %w", name, err)
		}
	}
	return nil
}
