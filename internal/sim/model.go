package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ModelConfig holds the parameters of the latent-capacity Model. Durations
// are converted to float seconds inside the model; one step is one second.
//
// The zero ModelConfig is not valid: start from PublishedModelConfig and
// change the fields you need. Every field is used as given (a zero
// Volatility or LatencyNoise is a valid, noise-free model), so there are no
// hidden defaults.
type ModelConfig struct {
	// InitialCapacity is the capacity c = exp(x) before the first step.
	// Must be > 0. Published: 20.
	InitialCapacity float64
	// MeanCapacity is exp(μ), the capacity that log-capacity reverts to when
	// the backend is not overloaded. Must be > 0. Published: 20.
	MeanCapacity float64
	// Reversion is θ, the fraction of the distance to μ_t that x closes per
	// step. Must be in [0, 1]. Published: 0.05.
	Reversion float64
	// Volatility is σ, the standard deviation of the per-step shock to x.
	// Must be >= 0. Published: 0.2.
	Volatility float64
	// OverloadPenalty is how far the mean of x drops per unit of log
	// overload: μ_t = log(MeanCapacity) − OverloadPenalty·max(0, log k − x).
	// Must be >= 0. Published: 0.5.
	OverloadPenalty float64
	// BaseLatency is ℓ0, the latency of a step whose concurrency is within
	// capacity. Must be > 0. Published: 1s.
	BaseLatency time.Duration
	// LatencyNoise is the standard deviation of the Gaussian noise added to
	// every observed latency. Must be >= 0. Published: 100ms.
	LatencyNoise time.Duration
	// SuccessLatency is the largest observed latency at which a step's
	// requests succeed; above it they are all rate-limited. Must be > 0.
	// Published: 1.5s.
	SuccessLatency time.Duration
}

// PublishedModelConfig returns the parameters of the published simulation
// ("Handling Concurrency", 2026): capacity starting at and reverting to 20,
// θ = 0.05, σ = 0.2, overload penalty 0.5, ℓ0 = 1s, latency noise 100ms and
// a 1.5s success threshold.
func PublishedModelConfig() ModelConfig {
	return ModelConfig{
		InitialCapacity: 20,
		MeanCapacity:    20,
		Reversion:       0.05,
		Volatility:      0.2,
		OverloadPenalty: 0.5,
		BaseLatency:     time.Second,
		LatencyNoise:    100 * time.Millisecond,
		SuccessLatency:  1500 * time.Millisecond,
	}
}

// Validate reports the first field of c that is out of range, or nil. The
// error names the field and its allowed range.
func (c ModelConfig) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(c.InitialCapacity) || c.InitialCapacity <= 0:
		return fmt.Errorf("sim: ModelConfig.InitialCapacity must be a finite number > 0, got %v", c.InitialCapacity)
	case !finite(c.MeanCapacity) || c.MeanCapacity <= 0:
		return fmt.Errorf("sim: ModelConfig.MeanCapacity must be a finite number > 0, got %v", c.MeanCapacity)
	case !(c.Reversion >= 0 && c.Reversion <= 1):
		return fmt.Errorf("sim: ModelConfig.Reversion must be in [0, 1], got %v", c.Reversion)
	case !finite(c.Volatility) || c.Volatility < 0:
		return fmt.Errorf("sim: ModelConfig.Volatility must be a finite number >= 0, got %v", c.Volatility)
	case !finite(c.OverloadPenalty) || c.OverloadPenalty < 0:
		return fmt.Errorf("sim: ModelConfig.OverloadPenalty must be a finite number >= 0, got %v", c.OverloadPenalty)
	case c.BaseLatency <= 0:
		return fmt.Errorf("sim: ModelConfig.BaseLatency must be > 0, got %v", c.BaseLatency)
	case c.LatencyNoise < 0:
		return fmt.Errorf("sim: ModelConfig.LatencyNoise must be >= 0, got %v", c.LatencyNoise)
	case c.SuccessLatency <= 0:
		return fmt.Errorf("sim: ModelConfig.SuccessLatency must be > 0, got %v", c.SuccessLatency)
	}
	return nil
}

// StepResult is what one Model step produced.
type StepResult struct {
	// Step is the 1-based number of the step in its model's life. The zero
	// StepResult (Step 0) means "no step yet".
	Step int
	// Concurrency is k, the number of requests applied during the step.
	Concurrency int
	// Capacity is the true capacity c = exp(x) the step's requests were
	// judged against (the capacity before the step's update of x).
	Capacity float64
	// NextCapacity is the true capacity after the step's update of x: the
	// capacity the next step will be judged against.
	NextCapacity float64
	// Latency is the observed latency: ℓ0 (or ℓ0·k/c when k > c) plus noise.
	// It is drawn even when Concurrency is 0.
	Latency time.Duration
	// Succeeded is the number of requests that succeeded: k when the
	// observed latency was at most SuccessLatency, else 0.
	Succeeded int
	// RateLimited is the number of requests that were rate-limited:
	// k − Succeeded.
	RateLimited int
}

