package bench

import (
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// Candidate is one limiter configuration of a selection grid.
type Candidate struct {
	// Label names the parameters that differ from ModelBaseConfig.
	Label  string
	Config adaptive.Config
}

// The grids are for the law as it is since adaptive moves its estimate once
// per round trip: a model step is one round trip, so Smoothing is the
// fraction of the way to the Gradient2 target the estimate moves per step,
// AIMDIncrease is what a clean step adds, and RTTWindow counts steps.

// Gradient2Grid returns the Gradient2 candidates: every combination of
// Tolerance in {1.05, 1.1, 1.15, 1.2, 1.3, 1.5}, Smoothing in {0.2, 0.35,
// 0.5, 0.75, 1}, BackoffRatio in {0.5, 0.75, 0.9} and RTTWindow in {3, 10,
// 30, 100, 600} round trips over ModelBaseConfig (450 candidates).
func Gradient2Grid() []Candidate {
	var out []Candidate
	for _, tol := range []float64{1.05, 1.1, 1.15, 1.2, 1.3, 1.5} {
		for _, sm := range []float64{0.2, 0.35, 0.5, 0.75, 1} {
			for _, bo := range []float64{0.5, 0.75, 0.9} {
				for _, w := range []int{3, 10, 30, 100, 600} {
					cfg := ModelBaseConfig()
					cfg.Law = adaptive.Gradient2
					cfg.Tolerance, cfg.Smoothing, cfg.BackoffRatio, cfg.RTTWindow = tol, sm, bo, w
					out = append(out, Candidate{Label: ConfigLabel(cfg), Config: cfg})
				}
			}
		}
	}
	return out
}

// AIMDGrid returns the AIMD-law candidates: every combination of
// AIMDIncrease in {0.5, 1, 1.5, 2, 3} per round trip, LatencyTarget in
// {1.1s, 1.15s, 1.2s, 1.25s, 1.3s}, AIMDBackoff in {0.75, 0.9} and
// BackoffRatio in {0.5, 0.75, 0.9} over ModelBaseConfig (150 candidates).
func AIMDGrid() []Candidate {
	var out []Candidate
	for _, inc := range []float64{0.5, 1, 1.5, 2, 3} {
		for _, target := range []time.Duration{1100, 1150, 1200, 1250, 1300} {
			for _, ab := range []float64{0.75, 0.9} {
				for _, bo := range []float64{0.5, 0.75, 0.9} {
					cfg := ModelBaseConfig()
					cfg.Law = adaptive.AIMD
					cfg.AIMDIncrease = inc
					cfg.LatencyTarget = target * time.Millisecond
					cfg.AIMDBackoff = ab
					cfg.BackoffRatio = bo
					out = append(out, Candidate{Label: ConfigLabel(cfg), Config: cfg})
				}
			}
		}
	}
	return out
}

// ConfigLabel describes the law parameters of cfg that the grids vary,
// for tables.
func ConfigLabel(cfg adaptive.Config) string {
	switch cfg.Law {
	case adaptive.AIMD:
		return fmt.Sprintf("aimd increase=%g target=%v aimd-backoff=%g backoff=%g",
			cfg.AIMDIncrease, cfg.LatencyTarget, cfg.AIMDBackoff, cfg.BackoffRatio)
	default:
		target := cfg.GradientLatencyTarget()
		tol, bo, w := cfg.Tolerance, cfg.BackoffRatio, cfg.RTTWindow
		defaults := cfg.Law == adaptive.Auto && tol == 0 && cfg.Smoothing == 0 && bo == 0 && w == 0
		if w == 0 {
			w = 600
		}
		smoothing := fmt.Sprintf("%g", cfg.Smoothing)
		switch {
		case cfg.Smoothing != 0:
		case target > 0:
			smoothing = "0.2/0.4" // 0.4 while the target is within twice rttNoload
		default:
			smoothing = "0.2"
		}
		if bo == 0 {
			bo = 0.9
		}
		tolerance := "measured"
		if tol != 0 {
			tolerance = fmt.Sprintf("%g", tol)
		}
		label := fmt.Sprintf("gradient2 tolerance=%s smoothing=%s backoff=%g window=%d", tolerance, smoothing, bo, w)
		if target > 0 {
			label += fmt.Sprintf(" target=%v", target)
		}
		if defaults {
			return "defaults (law auto: " + label + ")"
		}
		return label
	}
}

// Scored is a candidate with its results on the tuning seeds.
type Scored struct {
	Candidate
	Result StrategyResult
}

// Select returns the index in scored of the candidate with the highest
// median throughput whose median rate-limited fraction is at most
// maxRateLimited, or -1 if none qualifies. Ties go to the earlier
// candidate.
func Select(scored []Scored, maxRateLimited float64) int {
	best := -1
	for i, s := range scored {
		if s.Result.RateLimited.Median > maxRateLimited {
			continue
		}
		if best < 0 || s.Result.Throughput.Median > scored[best].Result.Throughput.Median {
			best = i
		}
	}
	return best
}
