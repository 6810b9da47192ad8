package coord_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
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

// TestDeleteKeyWaitsAfterALoss pins DeleteKey without force after the
// database lost state, on Memory and on Postgres: a failover to a replica
// that missed the last heartbeats leaves rows that show a node that still
// runs as holding nothing. The delete is refused with ErrLearning while
// the key last heard from its nodes under another incarnation (a refusal
// changes nothing, so it stays refused until a heartbeat sees the change)
// and while the key is in learning mode; then the rows are checked as
// before. --force deletes anyway.
func TestDeleteKeyWaitsAfterALoss(t *testing.T) {
	t.Parallel()
	for _, impl := range []struct {
		name string
		new  func(t *testing.T, clock *fakeClock) (coordinator, func(key string))
	}{
		{"memory", func(_ *testing.T, clock *fakeClock) (coordinator, func(string)) {
			m := coord.NewMemory(clock)
			n := 0
			return m, func(string) { n++; m.SetIncarnation(fmt.Sprintf("after loss %d", n)) }
		}},
		{"postgres", func(t *testing.T, clock *fakeClock) (coordinator, func(string)) {
			pool := fleettest.Pool(t)
			return newPostgres(t, pool, coord.WithClock(clock)), func(key string) {
				// The replica missed every heartbeat since the key's
				// first: its rows are gone, its incarnation is another.
				_, err := pool.Exec(context.Background(), `UPDATE fleetlimit.keys SET incarnation = 'before loss' WHERE key = $1`, key)
				require.NoError(t, err)
				_, err = pool.Exec(context.Background(), `UPDATE fleetlimit.database_state SET incarnation = 'before loss'`)
				require.NoError(t, err)
				_, err = pool.Exec(context.Background(), `DELETE FROM fleetlimit.nodes WHERE key = $1`, key)
				require.NoError(t, err)
			}
		}},
	} {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newFakeClock(t0)
			c, lose := impl.new(t, clock)
			require.NoError(t, c.CreateKey(ctx, "k", nil, new(4)))
			g, err := c.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a/1", Seq: 1, LLocal: 10, Demand: 4,
				Inflight: 3, LeaseTTL: 10 * time.Second, MaxRequestDuration: 5 * time.Second})
			require.NoError(t, err)
			require.Equal(t, 4, g.Share)
			require.NoError(t, c.CreateKey(ctx, "k0", nil, nil)) // never checked
			keys, err := c.Keys(ctx)
			require.NoError(t, err)
			require.False(t, keys[0].Unchecked || keys[1].Unchecked, "no loss yet")
			lose("k")
			keys, err = c.Keys(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"k", "k0"}, []string{keys[0].Key, keys[1].Key})
			require.True(t, keys[0].Unchecked, "k recorded another incarnation")
			require.True(t, keys[1].Unchecked, "k0 recorded none, and the database's check will enter learning mode")
			require.False(t, keys[0].Learning, "learning starts at the next check")
			require.NoError(t, c.DeleteKey(ctx, "k0", true))

			for range 2 {
				err = c.DeleteKey(ctx, "k", false)
				require.ErrorIs(t, err, coord.ErrLearning)
				require.Regexp(t, `: key .k. has not been checked since the database's incarnation changed$`, err.Error())
			}
			keys, err = c.Keys(ctx)
			require.NoError(t, err)
			require.Len(t, keys, 1, "nothing was deleted")
			require.True(t, keys[0].Unchecked, "a refused delete checks nothing")
			require.Equal(t, new(4), keys[0].MaxLimit)

			// b's heartbeat sees the change: learning mode for a's
			// lease and request bound.
			clock.Advance(time.Second)
			g, err = c.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "b", Instance: "b/1", Seq: 1, LLocal: 10, Demand: 1,
				LeaseTTL: time.Second})
			require.NoError(t, err)
			require.True(t, g.Learning)
			until := t0.Add(16 * time.Second)
			keys, err = c.Keys(ctx)
			require.NoError(t, err)
			require.WithinDuration(t, until, keys[0].LearningUntil, 100*time.Millisecond)
			require.False(t, keys[0].Unchecked, "checked")
			require.NoError(t, c.CreateKey(ctx, "k3", nil, nil))
			keys, err = c.Keys(ctx)
			require.NoError(t, err)
			require.True(t, keys[1].Unchecked, "k3 recorded no incarnation while the database is in learning mode")
			require.ErrorIs(t, c.DeleteKey(ctx, "k3", false), coord.ErrLearning)
			require.NoError(t, c.DeleteKey(ctx, "k3", true))
			clock.Advance(10 * time.Second)
			err = c.DeleteKey(ctx, "k", false)
			require.ErrorIs(t, err, coord.ErrLearning)
			require.Regexp(t, `: key .k. is in learning mode until `+keys[0].LearningUntil.UTC().Format("2006-01-02T15:04:05Z")+`$`, err.Error())

			// After learning mode a's grant has run out, and b's lease.
			clock.Set(keys[0].LearningUntil.Add(time.Millisecond))
			require.NoError(t, c.DeleteKey(ctx, "k", false))

			// --force deletes whatever the rows show.
			_, err = c.Heartbeat(ctx, coord.Report{Key: "k2", NodeID: "a", Instance: "a/1", Seq: 1, LLocal: 10, Demand: 1,
				LeaseTTL: 10 * time.Second})
			require.NoError(t, err)
			lose("k2")
			require.ErrorIs(t, c.DeleteKey(ctx, "k2", false), coord.ErrLearning)
			require.NoError(t, c.DeleteKey(ctx, "k2", true))
		})
	}
}

