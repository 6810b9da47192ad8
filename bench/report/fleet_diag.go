package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/bench"
)

// fleetDiag is what one run of an adaptive way shows about its limiters.
type fleetDiag struct {
	// binsWith429 of bins 100-ms intervals had at least one 429;
	// max429 is the most 429s in one of them.
	binsWith429, bins, max429 int
	// dropsBeforeHalving counts the drops before the capacity halved.
	dropsBeforeHalving uint64
	// atHalving is the mean estimate at the last sample before the
	// halving, lowest the lowest within diagWindow after it, lowestAt
	// when, and dropsToLowest the drops in between.
	atHalving, lowest float64
	lowestAt          time.Duration
	dropsToLowest     uint64
	// atDoubling and atEnd are the mean estimates at the doubling and
	// over the last second; dropsLastThird counts the drops in between.
	atDoubling, atEnd float64
	dropsLastThird    uint64
	// fallFrom and fallTo bound the largest relative fall of the mean
	// estimate within one heartbeat interval anywhere in the run, which
	// started at fallAt.
	fallFrom, fallTo float64
	fallAt           time.Duration
}

// backoffRatio is the fleet limiters' BackoffRatio.
var backoffRatio = bench.FleetLimiterConfig(1).BackoffRatio

// fallBackoffs is how many backoffs the fastest fall takes.
func (d fleetDiag) fallBackoffs() float64 {
	if d.fallFrom <= 0 || d.fallTo <= 0 {
		return 0
	}
	return max(0, math.Log(d.fallTo/d.fallFrom)/math.Log(backoffRatio))
}

// impliedBackoffs is how many backoffs the fall at the halving takes.
func (d fleetDiag) impliedBackoffs() float64 {
	return max(0, math.Log(d.lowest/d.atHalving)/math.Log(backoffRatio))
}

// diagWindow is how far after the halving diagnose looks for the lowest
// estimate.
const diagWindow = time.Second

// diagnose reads res's series. It reports false when the series holds no
// estimates (a static way) or too few samples.
func diagnose(res bench.FleetResult) (fleetDiag, bool) {
	var d fleetDiag
	s := res.Series
	third := res.Scenario.Duration / 3
	halving, doubling := third, 2*third
	var dropsAtHalving, dropsAtDoubling uint64
	found := false
	var endSum float64
	endN := 0
	for i, x := range s {
		switch {
		case x.At <= halving:
			d.atHalving, dropsAtHalving = x.MeanEstimate, x.Drops
			d.dropsBeforeHalving = x.Drops
		case x.At <= halving+diagWindow:
			if !found || x.MeanEstimate < d.lowest {
				d.lowest, d.lowestAt, d.dropsToLowest = x.MeanEstimate, x.At-halving, x.Drops-dropsAtHalving
				found = true
			}
		}
		if x.At <= doubling {
			d.atDoubling, dropsAtDoubling = x.MeanEstimate, x.Drops
		}
		if x.At > res.Scenario.Duration-time.Second {
			endSum += x.MeanEstimate
			endN++
		}
		if i == len(s)-1 {
			d.dropsLastThird = x.Drops - dropsAtDoubling
		}
	}
	if !found || d.atHalving <= 0 || endN == 0 {
		return d, false
	}
	d.atEnd = endSum / float64(endN)
	for i, x := range s {
		if x.MeanEstimate <= 0 {
			continue
		}
		for _, y := range s[i+1:] {
			if y.At-x.At > res.Scenario.Heartbeat {
				break
			}
			if y.MeanEstimate > 0 && (d.fallFrom == 0 || y.MeanEstimate/x.MeanEstimate < d.fallTo/d.fallFrom) {
				d.fallFrom, d.fallTo, d.fallAt = x.MeanEstimate, y.MeanEstimate, x.At
			}
		}
	}
	for i := 0; i+fleetBinSamples <= len(s); i += fleetBinSamples {
		var n int64
		for _, x := range s[i : i+fleetBinSamples] {
			n += x.Rejected
		}
		d.bins++
		if n > 0 {
			d.binsWith429++
		}
		d.max429 = max(d.max429, int(n))
	}
	return d, true
}

// adaptiveDiags returns the diagnosis of the plotted run of each adaptive
// way that was measured, by way.
func adaptiveDiags(runs []fleetRun) map[bench.FleetWay]fleetDiag {
	out := make(map[bench.FleetWay]fleetDiag)
	for _, r := range runs {
		if r.skipped != "" || (r.way != bench.IndependentAdaptive && r.way != bench.Fleetlimit) {
			continue
		}
		if d, ok := diagnose(r.runs[r.rep()]); ok {
			out[r.way] = d
		}
	}
	return out
}

