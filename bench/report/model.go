package report

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/bench"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// Targets of the model comparison.
const (
	targetRatioVsAIMD    = 1.25
	targetDefaultsVsAIMD = 1.30 // for the library's defaults, what a user gets without choosing
	targetRateLimited    = 0.10
	traceSeed            = 0
	tuneFirstSeed        = 1000
	scaleCapacity        = 200
	modelTraceImage      = "model-trace.png"
	modelGridImage       = "model-grid.png"
	gridTopPerLaw        = 5
	scaleCheckMaxLimit   = 10000
)

// modelResults holds everything the model section measures.
type modelResults struct {
	eval       []bench.StrategyResult // ModelStrategies on the evaluation seeds
	aimdIndex  int                    // index of the published AIMD in eval
	traces     []traceRun             // one seed of each strategy
	g2, aimd   []bench.Scored         // the selection grids on the tuning seeds
	g2Best     int
	aimdBest   int
	tuneRefs   []bench.StrategyResult // published AIMD and oracle on the tuning seeds
	scale      []scaleRow
	evalSeeds  []uint64
	tuneSeeds  []uint64
	strategies []bench.Strategy
}

type traceRun struct {
	name string
	run  sim.RunResult
}

type scaleRow struct {
	name     string
	at20     bench.StrategyResult
	at200    bench.StrategyResult
	oracle20 float64 // oracle's median at capacity 20
	oracle2h float64 // oracle's median at capacity 200
}

func runModel(ctx context.Context, e *env) (string, error) {
	start := time.Now()
	r, err := measureModel(ctx, e)
	if err != nil {
		return "", err
	}
	if err := plotTraces(filepath.Join(e.imgDir, modelTraceImage), traceSeed, r.traces); err != nil {
		return "", err
	}
	if err := plotGrid(filepath.Join(e.imgDir, modelGridImage), r); err != nil {
		return "", err
	}
	return renderModel(e, r, time.Since(start)), nil
}

func measureModel(ctx context.Context, e *env) (*modelResults, error) {
	mc := sim.PublishedModelConfig()
	r := &modelResults{
		evalSeeds:  bench.Seeds(0, e.opts.Seeds),
		tuneSeeds:  bench.Seeds(tuneFirstSeed, e.opts.Seeds),
		strategies: bench.ModelStrategies(),
		aimdIndex:  -1,
	}
	for i, st := range r.strategies {
		res, err := bench.RunStrategy(ctx, mc, st, r.evalSeeds, bench.ModelSteps)
		if err != nil {
			return nil, err
		}
		e.logf("model: %-36s median %6.2f req/s, rate-limited %5.1f%%", st.Name, res.Throughput.Median, 100*res.RateLimited.Median)
		r.eval = append(r.eval, res)
		if st.Name == bench.PublishedAIMDStrategy().Name {
			r.aimdIndex = i
		}
		run, err := bench.RunSeed(mc, st, traceSeed, bench.ModelSteps)
		if err != nil {
			return nil, err
		}
		r.traces = append(r.traces, traceRun{name: st.Name, run: run})
	}

	if r.aimdIndex < 0 {
		return nil, fmt.Errorf("model: the strategies lack %q, the baseline of the comparison", bench.PublishedAIMDStrategy().Name)
	}

	grid := func(cands []bench.Candidate) ([]bench.Scored, int, error) {
		scored := make([]bench.Scored, 0, len(cands))
		for _, c := range cands {
			res, err := bench.RunStrategy(ctx, mc, bench.LimiterStrategy(c.Label, c.Config), r.tuneSeeds, bench.ModelSteps)
			if err != nil {
				return nil, -1, err
			}
			scored = append(scored, bench.Scored{Candidate: c, Result: res})
		}
		return scored, bench.Select(scored, bench.SelectionMaxRateLimited), nil
	}
	var err error
	e.logf("model: selection grid, gradient2 (%d candidates × %d tuning seeds)", len(bench.Gradient2Grid()), len(r.tuneSeeds))
	if r.g2, r.g2Best, err = grid(bench.Gradient2Grid()); err != nil {
		return nil, err
	}
	e.logf("model: selection grid, AIMD law (%d candidates × %d tuning seeds)", len(bench.AIMDGrid()), len(r.tuneSeeds))
	if r.aimd, r.aimdBest, err = grid(bench.AIMDGrid()); err != nil {
		return nil, err
	}
	for _, st := range []bench.Strategy{bench.PublishedAIMDStrategy(), bench.OracleStrategy()} {
		res, err := bench.RunStrategy(ctx, mc, st, r.tuneSeeds, bench.ModelSteps)
		if err != nil {
			return nil, err
		}
		r.tuneRefs = append(r.tuneRefs, res)
	}

	e.logf("model: scale check at capacity %d", scaleCapacity)
	if r.scale, err = measureScale(ctx, r.evalSeeds); err != nil {
		return nil, err
	}
	return r, nil
}

