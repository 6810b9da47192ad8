package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The published medians over 300 seeds ("Handling Concurrency", 2026) and
// the band we hold our reproduction to. The band is the brief's ±10%; it
// was fixed before the numbers were measured and must not be widened to
// fit them.
const (
	publishedConstant20 = 13.1
	publishedAIMD       = 15.2
	publishedOracle     = 23.5
	medianTolerance     = 0.10
	paperSteps          = 300
	paperSeeds          = 300
)

func TestModelConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, PublishedModelConfig().Validate())

	tests := []struct {
		field  string
		mutate func(*ModelConfig)
	}{
		{"InitialCapacity", func(c *ModelConfig) { c.InitialCapacity = 0 }},
		{"InitialCapacity", func(c *ModelConfig) { c.InitialCapacity = math.Inf(1) }},
		{"MeanCapacity", func(c *ModelConfig) { c.MeanCapacity = -1 }},
		{"Reversion", func(c *ModelConfig) { c.Reversion = 1.5 }},
		{"Reversion", func(c *ModelConfig) { c.Reversion = math.NaN() }},
		{"Volatility", func(c *ModelConfig) { c.Volatility = -0.1 }},
		{"OverloadPenalty", func(c *ModelConfig) { c.OverloadPenalty = -1 }},
		{"BaseLatency", func(c *ModelConfig) { c.BaseLatency = 0 }},
		{"LatencyNoise", func(c *ModelConfig) { c.LatencyNoise = -time.Millisecond }},
		{"SuccessLatency", func(c *ModelConfig) { c.SuccessLatency = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			cfg := PublishedModelConfig()
			tt.mutate(&cfg)
			_, err := NewModel(cfg, 1)
			require.ErrorContains(t, err, "ModelConfig."+tt.field)
		})
	}
	_, err := NewModel(ModelConfig{}, 1)
	require.Error(t, err, "the zero ModelConfig is invalid")
}

func TestModelIsDeterministicPerSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []StepResult {
		m, err := NewModel(PublishedModelConfig(), seed)
		require.NoError(t, err)
		return Run(m, Constant(20), 50).Trace
	}
	require.Equal(t, run(7), run(7))
	require.NotEqual(t, run(7), run(8))
}

// TestModelStepOrder checks the documented order on a noise-free model:
// latency is observed against the capacity before the update, then x moves
// by θ(μ_t − x) with μ_t penalised by this step's k.
func TestModelStepOrder(t *testing.T) {
	t.Parallel()
	cfg := PublishedModelConfig()
	cfg.Volatility = 0
	cfg.LatencyNoise = 0
	m, err := NewModel(cfg, 1)
	require.NoError(t, err)

	c0 := m.Capacity()
	require.InDelta(t, 20, c0, 1e-9)

	// Within capacity: base latency, all succeed, no penalty, x stays at μ.
	r := m.Step(10)
	require.Equal(t, 1, r.Step)
	require.Equal(t, c0, r.Capacity)
	require.Equal(t, time.Second, r.Latency)
	require.Equal(t, 10, r.Succeeded)
	require.Zero(t, r.RateLimited)
	require.InDelta(t, c0, r.NextCapacity, 1e-9)
	require.Equal(t, r.NextCapacity, m.Capacity())

	// k = 40 against c = 20: latency 2s > 1.5s, all 40 rate-limited, and the
	// mean drops by 0.5·log 2 so x' = x + 0.05·(−0.5·log 2).
	before := m.Capacity()
	r = m.Step(40)
	require.Equal(t, before, r.Capacity, "latency is judged against the capacity before the update")
	require.InDelta(t, 2*float64(time.Second), float64(r.Latency), 1)
	require.Zero(t, r.Succeeded)
	require.Equal(t, 40, r.RateLimited)
	wantX := math.Log(before) + 0.05*(-0.5*(math.Log(40)-math.Log(before)))
	require.InDelta(t, math.Exp(wantX), r.NextCapacity, 1e-9)

	// k = 0: nothing sent, no penalty, x reverts toward μ.
	x := math.Log(m.Capacity())
	r = m.Step(0)
	require.Zero(t, r.Succeeded+r.RateLimited)
	require.InDelta(t, math.Exp(x+0.05*(math.Log(20)-x)), r.NextCapacity, 1e-9)

	// 1.5s is still a success: k/c = 1.5 exactly at c = 20, k = 30.
	m2, err := NewModel(cfg, 1)
	require.NoError(t, err)
	r = m2.Step(30)
	require.InDelta(t, 1.5, r.Latency.Seconds(), 1e-9)
	require.Equal(t, 30, r.Succeeded+r.RateLimited)
}