// renderDiagnosis shows, for the adaptive ways' plotted runs, how their
// 429s are spread, how far the estimates fall when the capacity halves and
// how fast they grow when it doubles.
func renderDiagnosis(sc bench.FleetScenario, runs []fleetRun) string {
	diags := adaptiveDiags(runs)
	if len(diags) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `
**The adaptive nodes' own state** in the plotted run (the run with the
median goodput), sampled with the in-flight series: the mean over the nodes
of their limiter's estimate (each node's inference of the whole provider's
capacity; fleetlimit reports it as l_local), and the drops (429s) their
limiters counted. A backoff multiplies the estimate by BackoffRatio %[1]v, so
a fall from a to b takes log(b/a)/log(%[1]v) backoffs (in parentheses). One
heartbeat is %.0[2]f base round trips; "at most one decrease per round trip"
would allow about that many backoffs per heartbeat for each node.

`, backoffRatio, float64(sc.Heartbeat)/float64(sc.BaseLatency))
	t := &table{
		header: []string{"way", "100-ms intervals with a 429", "most 429s in one", "drops before the halving",
			"estimate at the halving → lowest in the next 1 s (backoffs)",
			fmt.Sprintf("fastest fall within %v (backoffs)", sc.Heartbeat),
			"estimate at the doubling → last 1 s", "drops in the last third"},
		align: []byte("lrrrrrrr"),
	}
	for _, way := range []bench.FleetWay{bench.IndependentAdaptive, bench.Fleetlimit} {
		d, ok := diags[way]
		if !ok {
			continue
		}
		t.add(way.String(), fmt.Sprintf("%d of %d", d.binsWith429, d.bins), fmt.Sprint(d.max429), fmt.Sprint(d.dropsBeforeHalving),
			fmt.Sprintf("%.1f → %.1f after %.0f ms (%.1f)", d.atHalving, d.lowest, msf(d.lowestAt), d.impliedBackoffs()),
			fmt.Sprintf("%.1f → %.1f at %.2f s (%.1f)", d.fallFrom, d.fallTo, d.fallAt.Seconds(), d.fallBackoffs()),
			fmt.Sprintf("%.1f → %.1f", d.atDoubling, d.atEnd), fmt.Sprint(d.dropsLastThird))
	}
	b.WriteString(t.String())
	return b.String()
}

// Parameters of the lone-limiter reproductions (bench.DropBurst,
// bench.JitterCeiling, bench.SpreadCeiling).
const (
	burstEstimate = 30
	burstShare    = 7
	burstGap      = 500 * time.Microsecond
	burstMax      = 50
	jitterRounds  = 3000
	jitterSeed    = 1
)

// jitterSigmas are the σ of the jitter table: median RTT ÷ fastest − 1 is
// about 0.674·σ, so they give about 0, 1, 2, 5 and 10 %.
var jitterSigmas = []float64{0, 0.015, 0.03, 0.075, 0.15}

// spreadSigmas are the σ of the spread table, the lognormal's: the
// fastest of a round trip's samples then lies well below the median, and
// the windowed minimum of those further still.
var spreadSigmas = []float64{0.05, 0.1, 0.2, 0.3, 0.5, 1}