// measureScale runs the oracle and the fleetlimit configurations on the
// published model and on one whose capacity starts at and reverts to
// scaleCapacity, every limiter starting at the model's initial capacity.
func measureScale(ctx context.Context, seeds []uint64) ([]scaleRow, error) {
	small := sim.PublishedModelConfig()
	large := sim.PublishedModelConfig()
	large.InitialCapacity, large.MeanCapacity = scaleCapacity, scaleCapacity
	scaled := func(cfg adaptive.Config, capacity int) adaptive.Config {
		cfg.InitialLimit, cfg.MaxLimit = capacity, scaleCheckMaxLimit
		return cfg
	}
	type pair struct{ small, large bench.Strategy }
	named := []struct {
		name string
		cfg  adaptive.Config
	}{
		{bench.NameFleetDefaults, bench.ModelDefaultsConfig()},
		{bench.NameFleetFixed, bench.ModelFixedToleranceConfig()},
		{bench.NameFleetGradient, bench.ModelGradient2Config()},
		{bench.NameFleetAIMD, bench.ModelAIMDConfig()},
		{bench.NameFleetGradientProportional, bench.ModelGradient2ProportionalConfig()},
	}
	pairs := []pair{{bench.OracleStrategy(), bench.OracleStrategy()}}
	for _, n := range named {
		pairs = append(pairs, pair{
			bench.LimiterStrategy(n.name, scaled(n.cfg, int(small.InitialCapacity))),
			bench.LimiterStrategy(n.name, scaled(n.cfg, scaleCapacity)),
		})
	}
	var rows []scaleRow
	for _, p := range pairs {
		a, err := bench.RunStrategy(ctx, small, p.small, seeds, bench.ModelSteps)
		if err != nil {
			return nil, err
		}
		b, err := bench.RunStrategy(ctx, large, p.large, seeds, bench.ModelSteps)
		if err != nil {
			return nil, err
		}
		rows = append(rows, scaleRow{name: p.small.Name, at20: a, at200: b})
	}
	for i := range rows {
		rows[i].oracle20 = rows[0].at20.Throughput.Median
		rows[i].oracle2h = rows[0].at200.Throughput.Median
	}
	return rows, nil
}

func pct(f float64) string  { return fmt.Sprintf("%.1f %%", 100*f) }
func rate(f float64) string { return fmt.Sprintf("%.2f", f) }

// beats counts the seeds on which a's throughput exceeds b's; both ran
// the same seeds in the same order.
func beats(a, b bench.StrategyResult) int {
	n := 0
	for i := range a.Seeds {
		if a.Seeds[i].Throughput > b.Seeds[i].Throughput {
			n++
		}
	}
	return n
}

