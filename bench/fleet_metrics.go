package bench

import (
	"math"
	"slices"
	"time"
)

// JainIndex returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when
// every value is equal, 1/n when one holds everything. It returns NaN for
// no values or all zeros.
func JainIndex(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if len(xs) == 0 || sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// DurationPercentile returns the q-quantile (0 ≤ q ≤ 1) of ds with linear
// interpolation, or 0 for no values. ds is not modified.
func DurationPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = float64(d)
	}
	slices.Sort(s)
	return time.Duration(math.Round(quantile(s, q)))
}

// ConvergenceWindow is the length of the trailing mean and of the hold in
// the convergence rule (see Convergence).
const ConvergenceWindow = time.Second

// ConvergenceBand is the relative band around the new capacity within which
// the trailing mean must stay (see Convergence).
const ConvergenceBand = 0.10

// Convergence returns how long after a capacity step at offset step the
// fleet's in-flight took to settle on the new capacity, and whether it did
// before end (the next step or the end of the run). The rule: let m(t) be
// the mean in-flight over (max(step, t−1s), t] — series samples after the
// step only, so a fleet that jumps to the new capacity at once converges
// at once. The fleet has converged at the first t at which m stays within
// ±10 % of the new capacity for all of [t, t+1s]; the result is t − step.
// A run whose hold would pass end has not converged.
func Convergence(series []FleetSample, step, end time.Duration) (time.Duration, bool) {
	var post []FleetSample
	for _, s := range series {
		if s.At > step && s.At <= end {
			post = append(post, s)
		}
	}
	if len(post) == 0 {
		return 0, false
	}
	target := float64(post[0].Capacity)
	lo, hi := target*(1-ConvergenceBand), target*(1+ConvergenceBand)
	// Trailing mean at each sample (samples are evenly spaced, so a plain
	// mean of the samples in the window is the time mean).
	within := make([]bool, len(post))
	first := 0
	var sum float64
	for i, s := range post {
		sum += s.Inflight
		for post[first].At <= s.At-ConvergenceWindow {
			sum -= post[first].Inflight
			first++
		}
		m := sum / float64(i-first+1)
		within[i] = m >= lo && m <= hi
	}
	for i := range post {
		if !within[i] {
			continue
		}
		t := post[i].At
		if t+ConvergenceWindow > end {
			return 0, false
		}
		ok := true
		for j := i; j < len(post) && post[j].At <= t+ConvergenceWindow; j++ {
			if !within[j] {
				ok = false
				break
			}
		}
		if ok {
			return t - step, true
		}
	}
	return 0, false
}