// renderLimiterProperties reproduces the three limiter properties the
// findings rely on, on a lone limiter with a simulated clock, and relates
// the second to the jitter measured in the fleetlimit run.
func renderLimiterProperties(sc bench.FleetScenario, runs []fleetRun) (string, error) {
	var b strings.Builder
	cfg := bench.FleetLimiterConfig(sc.WorkersPerNode)
	after, err := bench.DropBurst(cfg, burstEstimate, burstShare, burstMax, burstGap)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, `
**Three properties of the limiter behind these numbers**, reproduced on a
lone `+"`adaptive.Limiter`"+` with this section's configuration (and the library's
defaults beside it) and a simulated clock (`+"`bench.DropBurst`, `bench.JitterCeiling`"+`,
`+"`bench.SpreadCeiling`"+`), so they do not depend on this machine's timing:

- *A 429 burst* (`+"`bench.DropBurst`"+`): estimate %d (a node's view of the whole
  provider), ceiling %d (its share), %d requests accepted and in flight, and
  one excess slot whose every request is answered 429 after %v and
  replaced at once by a queued one (a limiter driven directly, without
  Transport's hold of a refused slot). The estimate after each 429: `,
		burstEstimate, burstShare, burstShare-1, burstGap)
	for i, v := range after {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.1f", v)
	}
	fmt.Fprintf(&b, `. The burst is %d 429(s) long, %v, %.2f of a %v round
  trip: it ends when the limiter stops re-admitting the excess slot, which
  with a 429's cut of one slot off the ceiling is at once.
`, len(after), time.Duration(len(after))*burstGap, float64(time.Duration(len(after))*burstGap)/float64(sc.BaseLatency), sc.BaseLatency)

	fmt.Fprintf(&b, `- *The jitter ceiling* (`+"`bench.JitterCeiling`"+`): %d round trips of %v against an
  upstream whose latency is flat at any load (no queueing, no drops), with
  the whole limit in flight each time. The measured round trips carry
  timing jitter, %v·(1 + σ·|Z|), Z standard normal. The limiter starts at
  20 and its MaxLimit is 1000; the estimate is the mean over the last 300
  round trips, for this section's configuration, for the library's
  defaults (Gradient2 with the measured tolerance) and for the defaults
  with a fixed Tolerance of 2.

`, jitterRounds, sc.BaseLatency, sc.BaseLatency)
	// addCeilings adds the row of one σ: its two labels, then the
	// estimate ceiling leaves for this section's configuration, the
	// defaults with Tolerance 2, and the defaults.
	defaults := adaptive.Config{MaxQueued: sc.WorkersPerNode}
	fixed := adaptive.Config{MaxQueued: sc.WorkersPerNode, Tolerance: 2}
	addCeilings := func(t *table, ceiling func(adaptive.Config, time.Duration, float64, int, uint64) (float64, error), sigma float64, labels ...string) error {
		for _, c := range []adaptive.Config{cfg, fixed, defaults} {
			v, err := ceiling(c, sc.BaseLatency, sigma, jitterRounds, jitterSeed)
			if err != nil {
				return err
			}
			labels = append(labels, fmt.Sprintf("%.1f", v))
		}
		t.add(labels...)
		return nil
	}
	t := &table{header: []string{"σ", "median RTT ÷ fastest − 1", "estimate, FlatLatency()", "estimate, Tolerance 2", "estimate, defaults"}, align: []byte("rrrrr")}
	for _, sigma := range jitterSigmas {
		if err := addCeilings(t, bench.JitterCeiling, sigma, fmt.Sprintf("%.3f", sigma), fmt.Sprintf("%.1f %%", 100*0.674*sigma)); err != nil {
			return "", err
		}
	}
	b.WriteString(t.String())
	fmt.Fprintf(&b, `
- *Requests of unequal size* (`+"`bench.SpreadCeiling`"+`): the same, but the
  round trips spread both ways around a median of %v, %v·exp(σ·Z) — as
  completions of unequal length do — where the upstream is just as flat.
  A fixed tolerance (the column Tolerance 2, Netflix's default)
  compares one sample per round trip with the windowed minimum of the
  rounds' fastest samples, which a spread puts below a typical sample by
  more than 2 allows: it reads the spread as queueing, and once the
  gradient is clamped at 0.5 the estimate settles near the floor of its
  law, where estimate·0.5 + √estimate = estimate (4). The defaults compare
  each round's fastest sample instead, within a tolerance measured from
  how far it wanders (the noise band, `+"`go doc ./adaptive Config.Tolerance`"+`),
  and take the spread mostly for noise; two rounds in a row that stray
  beyond the band still cut, which is what keeps some rows under 1000. AIMD on drops
  does not read latency at all.

`, sc.BaseLatency, sc.BaseLatency)
	t = &table{header: []string{"σ", "p90 ÷ p10 of the round trips", "estimate, FlatLatency()", "estimate, Tolerance 2", "estimate, defaults"}, align: []byte("rrrrr")}
	for _, sigma := range spreadSigmas {
		if err := addCeilings(t, bench.SpreadCeiling, sigma, fmt.Sprintf("%.2f", sigma), fmt.Sprintf("%.2f", math.Exp(2*1.2816*sigma))); err != nil {
			return "", err
		}
	}
	b.WriteString(t.String())
	if j, ok := fleetJitter(runs); ok {
		fmt.Fprintf(&b, "\nIn the plotted fleetlimit run the successful round trips had median ÷ fastest − 1 = %.1f %%.\n", 100*j)
	}
	return b.String(), nil
}

// fleetJitter returns median ÷ fastest − 1 of the successful round trips
// of the plotted fleetlimit run.
func fleetJitter(runs []fleetRun) (float64, bool) {
	r, ok := measured(runs, bench.Fleetlimit)
	if !ok {
		return 0, false
	}
	res := r.runs[r.rep()]
	if len(res.Latencies) == 0 {
		return 0, false
	}
	fastest := slices.Min(res.Latencies)
	p50 := bench.DurationPercentile(res.Latencies, 0.5)
	return float64(p50)/float64(fastest) - 1, true
}
