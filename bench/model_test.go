package bench

import (
	"context"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values []float64
		want   Summary
	}{
		{"one value", []float64{3}, Summary{P10: 3, Median: 3, P90: 3}},
		{"two values", []float64{4, 0}, Summary{P10: 0.4, Median: 2, P90: 3.6}},
		{"0..10 unsorted", []float64{10, 0, 9, 1, 8, 2, 7, 3, 6, 4, 5}, Summary{P10: 1, Median: 5, P90: 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Summarize(tc.values)
			require.InDelta(t, tc.want.P10, got.P10, 1e-12)
			require.InDelta(t, tc.want.Median, got.Median, 1e-12)
			require.InDelta(t, tc.want.P90, got.P90, 1e-12)
		})
	}
	require.True(t, math.IsNaN(Summarize(nil).Median))
}

func TestSeeds(t *testing.T) {
	t.Parallel()
	require.Equal(t, []uint64{1000, 1001, 1002}, Seeds(1000, 3))
	require.Empty(t, Seeds(0, 0))
}

// TestRunStrategyIndependentOfWorkers checks that the parallel runner
// gives the same per-seed results as a one-goroutine run.
func TestRunStrategyIndependentOfWorkers(t *testing.T) {
	// Not parallel: it changes GOMAXPROCS.
	seeds := Seeds(0, 8)
	st := LimiterStrategy(NameFleetGradient, ModelGradient2Config())
	many, err := RunStrategy(context.Background(), sim.PublishedModelConfig(), st, seeds, ModelSteps)
	require.NoError(t, err)
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	one, err := RunStrategy(context.Background(), sim.PublishedModelConfig(), st, seeds, ModelSteps)
	require.NoError(t, err)
	require.Equal(t, one, many)
	for i, s := range one.Seeds {
		require.Equal(t, seeds[i], s.Seed)
	}
}

func TestRunStrategyPublishedMedians(t *testing.T) {
	t.Parallel()
	// The published strategies through this runner reproduce internal/sim's
	// own medians over seeds 0..299 (see its package doc): the runner adds
	// nothing of its own.
	seeds := Seeds(0, 300)
	for _, tc := range []struct {
		st   Strategy
		want float64
	}{
		{ConstantStrategy(20), 13.10},
		{PublishedAIMDStrategy(), 15.39},
		{OracleStrategy(), 23.86},
	} {
		res, err := RunStrategy(context.Background(), sim.PublishedModelConfig(), tc.st, seeds, ModelSteps)
		require.NoError(t, err)
		require.InDelta(t, tc.want, res.Throughput.Median, 0.005, tc.st.Name)
	}
}

func TestRunStrategyCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RunStrategy(ctx, sim.PublishedModelConfig(), ConstantStrategy(20), Seeds(0, 50), ModelSteps)
	require.ErrorIs(t, err, context.Canceled)
}

func TestRunStrategyPolicyError(t *testing.T) {
	t.Parallel()
	cfg := ModelBaseConfig()
	cfg.MinLimit = -1
	_, err := RunStrategy(context.Background(), sim.PublishedModelConfig(), LimiterStrategy("bad", cfg), Seeds(0, 3), ModelSteps)
	require.ErrorContains(t, err, "MinLimit")
}

func TestModelConfigsAreValid(t *testing.T) {
	t.Parallel()
	cfgs := []adaptive.Config{ModelDefaultsConfig(), ModelGradient2Config(), ModelAIMDConfig()}
	for _, c := range Gradient2Grid() {
		cfgs = append(cfgs, c.Config)
	}
	for _, c := range AIMDGrid() {
		cfgs = append(cfgs, c.Config)
	}
	for _, cfg := range cfgs {
		_, err := adaptive.New(cfg)
		require.NoError(t, err, ConfigLabel(cfg))
	}
}

func TestGridsHoldTheReportedConfigs(t *testing.T) {
	t.Parallel()
	labels := func(cs []Candidate) map[string]bool {
		m := make(map[string]bool)
		for _, c := range cs {
			require.False(t, m[c.Label], "duplicate candidate %s", c.Label)
			m[c.Label] = true
		}
		return m
	}
	g2, aimd := labels(Gradient2Grid()), labels(AIMDGrid())
	require.Len(t, g2, 450)
	require.Len(t, aimd, 150)
	require.True(t, g2[ConfigLabel(ModelGradient2Config())])
	require.True(t, aimd[ConfigLabel(ModelAIMDConfig())])
}

func TestSelect(t *testing.T) {
	t.Parallel()
	scored := func(tp, rl float64) Scored {
		return Scored{Result: StrategyResult{Throughput: Summary{Median: tp}, RateLimited: Summary{Median: rl}}}
	}
	for _, tc := range []struct {
		name   string
		scored []Scored
		want   int
	}{
		{"none", nil, -1},
		{"none qualifies", []Scored{scored(20, 0.2), scored(19, 0.09)}, -1},
		{"best qualifying", []Scored{scored(25, 0.3), scored(18, 0.05), scored(19, 0.08), scored(17, 0)}, 2},
		{"tie goes to the first", []Scored{scored(18, 0.05), scored(18, 0.01)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Select(tc.scored, 0.08))
		})
	}
}
