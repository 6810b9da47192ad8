package sim

import (
	"fmt"
	"math"
	"time"
)

// Policy chooses the concurrency of each Model step from what the step
// before it showed. A Policy may keep state (AIMD does) and need not be
// safe for concurrent use; use a fresh one per run.
type Policy interface {
	// Next returns k, the number of requests to apply in the coming step
	// (>= 0). prev is the result of the step before it; for the first step
	// of a run it is the zero StepResult (prev.Step == 0).
	Next(prev StepResult) int
}

// Constant is the Policy that applies the same concurrency every step:
// Constant(20) is the published "constant 20 req/s".
type Constant int

// Next returns int(c) whatever prev is.
func (c Constant) Next(StepResult) int { return int(c) }

// Oracle is the Policy that knows the true capacity and applies k =
// floor(c), where c is the capacity the previous step left the model in
// (StepResult.NextCapacity): the capacity the coming step is judged
// against. It is the upper reference of the published table; no real
// client can see capacity. It reproduces the published oracle median
// (about 23.5 req/s); LaggedOracle is the one-step-late variant.
type Oracle struct {
	// Initial is the capacity for the first step, which has no previous
	// step. Use the model's InitialCapacity.
	Initial float64
}

// Next returns floor(prev.NextCapacity), or floor(o.Initial) for the first
// step.
func (o Oracle) Next(prev StepResult) int {
	c := prev.NextCapacity
	if prev.Step == 0 {
		c = o.Initial
	}
	return floorCapacity(c)
}

// LaggedOracle is the Policy that applies k = floor(c) where c is the
// capacity the previous step was judged against (StepResult.Capacity), one
// update of x behind the capacity the coming step faces. It sits a little
// below Oracle (about 22 req/s median over 300 seeds, against 23.5).
type LaggedOracle struct {
	// Initial is the capacity for the first step. Use the model's
	// InitialCapacity.
	Initial float64
}

// Next returns floor(prev.Capacity), or floor(o.Initial) for the first
// step.
func (o LaggedOracle) Next(prev StepResult) int {
	c := prev.Capacity
	if prev.Step == 0 {
		c = o.Initial
	}
	return floorCapacity(c)
}

func floorCapacity(c float64) int {
	if !(c > 0) {
		return 0
	}
	if c >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Floor(c))
}

// AIMDConfig holds the parameters of the published AIMD policy, which
// controls the interval between requests rather than a concurrency.
type AIMDConfig struct {
	// InitialInterval is the interval between requests before the first
	// step. Must lie in [MinInterval, MaxInterval]. Published: 1s.
	InitialInterval time.Duration
	// TargetLatency is the latency above which a step counts as congested.
	// Must be > 0. Published: 1.25s.
	TargetLatency time.Duration
	// Alpha is subtracted from the interval after a step at or under the
	// target (additive increase of the request rate). Must be > 0.
	// Published: 20ms.
	Alpha time.Duration
	// Beta divides the interval after a step over the target
	// (multiplicative decrease of the rate to Beta times itself). Must be
	// in (0, 1). Published: 0.75.
	Beta float64
	// MinInterval and MaxInterval clamp the interval. Must satisfy
	// 0 < MinInterval <= MaxInterval. Published: 25ms and 1s.
	MinInterval, MaxInterval time.Duration
}

// PublishedAIMDConfig returns the published AIMD parameters: interval
// starting at 1s, clamped to [25ms, 1s], target latency 1.25s, α = 20ms,
// β = 0.75.
func PublishedAIMDConfig() AIMDConfig {
	return AIMDConfig{
		InitialInterval: time.Second,
		TargetLatency:   1250 * time.Millisecond,
		Alpha:           20 * time.Millisecond,
		Beta:            0.75,
		MinInterval:     25 * time.Millisecond,
		MaxInterval:     time.Second,
	}
}

