package adaptive

import (
	"math"
	"time"
)

// gradientSample applies one clean sample under Gradient2. The caller
// holds l.mu and has pushed rtt into the window.
func (l *Limiter) gradientSample(rtt time.Duration, load int) {
	noload, _ := l.window.min()
	l.propose(gradient2(l.estimate, rtt, noload, &l.cfg), load)
}

// minGradient is the least gradient: one round trip at most halves the
// Gradient2 target.
const minGradient = 0.5

// gradient2 returns the Gradient2 successor of estimate for a sample of
// rtt against a windowed minimum of noload (both positive):
//
//	gradient = clamp(tolerance·noload/rtt, 0.5, 1)
//	target   = estimate·gradient + queueSize(estimate)
//	next     = estimate·(1−smoothing) + target·smoothing
//
// The result is not yet guarded or clamped to [MinLimit, MaxLimit].
func gradient2(estimate float64, rtt, noload time.Duration, cfg *Config) float64 {
	gradient := min(max(cfg.Tolerance*float64(noload)/float64(rtt), minGradient), 1.0)
	queue := cfg.QueueSize(estimate)
	if !(queue >= 0) || math.IsInf(queue, 1) {
		queue = 0
	}
	target := estimate*gradient + queue
	return estimate*(1-cfg.Smoothing) + target*cfg.Smoothing
}