func renderModel(e *env, r *modelResults, took time.Duration) string {
	var b strings.Builder
	n := len(r.evalSeeds)
	aimd := r.eval[r.aimdIndex]
	fmt.Fprintf(&b, "## 1. Control quality on the latent-capacity model\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; this section took %v.\n\n", e.date, e.machine, took.Round(time.Second))
	b.WriteString(codeBlock(e.command))
	fmt.Fprintf(&b, `
The model is `+"`internal/sim`"+`'s latent-capacity model with the published
parameters (`+"`sim.PublishedModelConfig()`"+`): one step is one simulated
second; a step's k requests all see latency 1 s (or k/c seconds above the
capacity c) plus N(0, 0.1 s²) noise and all succeed if that latency is at
most 1.5 s, else all are rate-limited; overload also drags the capacity
down. Every strategy runs %d steps on seeds 0–%d. A seed fixes the noise,
and both noise draws happen on every step whatever k is, so on one seed
every strategy faces the same random numbers.

fleetlimit runs through its real API (`+"`bench.LimiterPolicy`"+`): at the
start of each step it calls `+"`TryAcquire`"+` until the limiter refuses, so k is
the limiter's current limit; after the step it advances the limiter's
simulated clock by the step's latency and calls `+"`Release()`"+` on every
lease if the step succeeded (so the latency is the round-trip sample) or
`+"`Drop()`"+` on every lease if it was rate-limited, then moves the clock to the
next step's start.

- **req/s**: effective throughput of a run, succeeded requests ÷ %d s.
- **rate-limited**: rate-limited requests ÷ sent requests of a run.
- **median, p10, p90**: over the %d seeds (linear interpolation).
- **× AIMD**: the strategy's median req/s ÷ the published AIMD's.
- **beats AIMD**: seeds on which the strategy's req/s exceeds AIMD's on the
  same seed.

`, bench.ModelSteps, n-1, bench.ModelSteps, n)

	t := &table{
		header: []string{"strategy", "median req/s", "p10", "p90", "× AIMD", "beats AIMD", "median rate-limited", "p10", "p90"},
		align:  []byte("lrrrrrrrr"),
	}
	for _, res := range r.eval {
		beat := fmt.Sprintf("%d/%d", beats(res, aimd), n)
		if res.Name == aimd.Name {
			beat = "—"
		}
		t.add(res.Name, rate(res.Throughput.Median), rate(res.Throughput.P10), rate(res.Throughput.P90),
			fmt.Sprintf("%.2f×", res.Throughput.Median/aimd.Throughput.Median), beat,
			pct(res.RateLimited.Median), pct(res.RateLimited.P10), pct(res.RateLimited.P90))
	}
	b.WriteString(t.String())

	goal := targetRatioVsAIMD * aimd.Throughput.Median
	fmt.Fprintf(&b, "\n**Target**: fleetlimit's median ≥ %.2f× AIMD's (≥ %.2f req/s) with median rate-limited ≤ %.0f %%.\n\n",
		targetRatioVsAIMD, goal, 100*targetRateLimited)
	for _, res := range r.eval {
		if !strings.HasPrefix(res.Name, "fleetlimit") {
			continue
		}
		ok := res.Throughput.Median >= goal && res.RateLimited.Median <= targetRateLimited
		verdict := "**not met**"
		if ok {
			verdict = "met"
		}
		fmt.Fprintf(&b, "- %s: %.2f× AIMD, %s rate-limited — %s.\n", res.Name,
			res.Throughput.Median/aimd.Throughput.Median, pct(res.RateLimited.Median), verdict)
	}
	for _, res := range r.eval {
		if res.Name != bench.NameFleetDefaults {
			continue
		}
		ratio := res.Throughput.Median / aimd.Throughput.Median
		fmt.Fprintf(&b, "\n**Target for the defaults**, what a user gets without choosing: median ≥ %.2f× AIMD's (≥ %.2f req/s) — %.2f×, %s.\n",
			targetDefaultsVsAIMD, targetDefaultsVsAIMD*aimd.Throughput.Median, ratio, verdict(ratio >= targetDefaultsVsAIMD))
	}

	fmt.Fprintf(&b, "\n![Capacity and k over time, seed %d](%s/%s)\n\n", traceSeed, ImgDir, modelTraceImage)
	fmt.Fprintf(&b, "*Seed %d, every strategy: the true capacity it faced (grey; overload lowers it, so it differs between panels) and the k it chose (blue); red dots mark rate-limited steps.*\n\n", traceSeed)

	b.WriteString(renderConfigs(r))
	b.WriteString(renderGrid(r))
	b.WriteString(renderScale(r))
	b.WriteString(modelFindings)
	return b.String()
}

func renderConfigs(r *modelResults) string {
	var b strings.Builder
	b.WriteString(`### The fleetlimit configurations

All four set ` + "`MinLimit: 1, InitialLimit: 20, MaxLimit: 1000, MaxHealthyRTT: 1500ms`" + `:
the model's initial capacity and its rate-limit threshold (a success slower
than 1.5 s would have been rate-limited; under this model no success is, so
it never fires as a drop, but it sets the default latency target, below).
No parameter is tuned per seed.

| strategy | law parameters |
|---|---|
`)
	for _, st := range r.strategies {
		if strings.HasPrefix(st.Name, "fleetlimit") {
			fmt.Fprintf(&b, "| %s | %s |\n", st.Name, st.About)
		}
	}
	b.WriteString(`
The limiter moves its estimate once per round trip — on the first clean
sample of a request admitted since the last move — and its min-RTT window
takes one entry per round trip, the round's fastest sample. A model step is
one round trip (all its leases are admitted together and settle together),
so every law parameter below is per step, whatever k is.

Why these values (see ` + "`bench/configs.go`" + `):

- **LatencyTarget 1.2 s** (the gradient2 rows): not set, it is Gradient2's
  default once MaxHealthyRTT is, 4/5 of it; a step slower than that moves
  the estimate down by AIMDBackoff (0.9) while its requests still succeed,
  and with a target within twice rttNoload, as here, Smoothing left 0 is
  0.4 rather than 0.2.
- **Tolerance 1.2** (gradient2): requests fail at 1.5× the base latency, so
  a fixed tolerance of 2 (Netflix's default) never sees a gradient below 1
  before they fail;
  and rttNoload, the minimum of the steps' noisy latencies over the window,
  sits under the 1 s base, so the gradient falls below 1 once a step is
  slower than about 1.2 times that minimum.
- **Smoothing 0.5** (gradient2): a step moves the estimate half of the way
  to estimate·gradient + √estimate.
- **RTTWindow 10** (gradient2): 10 steps, so one lucky draw of the noise
  holds the baseline down for ten steps, not for the run. The default 600
  round trips spans the whole 300-step run.
- **AIMDIncrease 2** (AIMD law): a clean step adds 2, about a tenth of the
  model's mean capacity; **LatencyTarget 1.25 s** and **AIMDBackoff 0.75**
  are the published AIMD's target and β.
- **BackoffRatio 0.5** (both): a rate-limited step is the only signal that
  arrives after the damage, and overload also drags the model's capacity
  down.

`)
	return b.String()
}

