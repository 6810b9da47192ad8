package report

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/bench"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// Targets of the fleet comparison, for the fleetlimit way.
const (
	targetFleetOfIdeal  = 0.90 // goodput ÷ the provider's ideal goodput
	targetFleetOfSplit  = 0.95 // goodput ÷ static C/N's in the same run
	targetFleetRejected = 0.02 // 429s ÷ requests sent
	targetFleetPeak     = 1.10 // attempted in-flight ÷ capacity, outside a drop's first heartbeat
	targetHalveBeats    = 2    // convergence after the halving, in heartbeats
	targetDoubleWithin  = 3 * time.Second
)

// fleetImage is the plot of one way in the section named prefix.
func fleetImage(prefix string, w bench.FleetWay) string { return prefix + "-" + w.Slug() + ".png" }

// unequalWorkers is the demand of the unequal fleet's eight nodes.
var unequalWorkers = []int{64, 64, 8, 8, 2, 2, 1, 1}

// fleetRun is one way's runs, or why it was not measured.
type fleetRun struct {
	way     bench.FleetWay
	runs    []bench.FleetResult // one per round, in order
	skipped string
}

// rep returns the index of the run with the median goodput (the lower
// median for an even count): the run the plot and the diagnosis show.
func (r fleetRun) rep() int {
	idx := make([]int, len(r.runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Compare(r.runs[a].Goodput(), r.runs[b].Goodput())
	})
	return idx[(len(idx)-1)/2]
}

// measured returns the runs of way, if it was measured.
func measured(runs []fleetRun, way bench.FleetWay) (fleetRun, bool) {
	for _, r := range runs {
		if r.way == way && r.skipped == "" {
			return r, true
		}
	}
	return fleetRun{}, false
}

// convergence is the time to settle after one capacity step.
type convergence struct {
	after time.Duration
	ok    bool
}

// convergences returns res's convergence after the halving and after the
// doubling.
func convergences(res bench.FleetResult) (halve, double convergence) {
	third := res.Scenario.Duration / 3
	halve.after, halve.ok = bench.Convergence(res.Series, third, 2*third)
	double.after, double.ok = bench.Convergence(res.Series, 2*third, res.Scenario.Duration)
	return halve, double
}

// summarizeConvergence renders the convergences of several runs: the
// median counting a run that never converged as infinitely slow, and how
// many converged.
func summarizeConvergence(cs []convergence) string {
	vals := make([]float64, len(cs))
	n := 0
	for i, c := range cs {
		vals[i] = math.Inf(1)
		if c.ok {
			vals[i] = c.after.Seconds()
			n++
		}
	}
	slices.Sort(vals)
	med := vals[(len(vals)-1)/2]
	if math.IsInf(med, 1) {
		if n == 0 {
			return "not within the phase"
		}
		return fmt.Sprintf("not within the phase (%d/%d runs did)", n, len(cs))
	}
	if n == len(cs) {
		if len(cs) == 1 {
			return fmt.Sprintf("%.2f s", med)
		}
		return fmt.Sprintf("%.2f s (%.2f–%.2f)", med, vals[0], vals[len(vals)-1])
	}
	return fmt.Sprintf("%.2f s (%d/%d runs converged)", med, n, len(cs))
}

// fleetScenario is the scenario of a run with opts.
func fleetScenario(opts Options) bench.FleetScenario {
	sc := bench.DefaultFleetScenario()
	sc.Duration = opts.FleetDuration
	sc.Settle = min(sc.Settle, sc.Duration/10)
	return sc
}

// runFleet is the four-node section.
func runFleet(ctx context.Context, e *env) (string, error) {
	return runFleetSection(ctx, e, fleetScenario(e.opts), "fleet", "3. Fleet: four nodes sharing one provider", true)
}

// runFleetUnequal is the section of eight nodes of unequal demand.
func runFleetUnequal(ctx context.Context, e *env) (string, error) {
	sc := fleetScenario(e.opts)
	sc.Nodes, sc.Workers = len(unequalWorkers), unequalWorkers
	return runFleetSection(ctx, e, sc, "fleet8", "4. Fleet: eight nodes of unequal demand", false)
}

