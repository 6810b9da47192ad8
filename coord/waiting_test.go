package coord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// TestGrantWaiting pins Grant.Waiting, on Memory and on Postgres: the
// key's other members (lease running, neither evicted nor departed) that
// want capacity (demand > 0 at their last report, not draining) and hold
// a share of 0, while more members want capacity than L_global holds
// (0 otherwise). Under L_global 1, a holds the slot and b and c wait; the
// reporting row never counts itself; a row whose demand drops to 0, a
// draining row, a row whose lease ran out and a departed row are not
// counted. Stale reports, an evicted row and an evicted instance whose
// row has gone are answered with the same count.
func TestGrantWaiting(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, c coordinator, clock *fakeClock) {
		ctx := context.Background()
		one := 1
		require.NoError(t, c.CreateKey(ctx, "k", nil, &one))

		// b's requests may run a minute: its row outlives its lease.
		long := func(r coord.Report) coord.Report { r.MaxRequestDuration = time.Minute; return r }
		type want struct {
			share, waiting int
			stale          bool
			status         coord.Status
		}
		beat := func(what string, r coord.Report, w want) {
			t.Helper()
			g, err := c.Heartbeat(ctx, r)
			require.NoError(t, err, what)
			if w.status == "" {
				w.status = coord.StatusActive
			}
			require.Equal(t, w, want{g.Share, g.Waiting, g.Stale, g.Status}, what)
		}

		// Waiting counts only while more members want capacity than
		// L_global holds (see TestWaitingOnlyWhenTheFloorsDoNotFit).
		beat("a takes the only slot", rep("a", 1, 8, 0, 1, 0), want{share: 1})
		beat("b waits; a holds its share", long(rep("b", 1, 8, 0, 1, 0)), want{})
		beat("c waits behind a; b waits", rep("c", 1, 8, 0, 1, 0), want{waiting: 1})
		beat("the holder sees b and c waiting", rep("a", 2, 8, 1, 1, 0), want{share: 1, waiting: 2})
		beat("a stale report sees them too", rep("a", 2, 8, 1, 1, 0), want{share: 1, waiting: 2, stale: true})
		beat("b does not count itself", long(rep("b", 2, 8, 0, 1, 0)), want{waiting: 1})
		beat("c wants nothing now; b waits", rep("c", 2, 8, 0, 0, 0), want{waiting: 1})
		beat("c no longer counts", rep("a", 3, 8, 1, 1, 0), want{share: 1, waiting: 1})

		require.NoError(t, c.Drain(ctx, "k", "b"))
		beat("a draining b does not count", rep("a", 4, 8, 1, 1, 0), want{share: 1})
		require.NoError(t, c.Undrain(ctx, "k", "b"))
		beat("undrained, b counts again", rep("a", 5, 8, 1, 1, 0), want{share: 1, waiting: 1})

		require.NoError(t, c.Evict(ctx, "k", "a"))
		beat("evicted, a no longer wants a slot: b's floor fits", rep("a", 6, 8, 1, 1, 0),
			want{status: coord.StatusEvicted})

		// Every lease runs out; a's and c's rows hold no longer, b's
		// does. c's report deletes a's row.
		clock.Advance(ttl + time.Millisecond)
		beat("b's lease ran out: no member", rep("c", 3, 8, 0, 1, 0), want{share: 1})
		beat("b is back, behind c", long(rep("b", 3, 8, 0, 1, 0)), want{})
		beat("an evicted instance without a row sees b waiting", rep("a", 7, 8, 0, 1, 0),
			want{status: coord.StatusEvicted, waiting: 1})
		beat("d waits behind c, as b does", rep("d", 1, 8, 0, 1, 0), want{waiting: 1})

		require.NoError(t, c.Leave(ctx, coord.Departure{Key: "k", NodeID: "b", Instance: "b-1"}))
		beat("a departed row sees d waiting", long(rep("b", 4, 8, 0, 1, 0)),
			want{waiting: 1, stale: true, status: coord.StatusDeparted})
		beat("a departed row does not count", rep("a", 8, 8, 0, 1, 0), want{waiting: 1, status: coord.StatusEvicted})
		beat("the holder sees d waiting", rep("c", 4, 8, 1, 1, 0), want{share: 1, waiting: 1})
	})
}

// onBoth runs test on Memory and on Postgres, in parallel subtests, each
// on a fake clock at t0.
func onBoth(t *testing.T, test func(t *testing.T, c coordinator, clock *fakeClock)) {
	for _, impl := range bothImplementations {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock(t0)
			test(t, impl.new(t, clock), clock)
		})
	}
}

// bothImplementations are the coordinators onBoth runs a test on, each on
// a given clock: Memory and Postgres.
var bothImplementations = []struct {
	name string
	new  func(t *testing.T, clock coord.Clock) coordinator
}{
	{"memory", func(_ *testing.T, clock coord.Clock) coordinator { return coord.NewMemory(clock) }},
	{"postgres", func(t *testing.T, clock coord.Clock) coordinator {
		return newPostgres(t, fleettest.Pool(t), coord.WithClock(clock))
	}},
}
