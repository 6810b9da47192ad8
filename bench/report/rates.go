package report

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/bench"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// The rate comparison's targets (issue 14).
const (
	rateRounds                          = 3
	rateGivenUsed, rateGivenRefused     = 0.95, 0.01
	rateLearnedUsed, rateLearnedRefused = 0.85, 0.03
)

func runRates(ctx context.Context, e *env) (string, error) {
	start := time.Now()
	pg, err := bench.StartFleetPostgres(ctx, 16)
	if errors.Is(err, pgtemp.ErrNotInstalled) {
		return "## 8. Rate budgets\n\nNot measured: Postgres is not installed here (" + err.Error() + ").\n", nil
	}
	if err != nil {
		return "", err
	}
	defer pg.Stop()
	sc := bench.DefaultRateScenario()
	ways := bench.RateWays()
	runs := make([][]bench.RateResult, len(ways)) // by way, then round
	for round := range rateRounds {
		for i, way := range ways {
			res, err := bench.RunRateWay(ctx, sc, way, pg.Pool)
			if err != nil {
				return "", fmt.Errorf("rates: %s: %w", way, err)
			}
			e.logf("rates: round %d: %s: used %.3f, 429s %.4f, peak %.2f, heartbeats %d", round+1, way, res.Used(),
				res.RefusedFraction(), res.PeakOver(), res.Heartbeats)
			runs[i] = append(runs[i], res)
		}
	}
	// results holds each way's run of the median use.
	results := make([]bench.RateResult, len(ways))
	for i, rs := range runs {
		sorted := slices.Clone(rs)
		slices.SortFunc(sorted, func(a, b bench.RateResult) int { return cmp.Compare(a.Used(), b.Used()) })
		results[i] = sorted[len(sorted)/2]
	}
	med := func(rs []bench.RateResult, f func(bench.RateResult) float64) float64 {
		vals := make([]float64, len(rs))
		for i, r := range rs {
			vals[i] = f(r)
		}
		return median(vals)
	}
	beatsPer := func(r bench.RateResult) float64 {
		return float64(r.Heartbeats) / float64(len(sc.Workers)) / (r.Elapsed.Seconds() / sc.Heartbeat.Seconds())
	}

	var b strings.Builder
	b.WriteString("## 8. Rate budgets\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; this section took %v: %d rounds, each running every way once, side by\n"+
		"side; the tables give each figure's median over the rounds, and every round's use and 429s.\n\n",
		e.date, e.machine, time.Since(start).Round(time.Second), rateRounds)
	b.WriteString(codeBlock(e.command))
	q0, q1 := sc.Quotas[0], sc.Quotas[1]
	fmt.Fprintf(&b, `
%d nodes of %s closed-loop workers send to a simulated provider (`+"`internal/sim`"+`, %v a
request) that enforces a requests- and a tokens-per-window quota over a sliding %v window and
answers 429 above it. A request costs between %d and %d tokens, is admitted with the estimate
%d and settled by the cost the provider reports; a worker backs off 100 ms after a 429. The
quota is %d requests and %d tokens per window (tokens bind) for %v, then %d requests and %d
tokens (requests bind) for %v. The fleetlimit ways run real nodes on a throwaway Postgres,
heartbeat %v:

- **%s**: the key's rates are set by an operator (`+"`Admin.SetRates`, `fleetctl limits set --rpm --tpm`"+`)
  and changed when the provider's quota changes; each node paces to its demand-proportional share.
- **%s**: nothing is given and the provider sends no quota headers; each node learns the key's
  request rate from its 429s (`+"`RateConfig.Learn`"+` with its defaults for a windowed quota, design
  §17: seed 001's loop of %v periods, +%g/s below %g %% errors, half steps for the first step above a
  cut, a cut above %g %% to the rate the fleet got accepted over the window, judged at once after 5
  429s and acting on the node's own pacing before its next heartbeat; seed %g/s, bounds %g–%g/s),
  and the key's rate is their lower median.
- **%s**: each node paces itself to the quota ÷ %d with its own buckets, changed by hand with the quota.
- **%s**: each node paces itself to the whole quota.

**used** is the mean over the run's complete %v windows of the binding dimension's accepted ÷ quota;
**429s** the share of requests answered 429; **peak** the fullest the sliding window got, as a
multiple of the quota (the provider refuses above it, so the overshoot of a way shows in its
429s and in **sent ÷ accepted**, the requests it sent per request the provider took);
**heartbeats** the fleetlimit nodes' heartbeats per node per heartbeat
interval, whatever the request rate (%d requests a second asked for at most).

`, len(sc.Workers), joinInts(sc.Workers), sc.Latency, sc.Window, sc.Tokens/2, 3*sc.Tokens/2, sc.Tokens,
		q0.Requests, q0.Tokens, sc.Phase, q1.Requests, q1.Tokens, sc.Phase, sc.Heartbeat,
		bench.RateGiven, bench.RateLearned, sc.Learner.CheckPeriod, sc.Learner.SpeedupStep,
		sc.Learner.RecoverPct, sc.Learner.TargetErrorPct, sc.Learner.SeedRate,
		sc.Learner.MinRate, sc.Learner.MaxRate, bench.RateStatic, len(sc.Workers), bench.RatePerPod,
		sc.Window, sumInts(sc.Workers)*int(time.Second/sc.Latency))
	t := &table{header: []string{"way", "used", "429s", "peak ÷ quota", "sent ÷ accepted", "heartbeats / node / interval", "rounds: used / 429s"},
		align: []byte("lrrrrrl")}
	for i, rs := range runs {
		beats := "–"
		if rs[0].Heartbeats > 0 {
			beats = fmt.Sprintf("%.2f", med(rs, beatsPer))
		}
		var each []string
		for _, r := range rs {
			each = append(each, fmt.Sprintf("%.1f %% / %.2f %%", 100*r.Used(), 100*r.RefusedFraction()))
		}
		t.add(ways[i].String(), fmt.Sprintf("%.1f %%", 100*med(rs, bench.RateResult.Used)),
			fmt.Sprintf("%.2f %%", 100*med(rs, bench.RateResult.RefusedFraction)),
			fmt.Sprintf("%.2f", med(rs, bench.RateResult.PeakOver)),
			fmt.Sprintf("%.2f", med(rs, func(r bench.RateResult) float64 {
				return ratioOf(r.Accepted.Requests+r.Refused.Requests, r.Accepted.Requests)
			})), beats, strings.Join(each, "; "))
	}
	b.WriteString(t.String())
	b.WriteString("\nPer window, in each way's round of median use (used of the binding dimension, 429s in the window):\n\n")
	wt := &table{header: []string{"way"}, align: []byte("l")}
	for i := range results[0].Windows {
		if i == len(results[0].Windows)-1 {
			break
		}
		wt.header = append(wt.header, fmt.Sprintf("%v–%v", time.Duration(i)*sc.Window, time.Duration(i+1)*sc.Window))
		wt.align = append(wt.align, 'r')
	}
	for _, r := range results {
		row := []string{r.Way.String()}
		for i, w := range r.Windows {
			if i == len(r.Windows)-1 || len(row) == len(wt.header) {
				break
			}
			used := max(ratioOf(w.Accepted.Requests, w.Quota.Requests), ratioOf(w.Accepted.Tokens, w.Quota.Tokens))
			row = append(row, fmt.Sprintf("%.0f %% / %d", 100*used, w.Refused.Requests))
		}
		for len(row) < len(wt.header) {
			row = append(row, "–")
		}
		wt.add(row...)
	}
	b.WriteString(wt.String())
	fmt.Fprintf(&b, "\n**Targets** (medians): quota given ≥ %.0f %% used with ≤ %.0f %% 429s; learned ≥ %.0f %% used with ≤ %.0f %% 429s; one heartbeat per node per interval (≤ 1.01: at its first requests a node claims a rate share once, early).\n\n",
		100*rateGivenUsed, 100*rateGivenRefused, 100*rateLearnedUsed, 100*rateLearnedRefused)
	for i, target := range [][2]float64{{rateGivenUsed, rateGivenRefused}, {rateLearnedUsed, rateLearnedRefused}} {
		rs := runs[i]
		used, refused, beats := med(rs, bench.RateResult.Used), med(rs, bench.RateResult.RefusedFraction), med(rs, beatsPer)
		fmt.Fprintf(&b, "- %s: %.1f %% used, %.2f %% 429s, %.3f heartbeats per node per interval — %s.\n", ways[i],
			100*used, 100*refused, beats, verdict(used >= target[0] && refused <= target[1] && beats <= 1.01))
	}
	return b.String(), nil
}

func ratioOf(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}

func sumInts(vs []int) int {
	n := 0
	for _, v := range vs {
		n += v
	}
	return n
}