func renderGrid(r *modelResults) string {
	var b strings.Builder
	fmt.Fprintf(&b, `### How the law parameters were chosen

Once, on tuning seeds %d–%d (disjoint from the reported seeds), from a grid
of %d gradient2 and %d AIMD-law candidates (`+"`bench.Gradient2Grid`, `bench.AIMDGrid`"+`):
the candidate with the highest median req/s whose median rate-limited share
is at most %.0f %% (two points of margin under the target). The report
reruns the grid every time; the five best qualifying candidates per law on
the tuning seeds:

`, r.tuneSeeds[0], r.tuneSeeds[len(r.tuneSeeds)-1], len(r.g2), len(r.aimd), 100*bench.SelectionMaxRateLimited)
	t := &table{header: []string{"candidate", "median req/s (tuning)", "median rate-limited (tuning)", "chosen"}, align: []byte("lrrl")}
	addTop := func(scored []bench.Scored, best int, chosen adaptive.Config) {
		for _, i := range topQualifying(scored, gridTopPerLaw) {
			mark := ""
			if i == best {
				mark = "grid winner"
			}
			if scored[i].Label == bench.ConfigLabel(chosen) {
				mark = strings.TrimPrefix(mark+", reported config", ", ")
			}
			t.add(scored[i].Label, rate(scored[i].Result.Throughput.Median), pct(scored[i].Result.RateLimited.Median), mark)
		}
	}
	addTop(r.g2, r.g2Best, bench.ModelGradient2Config())
	addTop(r.aimd, r.aimdBest, bench.ModelAIMDConfig())
	for _, ref := range r.tuneRefs {
		t.add(ref.Name+" (reference)", rate(ref.Throughput.Median), pct(ref.RateLimited.Median), "")
	}
	b.WriteString(t.String())
	for _, c := range []struct {
		law    string
		scored []bench.Scored
		best   int
		chosen adaptive.Config
	}{
		{"gradient2", r.g2, r.g2Best, bench.ModelGradient2Config()},
		{"AIMD law", r.aimd, r.aimdBest, bench.ModelAIMDConfig()},
	} {
		switch {
		case c.best < 0:
			fmt.Fprintf(&b, "\n**%s: no candidate qualified on this run's tuning seeds.**\n", c.law)
		case c.scored[c.best].Label != bench.ConfigLabel(c.chosen):
			fmt.Fprintf(&b, "\n**%s: this run's grid winner (%s) differs from the reported config (%s)**; the reported config was chosen on 100 tuning seeds.\n",
				c.law, c.scored[c.best].Label, bench.ConfigLabel(c.chosen))
		}
	}
	fmt.Fprintf(&b, "\n![Selection grid](%s/%s)\n\n", ImgDir, modelGridImage)
	b.WriteString("*Every grid candidate on the tuning seeds: median rate-limited share against median req/s. The shaded band is excluded by the selection rule; the published AIMD and the oracle are shown for reference.*\n\n")
	return b.String()
}

