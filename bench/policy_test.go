package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// TestLimiterPolicyGolden pins a fixed seed's totals: the adapter, the
// model and the limiter are all deterministic. It is a regression pin, not
// a statement of what is right: if the limiter's law or the model
// configurations change on purpose, these numbers move; regenerate them
// from the new code (and docs/benchmarks.md). They were last regenerated
// when adaptive moved to one estimate update per round trip and the model
// configurations were re-chosen for it; the defaults' row again when a
// Gradient2 drop after a queueing round trip began to back off by the
// queue, and when the defaults' tolerance became the measured noise band
// (the fixed tolerance of 2 keeps the numbers the defaults had); every
// gradient2 row when MaxHealthyRTT began to set Gradient2's latency target
// (and Smoothing 0.4 near it), and the gradient2 model configuration was
// re-chosen by the grid for it.
func TestLimiterPolicyGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                         string
		cfg                          adaptive.Config
		seed                         uint64
		sent, succeeded, rateLimited int
	}{
		{"gradient2 model config, seed 0", ModelGradient2Config(), 0, 4946, 4566, 380},
		{"gradient2 model config, seed 7", ModelGradient2Config(), 7, 6792, 6429, 363},
		{"AIMD law model config, seed 0", ModelAIMDConfig(), 0, 5081, 4649, 432},
		{"defaults, seed 0", ModelDefaultsConfig(), 0, 5061, 4550, 511},
		{"defaults but Tolerance 2, seed 0", ModelFixedToleranceConfig(), 0, 5132, 4622, 510},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 2 { // the same seed twice gives the same run
				r, err := RunSeed(sim.PublishedModelConfig(), LimiterStrategy(tc.name, tc.cfg), tc.seed, ModelSteps)
				require.NoError(t, err)
				require.Equal(t, tc.sent, r.Sent, "sent")
				require.Equal(t, tc.succeeded, r.Succeeded, "succeeded")
				require.Equal(t, tc.rateLimited, r.RateLimited, "rate-limited")
				require.InDelta(t, float64(tc.succeeded)/ModelSteps, r.Throughput(), 1e-12)
			}
		})
	}
}

func TestLimiterPolicyFirstStepIsInitialLimit(t *testing.T) {
	t.Parallel()
	cfg := ModelGradient2Config()
	cfg.InitialLimit = 7
	p, err := NewLimiterPolicy(cfg)
	require.NoError(t, err)
	require.Equal(t, 7, p.Next(sim.StepResult{}))
	require.Equal(t, 7, p.Limiter().Inflight(), "the step's requests are in flight until the next call")
}

// TestLimiterPolicyFeedsOutcomes drives the policy with hand-made steps:
// a success becomes a round-trip sample equal to the step's latency, a
// rate-limited step becomes one drop per request and one backoff.
func TestLimiterPolicyFeedsOutcomes(t *testing.T) {
	t.Parallel()
	cfg := ModelBaseConfig()
	cfg.Law = adaptive.AIMD
	cfg.AIMDIncrease = 0.5
	cfg.BackoffRatio = 0.5
	cfg.InitialLimit = 10
	cfg.MaxHealthyRTT = 0            // the 1.7s step below is a success
	cfg.UtilizationThreshold = 0.001 // every sample may raise the estimate
	p, err := NewLimiterPolicy(cfg)
	require.NoError(t, err)
	l := p.Limiter()

	k := p.Next(sim.StepResult{})
	require.Equal(t, 10, k)

	// A successful step slower than a step: the next step starts when it
	// ends, and its latency is the sample.
	k = p.Next(sim.StepResult{Step: 1, Concurrency: k, Latency: 1700 * time.Millisecond, Succeeded: k})
	s := l.Snapshot()
	require.Equal(t, 1700*time.Millisecond, s.RTTNoload, "the latency is the round-trip time")
	require.Zero(t, s.Drops)
	require.Equal(t, 10.5, s.Estimate, "ten clean samples of one round trip: one +0.5")
	require.Equal(t, 10, k)

	// A fast successful step: its sample is its own latency, not the time
	// since the previous step.
	k = p.Next(sim.StepResult{Step: 2, Concurrency: k, Latency: 300 * time.Millisecond, Succeeded: k})
	require.Equal(t, 300*time.Millisecond, l.RTTNoload())

	// A rate-limited step: every request is a drop, the estimate backs
	// off once.
	before := l.Estimate()
	k2 := p.Next(sim.StepResult{Step: 3, Concurrency: k, Latency: 2 * time.Second, RateLimited: k})
	s = l.Snapshot()
	require.Equal(t, uint64(k), s.Drops)
	require.InDelta(t, before*0.5, s.Estimate, 1e-9)
	require.Equal(t, int(before*0.5), k2)

	p.Finish(sim.StepResult{Step: 4, Concurrency: k2, Latency: time.Second, Succeeded: k2})
	require.Zero(t, l.Inflight(), "Finish settles the last step")
	p.Finish(sim.StepResult{Step: 4, Concurrency: k2, Latency: time.Second, Succeeded: k2})
	require.Zero(t, l.Inflight(), "a second Finish is a no-op")
}

func TestLimiterPolicyPanicsOnForeignStep(t *testing.T) {
	t.Parallel()
	p, err := NewLimiterPolicy(ModelBaseConfig())
	require.NoError(t, err)
	k := p.Next(sim.StepResult{})
	require.Panics(t, func() {
		p.Next(sim.StepResult{Step: 1, Concurrency: k + 1, Latency: time.Second, Succeeded: k + 1})
	})
}

func TestNewLimiterPolicyErrors(t *testing.T) {
	t.Parallel()
	cfg := ModelBaseConfig()
	cfg.Clock = sim.NewManualClock(time.Unix(0, 0))
	_, err := NewLimiterPolicy(cfg)
	require.ErrorContains(t, err, "Config.Clock must be nil")

	cfg = ModelBaseConfig()
	cfg.Smoothing = 2
	_, err = NewLimiterPolicy(cfg)
	require.ErrorContains(t, err, "Smoothing")
}
