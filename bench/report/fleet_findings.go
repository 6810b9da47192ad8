package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/bench"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// fleetFindings explains the fleet results by their mechanisms. The
// mechanisms are fixed text; the numbers it cites come from the plotted
// runs, through the diagnosis, but for the outer peaks, which it lists for
// every run.
func fleetFindings(sc bench.FleetScenario, runs []fleetRun) string {
	diags := adaptiveDiags(runs)
	var b strings.Builder
	b.WriteString(`
### What the numbers say

- **The static caps over-admit as soon as C moves or is not theirs.**
  static C/N matches C exactly for two thirds of the run, then offers twice
  the halved capacity, and about half its requests in the middle third are
  429s. It keeps the provider full, so its goodput is the practical ceiling
  on this machine, but only because it was given C and N and because a 429
  costs nothing here. static C offers N·C, and most of its requests are
  429s.
- **Independent adaptive limiters share a 429-mode provider well, and pay
  for it in 429s.** Each node's estimate is its own admission limit, and a
  429 lands on a node that is sending, so the nodes settle near C/N each,
  like TCP flows on one link, and follow both steps within a second. But
  every node probes on its own, so the fleet keeps crossing C`)
	if d, ok := diags[bench.IndependentAdaptive]; ok {
		fmt.Fprintf(&b, ": in the plotted run, %d of its %d 100-ms intervals had a 429", d.binsWith429, d.bins)
	}
	b.WriteString(`.
- **fleetlimit keeps the fleet near C, and a crossing of C costs a few
  429s, not a heartbeat of them.** Three mechanisms do it.
  1. **A 429 acts on the node's own admission at once** (adaptive/
     SetCeiling). Every drop takes one slot off the node's ceiling (its
     share) before the next grant, so an excess slot is not refilled by
     a queued request that the provider will refuse too (k requests
     sent together and refused together cut k; one that ends a paced
     climb first takes the ceiling down to what was in flight), and two
     for a request
     admitted after the last backoff and refused less than a no-load
     round trip after it; 5 clean round trips
     give one slot back (each give-back that holds for 5 more twice
     as many as the one before, but never past the cut a refused
     give-back last left; the wait doubles after a give-back is refused
     before it held, 5 again once a give-back to the cut last refused
     holds), and a lower share absorbs
     the cut. The same 429
     takes the node's estimate down to L_global less its cut, so the
     lower median, and with it every share, follows.`)
	if d, ok := diags[bench.Fleetlimit]; ok {
		fmt.Fprintf(&b, " In the plotted run the 429s came in %d of %d 100-ms intervals, at most %d in one.", d.binsWith429, d.bins, d.max429)
	}
	b.WriteString(`
  2. **The law ignores round-trip time** (adaptive.FlatLatency). In 429
     mode the provider's latency is flat, so any rise in the round trip is
     timing jitter on the client machine; Gradient2 would read it as
     queueing once it exceeds the tolerance (a fixed tolerance of 2 absorbs
     the jitter table's σ but not the spread of requests of unequal size;
     the defaults' measured band takes both for noise, though a spread
     still holds them under 1000: the spread table) and stop at a ceiling
     set by the latency, not by C. AIMD
     on drops alone has no such ceiling.
  3. **The probe is small near the capacity last hit and grows when there
     is room.** After a 429 the step starts at 1 % of the estimate per
     round trip (at least 0.25) and doubles every 2 round trips without
     one, up to a quarter of the estimate, so a 5 % backoff is won back in
     4 round trips, the fleet's probes above C cost a few 429s, and a
     doubling of C is found in about a second. Above the level the last
     backoff came down from, each heartbeat after requests of the
     node's own and no 429 since the last counts as a round trip too
     (Limiter.ProbeTick), so with requests
     longer than a heartbeat (section 7) the climb is not clocked by the
     round trips alone.`)
	if d, ok := diags[bench.Fleetlimit]; ok {
		fmt.Fprintf(&b, " In the plotted run's last third the mean estimate went from %.1f to %.1f, with %d drops.",
			d.atDoubling, d.atEnd, d.dropsLastThird)
	}
	b.WriteString(`
- **What the numbers do not show.** The fleet's l_local values vote in a
  lower median, so a node whose probe has not yet met a 429 can hold an
  estimate above C for a while (the mean estimate in the table above);
  L_global, not the mean, bounds admission. At the halving the fleet has
  C in flight when the capacity becomes C/2: the whole-run peak counts
  that moment, which no limiter can avoid.
`)
	r, ok := measured(runs, bench.Fleetlimit)
	if ok && median(metric(r.runs, func(x bench.FleetResult) float64 { return x.OuterPeakRatio })) > targetFleetPeak {
		low := sc.Capacity / 2
		over := int(targetFleetPeak*float64(low)) + 1 // the least in flight above the bound at C = low
		fmt.Fprintf(&b, `
- **Why the outer peak stays above %.2f·C.** Attempted in-flight never
  exceeds what the nodes admitted, so every request above C is a slot
  granted above C, and the provider refuses it. At the start a node
  takes a share that rises over a round trip, and its first 429 ends the
  climb, but the nodes that reach C at once each send a slot over it.
  After the halving the
  shares add up to L_global, which
  stays above the new C until the drops have cut enough slots and the
  lower median has followed: longer than the first heartbeat (see the
  convergence column). Later a slot given back, or a share that grows,
  can overshoot again. At C = %d, %d slots over C at once are %.2f·C.
  Staying within %.2f·C at every instant would mean almost never probing
  above C, which would cost goodput and slow the climb after the
  doubling. fleetlimit's outer peak in each run: `, targetFleetPeak, low, over-low, float64(over)/float64(low), targetFleetPeak)
		var at []string
		for _, res := range r.runs {
			at = append(at, fmt.Sprintf("%.2f·C at %s", res.OuterPeakRatio, phaseOf(sc, res.OuterPeakAt)))
		}
		b.WriteString(strings.Join(at, "; ") + ".")
	}
	b.WriteString("\n")
	return b.String()
}

// phaseOf names where at falls in sc's schedule, for the findings.
func phaseOf(sc bench.FleetScenario, at time.Duration) string {
	steps := sc.Steps()
	i := 0
	for i+1 < len(steps) && at >= steps[i+1].At {
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.2f s, after the start", at.Seconds())
	}
	return fmt.Sprintf("%.2f s, %.2f s after the %s", at.Seconds(), (at - steps[i].At).Seconds(), stepKind(steps, i))
}

// stepKind names steps[i] of a schedule: the start, a halving (the
// capacity fell) or a doubling.
func stepKind(steps []sim.Step, i int) string {
	switch {
	case i == 0:
		return "start"
	case steps[i].Capacity < steps[i-1].Capacity:
		return "halving"
	default:
		return "doubling"
	}
}