// Model is the latent-capacity model of the published simulation. Each Step
// is one second. Log-capacity x follows a discrete Ornstein–Uhlenbeck
// process whose mean drops while the backend is overloaded:
//
//	μ_t = log(MeanCapacity) − OverloadPenalty·max(0, log k − x)
//	x'  = x + Reversion·(μ_t − x) + Volatility·ε,  ε ~ N(0, 1)
//
// and the capacity is c = exp(x). Step(k), in this exact order:
//
//  1. c = exp(x) is the step's capacity;
//  2. draw the latency noise η ~ N(0, 1) and observe
//     ℓ = ℓ0·max(1, k/c) + LatencyNoise·η;
//  3. all k requests succeed when ℓ <= SuccessLatency, else all k are
//     rate-limited;
//  4. draw ε ~ N(0, 1) and update x with μ_t computed from this k and the
//     x of step 1 (k = 0 applies no penalty).
//
// Both normals are drawn on every step, whatever k is, so two models with
// the same config and seed see the same noise sequence under different
// policies (common random numbers).
//
// A Model is deterministic given its config and seed. It is not safe for
// concurrent use; callers that share one (such as FollowModel) lock around
// it.
type Model struct {
	cfg      ModelConfig
	rng      *rand.Rand
	x        float64 // log-capacity
	logMu    float64 // log(MeanCapacity)
	base     float64 // ℓ0 in seconds
	noise    float64 // latency noise std dev in seconds
	success  float64 // success threshold in seconds
	steps    int
	seedUsed uint64
}

// NewModel returns a Model with x = log(cfg.InitialCapacity) whose noise
// comes from a PCG source seeded with (seed, seed^0x9e3779b97f4a7c15). It
// returns an error naming the field when cfg is invalid (see
// ModelConfig.Validate).
func NewModel(cfg ModelConfig, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		x:        math.Log(cfg.InitialCapacity),
		logMu:    math.Log(cfg.MeanCapacity),
		base:     cfg.BaseLatency.Seconds(),
		noise:    cfg.LatencyNoise.Seconds(),
		success:  cfg.SuccessLatency.Seconds(),
		seedUsed: seed,
	}, nil
}

// Config returns the configuration the model was built with.
func (m *Model) Config() ModelConfig { return m.cfg }

// Seed returns the seed the model was built with.
func (m *Model) Seed() uint64 { return m.seedUsed }

// Steps returns how many steps the model has taken.
func (m *Model) Steps() int { return m.steps }

// Capacity returns the current capacity exp(x): the capacity the next Step
// will judge its requests against.
func (m *Model) Capacity() float64 { return math.Exp(m.x) }

// Step applies concurrency k for one second and advances the model (see
// Model for the order of operations). It panics if k is negative.
func (m *Model) Step(k int) StepResult {
	if k < 0 {
		panic(fmt.Sprintf("sim: Model.Step called with negative concurrency %d", k))
	}
	c, latency, next := m.step(float64(k))
	res := StepResult{
		Step:         m.steps,
		Concurrency:  k,
		Capacity:     c,
		Latency:      secondsToDuration(latency),
		NextCapacity: next,
	}
	if latency <= m.success {
		res.Succeeded = k
	} else {
		res.RateLimited = k
	}
	return res
}

// step is Step for a real-valued k >= 0 (the Provider feeds it a mean
// concurrency). It returns the step's capacity, its observed latency in
// seconds and the capacity after the update.
func (m *Model) step(k float64) (c, latency, next float64) {
	m.steps++
	c = math.Exp(m.x)
	latency = m.base*math.Max(1, k/c) + m.noise*m.rng.NormFloat64()

	overload := 0.0
	if k > 0 {
		overload = math.Max(0, math.Log(k)-m.x)
	}
	mu := m.logMu - m.cfg.OverloadPenalty*overload
	m.x += m.cfg.Reversion*(mu-m.x) + m.cfg.Volatility*m.rng.NormFloat64()
	return c, latency, math.Exp(m.x)
}

func secondsToDuration(s float64) time.Duration {
	d := s * float64(time.Second)
	switch {
	case d >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case d <= math.MinInt64:
		return time.Duration(math.MinInt64)
	}
	return time.Duration(math.Round(d))
}
