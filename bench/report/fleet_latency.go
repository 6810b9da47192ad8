package report

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/bench"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// Targets of the latency-shaped comparison, for fleetlimit with the
// library's defaults.
const (
	targetLatencyLow, targetLatencyHigh = 0.9, 1.25 // median fleet in-flight ÷ C
	targetLatencyOver                   = 0.10      // time over C ÷ run
)

// latencyWay is one way of the latency-shaped comparison: a fleet way and
// the limiter configuration its adaptive nodes use.
type latencyWay struct {
	label   string
	way     bench.FleetWay
	limiter func(maxQueued int) adaptive.Config
	runs    []bench.FleetResult
	skipped string
}

func defaultsLimiter(maxQueued int) adaptive.Config { return adaptive.Config{MaxQueued: maxQueued} }

func fixedToleranceLimiter(maxQueued int) adaptive.Config {
	return adaptive.Config{MaxQueued: maxQueued, Tolerance: 2}
}

// runFleetLatency is the section of a provider whose latency grows with
// its load and which never refuses.
func runFleetLatency(ctx context.Context, e *env) (string, error) {
	start := time.Now()
	load := loadAverage()
	sc := fleetScenario(e.opts)
	sc.LatencyShaped = true

	pg, pgErr := bench.StartFleetPostgres(ctx, 8)
	if pgErr != nil && !errors.Is(pgErr, pgtemp.ErrNotInstalled) {
		return "", pgErr
	}
	if pg != nil {
		defer pg.Stop()
	}
	ways := []*latencyWay{
		{label: "static C/N", way: bench.StaticSplit},
		{label: "independent adaptive, defaults", way: bench.IndependentAdaptive, limiter: defaultsLimiter},
		{label: "fleetlimit, defaults", way: bench.Fleetlimit, limiter: defaultsLimiter},
		{label: "fleetlimit, defaults but Tolerance 2", way: bench.Fleetlimit, limiter: fixedToleranceLimiter},
		{label: "fleetlimit, FlatLatency()", way: bench.Fleetlimit, limiter: bench.FleetLimiterConfig},
	}
	for _, w := range ways {
		if w.way == bench.Fleetlimit && pg == nil {
			w.skipped = "Postgres is not installed here (" + pgErr.Error() + ")"
		}
	}
	for round := range e.opts.FleetRuns {
		for i, w := range ways {
			if w.skipped != "" {
				continue
			}
			env := bench.FleetEnv{Key: fmt.Sprintf("bench-latency-%d-%d-%d", start.UnixNano(), round, i), Limiter: w.limiter}
			if pg != nil {
				env.Pool = pg.Pool
			}
			res, err := bench.RunFleetWay(ctx, sc, w.way, env)
			if err != nil {
				return "", err
			}
			e.logf("fleet-latency: round %d/%d %-32s goodput %6.0f req/s (%3.0f %% of ideal), median in-flight %.2f×C, over C %.0f %%",
				round+1, e.opts.FleetRuns, w.label, res.Goodput(), 100*res.Goodput()/sc.IdealGoodput(), res.MedianInflightRatio(),
				100*res.OverCapacity.Seconds()/res.Elapsed.Seconds())
			w.runs = append(w.runs, res)
		}
	}
	return renderFleetLatency(e, sc, ways, load, time.Since(start)), nil
}

