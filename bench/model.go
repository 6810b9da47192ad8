package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// ModelSteps is the length of one run of the model comparison: 300 steps
// of one simulated second, as in the published simulation.
const ModelSteps = 300

// Strategy is one way of choosing the concurrency of each model step.
type Strategy struct {
	// Name labels the strategy in tables and plots.
	Name string
	// About says in a few words what the strategy does.
	About string
	// NewPolicy returns a fresh policy for one run. cfg is the model the
	// run uses (the oracle starts from its InitialCapacity).
	NewPolicy func(cfg sim.ModelConfig) (sim.Policy, error)
}

// ConstantStrategy applies k every step.
func ConstantStrategy(k int) Strategy {
	return Strategy{
		Name:  fmt.Sprintf("constant-%d", k),
		About: fmt.Sprintf("k = %d every step", k),
		NewPolicy: func(sim.ModelConfig) (sim.Policy, error) {
			return sim.Constant(k), nil
		},
	}
}

// PublishedAIMDStrategy is the published AIMD policy (sim.NewAIMD with
// sim.PublishedAIMDConfig).
func PublishedAIMDStrategy() Strategy {
	return Strategy{
		Name:  "AIMD (published)",
		About: "sim.NewAIMD(sim.PublishedAIMDConfig()): interval AIMD, target 1.25s, α 20ms, β 0.75",
		NewPolicy: func(sim.ModelConfig) (sim.Policy, error) {
			return sim.NewAIMD(sim.PublishedAIMDConfig())
		},
	}
}

// OracleStrategy applies the true capacity the coming step faces; no real
// client can, so it is the upper reference.
func OracleStrategy() Strategy {
	return Strategy{
		Name:  "oracle",
		About: "k = floor(true capacity of the coming step); reference only",
		NewPolicy: func(cfg sim.ModelConfig) (sim.Policy, error) {
			return sim.Oracle{Initial: cfg.InitialCapacity}, nil
		},
	}
}

// LimiterStrategy drives an adaptive.Limiter built from cfg through a
// LimiterPolicy.
func LimiterStrategy(name string, cfg adaptive.Config) Strategy {
	return Strategy{
		Name:  name,
		About: ConfigLabel(cfg),
		NewPolicy: func(sim.ModelConfig) (sim.Policy, error) {
			return NewLimiterPolicy(cfg)
		},
	}
}

// Names of the fleetlimit strategies in the model comparison.
const (
	NameFleetDefaults = "fleetlimit gradient2, defaults"
	NameFleetFixed    = "fleetlimit gradient2, defaults but Tolerance 2"
	NameFleetGradient = "fleetlimit gradient2, model config"
	NameFleetAIMD     = "fleetlimit AIMD law, model config"
	// NameFleetGradientProportional is the scale check's diagnostic row
	// (ModelGradient2ProportionalConfig); it is not in ModelStrategies.
	NameFleetGradientProportional = "fleetlimit gradient2, model config, QueueSize 0.2·estimate (diagnostic)"
)

// ModelStrategies returns the strategies of the model comparison, in
// table order: the published ones, the oracle and four fleetlimit
// configurations (ModelDefaultsConfig, ModelFixedToleranceConfig,
// ModelGradient2Config, ModelAIMDConfig).
func ModelStrategies() []Strategy {
	return []Strategy{
		ConstantStrategy(50),
		ConstantStrategy(20),
		PublishedAIMDStrategy(),
		OracleStrategy(),
		LimiterStrategy(NameFleetDefaults, ModelDefaultsConfig()),
		LimiterStrategy(NameFleetFixed, ModelFixedToleranceConfig()),
		LimiterStrategy(NameFleetGradient, ModelGradient2Config()),
		LimiterStrategy(NameFleetAIMD, ModelAIMDConfig()),
	}
}

// SeedResult is one run's outcome.
type SeedResult struct {
	Seed uint64
	// Throughput is succeeded requests per simulated second.
	Throughput float64
	// RateLimited is the fraction of sent requests that were rate-limited.
	RateLimited float64
}

// Summary is the spread of one metric over seeds.
type Summary struct {
	P10, Median, P90 float64
}

// Summarize returns the 10th, 50th and 90th percentiles of values, with
// linear interpolation between order statistics (the "type 7" estimator
// of R and NumPy). It returns NaNs for no values.
func Summarize(values []float64) Summary {
	s := slices.Clone(values)
	slices.Sort(s)
	return Summary{P10: quantile(s, 0.1), Median: quantile(s, 0.5), P90: quantile(s, 0.9)}
}

// quantile returns the q-quantile of sorted.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[hi]-sorted[lo])
}

// StrategyResult is a strategy's outcome over a set of seeds.
type StrategyResult struct {
	Name        string
	Seeds       []SeedResult // in the order of the seeds given
	Throughput  Summary      // req/s
	RateLimited Summary      // fraction of sent requests
}

// Seeds returns the seeds first, first+1, …, first+n−1.
func Seeds(first uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// RunStrategy runs st on a fresh model per seed, steps steps each, using
// up to runtime.GOMAXPROCS(0) goroutines. The result does not depend on
// how many goroutines ran it. It returns the first policy construction
// error, or ctx's error if ctx ends first.
func RunStrategy(ctx context.Context, cfg sim.ModelConfig, st Strategy, seeds []uint64, steps int) (StrategyResult, error) {
	res := StrategyResult{Name: st.Name, Seeds: make([]SeedResult, len(seeds))}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan int)
	)
	workers := max(1, min(runtime.GOMAXPROCS(0), len(seeds)))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := RunSeed(cfg, st, seeds[i], steps)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				res.Seeds[i] = SeedResult{Seed: seeds[i], Throughput: r.Throughput(), RateLimited: r.RateLimitedFraction()}
			}
		}()
	}
feed:
	for i := range seeds {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	tp := make([]float64, len(res.Seeds))
	rl := make([]float64, len(res.Seeds))
	for i, s := range res.Seeds {
		tp[i], rl[i] = s.Throughput, s.RateLimited
	}
	res.Throughput, res.RateLimited = Summarize(tp), Summarize(rl)
	return res, nil
}

// RunSeed runs st for steps steps on a model built from cfg and seed and
// returns the run with its trace.
func RunSeed(cfg sim.ModelConfig, st Strategy, seed uint64, steps int) (sim.RunResult, error) {
	model, err := sim.NewModel(cfg, seed)
	if err != nil {
		return sim.RunResult{}, fmt.Errorf("%s: %w", st.Name, err)
	}
	policy, err := st.NewPolicy(cfg)
	if err != nil {
		return sim.RunResult{}, fmt.Errorf("%s: %w", st.Name, err)
	}
	return sim.Run(model, policy, steps), nil
}