// runFleet400 is the four-node section at C = 400. The base latency is
// 200 ms so that the request rate (C ÷ latency, 2000 req/s) stays what
// this machine's HTTP stack serves in section 3; at 20 ms it would be ten
// times that, and the machine, not the limiter, would be measured. The
// request timeout, which includes the wait for admission, is 10 s: 300
// workers per node wait behind a limit that starts at 20, and a 1 s
// timeout would turn that wait into timeouts, which are drops.
func runFleet400(ctx context.Context, e *env) (string, error) {
	sc := fleetScenario(e.opts)
	sc.Capacity, sc.BaseLatency = 400, 200*time.Millisecond
	sc.WorkersPerNode = 3 * sc.Capacity / sc.Nodes
	sc.RequestTimeout = 10 * time.Second
	return runFleetSection(ctx, e, sc, "fleet400", "7. Fleet: four nodes at C = 400", false)
}

// runFleetSection runs every way on sc and renders the section; full adds
// the limiter's properties, the diagnosis and the findings.
func runFleetSection(ctx context.Context, e *env, sc bench.FleetScenario, prefix, title string, full bool) (string, error) {
	start := time.Now()
	load := loadAverage()

	pg, pgErr := bench.StartFleetPostgres(ctx, 8)
	if pgErr != nil && !errors.Is(pgErr, pgtemp.ErrNotInstalled) {
		return "", pgErr
	}
	if pg != nil {
		defer pg.Stop()
	}

	ways := bench.FleetWays()
	runs := make([]fleetRun, len(ways))
	for i, way := range ways {
		runs[i].way = way
		if way == bench.Fleetlimit && pg == nil {
			runs[i].skipped = "Postgres is not installed here (" + pgErr.Error() + ")"
			e.logf("fleet: %s skipped: %s", way, runs[i].skipped)
		}
	}
	// Rounds of every way in turn, so that a change in the machine's load
	// spreads over all of them.
	for round := range e.opts.FleetRuns {
		for i := range runs {
			r := &runs[i]
			if r.skipped != "" {
				continue
			}
			env := bench.FleetEnv{Key: fmt.Sprintf("bench-fleet-%d-%d-%d", start.UnixNano(), round, i)}
			if pg != nil {
				env.Pool = pg.Pool
			}
			res, err := bench.RunFleetWay(ctx, sc, r.way, env)
			if err != nil {
				return "", err
			}
			e.logf("fleet: round %d/%d %-22s goodput %6.0f req/s (%3.0f %% of ideal), 429s %5.2f %%, peak %.2f×C (outer %.2f×C at %v, steady %.2f×C), over C %v",
				round+1, e.opts.FleetRuns, r.way, res.Goodput(), 100*res.Goodput()/sc.IdealGoodput(), 100*res.RejectedFraction(),
				res.PeakRatio, res.OuterPeakRatio, res.OuterPeakAt.Round(time.Millisecond), res.SteadyPeakRatio, res.OverCapacity.Round(time.Millisecond))
			r.runs = append(r.runs, res)
		}
	}
	for _, r := range runs {
		if r.skipped != "" {
			continue
		}
		if err := plotFleet(filepath.Join(e.imgDir, fleetImage(prefix, r.way)), r.runs[r.rep()]); err != nil {
			return "", err
		}
	}
	props := ""
	if full {
		var err error
		if props, err = renderLimiterProperties(sc, runs); err != nil {
			return "", err
		}
	}
	return renderFleet(e, sc, runs, fleetSection{prefix: prefix, title: title, full: full, props: props, load: load}, time.Since(start)), nil
}

// fleetSection is how one fleet section renders.
type fleetSection struct {
	prefix, title string
	full          bool   // the limiter's properties, diagnosis and findings too
	props, load   string // rendered properties; the load average at the start
}

// stat renders the median of the runs' values with their range when there
// is more than one run.
func stat(vals []float64, format string) string {
	med := bench.Summarize(vals).Median
	if len(vals) == 1 {
		return fmt.Sprintf(format, med)
	}
	lo, hi := slices.Min(vals), slices.Max(vals)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", med, lo, hi)
}