func TestModelStepPanicsOnNegativeK(t *testing.T) {
	t.Parallel()
	m, err := NewModel(PublishedModelConfig(), 1)
	require.NoError(t, err)
	require.Panics(t, func() { m.Step(-1) })
}

func TestAIMDConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, PublishedAIMDConfig().Validate())
	tests := []struct {
		field  string
		mutate func(*AIMDConfig)
	}{
		{"MinInterval", func(c *AIMDConfig) { c.MinInterval = 0 }},
		{"MaxInterval", func(c *AIMDConfig) { c.MaxInterval = c.MinInterval / 2 }},
		{"InitialInterval", func(c *AIMDConfig) { c.InitialInterval = 2 * time.Second }},
		{"TargetLatency", func(c *AIMDConfig) { c.TargetLatency = 0 }},
		{"Alpha", func(c *AIMDConfig) { c.Alpha = 0 }},
		{"Beta", func(c *AIMDConfig) { c.Beta = 1 }},
		{"Beta", func(c *AIMDConfig) { c.Beta = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			cfg := PublishedAIMDConfig()
			tt.mutate(&cfg)
			_, err := NewAIMD(cfg)
			require.ErrorContains(t, err, "AIMDConfig."+tt.field)
		})
	}
}

func TestAIMDInterval(t *testing.T) {
	t.Parallel()
	a, err := NewAIMD(PublishedAIMDConfig())
	require.NoError(t, err)
	good := func(step int) StepResult { return StepResult{Step: step, Latency: 1250 * time.Millisecond} }
	bad := func(step int) StepResult { return StepResult{Step: step, Latency: 1251 * time.Millisecond} }

	require.Equal(t, 1, a.Next(StepResult{}), "first step: interval 1s → 1 req/s")
	require.Equal(t, time.Second, a.Interval())

	// A step at the target is good: the interval shrinks by α = 20ms.
	require.Equal(t, 1, a.Next(good(1)), "1/0.98 rounds to 1")
	require.Equal(t, 980*time.Millisecond, a.Interval())

	// Many good steps: the interval bottoms out at 25ms → 40 req/s.
	for i := range 60 {
		a.Next(good(i + 2))
	}
	require.Equal(t, 25*time.Millisecond, a.Interval())
	require.Equal(t, 40, a.Next(good(70)))

	// A bad step divides the interval by β: the rate becomes 0.75·40 = 30.
	require.Equal(t, 30, a.Next(bad(71)))
	require.InDelta(t, float64(25*time.Millisecond)/0.75, float64(a.Interval()), 1)

	// Many bad steps: the interval tops out at 1s.
	for i := range 30 {
		a.Next(bad(i + 72))
	}
	require.Equal(t, time.Second, a.Interval())
	require.Equal(t, 1, a.Next(bad(200)))
}

func TestOracles(t *testing.T) {
	t.Parallel()
	prev := StepResult{Step: 3, Capacity: 17.9, NextCapacity: 21.2}
	require.Equal(t, 21, Oracle{Initial: 20}.Next(prev))
	require.Equal(t, 17, LaggedOracle{Initial: 20}.Next(prev))
	require.Equal(t, 20, Oracle{Initial: 20}.Next(StepResult{}))
	require.Equal(t, 20, LaggedOracle{Initial: 20}.Next(StepResult{}))
}

