package bench

import (
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// The limiter configurations the model comparison reports. They share the
// settings that follow from the model itself:
//
//   - MaxHealthyRTT = 1.5s, the model's rate-limit threshold
//     (sim.ModelConfig.SuccessLatency): a success slower than that would
//     have been rate-limited. Under the model every success is at or under
//     1.5s, so it never fires as a drop; it is set because a user who
//     knows the threshold would set it, and under Gradient2 it sets the
//     default latency target, 4/5 of it (1.2s).
//   - MinLimit = 1 and InitialLimit = 20, the model's initial capacity, so
//     no strategy starts with an advantage; MaxLimit = 1000 (the default)
//     never binds.
//
// The law parameters were chosen once, for the model and not per seed, by
// the selection grid (Gradient2Grid, AIMDGrid) on tuning seeds 1000–1099,
// which are disjoint from the reported seeds 0–99: of the grid's
// candidates, the one with the highest median throughput whose median
// rate-limited fraction is at most SelectionMaxRateLimited. The report
// reruns the grid and says whether its winner still matches.

// SelectionMaxRateLimited is the largest median rate-limited fraction a
// grid candidate may have on the tuning seeds to be selected: two points
// of margin under the 10 % target, so that the choice does not sit on the
// edge of the constraint.
const SelectionMaxRateLimited = 0.08

// modelHealthyRTT is the model's rate-limit threshold; see the comment
// above.
const modelHealthyRTT = 1500 * time.Millisecond

// ModelBaseConfig returns the settings every model-comparison limiter
// shares (see above); the law's parameters are left at their defaults.
func ModelBaseConfig() adaptive.Config {
	return adaptive.Config{
		MinLimit:      1,
		InitialLimit:  20,
		MaxLimit:      1000,
		MaxHealthyRTT: modelHealthyRTT,
	}
}

// ModelDefaultsConfig returns the limiter with the library's defaults
// (law Auto, the measured tolerance, backoff 0.9; with MaxHealthyRTT set,
// a latency target of 4/5 of it, 1.2s, and smoothing 0.4 while that
// target is within twice rttNoload, as it is here) plus ModelBaseConfig:
// what a user gets without tuning. Auto stays Gradient2 on the model: its
// failures are steps slower than the success threshold, not refusals
// answered at once.
func ModelDefaultsConfig() adaptive.Config { return ModelBaseConfig() }

// ModelFixedToleranceConfig returns the defaults with a fixed Tolerance of
// 2, Netflix's Gradient2 default, for contrast with the measured noise
// band.
func ModelFixedToleranceConfig() adaptive.Config {
	cfg := ModelBaseConfig()
	cfg.Tolerance = 2
	return cfg
}

// ModelGradient2Config returns the Gradient2 configuration chosen for the
// latent-capacity model. The limiter moves its estimate once per round
// trip, and a model step is one round trip, so each parameter is per step:
//
//   - Tolerance 1.2: requests fail at 1.5 times the base latency, so a
//     fixed tolerance of 2 (Netflix's default) never sees a gradient below
//     1 before they fail. rttNoload, the minimum of the steps' noisy
//     latencies (σ = 0.1s) over the window, sits under the 1s base, so
//     the gradient falls below 1 once a step is slower than about 1.2
//     times that minimum.
//   - Smoothing 0.5: a step moves the estimate half of the way to
//     estimate·gradient + √estimate.
//   - BackoffRatio 0.5 on a rate-limited step: a drop is the only signal
//     that arrives after the damage, and overload also drags the model's
//     capacity down.
//   - RTTWindow 10 steps: the baseline is the fastest of the last ten
//     steps, so one lucky draw of the noise holds it down for ten steps,
//     not for the run (the default 600 spans the whole 300-step run).
//
// Like every configuration here it sets MaxHealthyRTT, so its latency
// target is the default 4/5 of it, 1.2s: a full step slower than that
// moves the estimate down by AIMDBackoff (0.9) before the model's 1.5s
// rate-limits.
func ModelGradient2Config() adaptive.Config {
	cfg := ModelBaseConfig()
	cfg.Law = adaptive.Gradient2
	cfg.Tolerance = 1.2
	cfg.Smoothing = 0.5
	cfg.BackoffRatio = 0.5
	cfg.RTTWindow = 10
	return cfg
}

// ModelAIMDConfig returns the AIMD-law configuration chosen for the
// latent-capacity model:
//
//   - LatencyTarget 1.25s: the published AIMD's target.
//   - AIMDIncrease 2 per clean step (one round trip), about 10 % of the
//     model's mean capacity.
//   - AIMDBackoff 0.75 (the published β) on a step slower than the target,
//     and BackoffRatio 0.5 on a rate-limited step.
func ModelAIMDConfig() adaptive.Config {
	cfg := ModelBaseConfig()
	cfg.Law = adaptive.AIMD
	cfg.LatencyTarget = 1250 * time.Millisecond
	cfg.AIMDIncrease = 2
	cfg.AIMDBackoff = 0.75
	cfg.BackoffRatio = 0.5
	return cfg
}

// ModelGradient2ProportionalConfig is ModelGradient2Config with a headroom
// proportional to the estimate (QueueSize = 0.2·estimate) instead of
// √estimate. It is not a selected configuration: the report's scale check
// shows it as a diagnostic. Gradient2 settles where
// estimate·(1 − gradient) = QueueSize(estimate); with √estimate that is
// estimate = 1/(1 − gradient)², a ceiling set by the latency ratio alone,
// whatever the capacity, while with a proportional headroom the estimate
// grows whenever gradient > 0.8, at any scale.
func ModelGradient2ProportionalConfig() adaptive.Config {
	cfg := ModelGradient2Config()
	cfg.QueueSize = func(estimate float64) float64 { return 0.2 * estimate }
	return cfg
}
