package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// TestLiveness runs both liveness measurements on a small fleet.
func TestLiveness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := StartFleetPostgres(ctx, 8)
	if errors.Is(err, pgtemp.ErrNotInstalled) {
		t.Skip("Postgres is not installed:", err)
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, pg.Stop()) }()
	cfg := adaptive.FlatLatency()
	cfg.InitialLimit = 1
	sc := LivenessScenario{Capacity: 8, Nodes: 2, WorkersPerNode: 8, BaseLatency: 10 * time.Millisecond,
		Heartbeat: 50 * time.Millisecond, Limiter: cfg}

	climb, err := MeasureClimb(ctx, pg.Pool, "test-climb", sc, 6, 10*time.Second)
	require.NoError(t, err)
	require.True(t, climb.Ok, "L_global reached 6 of 8: %+v", climb)
	require.Positive(t, climb.Reached)

	_, err = MeasureRollingRestart(ctx, pg.Pool, "test-restart", sc, time.Second, time.Second)
	require.ErrorContains(t, err, "warmup")
	res, err := MeasureRollingRestart(ctx, pg.Pool, "test-restart", sc, 2*time.Second, 500*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, res.Before)
	require.LessOrEqual(t, res.Low, res.Before)
	require.Positive(t, res.Low)

	_, err = MeasureJoin(ctx, pg.Pool, "test-join", LivenessScenario{Nodes: 3}, time.Second, time.Second)
	require.ErrorContains(t, err, "not 3")
	jsc := sc
	jsc.BaseLatency = 100 * time.Millisecond
	join, err := MeasureJoin(ctx, pg.Pool, "test-join", jsc, 2*time.Second, 2*time.Second)
	require.NoError(t, err)
	require.Positive(t, join.Before)
	require.Positive(t, join.Low)
	require.Positive(t, join.Served[0])
	require.GreaterOrEqual(t, join.Filled, jsc.Capacity-1, "the first node fills the provider before the join: %+v", join)
	require.Greater(t, float64(join.Served[0]+join.Served[1]), join.Ideal/2,
		"a joiner refused by a full upstream does not take the fleet's limit down: %+v", join)

	hold, err := MeasureHold(ctx, pg.Pool, "test-hold", sc, 2*time.Second, 500*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, hold.Before)
	require.Positive(t, hold.Low, "L_global stays up with no restart")
}
