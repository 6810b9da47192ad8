package pace_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/sim"
	"github.com/fleetlimit/fleetlimit/pace"
)

// TestLearnerAgainstSlidingQuota closes the loop on one node with
// unlimited demand: a Pacer at the Learner's rate (default settings, seed
// 5 req/s, bounds 0.5 to 40) sends to a simulated sliding-window quota of
// 600 requests a minute that drops to 360 at 30 minutes; every response
// feeds the Learner. Measured from the provider's answers over minutes
// 10–30 and 40–60: the share of the quota used and the share of requests
// refused 429.
func TestLearnerAgainstSlidingQuota(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	window, err := sim.NewRateWindow(sim.RateLimit{Window: time.Minute, Quota: []sim.QuotaStep{
		{Quota: sim.RateQuota{Requests: 600}},
		{At: 30 * time.Minute, Quota: sim.RateQuota{Requests: 360}},
	}}, start)
	require.NoError(t, err)
	learner, err := pace.NewLearner(pace.LearnerConfig{SeedRate: 5, MinRate: 0.5, MaxRate: 40}, start)
	require.NoError(t, err)
	pacer, err := pace.New(pace.Config{RequestRate: 5, TokenRate: pace.Unlimited}, start)
	require.NoError(t, err)

	type phase struct{ sent, refused, quota int }
	phases := [2]phase{{quota: 600 * 20}, {quota: 360 * 20}}
	now, rate := start, 5.0
	for now.Before(start.Add(time.Hour)) {
		_, d, err := pacer.Reserve(now, 0)
		require.NoError(t, err)
		now = now.Add(d)
		decision := window.Admit(now, 0)
		learner.Record(now, !decision.Admitted)
		if since := now.Sub(start); since%(30*time.Minute) >= 10*time.Minute {
			ph := &phases[since/(30*time.Minute)]
			ph.sent++
			if !decision.Admitted {
				ph.refused++
			}
		}
		if r := learner.Rate(now); r != rate {
			require.NoError(t, pacer.SetRate(now, r, pace.Unlimited))
			rate = r
		}
	}
	for i, ph := range phases {
		used := float64(ph.sent-ph.refused) / float64(ph.quota)
		refused := float64(ph.refused) / float64(ph.sent)
		t.Logf("phase %d: %.1f%% of the quota used, %.1f%% of requests refused", i+1, 100*used, 100*refused)
		require.GreaterOrEqual(t, used, 0.90, "phase %d", i+1)
		require.LessOrEqual(t, refused, 0.06, "phase %d", i+1)
	}
}
