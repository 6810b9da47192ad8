package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	l, err := New(Config{})
	require.NoError(t, err)
	cfg := l.cfg
	require.Equal(t, 20, cfg.InitialLimit)
	require.Equal(t, 1, cfg.MinLimit)
	require.Equal(t, 1000, cfg.MaxLimit)
	require.Equal(t, Auto, cfg.Law)
	require.Equal(t, Gradient2, l.Snapshot().Law, "Auto starts as Gradient2")
	require.Zero(t, cfg.Tolerance, "zero: the measured noise band")
	require.Equal(t, 0.2, cfg.Smoothing)
	require.Equal(t, 600, cfg.RTTWindow)
	require.Equal(t, 0.9, cfg.BackoffRatio)
	require.Equal(t, 1.0, cfg.AIMDIncrease)
	require.Equal(t, 0.9, cfg.AIMDBackoff)
	require.Equal(t, 0.5, cfg.UtilizationThreshold)
	require.Equal(t, 0, cfg.MaxQueued)
	require.Equal(t, 3.0, cfg.QueueSize(9))
	require.Zero(t, cfg.Recalibration)
	require.Equal(t, 20.0, l.Estimate())
	require.Equal(t, 20, l.Limit())
}

func TestNewInitialLimitDefaultFollowsBounds(t *testing.T) {
	t.Parallel()
	l, err := New(Config{MaxLimit: 8})
	require.NoError(t, err)
	require.Equal(t, 8, l.Limit())

	l, err = New(Config{MinLimit: 50})
	require.NoError(t, err)
	require.Equal(t, 50, l.Limit())
}

func TestNewRejectsBadFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"MinLimit negative", Config{MinLimit: -1}, "Config.MinLimit = -1, want [1, MaxLimit=1000]"},
		{"MinLimit above MaxLimit", Config{MinLimit: 10, MaxLimit: 5, InitialLimit: 5}, "Config.MinLimit = 10"},
		{"MaxLimit negative", Config{MaxLimit: -3}, "Config.MaxLimit = -3"},
		{"MaxLimit huge", Config{MaxLimit: 1 << 31}, "Config.MaxLimit"},
		{"InitialLimit above MaxLimit", Config{InitialLimit: 2000}, "Config.InitialLimit = 2000, want [MinLimit=1, MaxLimit=1000]"},
		{"InitialLimit negative", Config{InitialLimit: -1}, "Config.InitialLimit = -1"},
		{"Law unknown", Config{Law: Law(7)}, "Config.Law = Law(7), want Auto, Gradient2 or AIMD"},
		{"Tolerance below 1", Config{Tolerance: 0.5}, "Config.Tolerance = 0.5, want 0 or [1, 1e6]"},
		{"Tolerance NaN", Config{Tolerance: math.NaN()}, "Config.Tolerance = NaN"},
		{"Tolerance Inf", Config{Tolerance: math.Inf(1)}, "Config.Tolerance = +Inf"},
		{"Smoothing above 1", Config{Smoothing: 1.5}, "Config.Smoothing = 1.5, want (0, 1]"},
		{"Smoothing negative", Config{Smoothing: -0.1}, "Config.Smoothing = -0.1"},
		{"RTTWindow negative", Config{RTTWindow: -1}, "Config.RTTWindow = -1, want [1, 1048576]"},
		{"RTTWindow huge", Config{RTTWindow: 1 << 21}, "Config.RTTWindow"},
		{"BackoffRatio 1", Config{BackoffRatio: 1}, "Config.BackoffRatio = 1, want (0, 1)"},
		{"BackoffRatio negative", Config{BackoffRatio: -0.5}, "Config.BackoffRatio = -0.5"},
		{"AIMDIncrease negative", Config{AIMDIncrease: -1}, "Config.AIMDIncrease = -1, want (0, MaxLimit=1000]"},
		{"AIMDIncrease NaN", Config{AIMDIncrease: math.NaN()}, "Config.AIMDIncrease = NaN"},
		{"AIMDBackoff 1", Config{AIMDBackoff: 1}, "Config.AIMDBackoff = 1, want (0, 1)"},
		{"LatencyTarget negative", Config{LatencyTarget: -time.Second}, "Config.LatencyTarget = -1s, want 0 (off, or under Gradient2 4/5 of MaxHealthyRTT) or ≥ 1µs"},
		{"MaxHealthyRTT negative", Config{MaxHealthyRTT: -time.Second}, "Config.MaxHealthyRTT = -1s, want 0 (off) or ≥ 1µs"},
		// A number with no unit is nanoseconds: 500 meant as 500ms made
		// every request a drop.
		{"MaxHealthyRTT without unit", Config{MaxHealthyRTT: 500}, "Config.MaxHealthyRTT = 500ns, want 0 (off) or ≥ 1µs (a number with no unit is nanoseconds: write 500 * time.Millisecond)"},
		{"LatencyTarget without unit", Config{LatencyTarget: 200}, "Config.LatencyTarget = 200ns"},
		{"TimeoutFactor without unit", Config{TimeoutFactor: 5}, "Config.TimeoutFactor = 5ns, want 0 (no bound but the context's) or ≥ 1µs (a number"},
		{"Recalibration.Interval negative", Config{Recalibration: Recalibration{Interval: -time.Second}}, "Config.Recalibration.Interval = -1s"},
		{"Recalibration.Jitter without Interval", Config{Recalibration: Recalibration{Jitter: time.Second}}, "Config.Recalibration.Jitter = 1s, want 0 when Recalibration.Interval is 0"},
		{"Recalibration.Samples without Interval", Config{Recalibration: Recalibration{Samples: 3}}, "Config.Recalibration.Samples = 3"},
		{"Recalibration.Jitter not below Interval", Config{Recalibration: Recalibration{Interval: time.Second, Jitter: time.Second}}, "Config.Recalibration.Jitter = 1s, want 0, or [1µs, Recalibration.Interval=1s)"},
		{"Recalibration.Jitter negative", Config{Recalibration: Recalibration{Interval: time.Second, Jitter: -1}}, "Config.Recalibration.Jitter = -1ns"},
		// A number with no unit is nanoseconds: an Interval of 500, meant
		// as 500ms, pinned the limit to MinLimit half of the time.
		{"Recalibration.Interval without unit", Config{Recalibration: Recalibration{Interval: 500}},
			"Config.Recalibration.Interval = 500ns, want 0 (off) or ≥ 1µs (a number with no unit is nanoseconds"},
		{"Recalibration.Jitter without unit", Config{Recalibration: Recalibration{Interval: time.Second, Jitter: 5}},
			"Config.Recalibration.Jitter = 5ns, want 0, or [1µs, Recalibration.Interval=1s) (a number with no unit is nanoseconds"},
		{"Recalibration.MaxPinned without unit", Config{Recalibration: Recalibration{Interval: time.Second, MaxPinned: 1}},
			"Config.Recalibration.MaxPinned = 1ns, want [1µs, Recalibration.Interval=1s] (a number with no unit is nanoseconds"},
		{"Recalibration.Samples above RTTWindow", Config{RTTWindow: 5, Recalibration: Recalibration{Interval: time.Second, Samples: 6}}, "Config.Recalibration.Samples = 6, want [1, RTTWindow=5]"},
		{"MaxQueued negative", Config{MaxQueued: -1}, "Config.MaxQueued = -1, want [0, 1073741824]"},
		{"UtilizationThreshold above 1", Config{UtilizationThreshold: 1.1}, "Config.UtilizationThreshold = 1.1, want (0, 1]"},
		{"UtilizationThreshold negative", Config{UtilizationThreshold: -0.5}, "Config.UtilizationThreshold = -0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := New(tt.cfg)
			require.Nil(t, l)
			require.ErrorContains(t, err, "adaptive: "+tt.want)
		})
	}
}

func TestNewReportsEveryBadField(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Smoothing: 2, BackoffRatio: 2})
	require.ErrorContains(t, err, "Config.Smoothing")
	require.ErrorContains(t, err, "Config.BackoffRatio")
}

// TestNewNamesOnlyTheBadField: a field whose default derives from a bad
// one, or that is checked against it, is not reported with it.
func TestNewNamesOnlyTheBadField(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxLimit: -1}, "adaptive: Config.MaxLimit = -1, want [1, 1073741824], and at least MinLimit"},
		{Config{MinLimit: 10, MaxLimit: 5}, "adaptive: Config.MinLimit = 10, want [1, MaxLimit=5]"},
		{Config{RTTWindow: -1, Recalibration: Recalibration{Interval: time.Second}}, "adaptive: Config.RTTWindow = -1, want [1, 1048576]"},
	} {
		_, err := New(tt.cfg)
		require.EqualError(t, err, tt.want)
	}
	_, err := New(Config{Recalibration: Recalibration{Interval: 5 * time.Microsecond}})
	require.NoError(t, err, "MaxPinned's default is at least 1µs")
}

func TestLawString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "gradient2", Gradient2.String())
	require.Equal(t, "aimd", AIMD.String())
	require.Equal(t, "Law(9)", Law(9).String())
}
