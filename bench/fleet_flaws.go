package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// The fleet comparison explains fleetlimit's results by two properties of
// the adaptive limiter. The functions below reproduce each on a lone
// limiter with a simulated clock, deterministically, so that the report
// can show them independently of the machine's timing (and show them gone
// once the limiter changes).

// DropBurst reproduces a 429 burst on a fleet node. A limiter built from
// cfg (cfg.Clock must be nil) has the estimate estimate (the node's view
// of the whole provider) and the ceiling ceiling (its share, well under
// the estimate). ceiling−1 of its requests were accepted by the provider
// and stay in flight; the last slot is excess: every request sent on it
// is answered 429 after gap, and the slot it frees is taken at once by a
// queued request, as long as the limiter admits one. It returns the
// estimate after each 429, at most drops of them; the burst ends when the
// limiter stops re-admitting.
func DropBurst(cfg adaptive.Config, estimate float64, ceiling, drops int, gap time.Duration) ([]float64, error) {
	if cfg.Clock != nil {
		return nil, errClockSet("DropBurst")
	}
	clock := sim.NewManualClock(simEpoch)
	cfg.Clock = clock
	l, err := adaptive.New(cfg)
	if err != nil {
		return nil, err
	}
	l.SetEstimate(estimate)
	l.SetCeiling(ceiling)
	var accepted []adaptive.Lease
	for range ceiling - 1 {
		if le, ok := l.TryAcquire(); ok {
			accepted = append(accepted, le)
		}
	}
	var after []float64
	for range drops {
		le, ok := l.TryAcquire()
		if !ok {
			break
		}
		clock.Advance(gap)
		le.Drop()
		after = append(after, l.Estimate())
	}
	for _, le := range accepted {
		le.Ignore()
	}
	return after, nil
}

// JitterCeiling runs a limiter built from cfg (cfg.Clock must be nil) for
// rounds round trips against an upstream whose latency is flat — no
// queueing, no drops, at any load — but whose measured round-trip times
// carry timing jitter: base·(1 + jitter·|Z|), Z standard normal, from a
// PCG source seeded with seed. Every round trip the limiter's whole limit
// is in flight (so the utilization guard never blocks) and settles with
// that round's samples. It returns the mean estimate over the last tenth
// of the rounds: with a Gradient2 law and a headroom that does not grow
// with the estimate, a value set by the jitter, not by any capacity.
func JitterCeiling(cfg adaptive.Config, base time.Duration, jitter float64, rounds int, seed uint64) (float64, error) {
	return flatCeiling("JitterCeiling", cfg, rounds, seed, func(rng *rand.Rand) time.Duration {
		return time.Duration(float64(base) * (1 + jitter*math.Abs(rng.NormFloat64())))
	})
}

// SpreadCeiling is JitterCeiling for requests of unequal size: the round
// trips spread both ways around a median of base, base·exp(spread·Z) (a
// lognormal), as the latencies of completions of unequal length do. The
// upstream is just as flat: nothing queues, nothing is refused.
func SpreadCeiling(cfg adaptive.Config, base time.Duration, spread float64, rounds int, seed uint64) (float64, error) {
	return flatCeiling("SpreadCeiling", cfg, rounds, seed, func(rng *rand.Rand) time.Duration {
		return time.Duration(float64(base) * math.Exp(spread*rng.NormFloat64()))
	})
}

// flatCeiling runs JitterCeiling's loop with round-trip times drawn by
// rtt; fn names the caller in errors.
func flatCeiling(fn string, cfg adaptive.Config, rounds int, seed uint64, rtt func(*rand.Rand) time.Duration) (float64, error) {
	if cfg.Clock != nil {
		return 0, errClockSet(fn)
	}
	clock := sim.NewManualClock(simEpoch)
	cfg.Clock = clock
	l, err := adaptive.New(cfg)
	if err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var leases []adaptive.Lease
	var sum float64
	n := 0
	for r := range rounds {
		leases = leases[:0]
		for {
			le, ok := l.TryAcquire()
			if !ok {
				break
			}
			leases = append(leases, le)
		}
		var longest time.Duration
		for _, le := range leases {
			d := rtt(rng)
			le.ReleaseRTT(d)
			longest = max(longest, d)
		}
		clock.Advance(longest)
		if r >= rounds-rounds/10 {
			sum += l.Estimate()
			n++
		}
	}
	return sum / float64(max(n, 1)), nil
}

func errClockSet(fn string) error {
	return fmt.Errorf("bench: %s: Config.Clock must be nil; it supplies a simulated clock", fn)
}
