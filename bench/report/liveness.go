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

// The liveness measurements' scenarios and targets.
const (
	climbNodes, climbCapacity, climbWorkers = 8, 40, 15
	climbDeadline                           = 10 * time.Second
	climbTarget                             = 0.8 // of C
	restartNodes, restartWorkers            = 2, 60
	restartWarmup, restartSettle            = 4 * time.Second, 2 * time.Second
	restartTarget                           = 0.9 // lowest L_global ÷ before
	joinCapacity, joinWorkers               = 16, 16
	joinLatency                             = 200 * time.Millisecond
	joinWarmup, joinSpan                    = 3 * time.Second, 5 * time.Second
)

// livenessConfigs are the limiter configurations measured, each starting
// at InitialLimit 1.
func livenessConfigs() []struct {
	name string
	cfg  adaptive.Config
} {
	flat := adaptive.FlatLatency()
	flat.InitialLimit = 1
	return []struct {
		name string
		cfg  adaptive.Config
	}{
		{"FlatLatency()", flat},
		{"defaults", adaptive.Config{InitialLimit: 1}},
	}
}

func runLiveness(ctx context.Context, e *env) (string, error) {
	start := time.Now()
	pg, err := bench.StartFleetPostgres(ctx, 16)
	if errors.Is(err, pgtemp.ErrNotInstalled) {
		return "## 6. Liveness\n\nNot measured: Postgres is not installed here (" + err.Error() + ").\n", nil
	}
	if err != nil {
		return "", err
	}
	defer pg.Stop()

	base := bench.LivenessScenario{Capacity: climbCapacity, BaseLatency: 20 * time.Millisecond, Heartbeat: 100 * time.Millisecond}
	type climbRow struct {
		name  string
		times []float64 // seconds; +Inf when not reached
		final []float64
	}
	var climbs []climbRow
	for _, c := range livenessConfigs() {
		row := climbRow{name: c.name}
		for run := range e.opts.FleetRuns {
			sc := base
			sc.Nodes, sc.WorkersPerNode, sc.Limiter = climbNodes, climbWorkers, c.cfg
			key := fmt.Sprintf("bench-climb-%d-%s-%d", start.UnixNano(), strings.Trim(c.name, "()"), run)
			res, err := bench.MeasureClimb(ctx, pg.Pool, key, sc, int(climbTarget*climbCapacity), climbDeadline)
			if err != nil {
				return "", err
			}
			t := climbDeadline.Seconds() * 1e9 // never reached: slower than any deadline
			if res.Ok {
				t = res.Reached.Seconds()
			}
			e.logf("liveness: climb %s run %d: reached %v (%v), final L_global %d", c.name, run+1, res.Reached.Round(time.Millisecond), res.Ok, res.Final)
			row.times, row.final = append(row.times, t), append(row.final, float64(res.Final))
		}
		climbs = append(climbs, row)
	}

	type restartRow struct {
		name              string
		before, low, frac []float64
		hold              []float64 // lowest ÷ before with no restart
	}
	var restarts []restartRow
	for _, c := range livenessConfigs() {
		row := restartRow{name: c.name}
		for run := range e.opts.FleetRuns {
			sc := base
			sc.Nodes, sc.WorkersPerNode, sc.Limiter = restartNodes, restartWorkers, c.cfg
			key := fmt.Sprintf("bench-restart-%d-%s-%d", start.UnixNano(), strings.Trim(c.name, "()"), run)
			// The restarts and their control alternate which goes first, so
			// a drift in the machine's load favours neither.
			var res, hold bench.RestartResult
			var err error
			for i := range 2 {
				if (i+run)%2 == 0 {
					res, err = bench.MeasureRollingRestart(ctx, pg.Pool, key, sc, restartWarmup, restartSettle)
				} else {
					hold, err = bench.MeasureHold(ctx, pg.Pool, key+"-hold", sc, restartWarmup, restartSettle)
				}
				if err != nil {
					return "", err
				}
			}
			e.logf("liveness: rolling restart %s run %d: L_global %d before, lowest %d", c.name, run+1, res.Before, res.Low)
			row.before = append(row.before, float64(res.Before))
			row.low = append(row.low, float64(res.Low))
			row.frac = append(row.frac, float64(res.Low)/float64(max(res.Before, 1)))
			e.logf("liveness: hold (no restart) %s run %d: L_global %d before, lowest %d", c.name, run+1, hold.Before, hold.Low)
			row.hold = append(row.hold, float64(hold.Low)/float64(max(hold.Before, 1)))
		}
		restarts = append(restarts, row)
	}

	type joinRow struct {
		name                         string
		goodput, joiner, low, filled []float64
	}
	var joins []joinRow
	for _, c := range livenessConfigs() {
		row := joinRow{name: c.name}
		for run := range e.opts.FleetRuns {
			sc := base
			sc.Capacity, sc.BaseLatency = joinCapacity, joinLatency
			sc.Nodes, sc.WorkersPerNode, sc.Limiter = 2, joinWorkers, c.cfg
			sc.Limiter.InitialLimit = 0 // the library's: the first node fills C within the warmup
			key := fmt.Sprintf("bench-join-%d-%s-%d", start.UnixNano(), strings.Trim(c.name, "()"), run)
			res, err := bench.MeasureJoin(ctx, pg.Pool, key, sc, joinWarmup, joinSpan)
			if err != nil {
				return "", err
			}
			total := float64(res.Served[0] + res.Served[1])
			e.logf("liveness: join %s run %d: first node's in-flight %d, served %v of %.0f, L_global %d before, lowest %d", c.name, run+1, res.Filled, res.Served, res.Ideal, res.Before, res.Low)
			row.filled = append(row.filled, float64(res.Filled))
			row.goodput = append(row.goodput, total/res.Ideal)
			row.joiner = append(row.joiner, float64(res.Served[1])/max(total, 1))
			row.low = append(row.low, float64(res.Low))
		}
		joins = append(joins, row)
	}

	var b strings.Builder
	b.WriteString("## 6. Liveness\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; this section took %v. Each measurement ran %d time(s); medians, ranges in parentheses.\n\n",
		e.date, e.machine, time.Since(start).Round(time.Second), e.opts.FleetRuns)
	b.WriteString(codeBlock(e.command))
	fmt.Fprintf(&b, `
Both measurements run real fleet nodes (`+"`bench.MeasureClimb`, `bench.MeasureRollingRestart`, `bench.MeasureHold`"+`) on
a throwaway Postgres against a 429-mode provider of fixed capacity C = %d
(%v per request), heartbeat 100 ms, every node's limiter starting at
InitialLimit 1. L_global is the lowest value any running node last heard.

- **Climb**: %d nodes × %d busy workers start together; the time until
  L_global first reaches %.0f %% of C (%d), for at most %v.
- **Rolling restart**: %d nodes × %d busy workers run for %v; then each node
  in turn stops gracefully and a new instance with the same NodeID starts,
  %v apart. **before** is the median L_global over the second before the
  first restart, **lowest** the lowest from the first restart until %v
  after the last. **no restart** is the control: the same fleet, watched
  as long, with no restart (`+"`bench.MeasureHold`"+`); its lowest ÷ before is
  how far L_global moves by itself, through the law's own probes and
  backoffs, and a restart's lowest includes that movement too.
- **Join**: one node × %d busy workers runs alone for %v against C = %d
  with requests of %v (a request outlasts two heartbeats), both nodes'
  limiters starting at the library's InitialLimit (20); **first node's
  in-flight** is how many of its requests the provider held just before a
  second node, as busy, starts. The second meets an upstream the first
  fills: it is refused until the fleet makes room. Over the %v after its
  workers start, **served ÷ ideal**
  is both nodes' successes ÷ what C allows (C ÷ %v per second),
  **joiner's part** the second node's part of them (0.5 is an even split),
  **lowest L_global** the lowest any node heard.

**defaults** is the zero Config but for InitialLimit: law Auto, which
starts as Gradient2 and moves to FlatLatency's law after three refusals
answered at once that followed round trips without queueing, as this
provider's 429s are, and backs off by FlatLatency's 0.95 on such a
refusal already before it moves; a restarted node's limiter starts as
Gradient2 again.

`, climbCapacity, base.BaseLatency, climbNodes, climbWorkers, 100*climbTarget, int(climbTarget*climbCapacity), climbDeadline,
		restartNodes, restartWorkers, restartWarmup, restartSettle, restartSettle,
		joinWorkers, joinWarmup, joinCapacity, joinLatency, joinSpan, joinLatency)
	t := &table{header: []string{"limiter", "climb: time to 0.8·C (s)", "L_global at the end", "restart: before", "lowest", "lowest ÷ before", "no restart: lowest ÷ before"}, align: []byte("lrrrrrr")}
	for i := range climbs {
		t.add(climbs[i].name, stat(climbs[i].times, "%.2f"), stat(climbs[i].final, "%.0f"),
			stat(restarts[i].before, "%.0f"), stat(restarts[i].low, "%.0f"), stat(restarts[i].frac, "%.2f"), stat(restarts[i].hold, "%.2f"))
	}
	b.WriteString(t.String())
	b.WriteString("\n")
	jt := &table{header: []string{"limiter", "join: first node's in-flight", "served ÷ ideal", "joiner's part", "lowest L_global"}, align: []byte("lrrrr")}
	for _, j := range joins {
		jt.add(j.name, stat(j.filled, "%.0f"), stat(j.goodput, "%.2f"), stat(j.joiner, "%.2f"), stat(j.low, "%.0f"))
	}
	b.WriteString(jt.String())
	fmt.Fprintf(&b, "\n**Targets**: L_global ≥ %.1f·C within %v; a rolling restart keeps L_global within %.0f %% of its value before.\n\n",
		climbTarget, climbDeadline, 100*(1-restartTarget))
	for i := range climbs {
		tm := median(climbs[i].times)
		fr := median(restarts[i].frac)
		fmt.Fprintf(&b, "- %s: climb %s — %s; restart lowest ÷ before %.2f — %s (%.2f with no restart).\n", climbs[i].name,
			climbTime(tm, climbDeadline), verdict(tm <= climbDeadline.Seconds()), fr, verdict(fr >= restartTarget), median(restarts[i].hold))
	}
	return b.String(), nil
}

// climbTime renders a median climb time, which is huge when the median
// run never reached the target.
func climbTime(s float64, deadline time.Duration) string {
	if s > deadline.Seconds() {
		return fmt.Sprintf("not within %v", deadline)
	}
	return fmt.Sprintf("%.2f s", s)
}
