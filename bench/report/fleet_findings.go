package report

import (
	"fmt"
	"strings"

	"github.com/fleetlimit/fleetlimit/bench"
)

// fleetFindings explains the fleet results by their mechanisms. The
// mechanisms are fixed text; the numbers it cites come from the plotted
// runs, through the diagnosis.
func fleetFindings(sc bench.FleetScenario, runs []fleetRun) string {
	diags := adaptiveDiags(runs)
	third := sc.Duration / 3
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
- **fleetlimit keeps the fleet under one limit, but follows C slowly and
  refuses in bursts.** The coordinator does its job: the fleet's in-flight
  stays under L_global (plot), and far fewer requests are refused than
  under the uncoordinated ways. Three mechanisms cost it the targets.
  1. **A crossing of C costs up to a heartbeat of 429s** (fleet/). When
     L_global overshoots C, each node keeps admitting up to its share
     until the next grant. A refused request frees its slot within a
     millisecond and a queued request takes it at once, so every excess
     slot becomes a stream of 429s. The node's own backoff does not stop
     it: l_local estimates the whole provider, and the node admits up to
     its share, about l_local/N, so a lower l_local does not slow the
     node's own admission while it stays above the share.`)
	if d, ok := diags[bench.Fleetlimit]; ok {
		fmt.Fprintf(&b, " In the plotted run, the 429s came in %d of %d 100-ms intervals, up to %d in one.", d.binsWith429, d.bins, d.max429)
	}
	b.WriteString(`
  2. **Decreases compound on fast 429s** (adaptive/). "At most one
     decrease per round trip" is enforced by an epoch: a drop counts if its
     lease was admitted after the last decrease. In such a burst each 429
     answers a lease admitted a millisecond after the previous decrease,
     so the estimate falls by 0.9 per 429, not per round trip, until it is
     under the share. The lone-limiter reproduction above shows this with
     no timing noise. In the fleet runs, how far the estimate falls depends
     on how the 429s interleave with accepted requests.`)
	if d, ok := diags[bench.Fleetlimit]; ok {
		fmt.Fprintf(&b, " In the plotted run the fastest fall of the nodes' mean estimate took %.1f backoffs' worth within one heartbeat (%.1f → %.1f at %.2f s).",
			d.fallBackoffs(), d.fallFrom, d.fallTo, d.fallAt.Seconds())
	}
	b.WriteString(`
  3. **The estimate grows slowly, and its ceiling is set by timing jitter,
     not by C** (adaptive/). With Tolerance 1 and a constant headroom of 2,
     a round trip moves the estimate by Smoothing·(2 − estimate·(1 − g)),
     where g = rttNoload/rtt. That is 0.4 only when g = 1, and nothing once
     estimate = 2/(1 − g). In 429 mode the provider's latency is flat, so
     g < 1 comes only from timing jitter on the client machine: the busier
     the machine, the lower that ceiling, whatever C is. The jitter table
     above reproduces this on a lone limiter. This is the fleet side of the
     capacity-independent ceiling in the model section.`)
	if d, ok := diags[bench.Fleetlimit]; ok {
		fmt.Fprintf(&b, " In the plotted run's last third, with %d drops, the mean estimate grew from %.1f to %.1f: about %.1f per second, where 0.4 per round trip would allow about %.0f.",
			d.dropsLastThird, d.atDoubling, d.atEnd, d.growthPerSecond(third), 0.4/sc.BaseLatency.Seconds())
	}
	if j, ok := fleetJitter(runs); ok {
		sigma := j / 0.674
		ceiling, err := bench.JitterCeiling(bench.FleetLimiterConfig(sc.WorkersPerNode), sc.BaseLatency, sigma, jitterRounds, jitterSeed)
		if err == nil {
			fmt.Fprintf(&b, " Its round trips had a median %.1f %% above the fastest. A lone limiter whose round trips have that median jitter, as half-normal noise (σ = %.3f), settles at %.1f. That model of this machine's jitter is rough, but both put the ceiling at a few dozen, the same order as this C. At C = 400 the fleet would stop in the same place.",
				100*j, sigma, ceiling)
		}
	}
	b.WriteString(`
- **What would fix it** (for the owners of adaptive/ and fleet/; not
  measured here). Count at most one decrease per elapsed round trip (for
  example, none within rttNoload of the last one). Let a fleet node's
  decrease act on its own admission before the next grant: scale its
  ceiling by the new l_local ÷ the old one, or send an eager heartbeat
  after a backoff. Pause a node's admission for about one round trip
  after a 429 that has no Retry-After. For the ceiling, treat round trips
  within the jitter as gradient 1, or use a headroom that grows with the
  estimate.
`)
	return b.String()
}