// TestHeartbeatsRacingAForcedDelete: a heartbeat that found no key row
// creates it and looks again; a forced DeleteKey in between left it no
// row to lock, and it failed writing the node's row with a bare
// not-null violation (4 % of heartbeats in a tight loop), wrapping no
// sentinel. The function now creates the row again until it locks one
// (migration 16), as Memory's, which cannot race, never fails.
func TestHeartbeatsRacingAForcedDelete(t *testing.T) {
	t.Parallel()
	p := newPostgres(t, fleettest.Pool(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var beats, failed atomic.Int64
	var firstErr atomic.Value
	for i := range 2 {
		wg.Go(func() {
			id := fmt.Sprintf("n%d", i)
			for seq := int64(1); ctx.Err() == nil; seq++ {
				_, err := p.Heartbeat(ctx, coord.Report{Key: "race", NodeID: id, Instance: id + "/1", Seq: seq,
					LLocal: 10, Demand: 1, LeaseTTL: time.Second})
				if err != nil && ctx.Err() == nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				beats.Add(1)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := p.DeleteKey(ctx, "race", true); err != nil && ctx.Err() == nil && !errors.Is(err, coord.ErrUnknownKey) {
				firstErr.CompareAndSwap(nil, err)
				failed.Add(1)
			}
		}
	})
	wg.Wait()
	require.Zero(t, failed.Load(), "of %d heartbeats; first error: %v", beats.Load(), firstErr.Load())
	require.Positive(t, beats.Load())
}

// TestUpdateLimitsIgnoresAnUnsetBound: a bound whose Set flag is false
// keeps its value, whatever its pointer holds. Postgres sent the pointer
// anyway, and one past an int4 failed to encode, where Memory ignored it.
func TestUpdateLimitsIgnoresAnUnsetBound(t *testing.T) {
	onBoth(t, func(t *testing.T, c coordinator, _ *fakeClock) {
		ctx := context.Background()
		require.NoError(t, c.CreateKey(ctx, "k", new(2), new(10)))
		minL, maxL, err := c.UpdateLimits(ctx, "k", coord.LimitsChange{SetMax: true, Max: new(20), Min: new(1 << 40)})
		require.NoError(t, err)
		require.Equal(t, [2]int{2, 20}, [2]int{*minL, *maxL})
	})
}
