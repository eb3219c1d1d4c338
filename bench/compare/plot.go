package main

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette gives each library configuration a colour; tuned ones (and relock-new) are lighter.
var palette = map[string]color.RGBA{
	"relock":              {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"relock-new":          {R: 0xff, G: 0x98, B: 0x96, A: 0xff},
	"relock-nocancel":     {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"redsync-default":     {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"redsync-tuned":       {R: 0x9e, G: 0xc5, B: 0xe8, A: 0xff},
	"redislock-default":   {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"redislock-tuned":     {R: 0x98, G: 0xdf, B: 0x8a, A: 0xff},
	"rueidislock-default": {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"rueidislock-tuned":   {R: 0xc5, G: 0xb0, B: 0xd5, A: 0xff},
}

func colorOf(lib string) color.Color {
	if c, ok := palette[lib]; ok {
		return c
	}
	return color.Black
}

// plotThroughput draws one horizontal bar chart per scenario, one bar per library.
func plotThroughput(path string, results []*result, sel []lib) error {
	type panel struct {
		scenario string
		g        int
		title    string
	}
	panels := []panel{
		{"uncontended", 1, "uncontended, 1 goroutine"},
		{"uncontended", 8, "uncontended, 8 goroutines"},
		{"uncontended", 64, "uncontended, 64 goroutines"},
	}
	for _, r := range results {
		if r.scenario == "uncontended-rtt" {
			panels = append(panels, panel{r.scenario, 1, fmt.Sprintf("uncontended, 1 goroutine, %v round trip", r.addedRTT)})
			break
		}
	}
	panels = append(panels,
		panel{"hotkey", 2, "hot key, 2 contenders"},
		panel{"hotkey", 16, "hot key, 16 contenders"},
		panel{"handoff", 2, "hand-off (1 / mean hand-off time)"})
	cols, rows := 3, 2
	if len(panels) > cols*rows {
		cols = 4
	}
	img := vgimg.New(vg.Length(cols)*13*vg.Inch/3, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	var names []string
	for i := len(sel) - 1; i >= 0; i-- { // top to bottom in selection order
		names = append(names, sel[i].name)
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font.Size = vg.Points(11)
		p.X.Label.Text = "acquisitions / s"
		p.X.Min = 0
		for j, name := range names {
			r := find(results, name, pn.scenario, pn.g)
			v := 0.0
			if r != nil {
				v = r.opsPerSec()
			}
			b, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(10))
			if err != nil {
				return err
			}
			b.Horizontal = true
			b.XMin = float64(j)
			b.Color = colorOf(name)
			b.LineStyle.Width = 0
			p.Add(b)
		}
		p.NominalY(names...)
		p.Add(plotter.NewGrid())
		p.Draw(tiles.At(dc, i%cols, i/cols))
	}
	return save(path, img)
}

// plotWaits draws the distribution of lock waits on the hot key with g contenders, one line
// per library: the share of acquisitions that waited longer than x (a complementary CDF),
// both axes logarithmic, so that the tail (starved waiters) is as visible as the median.
func plotWaits(path string, results []*result, sel []lib, g int) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Wait for the lock, hot key, %d contenders: share of acquisitions that waited longer than x", g)
	p.X.Label.Text = "wait (µs, log scale)"
	p.Y.Label.Text = "share waiting longer (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Max = 1
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs = 0
	for _, l := range sel {
		r := find(results, l.name, "hotkey", g)
		if r == nil || len(r.waits) == 0 {
			continue
		}
		n := len(r.waits)
		var pts plotter.XYs
		// Evenly spaced in log(share), so the tail keeps its detail.
		last := -1
		for share := 1.0; ; share /= 1.05 {
			i := min(n-1, int(float64(n)*(1-share)))
			if i != last {
				pts = append(pts, plotter.XY{X: math.Max(1, float64(r.waits[i])/1e3), Y: float64(n-i) / float64(n)})
				last = i
			}
			if i == n-1 {
				break
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = colorOf(l.name)
		line.Width = vg.Points(1.8)
		p.Add(line)
		p.Legend.Add(l.name, line)
	}
	img := vgimg.New(9*vg.Inch, 5*vg.Inch)
	p.Draw(draw.New(img))
	return save(path, img)
}

func save(path string, img *vgimg.Canvas) error {
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