// Validate reports the first field of c that is out of range, or nil. The
// error names the field and its allowed range.
func (c AIMDConfig) Validate() error {
	switch {
	case c.MinInterval <= 0:
		return fmt.Errorf("sim: AIMDConfig.MinInterval must be > 0, got %v", c.MinInterval)
	case c.MaxInterval < c.MinInterval:
		return fmt.Errorf("sim: AIMDConfig.MaxInterval must be >= MinInterval (%v), got %v", c.MinInterval, c.MaxInterval)
	case c.InitialInterval < c.MinInterval || c.InitialInterval > c.MaxInterval:
		return fmt.Errorf("sim: AIMDConfig.InitialInterval must be in [%v, %v], got %v", c.MinInterval, c.MaxInterval, c.InitialInterval)
	case c.TargetLatency <= 0:
		return fmt.Errorf("sim: AIMDConfig.TargetLatency must be > 0, got %v", c.TargetLatency)
	case c.Alpha <= 0:
		return fmt.Errorf("sim: AIMDConfig.Alpha must be > 0, got %v", c.Alpha)
	case !(c.Beta > 0 && c.Beta < 1):
		return fmt.Errorf("sim: AIMDConfig.Beta must be in (0, 1), got %v", c.Beta)
	}
	return nil
}

// AIMD is the published AIMD Policy. It keeps an interval between requests
// and applies k = round(1s / interval) requests in a step, so k ranges over
// [1s/MaxInterval, 1s/MinInterval] (1 to 40 with the published config).
// After each step it compares the observed latency with TargetLatency: at
// or under it, the interval shrinks by Alpha; over it, the interval is
// divided by Beta. The interval is then clamped to [MinInterval,
// MaxInterval].
type AIMD struct {
	cfg      AIMDConfig
	interval float64 // seconds
}

// NewAIMD returns an AIMD policy, or an error naming the invalid field of
// cfg (see AIMDConfig.Validate).
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &AIMD{cfg: cfg, interval: cfg.InitialInterval.Seconds()}, nil
}

// Interval returns the current interval between requests.
func (a *AIMD) Interval() time.Duration { return secondsToDuration(a.interval) }

// Next updates the interval from prev (unless prev is the zero StepResult)
// and returns round(1s / interval).
func (a *AIMD) Next(prev StepResult) int {
	if prev.Step != 0 {
		if prev.Latency > a.cfg.TargetLatency {
			a.interval /= a.cfg.Beta
		} else {
			a.interval -= a.cfg.Alpha.Seconds()
		}
		a.interval = math.Min(a.cfg.MaxInterval.Seconds(), math.Max(a.cfg.MinInterval.Seconds(), a.interval))
	}
	return int(math.Round(1 / a.interval))
}

// RunResult sums up a Run.
type RunResult struct {
	// Steps is the number of steps run.
	Steps int
	// Sent, Succeeded and RateLimited are totals over all steps.
	Sent, Succeeded, RateLimited int
	// Trace holds every step's result, in order.
	Trace []StepResult
}

// Throughput returns the effective throughput in requests per second:
// Succeeded / Steps (one step is one second). It is 0 for an empty run.
func (r RunResult) Throughput() float64 {
	if r.Steps == 0 {
		return 0
	}
	return float64(r.Succeeded) / float64(r.Steps)
}

// RateLimitedFraction returns RateLimited / Sent, in [0, 1]. It is 0 when
// nothing was sent.
func (r RunResult) RateLimitedFraction() float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.RateLimited) / float64(r.Sent)
}

// Run drives model with policy for steps steps (one second each; a
// negative count runs none) and returns the totals and the trace. It panics
// if policy returns a negative k.
func Run(model *Model, policy Policy, steps int) RunResult {
	steps = max(steps, 0)
	res := RunResult{Steps: steps, Trace: make([]StepResult, 0, steps)}
	var prev StepResult
	for range steps {
		k := policy.Next(prev)
		prev = model.Step(k)
		res.Sent += prev.Concurrency
		res.Succeeded += prev.Succeeded
		res.RateLimited += prev.RateLimited
		res.Trace = append(res.Trace, prev)
	}
	return res
}
