package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// StepDuration is the simulated time one sim.Model step lasts.
const StepDuration = time.Second

// LimiterPolicy is a sim.Policy that lets an adaptive.Limiter, driven
// through its public API on a simulated clock, choose each step's
// concurrency:
//
//  1. At the start of a step it calls TryAcquire until the limiter
//     refuses; k is the number of leases it got, which is the limiter's
//     current limit.
//  2. When the model has run the step, it advances the clock by the
//     step's observed latency and settles every lease: Release for the
//     requests that succeeded (so the latency is the round-trip time
//     sample) and Drop for the rate-limited ones.
//  3. It then moves the clock to the start of the next step, one
//     StepDuration after the start of this one (or leaves it where it is
//     when the latency was longer than that).
//
// Settling happens in the Next call after the step, so the leases of the
// last step of a run stay in flight; call Finish to settle them.
//
// A LimiterPolicy is not safe for concurrent use; use a fresh one per run.
type LimiterPolicy struct {
	limiter   *adaptive.Limiter
	clock     *sim.ManualClock
	leases    []adaptive.Lease
	stepStart time.Time
}

// simEpoch is the simulated clock's reading at the start of every run, so
// that runs are reproducible.
var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewLimiterPolicy returns a LimiterPolicy over a new adaptive.Limiter
// built from cfg. cfg.Clock must be nil: the policy supplies its simulated
// clock. A nil cfg.Rand is replaced by a fixed-seed source so that a run
// with recalibration jitter is reproducible. It returns the limiter's
// configuration error, if any.
func NewLimiterPolicy(cfg adaptive.Config) (*LimiterPolicy, error) {
	if cfg.Clock != nil {
		return nil, errors.New("bench: NewLimiterPolicy: Config.Clock must be nil; the policy supplies a simulated clock")
	}
	clock := sim.NewManualClock(simEpoch)
	cfg.Clock = clock
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	l, err := adaptive.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: NewLimiterPolicy: %w", err)
	}
	return &LimiterPolicy{limiter: l, clock: clock, stepStart: simEpoch}, nil
}

// Limiter returns the limiter the policy drives, for inspection
// (Snapshot). Calling its admission methods during a run breaks the
// policy's accounting.
func (p *LimiterPolicy) Limiter() *adaptive.Limiter { return p.limiter }

// Next settles the leases of the step prev describes (unless prev is the
// zero StepResult of a run's first step) and returns how many leases the
// limiter grants for the coming step. It panics if prev.Concurrency is not
// the number of leases the previous call returned: the policy must drive
// every step of its model.
func (p *LimiterPolicy) Next(prev sim.StepResult) int {
	if prev.Step != 0 {
		p.settle(prev)
	}
	p.leases = p.leases[:0]
	for {
		le, ok := p.limiter.TryAcquire()
		if !ok {
			break
		}
		p.leases = append(p.leases, le)
	}
	return len(p.leases)
}

// Finish settles the leases of the last step of a run, described by last,
// as Next would. It is a no-op when no lease is outstanding.
func (p *LimiterPolicy) Finish(last sim.StepResult) {
	if len(p.leases) > 0 {
		p.settle(last)
		p.leases = p.leases[:0]
	}
}

// settle feeds one step's outcome back into the limiter.
func (p *LimiterPolicy) settle(step sim.StepResult) {
	if step.Concurrency != len(p.leases) {
		panic(fmt.Sprintf("bench: LimiterPolicy: step %d ran %d requests, but the policy granted %d",
			step.Step, step.Concurrency, len(p.leases)))
	}
	p.clock.Advance(max(step.Latency, 0))
	for i, le := range p.leases {
		if i < step.Succeeded {
			le.Release()
		} else {
			le.Drop()
		}
	}
	next := p.stepStart.Add(StepDuration)
	if now := p.clock.Now(); now.Before(next) {
		p.clock.Advance(next.Sub(now))
	}
	p.stepStart = p.clock.Now()
}
