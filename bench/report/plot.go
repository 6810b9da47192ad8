package report

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fleetlimit/fleetlimit/bench"
)

var (
	colorCapacity = color.RGBA{R: 140, G: 140, B: 140, A: 255}
	colorK        = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colorLimited  = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colorAIMDLaw  = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	colorRef      = color.RGBA{A: 255}
)

const plotDPI = 96

// plotTraces draws one panel per strategy: the capacity the strategy
// faced, the k it chose and its rate-limited steps, on one seed. All
// panels share the y range so that they compare at a glance.
func plotTraces(path string, seed uint64, traces []traceRun) error {
	const cols = 2
	rows := (len(traces) + cols - 1) / cols
	yMax := 0.0
	for _, tr := range traces {
		for _, s := range tr.run.Trace {
			yMax = max(yMax, s.Capacity, float64(s.Concurrency))
		}
	}
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, tr := range traces {
		p, err := tracePanel(tr, seed, yMax)
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = p
	}
	w, h := 12*vg.Inch, vg.Length(rows)*3*vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i := range plots[j] {
			if plots[j][i] != nil {
				plots[j][i].Draw(canvases[j][i])
			}
		}
	}
	return writePNG(path, img)
}

func tracePanel(tr traceRun, seed uint64, yMax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (seed %d): %.1f req/s, %.0f %% rate-limited",
		tr.name, seed, tr.run.Throughput(), 100*tr.run.RateLimitedFraction())
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "concurrency (requests)"
	p.X.Min, p.X.Max = 0, float64(len(tr.run.Trace))
	p.Y.Min, p.Y.Max = 0, yMax*1.05
	p.Add(plotter.NewGrid())

	capacity := make(plotter.XYs, len(tr.run.Trace))
	k := make(plotter.XYs, len(tr.run.Trace))
	var limited plotter.XYs
	for i, s := range tr.run.Trace {
		capacity[i] = plotter.XY{X: float64(s.Step), Y: s.Capacity}
		k[i] = plotter.XY{X: float64(s.Step), Y: float64(s.Concurrency)}
		if s.RateLimited > 0 {
			limited = append(limited, k[i])
		}
	}
	capLine, err := plotter.NewLine(capacity)
	if err != nil {
		return nil, err
	}
	capLine.Color = colorCapacity
	capLine.Width = vg.Points(1.2)
	kLine, err := plotter.NewLine(k)
	if err != nil {
		return nil, err
	}
	kLine.Color = colorK
	kLine.Width = vg.Points(1.2)
	p.Add(capLine, kLine)
	p.Legend.Add("true capacity", capLine)
	p.Legend.Add("k (the strategy's concurrency)", kLine)
	if len(limited) > 0 {
		dots, err := plotter.NewScatter(limited)
		if err != nil {
			return nil, err
		}
		dots.GlyphStyle = draw.GlyphStyle{Color: colorLimited, Radius: vg.Points(1.8), Shape: draw.CircleGlyph{}}
		p.Add(dots)
		p.Legend.Add("rate-limited step", dots)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	return p, nil
}

// plotGrid draws every grid candidate's median rate-limited share against
// its median throughput on the tuning seeds.
func plotGrid(path string, r *modelResults) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Selection grid on tuning seeds %d–%d", r.tuneSeeds[0], r.tuneSeeds[len(r.tuneSeeds)-1])
	p.X.Label.Text = "median rate-limited share of sent requests (%)"
	p.Y.Label.Text = "median effective throughput (req/s)"
	p.Add(plotter.NewGrid())

	// The axes are fixed up front so that the excluded band can be drawn
	// first, under the points.
	xMax, yMax := 0.0, 0.0
	for _, set := range [][]bench.Scored{r.g2, r.aimd} {
		for _, sc := range set {
			xMax = max(xMax, 100*sc.Result.RateLimited.Median)
			yMax = max(yMax, sc.Result.Throughput.Median)
		}
	}
	for _, ref := range r.tuneRefs {
		xMax = max(xMax, 100*ref.RateLimited.Median)
		yMax = max(yMax, ref.Throughput.Median)
	}
	p.X.Min, p.X.Max = 0, xMax*1.05
	p.Y.Min, p.Y.Max = 0, yMax*1.05
	band, err := plotter.NewPolygon(plotter.XYs{
		{X: 100 * bench.SelectionMaxRateLimited, Y: p.Y.Min}, {X: p.X.Max, Y: p.Y.Min},
		{X: p.X.Max, Y: p.Y.Max}, {X: 100 * bench.SelectionMaxRateLimited, Y: p.Y.Max},
	})
	if err != nil {
		return err
	}
	band.Color = color.NRGBA{R: 200, G: 200, B: 200, A: 110}
	band.LineStyle.Width = 0
	p.Add(band)
	p.Legend.Add(fmt.Sprintf("excluded: rate-limited > %.0f %%", 100*bench.SelectionMaxRateLimited), band)

	points := func(scored []bench.Scored) plotter.XYs {
		xys := make(plotter.XYs, len(scored))
		for i, s := range scored {
			xys[i] = plotter.XY{X: 100 * s.Result.RateLimited.Median, Y: s.Result.Throughput.Median}
		}
		return xys
	}
	for _, set := range []struct {
		name   string
		scored []bench.Scored
		best   int
		color  color.Color
		shape  draw.GlyphDrawer
	}{
		{"gradient2 candidates", r.g2, r.g2Best, colorK, draw.CircleGlyph{}},
		{"AIMD-law candidates", r.aimd, r.aimdBest, colorAIMDLaw, draw.TriangleGlyph{}},
	} {
		sc, err := plotter.NewScatter(points(set.scored))
		if err != nil {
			return err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: set.color, Radius: vg.Points(3), Shape: set.shape}
		p.Add(sc)
		p.Legend.Add(set.name, sc)
		if set.best >= 0 {
			win, err := plotter.NewScatter(plotter.XYs{{X: 100 * set.scored[set.best].Result.RateLimited.Median, Y: set.scored[set.best].Result.Throughput.Median}})
			if err != nil {
				return err
			}
			win.GlyphStyle = draw.GlyphStyle{Color: set.color, Radius: vg.Points(8), Shape: draw.RingGlyph{}}
			p.Add(win)
			p.Legend.Add(set.name[:len(set.name)-len(" candidates")]+" grid winner", win)
		}
	}
	for _, ref := range r.tuneRefs {
		sc, err := plotter.NewScatter(plotter.XYs{{X: 100 * ref.RateLimited.Median, Y: ref.Throughput.Median}})
		if err != nil {
			return err
		}
		shape := draw.GlyphDrawer(draw.BoxGlyph{})
		if ref.Name == bench.OracleStrategy().Name {
			shape = draw.PyramidGlyph{}
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: colorRef, Radius: vg.Points(4), Shape: shape}
		p.Add(sc)
		p.Legend.Add(ref.Name, sc)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(10)

	img := vgimg.NewWith(vgimg.UseWH(9*vg.Inch, 6*vg.Inch), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	p.Draw(draw.New(img))
	return writePNG(path, img)
}

func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