func renderFleetLatency(e *env, sc bench.FleetScenario, ways []*latencyWay, load string, took time.Duration) string {
	var b strings.Builder
	third := sc.Duration / 3
	b.WriteString("## 5. Fleet: a provider whose latency grows with its load\n\n")
	fmt.Fprintf(&b, "Measured %s on %s", e.date, e.machine)
	if load != "" {
		fmt.Fprintf(&b, ", 1-minute load average %s at the start", load)
	}
	fmt.Fprintf(&b, "; this section took %v. Every way ran %d time(s), in interleaved rounds; medians over the runs, ranges in parentheses.\n\n", took.Round(time.Second), e.opts.FleetRuns)
	b.WriteString(codeBlock(e.command))
	fmt.Fprintf(&b, `
**Setup.** As in section 3 (%d nodes, %s, C = %d → %d → %d over thirds of
%s, %v per request within capacity), but the provider never refuses: a
request that arrives with k requests in flight (itself included) above
the capacity C takes %v·k/C, so above C the provider serves no more
requests per second, only slower ones. Here the round-trip time is the
signal, and the library's defaults (law Auto, which stays Gradient2
here since the provider refuses nothing, with its tolerance measured as
the noise band of the rounds' fastest samples; `+"`go doc ./adaptive Config.Tolerance`"+`)
are what a user gets without choosing. The same with a fixed Tolerance
of 2, Netflix's default, and `+"`adaptive.FlatLatency()`"+`, the preset of
sections 3–4, are shown for contrast.

- **median in-flight ÷ C**: the median over the run's 10-ms samples of the
  fleet's attempted in-flight ÷ the capacity then.
- **time over C**: how long the attempted in-flight exceeded the capacity,
  as a share of the run (every request then waits longer than it needs to).
  **provider over C**: the same, counted by the provider itself (its
  handlers, from a request's arrival to its response's end), without the
  time a request spends in the clients' HTTP stacks. The target is judged
  on the first.
- **goodput**, **of ideal**, **p50**, **p99**: as in section 3.

`, sc.Nodes, strings.ToLower(workersSentence(sc)[:1])+workersSentence(sc)[1:], sc.Capacity, sc.Capacity/2, sc.Capacity, secs(3*third), sc.BaseLatency, sc.BaseLatency)

	ideal := sc.IdealGoodput()
	t := &table{
		header: []string{"way", "goodput req/s", "of ideal", "median in-flight ÷ C", "time over C (%)", "provider over C (%)", "p50 ms", "p99 ms"},
		align:  []byte("lrrrrrrr"),
	}
	for _, w := range ways {
		if w.skipped != "" {
			t.add(w.label, "not measured", "", "", "", "", "", "")
			continue
		}
		var lat []time.Duration
		for _, r := range w.runs {
			lat = append(lat, r.Latencies...)
		}
		t.add(w.label,
			stat(metric(w.runs, bench.FleetResult.Goodput), "%.0f"),
			pct(median(metric(w.runs, bench.FleetResult.Goodput))/ideal),
			stat(metric(w.runs, bench.FleetResult.MedianInflightRatio), "%.2f"),
			stat(metric(w.runs, overFraction), "%.0f"),
			stat(metric(w.runs, providerOverFraction), "%.0f"),
			fmt.Sprintf("%.1f", msf(bench.DurationPercentile(lat, 0.5))),
			fmt.Sprintf("%.1f", msf(bench.DurationPercentile(lat, 0.99))))
	}
	b.WriteString(t.String())

	fmt.Fprintf(&b, "\n**Targets** for fleetlimit with the defaults (medians over the runs): median in-flight within %.2f–%.2f·C, goodput ≥ %.0f %% of ideal, time over C ≤ %.0f %%.\n\n",
		targetLatencyLow, targetLatencyHigh, 100*targetFleetOfIdeal, 100*targetLatencyOver)
	for _, w := range ways {
		if w.label != "fleetlimit, defaults" {
			continue
		}
		if w.skipped != "" {
			fmt.Fprintf(&b, "- not measured: %s.\n", w.skipped)
			break
		}
		med := median(metric(w.runs, bench.FleetResult.MedianInflightRatio))
		good := median(metric(w.runs, bench.FleetResult.Goodput))
		over := median(metric(w.runs, overFraction)) / 100
		fmt.Fprintf(&b, "- median in-flight %.2f·C — %s.\n", med, verdict(med >= targetLatencyLow && med <= targetLatencyHigh))
		fmt.Fprintf(&b, "- goodput %.0f req/s = %s of ideal — %s.\n", good, pct(good/ideal), verdict(good >= targetFleetOfIdeal*ideal))
		fmt.Fprintf(&b, "- time over C %.0f %% — %s.\n", 100*over, verdict(over <= targetLatencyOver))
	}
	return b.String()
}

// providerOverFraction is the share of the run the provider's own
// in-flight count spent above the capacity, in per cent.
func providerOverFraction(r bench.FleetResult) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return 100 * r.ServerOverCapacity.Seconds() / r.Elapsed.Seconds()
}

// overFraction is the share of the run the attempted in-flight spent
// above the capacity, in per cent.
func overFraction(r bench.FleetResult) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return 100 * r.OverCapacity.Seconds() / r.Elapsed.Seconds()
}
