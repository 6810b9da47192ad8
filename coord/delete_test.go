package coord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// TestDeleteKeyWaitsForHeldCapacity pins DeleteKey without force, on
// Memory and on Postgres: it refuses with ErrHeldCapacity while a row that
// is no member still holds back capacity, and the keys listing counts the
// same rows. An evicted instance whose lease runs holds back its rate
// share with no slot: its node may not know yet and may still send. A
// departed row with nothing in flight holds nothing; once the evicted
// row's lease has run out, the key goes.
func TestDeleteKeyWaitsForHeldCapacity(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, c coordinator, clock *fakeClock) {
		ctx := context.Background()
		require.NoError(t, c.CreateKey(ctx, "k", nil, nil))
		_, err := c.SetRates(ctx, "k", coord.RatesChange{SetRequests: true, Requests: 600})
		require.NoError(t, err)
		// a wants a rate and no slot: its share of slots is 0.
		g, err := c.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a/1", Seq: 1, LLocal: 10,
			LeaseTTL: 10 * time.Second, RateDemand: coord.Rates{Requests: 100}})
		require.NoError(t, err)
		require.Zero(t, g.Share)
		require.Positive(t, g.RateShare.Requests)
		// b left with nothing in flight.
		_, err = c.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "b", Instance: "b/1", Seq: 1, LLocal: 10,
			LeaseTTL: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, c.Leave(ctx, coord.Departure{Key: "k", NodeID: "b", Instance: "b/1", Hold: time.Minute}))
		require.NoError(t, c.Evict(ctx, "k", "a"))

		held := func() (int, int) {
			t.Helper()
			keys, err := c.Keys(ctx)
			require.NoError(t, err)
			require.Len(t, keys, 1)
			return keys[0].HeldRows, keys[0].HeldReserve
		}
		rows, slots := held()
		require.Equal(t, [2]int{1, 0}, [2]int{rows, slots}, "a's rate reserve is held, b holds nothing")
		err = c.DeleteKey(ctx, "k", false)
		require.ErrorIs(t, err, coord.ErrHeldCapacity)
		require.Regexp(t, `: 1 row holds 0 slots and a rate reserve on key .k. until `+
			t0.Add(10*time.Second).UTC().Format("2006-01-02T15:04:05Z")+`$`, err.Error())

		clock.Advance(10 * time.Second)
		rows, slots = held()
		require.Equal(t, [2]int{0, 0}, [2]int{rows, slots}, "a's lease ran out")
		require.NoError(t, c.DeleteKey(ctx, "k", false))
	})
}