// metric returns f of every run.
func metric(runs []bench.FleetResult, f func(bench.FleetResult) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

func median(vals []float64) float64 { return bench.Summarize(vals).Median }

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func renderFleet(e *env, sc bench.FleetScenario, runs []fleetRun, fs fleetSection, took time.Duration) string {
	var b strings.Builder
	third := sc.Duration / 3
	fmt.Fprintf(&b, "## %s\n\n", fs.title)
	fmt.Fprintf(&b, "Measured %s on %s", e.date, e.machine)
	if fs.load != "" {
		fmt.Fprintf(&b, ", 1-minute load average %s at the start (the machine is shared, so expect noise)", fs.load)
	}
	fmt.Fprintf(&b, "; this section took %v. Every way ran %d time(s), in interleaved rounds; the tables give the median over the runs with the range in parentheses.\n\n", took.Round(time.Second), e.opts.FleetRuns)
	b.WriteString(codeBlock(e.command))
	fmt.Fprintf(&b, `
**Setup.** %d nodes share one simulated provider (`+"`sim.StartProvider`"+` on
127.0.0.1) whose capacity is C = %d for the first %s, %d (halved) for the
next %s and %d again for the last %s (`+"`sim.Stepped`"+`). A request within
capacity takes %v. The provider runs in **429 mode without Retry-After**: a
request that would make its in-flight count exceed the capacity is answered
429 at once. That is the realistic LLM case, where over-admission costs
rejected calls rather than slower ones. Retry-After is off because the
simulator's header is in whole seconds, %.0f round trips here: one 429 would
pause a fleetlimit node (which honours it) for a second, and the comparison
would measure the header, not the control. %s: a worker sends one request at a
time, reads the body, and after a 429 or an error waits %v before it sends
again. Each node has its own HTTP client; every number below is counted at
the clients, below each way's admission.

| way | what each node does |
|---|---|
| static C/N | a semaphore of C/N = %d (needs C and N; ignores C's moves) |
| static C | a semaphore of C = %d (each node behaves as if it owned the quota) |
| independent adaptive | its own `+"`adaptive.Limiter`"+` (config below), no coordinator |
| fleetlimit | a `+"`fleet.Node`"+` on a real Postgres (`+"`internal/pgtemp`"+`, `+"`migrations.Up`"+`), sending through `+"`Node.Transport`"+`; heartbeat %v, lease TTL %v, fence margin %v |

**Limiter configuration** (independent adaptive and fleetlimit, the same
for both and for every fleet section, chosen once and not per run): the
library's preset for a flat-latency upstream, `+"`adaptive.FlatLatency()`"+`
(`+"`bench.FleetLimiterConfig`"+`), with MaxQueued = the node's workers so
every worker can wait. In 429 mode the provider's latency is flat — a
request over capacity is refused, not slowed — so the round-trip time
carries no capacity signal and the 429s are the only one. The preset is
AIMD on drops alone: until the first 429 a slow start (×1.5 per round
trip, while the load reached half the estimate); after it a step of 1 %% of the estimate (at least 0.25) per round
trip, doubling every 2 round trips without a 429, at most a quarter of
the estimate; a 429
backs off by 0.95 at most once per round trip; the estimate rises only while the load is within 80 %% of it (90 %% on a
fleet node from a 429 until 5 heartbeats pass without one). The in-flight
climbs to a raised limit only as requests succeed, one more per success
(PaceGrowth) — after the first 429; and a fleet node takes a share
that rises in a straight line over one no-load round trip (at most half
a heartbeat), its first slot at once, so the requests of a rise, in the
slow start too, reach the provider one after another and the first 429
ends the climb before the rest is sent. Under a ceiling
(a fleet node's share) a 429 that comes while the pacing holds the
in-flight below the share, all its room in use, ends that climb where it
was refused, and every 429 also takes one slot off the ceiling at
once, two for a 429 of a request admitted after the last backoff and
refused less than a no-load round trip after it, and 5 clean round trips give one back (each give-back that
holds for 5 more twice as many as the one before, but never past the
cut a refused give-back last left; the wait doubles each time a
give-back is refused before it held, 5 again once a give-back to the cut
last refused holds); a share that rises after a 429 is taken up only to
one slot under the in-flight the 429 came at, and past it one give-back
slot at a time (the level is forgotten once a give-back there holds, or
after 5 grants without a 429), and a give-back takes the fleet's
in-flight (the node's room plus its peers') no further than one slot
under the fleet's in-flight at the node's last 429, and past it gives
back one slot at a time (forgotten after 5 grants without a 429); a 429 keeps its slot until a served request's
headers would have come (Transport); a fleet node's 429 also takes its
estimate down to L_global less the slots cut, and its give-backs wait
for its next grant (SetFleetLimit); and each
heartbeat after requests of the node's own (admitted, or held while
others wait) and no 429 since the last, from the node's first grant on,
takes as many slow-start steps as the fleet's
in-flight passes the test for (L_global, where a round trip lasts a
heartbeat interval or more, or none has ended clean yet, and requests wait for the node's room),
up to 2.25 times the larger of its
estimate and L_global, just before the node's report, and after the
slow start counts at the grant as a
round trip for the probe while the estimate is above the level the last
backoff came down from (ProbeTick).
InitialLimit is the library default (20) because neither C nor N is known
to an adaptive node.

What the columns mean:

- **goodput**: requests answered 200 (body read) per second over the run;
  **of ideal**: goodput ÷ the most the provider can serve, the time-averaged
  capacity over the base latency (%.0f req/s). A request's round trip also
  includes the HTTP stack and scheduling on a shared 2-core machine (the
  p50 column), so even a fleet that kept C requests in flight at every
  instant would stay a few per cent under 100 %%.
- **429s**: 429 answers ÷ requests sent.
- **attempted in-flight** counts a request from just before it is sent until
  its body is read to the end or it fails, over all %d nodes. The provider
  itself never holds more than its capacity in 429 mode, so its own maximum
  says nothing; this is what the fleet tried to put on it. **peak ÷ C**:
  the largest ratio of attempted in-flight to the capacity at that instant,
  over the whole run, which includes the moment the capacity halves under a
  full fleet; **outer peak ÷ C**: the same outside the first heartbeat
  (%v) after the capacity halves, the grace the target allows
  the fleet to hear of the drop: the start and the climb after the
  doubling count; **steady peak ÷ C**: the same outside the first
  %v of the run and the %v after each capacity step. **time over C**: how long
  attempted in-flight exceeded the capacity, integrated request by request.
- **p50, p99**: round trip of the successful requests, from send to the
  body's end, in ms (admission wait excluded).
- **Jain**: Jain's fairness index of the nodes' successes, (Σx)²/(N·Σx²):
  1 is an even split, 1/N one node taking everything.
- **converge ↓, ↑**: time to settle after the capacity halves (at %s) and
  after it doubles (at %s). With m(t) the mean attempted in-flight over the
  last %v (only samples after the step, taken every %v), the fleet has
  converged at the first t from which m stays within ±%.0f %% of the new C
  for %v; "not within the phase" if that never happens before the next step
  or the end.

`,
		sc.Nodes, sc.Capacity, secs(third), sc.Capacity/2, secs(third), sc.Capacity, secs(sc.Duration-2*third),
		sc.BaseLatency, float64(time.Second)/float64(sc.BaseLatency), workersSentence(sc), sc.Pause,
		sc.Capacity/sc.Nodes, sc.Capacity, sc.Heartbeat, 4*sc.Heartbeat, sc.Heartbeat,
		sc.IdealGoodput(), sc.Nodes, sc.Heartbeat, sc.Settle, sc.Settle, secs(third), secs(2*third),
		bench.ConvergenceWindow, sc.SampleEvery, 100*bench.ConvergenceBand, bench.ConvergenceWindow)

	ideal := sc.IdealGoodput()
	t := &table{
		header: []string{"way", "goodput req/s", "of ideal", "429s (%)", "peak ÷ C", "outer peak ÷ C", "steady peak ÷ C", "time over C (%)", "p50 ms", "p99 ms", "Jain", "converge ↓", "converge ↑"},
		align:  []byte("lrrrrrrrrrrrr"),
	}
	var split []bench.FleetResult
	for _, r := range runs {
		if r.skipped != "" {
			t.add(r.way.String(), "not measured", "", "", "", "", "", "", "", "", "", "", "")
			continue
		}
		if r.way == bench.StaticSplit {
			split = r.runs
		}
		var halves, doubles []convergence
		for _, res := range r.runs {
			h, d := convergences(res)
			halves, doubles = append(halves, h), append(doubles, d)
		}
		rs := r.runs
		t.add(r.way.String(),
			stat(metric(rs, bench.FleetResult.Goodput), "%.0f"),
			pct(median(metric(rs, bench.FleetResult.Goodput))/ideal),
			stat(metric(rs, func(x bench.FleetResult) float64 { return 100 * x.RejectedFraction() }), "%.2f"),
			stat(metric(rs, func(x bench.FleetResult) float64 { return x.PeakRatio }), "%.2f"),
			stat(metric(rs, func(x bench.FleetResult) float64 { return x.OuterPeakRatio }), "%.2f"),
			stat(metric(rs, func(x bench.FleetResult) float64 { return x.SteadyPeakRatio }), "%.2f"),
			stat(metric(rs, func(x bench.FleetResult) float64 { return 100 * x.OverCapacity.Seconds() / x.Elapsed.Seconds() }), "%.0f"),
			fmt.Sprintf("%.1f", median(metric(rs, func(x bench.FleetResult) float64 { return msf(bench.DurationPercentile(x.Latencies, 0.5)) }))),
			fmt.Sprintf("%.1f", median(metric(rs, func(x bench.FleetResult) float64 { return msf(bench.DurationPercentile(x.Latencies, 0.99)) }))),
			fmt.Sprintf("%.3f", median(metric(rs, func(x bench.FleetResult) float64 { return bench.JainIndex(x.NodeSucceeded) }))),
			summarizeConvergence(halves), summarizeConvergence(doubles))
	}
	b.WriteString(t.String())

	b.WriteString("\nCross-check, summed over the runs: the clients' counts against the provider's own (a request in flight when a run stops can end as a success at the provider and a failure at its client). Failed = transport errors, timeouts and other statuses at the clients.\n\n")
	ct := &table{header: []string{"way", "sent", "200 (clients)", "200 (provider)", "429 (clients)", "429 (provider)", "failed", "largest attempted in-flight"}, align: []byte("lrrrrrrr")}
	for _, r := range runs {
		if r.skipped != "" {
			continue
		}
		var sent, ok, okP, rej, rejP, failed int64
		peak := 0
		for _, res := range r.runs {
			sent, ok, okP, rej, rejP, failed = sent+res.Sent, ok+res.Succeeded, okP+res.ServerSuccesses, rej+res.Rejected, rejP+res.ServerRejected, failed+res.Failed
			peak = max(peak, res.PeakInflight)
		}
		ct.add(r.way.String(), fmt.Sprint(sent), fmt.Sprint(ok), fmt.Sprint(okP), fmt.Sprint(rej), fmt.Sprint(rejP), fmt.Sprint(failed), fmt.Sprint(peak))
	}
	b.WriteString(ct.String())

	fmt.Fprintf(&b, "\n**Targets** for fleetlimit (medians over the runs): goodput ≥ %.0f %% of ideal and ≥ %.0f %% of static C/N's in the same runs, 429s ≤ %.0f %% of requests sent, attempted in-flight ≤ %.2f·C outside the first heartbeat (%v) after the capacity halves, converged within %d heartbeats (%v) after the halving and within %v after the doubling.\n\n",
		100*targetFleetOfIdeal, 100*targetFleetOfSplit, 100*targetFleetRejected, targetFleetPeak, sc.Heartbeat,
		targetHalveBeats, targetHalveBeats*sc.Heartbeat, targetDoubleWithin)
	for _, r := range runs {
		if r.way != bench.Fleetlimit {
			continue
		}
		if r.skipped != "" {
			fmt.Fprintf(&b, "- not measured: %s.\n", r.skipped)
			break
		}
		good := median(metric(r.runs, bench.FleetResult.Goodput))
		fmt.Fprintf(&b, "- goodput %.0f req/s = %s of ideal — %s.\n", good, pct(good/ideal), verdict(good >= targetFleetOfIdeal*ideal))
		if split != nil {
			sg := median(metric(split, bench.FleetResult.Goodput))
			fmt.Fprintf(&b, "- goodput ÷ static C/N's (%.0f req/s) = %.2f — %s.\n", sg, good/sg, verdict(good >= targetFleetOfSplit*sg))
		}
		rej := median(metric(r.runs, bench.FleetResult.RejectedFraction))
		fmt.Fprintf(&b, "- 429s %.2f %% — %s.\n", 100*rej, verdict(rej <= targetFleetRejected))
		peak := median(metric(r.runs, func(x bench.FleetResult) float64 { return x.PeakRatio }))
		outer := median(metric(r.runs, func(x bench.FleetResult) float64 { return x.OuterPeakRatio }))
		steady := median(metric(r.runs, func(x bench.FleetResult) float64 { return x.SteadyPeakRatio }))
		fmt.Fprintf(&b, "- attempted in-flight: %.2f·C outside the first heartbeat after the halving — %s (%.2f·C outside the first %v and the %v after each step; %.2f·C over the whole run, which includes the halving under a full fleet).\n",
			outer, verdict(outer <= targetFleetPeak), steady, sc.Settle, sc.Settle, peak)
		if carried := median(metric(r.runs, func(x bench.FleetResult) float64 { return x.CarriedRatio })); carried > targetFleetPeak {
			why := "they outlasted the heartbeat"
			if sc.BaseLatency > sc.Heartbeat {
				why = fmt.Sprintf("a request takes %v here, longer than the heartbeat", sc.BaseLatency)
			}
			fmt.Fprintf(&b, "  At the end of that heartbeat the requests sent before the halving were still %.2f·C (median over the runs; %s in each): %s, so whatever the fleet admitted after the halving, its outer peak could not be lower than that.\n",
				carried, joinRatios(r.runs, func(x bench.FleetResult) float64 { return x.CarriedRatio }), why)
		}
		var down, up []convergence
		for _, res := range r.runs {
			d, u := convergences(res)
			down, up = append(down, d), append(up, u)
		}
		fmt.Fprintf(&b, "- converged after the halving: %s — %s; after the doubling: %s — %s.\n",
			summarizeConvergence(down), verdict(convergedWithin(down, targetHalveBeats*sc.Heartbeat)),
			summarizeConvergence(up), verdict(convergedWithin(up, targetDoubleWithin)))
	}

	b.WriteString(renderQuotaUse(sc, runs))

	if !fs.full {
		b.WriteString("\nOne plot per way, of its run with the median goodput, as in section 3.\n\n")
		for _, r := range runs {
			if r.skipped == "" {
				fmt.Fprintf(&b, "![%s](%s/%s)\n\n", r.way, ImgDir, fleetImage(fs.prefix, r.way))
			}
		}
		return b.String()
	}
	b.WriteString(renderDiagnosis(sc, runs))
	b.WriteString(fs.props)

	b.WriteString("\nOne plot per way, of its run with the median goodput: the capacity, the fleet's attempted in-flight (mean per 100 ms) and, for fleetlimit, L_global as node 0 last heard it (top); successes and 429s per second, per 100 ms (bottom). A refused request is in flight for well under a millisecond, so hundreds of 429s per second barely lift the 100-ms mean of attempted in-flight: read over-admission from the bottom panel and from the peak columns.\n\n")
	for _, r := range runs {
		if r.skipped != "" {
			continue
		}
		fmt.Fprintf(&b, "![%s](%s/%s)\n\n", r.way, ImgDir, fleetImage(fs.prefix, r.way))
	}
	b.WriteString(fleetFindings(sc, runs))
	return b.String()
}

// workersSentence describes the scenario's demand.
func workersSentence(sc bench.FleetScenario) string {
	if sc.Workers == nil {
		return fmt.Sprintf("Each node runs %d closed-loop workers (demand %d, %.0f times C)",
			sc.WorkersPerNode, sc.TotalWorkers(), float64(sc.TotalWorkers())/float64(sc.Capacity))
	}
	parts := make([]string, len(sc.Workers))
	for i, w := range sc.Workers {
		parts[i] = fmt.Sprint(w)
	}
	return fmt.Sprintf("The nodes run %s closed-loop workers (demand %d, %.2f times C, very unequal)",
		strings.Join(parts, ", "), sc.TotalWorkers(), float64(sc.TotalWorkers())/float64(sc.Capacity))
}

// convergedWithin reports whether the median run converged within d;
// a run that never converged counts as slower than any d.
func convergedWithin(cs []convergence, d time.Duration) bool {
	var vals []float64
	for _, c := range cs {
		v := math.Inf(1)
		if c.ok {
			v = c.after.Seconds()
		}
		vals = append(vals, v)
	}
	slices.Sort(vals)
	return vals[(len(vals)-1)/2] <= d.Seconds()
}

// joinRatios lists f of each run as "1.23·C", in run order.
func joinRatios(rs []bench.FleetResult, f func(bench.FleetResult) float64) string {
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = fmt.Sprintf("%.2f·C", f(x))
	}
	return strings.Join(parts, ", ")
}
