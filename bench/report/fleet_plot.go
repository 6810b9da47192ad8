package report

import (
	"fmt"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fleetlimit/fleetlimit/bench"
)

// fleetBinSamples is the width of the plots' bins, in samples of the series.
const fleetBinSamples = 10

// plotFleet draws one way's run: capacity, attempted in-flight and
// L_global over time (top), successes and 429s per second (bottom).
func plotFleet(path string, res bench.FleetResult) error {
	type bin struct {
		at                          float64 // seconds, bin end
		capacity, inflight, lGlobal float64
		ok, rejected                float64 // per second
	}
	var bins []bin
	s := res.Series
	for i := 0; i+fleetBinSamples <= len(s); i += fleetBinSamples {
		j := i + fleetBinSamples
		var b bin
		var dt float64
		prev := 0.0
		if i > 0 {
			prev = s[i-1].At.Seconds()
		}
		for _, x := range s[i:j] {
			b.inflight += x.Inflight
			b.ok += float64(x.Succeeded)
			b.rejected += float64(x.Rejected)
		}
		dt = s[j-1].At.Seconds() - prev
		b.inflight /= float64(j - i)
		if dt > 0 {
			b.ok /= dt
			b.rejected /= dt
		}
		b.at = s[j-1].At.Seconds()
		b.capacity = float64(s[j-1].Capacity)
		b.lGlobal = float64(s[j-1].LGlobal)
		bins = append(bins, b)
	}

	sc := res.Scenario
	top := plot.New()
	top.Title.Text = fmt.Sprintf("%s: goodput %.0f req/s, %.2f %% 429s, peak %.2f×C", res.Way, res.Goodput(), 100*res.RejectedFraction(), res.PeakRatio)
	top.Y.Label.Text = "requests in flight"
	top.X.Label.Text = "time (s)"
	top.X.Min, top.X.Max = 0, sc.Duration.Seconds()
	top.Y.Min = 0
	yMax := float64(sc.Capacity)
	for _, b := range bins {
		yMax = max(yMax, b.inflight, b.lGlobal)
	}
	top.Y.Max = yMax * 1.3 // room for the legend
	top.Add(plotter.NewGrid())
	top.Y.Tick.Marker = plainTicks{}
	top.X.Tick.Marker = plainTicks{}

	// The capacity as a step function from the schedule itself.
	var capXY plotter.XYs
	steps := sc.Steps()
	for i, st := range steps {
		end := sc.Duration
		if i+1 < len(steps) {
			end = steps[i+1].At
		}
		capXY = append(capXY, plotter.XY{X: st.At.Seconds(), Y: float64(st.Capacity)}, plotter.XY{X: end.Seconds(), Y: float64(st.Capacity)})
	}
	capLine, err := plotter.NewLine(capXY)
	if err != nil {
		return err
	}
	capLine.Color = colorCapacity
	capLine.Width = vg.Points(2.5)
	top.Add(capLine)
	top.Legend.Add("capacity C", capLine)

	inXY := make(plotter.XYs, len(bins))
	lgXY := make(plotter.XYs, 0, len(bins))
	okXY := make(plotter.XYs, len(bins))
	rejXY := make(plotter.XYs, len(bins))
	rateMax := 0.0
	for i, b := range bins {
		inXY[i] = plotter.XY{X: b.at, Y: b.inflight}
		if b.lGlobal > 0 {
			lgXY = append(lgXY, plotter.XY{X: b.at, Y: b.lGlobal})
		}
		okXY[i] = plotter.XY{X: b.at, Y: b.ok}
		rejXY[i] = plotter.XY{X: b.at, Y: b.rejected}
		rateMax = max(rateMax, b.ok, b.rejected)
	}
	inLine, err := plotter.NewLine(inXY)
	if err != nil {
		return err
	}
	inLine.Color = colorK
	inLine.Width = vg.Points(1.5)
	top.Add(inLine)
	top.Legend.Add("attempted in-flight, all nodes (100 ms mean)", inLine)
	if len(lgXY) > 0 {
		lgLine, err := plotter.NewLine(lgXY)
		if err != nil {
			return err
		}
		lgLine.Color = colorAIMDLaw
		lgLine.Width = vg.Points(1.5)
		lgLine.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		top.Add(lgLine)
		top.Legend.Add("L_global (node 0's last grant)", lgLine)
	}
	top.Legend.Top = true
	top.Legend.TextStyle.Font.Size = vg.Points(10)

	bottom := plot.New()
	bottom.Y.Label.Text = "responses per second"
	bottom.X.Label.Text = "time (s)"
	bottom.X.Min, bottom.X.Max = 0, sc.Duration.Seconds()
	bottom.Y.Min = 0
	bottom.Y.Max = max(rateMax, sc.IdealGoodput()) * 1.1
	bottom.Add(plotter.NewGrid())
	bottom.Y.Tick.Marker = plainTicks{}
	bottom.X.Tick.Marker = plainTicks{}
	idealXY := make(plotter.XYs, len(capXY))
	for i, p := range capXY {
		idealXY[i] = plotter.XY{X: p.X, Y: p.Y / sc.BaseLatency.Seconds()}
	}
	idealLine, err := plotter.NewLine(idealXY)
	if err != nil {
		return err
	}
	idealLine.Color = colorCapacity
	idealLine.Width = vg.Points(2.5)
	okLine, err := plotter.NewLine(okXY)
	if err != nil {
		return err
	}
	okLine.Color = colorK
	okLine.Width = vg.Points(1.2)
	rejLine, err := plotter.NewLine(rejXY)
	if err != nil {
		return err
	}
	rejLine.Color = colorLimited
	rejLine.Width = vg.Points(1.2)
	bottom.Add(idealLine, okLine, rejLine)
	bottom.Legend.Add("ideal goodput C / base latency", idealLine)
	bottom.Legend.Add("successes/s", okLine)
	bottom.Legend.Add("429s/s", rejLine)
	bottom.Legend.Top = true
	bottom.Legend.TextStyle.Font.Size = vg.Points(10)

	plots := [][]*plot.Plot{{top}, {bottom}}
	img := vgimg.NewWith(vgimg.UseWH(11*vg.Inch, 7*vg.Inch), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(plots, tiles, draw.New(img))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return writePNG(path, img)
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// ("25", not "25.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', -1, 64)
		}
	}
	return ticks
}
