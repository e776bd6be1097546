package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// series is one line of a chart.
type series struct {
	name string
	ys   []float64
}

// chart is a line chart over the simulated sizes.
type chart struct {
	title, ylabel string
	xs            []float64 // servers
	xlabels       []string
	lines         []series
	goal          float64 // a dashed horizontal line (0: none)
	goalName      string
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

const (
	plotW, plotH                       = 900, 560
	marginL, marginR, marginT, marginB = 90, 290, 50, 70
)

// niceStep is a round tick step giving about n ticks up to v.
func niceStep(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	raw := v / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func formatTick(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// render draws the chart as a PNG.
func (c chart) render(path string) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	black, grey := color.RGBA{0, 0, 0, 0xff}, color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	x0, x1, y0, y1 := marginL, plotW-marginR, plotH-marginB, marginT
	ymax := c.goal * 1.2
	xmax := 0.0
	for _, s := range c.lines {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				ymax = math.Max(ymax, y)
			}
		}
	}
	for _, x := range c.xs {
		xmax = math.Max(xmax, x)
	}
	if ymax <= 0 {
		ymax = 1
	}
	step := niceStep(ymax, 5)
	ytop := math.Ceil(ymax/step) * step
	xs := func(x float64) int { return x0 + int(float64(x1-x0)*x/(xmax*1.05)) }
	ys := func(y float64) int { return y0 - int(float64(y0-y1)*y/ytop) }
	for v := 0.0; v <= ytop+step/2; v += step {
		y := ys(v)
		line(img, x0, y, x1, y, grey, false)
		l := formatTick(v)
		drawText(img, x0-8-textWidth(l, 2), y-7, l, 2, black, false)
	}
	line(img, x0, y0, x1, y0, black, false)
	line(img, x0, y0, x0, y1, black, false)
	for i, x := range c.xs {
		px := xs(x)
		line(img, px, y0, px, y0+6, black, false)
		drawText(img, px-textWidth(c.xlabels[i], 2)/2, y0+12, c.xlabels[i], 2, black, false)
	}
	xl := "SERVERS/PROXIES"
	drawText(img, (x0+x1)/2-textWidth(xl, 2)/2, y0+42, xl, 2, black, false)
	drawText(img, 14, (y0+y1)/2+textWidth(c.ylabel, 2)/2, c.ylabel, 2, black, true)
	drawText(img, x0, 14, c.title, 3, black, false)
	ly := marginT
	if c.goal > 0 {
		line(img, x0, ys(c.goal), x1, ys(c.goal), color.RGBA{0xaa, 0, 0, 0xff}, true)
		line(img, x1+15, ly+7, x1+45, ly+7, color.RGBA{0xaa, 0, 0, 0xff}, true)
		drawText(img, x1+52, ly, c.goalName, 2, black, false)
		ly += 24
	}
	for i, s := range c.lines {
		col := palette[i%len(palette)]
		var px, py int
		for j, y := range s.ys {
			if math.IsNaN(y) {
				continue
			}
			nx, ny := xs(c.xs[j]), ys(y)
			if j > 0 && !math.IsNaN(s.ys[j-1]) {
				thick(img, px, py, nx, ny, col)
			}
			for dx := -4; dx <= 4; dx++ {
				for dy := -4; dy <= 4; dy++ {
					img.SetRGBA(nx+dx, ny+dy, col)
				}
			}
			px, py = nx, ny
		}
		thick(img, x1+15, ly+7, x1+45, ly+7, col)
		drawText(img, x1+52, ly, s.name, 2, black, false)
		ly += 24
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// line draws a one-pixel line (Bresenham), dashed if asked.
func line(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA, dashed bool) {
	dx, dy := abs(xb-xa), -abs(yb-ya)
	sx, sy := sign(xb-xa), sign(yb-ya)
	e := dx + dy
	for n := 0; ; n++ {
		if !dashed || (n/8)%2 == 0 {
			img.SetRGBA(xa, ya, c)
		}
		if xa == xb && ya == yb {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			xa += sx
		} else if e2 <= dx {
			e += dx
			ya += sy
		}
	}
}

func thick(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA) {
	for o := -1; o <= 1; o++ {
		line(img, xa, ya+o, xb, yb+o, c, false)
		line(img, xa+o, ya, xb+o, yb, c, false)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
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
		labels[i] = fmt.Sprintf("%d/%d", r.Servers, r.Proxies)
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
		lat = append(lat,
			series{"VERDICT P50 " + rate(i) + "/S", at(i, func(st *steady) float64 { return st.ObsToVerdict.P50 })},
			series{"VERDICT P99 " + rate(i) + "/S", at(i, func(st *steady) float64 { return st.ObsToVerdict.P99 })},
			series{"FP P99 " + rate(i) + "/S", at(i, func(st *steady) float64 { return st.ObsToFp.P99 })})
		fan = append(fan,
			series{"OBS>ALL P99 " + rate(i) + "/S", at(i, func(st *steady) float64 { return st.DriftAll.P99 })},
			series{"KV>PX P50 " + rate(i) + "/S", at(i, func(st *steady) float64 { return st.KVToProxy.P50 })},
			series{"KV>PX P99 " + rate(i) + "/S", at(i, func(st *steady) float64 { return st.KVToProxy.P99 })})
	}
	storage := func(name string) []float64 {
		return at(0, func(st *steady) float64 { return st.Storage[name].GiBPerDay })
	}
	charts := map[string]chart{
		"latency.png": {title: "OBSERVATION TO VERDICT (LOG10 MS)", ylabel: "LOG10 MS", goal: 1, goalName: "GOAL P99 10 MS", lines: logs(lat)},
		"fanout.png":  {title: "A DRIFT REACHING EVERY PROXY (LOG10 MS)", ylabel: "LOG10 MS", goal: math.Log10(50), goalName: "GOAL P99 50 MS", lines: logs(fan)},
		"cpu.png": {title: "CPU DURING THE STEADY PHASE", ylabel: "% OF ONE CORE", lines: []series{
			{"NATS (3 NODES)", comp("nats-", true)}, {"FINGERPRINT", comp("fingerprint", true)}, {"DRIFT (2)", comp("drift-", true)},
			{"AUDIT", comp("audit", true)}, {"CLICKHOUSE", comp("clickhouse", true)}, {"PROXY FLEET", comp("fleet", true)},
		}},
		"memory.png": {title: "RESIDENT MEMORY (PEAK)", ylabel: "MIB", lines: []series{
			{"NATS (3 NODES)", comp("nats-", false)}, {"FINGERPRINT", comp("fingerprint", false)}, {"DRIFT (2)", comp("drift-", false)},
			{"AUDIT", comp("audit", false)}, {"CLICKHOUSE", comp("clickhouse", false)}, {"PROXY FLEET", comp("fleet", false)},
		}},
		"watches.png": {title: "KV WATCHES (STATUS BUCKET CONSUMERS)", ylabel: "THOUSANDS", lines: []series{
			{"CONSUMERS", col(func(r *result) float64 { return float64(r.KVConsumers) / 1000 })},
			{"GATES", col(func(r *result) float64 { return float64(r.Gates) / 1000 })},
			{"SETUP S /10", col(func(r *result) float64 { return r.WatchSetupSec / 10 })},
		}},
		"proxy.png": {title: "PER PROXY", ylabel: "KIB OR COUNT", lines: []series{
			{"RSS KIB/PROXY", col(func(r *result) float64 { return r.FleetRSSMiBPerProxy * 1024 })},
			{"HEAP KIB/GATE", col(func(r *result) float64 { return r.FleetHeapKiBPerGate })},
			{"WATCHES/PROXY", col(func(r *result) float64 { return r.WatchesPerProxy })},
		}},
		"storage.png": {title: "JETSTREAM GIB/DAY AT " + rate(0) + " OBS/S, 1 REPLICA", ylabel: "GIB/DAY", lines: []series{
			{"OBSERVATIONS", storage(bus.StreamObservations)},
			{"FINGERPRINTS", storage(bus.StreamFingerprints)},
			{"VERDICTS", storage(bus.StreamVerdicts)},
			{"STATUS KV", storage("KV_" + bus.BucketStatus)},
			{"MANIFESTS", storage("OBJ_" + bus.BucketManifests)},
		}},
	}
	for name, c := range charts {
		c.xs, c.xlabels = xs, labels
		if err := c.render(filepath.Join(out, name)); err != nil {
			return fmt.Errorf("plotting %s: %w", name, err)
		}
	}
	return nil
}

// logs maps every value to its base-10 logarithm (latencies span 1 ms to
// seconds); zero and missing values are left out.
func logs(ss []series) []series {
	out := make([]series, len(ss))
	for i, s := range ss {
		ys := make([]float64, len(s.ys))
		for j, y := range s.ys {
			ys[j] = math.NaN()
			if y > 0 {
				ys[j] = math.Log10(y)
			}
		}
		out[i] = series{s.name, ys}
	}
	return out
}