func TestRunTotals(t *testing.T) {
	t.Parallel()
	m, err := NewModel(PublishedModelConfig(), 3)
	require.NoError(t, err)
	r := Run(m, Constant(20), 100)
	require.Len(t, r.Trace, 100)
	require.Equal(t, 2000, r.Sent)
	require.Equal(t, r.Sent, r.Succeeded+r.RateLimited)
	require.InDelta(t, float64(r.Succeeded)/100, r.Throughput(), 1e-12)
	require.InDelta(t, float64(r.RateLimited)/2000, r.RateLimitedFraction(), 1e-12)
	require.Equal(t, 100, m.Steps())

	empty := Run(m, Constant(20), -5)
	require.Zero(t, empty.Steps)
	require.Zero(t, empty.Throughput())
	require.Zero(t, empty.RateLimitedFraction())
}

// paperPolicies are the three strategies of the published table.
func paperPolicies(t *testing.T) map[string]func() Policy {
	return map[string]func() Policy{
		"constant20": func() Policy { return Constant(20) },
		"aimd": func() Policy {
			a, err := NewAIMD(PublishedAIMDConfig())
			require.NoError(t, err)
			return a
		},
		"oracle":       func() Policy { return Oracle{Initial: 20} },
		"laggedOracle": func() Policy { return LaggedOracle{Initial: 20} },
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TestPublishedMedians reproduces the published table: for seeds
// 0..299, 300 one-second steps each, the median effective throughput of
// each strategy lies within ±10% of the published median.
func TestPublishedMedians(t *testing.T) {
	t.Parallel()
	throughput := map[string][]float64{}
	limited := map[string][]float64{}
	for name, newPolicy := range paperPolicies(t) {
		for seed := range uint64(paperSeeds) {
			m, err := NewModel(PublishedModelConfig(), seed)
			require.NoError(t, err)
			r := Run(m, newPolicy(), paperSteps)
			throughput[name] = append(throughput[name], r.Throughput())
			limited[name] = append(limited[name], r.RateLimitedFraction())
		}
	}
	for _, name := range []string{"constant20", "aimd", "oracle", "laggedOracle"} {
		t.Logf("%-12s median throughput %.2f req/s, median rate-limited %.1f%%",
			name, median(throughput[name]), 100*median(limited[name]))
	}
	for name, want := range map[string]float64{
		"constant20":   publishedConstant20,
		"aimd":         publishedAIMD,
		"oracle":       publishedOracle,
		"laggedOracle": publishedOracle,
	} {
		got := median(throughput[name])
		require.InDelta(t, want, got, want*medianTolerance, "%s median throughput", name)
	}
	// The table's ordering: oracle > AIMD > constant 20, and the oracle, which
	// never exceeds the capacity it sees, is almost never rate-limited.
	require.Greater(t, median(throughput["oracle"]), median(throughput["aimd"]))
	require.Greater(t, median(throughput["aimd"]), median(throughput["constant20"]))
	require.Less(t, median(limited["oracle"]), median(limited["aimd"]))
	require.Less(t, median(limited["aimd"]), median(limited["constant20"]))
}

// TestSingleSeedRun pins seed 0 so a change to the model's arithmetic or
// its order of random draws is noticed. The published single run (9.13
// req/s for constant 20, 14.9 for AIMD) used another generator, so its
// numbers cannot be reproduced seed for seed; seed 0 happens to be a
// similarly unlucky path.
func TestSingleSeedRun(t *testing.T) {
	t.Parallel()
	got := map[string]float64{}
	for name, newPolicy := range paperPolicies(t) {
		m, err := NewModel(PublishedModelConfig(), 0)
		require.NoError(t, err)
		got[name] = Run(m, newPolicy(), paperSteps).Throughput()
	}
	t.Logf("seed 0: %v", got)
	want := map[string]float64{
		"constant20":   8.2,
		"aimd":         13.236666666666666,
		"oracle":       17.94333333333333,
		"laggedOracle": 16.653333333333332,
	}
	for name, w := range want {
		require.InDelta(t, w, got[name], 1e-9, name)
	}
}