// topQualifying returns the indices of the k candidates with the highest
// median throughput among those within the selection rule, best first.
func topQualifying(scored []bench.Scored, k int) []int {
	var idx []int
	for i, s := range scored {
		if s.Result.RateLimited.Median <= bench.SelectionMaxRateLimited {
			idx = append(idx, i)
		}
	}
	for i := 1; i < len(idx); i++ { // insertion sort: stable, small n
		for j := i; j > 0 && scored[idx[j]].Result.Throughput.Median > scored[idx[j-1]].Result.Throughput.Median; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx[:min(k, len(idx))]
}

func renderScale(r *modelResults) string {
	var b strings.Builder
	fmt.Fprintf(&b, `### Scale check: the same configurations at capacity %d

The law parameters above were chosen at a capacity of about 20. Here the
model's capacity starts at and reverts to %d instead (everything else
published), each limiter starts at the initial capacity (InitialLimit 20 or
%d, MaxLimit %d), on the same seeds. A law whose behaviour does not depend
on the scale keeps its fraction of the oracle. The published AIMD is left
out: its 25 ms minimum interval caps k at 40.

`, scaleCapacity, scaleCapacity, scaleCapacity, scaleCheckMaxLimit)
	t := &table{
		header: []string{"strategy", "capacity 20: median req/s", "of oracle", "rate-limited", fmt.Sprintf("capacity %d: median req/s", scaleCapacity), "of oracle", "rate-limited"},
		align:  []byte("lrrrrrr"),
	}
	for _, row := range r.scale {
		t.add(row.name,
			rate(row.at20.Throughput.Median), pct(row.at20.Throughput.Median/row.oracle20), pct(row.at20.RateLimited.Median),
			rate(row.at200.Throughput.Median), pct(row.at200.Throughput.Median/row.oracle2h), pct(row.at200.RateLimited.Median))
	}
	b.WriteString(t.String())
	b.WriteString("\n")
	return b.String()
}

// modelFindings explains the results; it describes mechanisms, which do
// not change from run to run, and points at the tables for the numbers.
const modelFindings = `### What the numbers say

- **Once per round trip fixed the compounding.** Before the change the
  limiter moved its estimate on every settled lease, so a step of k
  requests applied the law k times: the gain grew with the limit itself,
  and the previous report had to pick Smoothing 0.05 and AIMDIncrease 0.1
  to tame it. Now a step is one move, the parameters read per round trip,
  and the same search meets the target with both laws.
- **The defaults turn at the noise band, and back off at the latency
  target.** The model draws one noise value per step, so a round's
  fastest sample is the step's latency, spread around a base of 1 s, and
  the band the defaults measure is wide: two steps in a row slower than it
  — slowed by load above the capacity — shrink the estimate even when they
  succeeded. Here every request of a step counts whatever its latency up
  to the 1.5 s threshold, so riding latency up to it pays, and the row with
  a fixed Tolerance of 2 does just that: every successful step has a
  gradient of 1 until one is rate-limited or slower than the target. On a
  provider whose latency grows with its load while its throughput does not
  (section 5) the same riding makes every request twice as slow for
  nothing, which is what the band is for: a default must pick one of the
  two, and the defaults pick the provider on which latency costs. What
  lifts the defaults here is MaxHealthyRTT: set, it gives Gradient2's
  latency target its default of 4/5 of it (1.2 s), so a full step that
  slows towards failing moves the estimate down by 0.9 while its requests
  still succeed, and with that backstop within twice rttNoload Smoothing
  is 0.4, a climb of 0.4·√estimate per step instead of 0.2·√estimate.
  Without MaxHealthyRTT (section 5), or with one far above the round trip,
  neither changes.
- **Gradient2's ceiling comes from the window's noise.** Gradient2 with a
  fixed tolerance settles where estimate·(1 − gradient) =
  QueueSize(estimate). With the √estimate headroom that is estimate =
  1/(1 − gradient)², so the ceiling depends on the latency ratio
  tolerance·rttNoload/rtt alone. rttNoload is the minimum over the window
  of noisy latencies, so it sits under the typical no-load latency, the
  further the longer the window: over 100 steps about 2.5σ (0.25 s), and
  a tolerance of 1.15 then gives a gradient of about 0.86 with no queueing
  at all, a ceiling near 50 that binds at capacity 200. The model
  configuration's window of 10 steps keeps the minimum about 1.5σ
  (0.15 s) under the base, and with Tolerance 1.2, tolerance·rttNoload is
  about the base itself: a step at the base latency has a gradient of 1,
  and the scale check shows it keeping about as large a share of the
  oracle at capacity 200 as the defaults. The diagnostic row changes only
  the headroom to 0.2·estimate, which makes the equilibrium gradient = 0.8
  whatever the estimate: it keeps the same fraction of the oracle at both
  scales (it was not tuned).
- **The AIMD law is now additive per round trip.** A clean step adds a
  constant 2 whatever the capacity, as TCP Reno does. At capacity 200 a
  backoff to half takes about 50 steps to recover, hence its lower fraction
  of the oracle there. Before the change its per-sample increase made it
  multiplicative per round trip, which is why it used to scale.
`
