package chaos

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// TestLeaseOutlastingAnOutage: a busy node of 20-ms requests, heartbeats
// every 200 ms and the default request bound of 5 minutes; the database
// goes down for 2 s and comes back (a server start counts as a possible
// loss of state: learning mode, which grants a node no more than it proves
// it holds, for a lease plus the request bound). With a 1-s lease the
// outage fences the node, its requests end, and it holds nothing when the
// database is back: it admits nothing while the key learns. With an 8-s
// lease (fence margin 250 ms) the outage ends before the fence: the node
// admits through it, under its last share, and is granted what it holds
// in flight when it reports again, so it goes on admitting while the key
// learns. The lease, not the request bound, decides which outages a fleet
// rides out (README, "How it works", 4).
func TestLeaseOutlastingAnOutage(t *testing.T) {
	requirePostgres(t)
	for _, c := range []struct {
		name   string
		lease  time.Duration
		fenced bool
	}{
		{"lease shorter than the outage", time.Second, true},
		{"lease longer than the outage", 8 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			const key = "lease-outage"
			db := startPrimary(t, key)
			node := fleettest.StartNode(t, ownCoordinator(t, db.primary), fleet.Config{
				Key:               key,
				NodeID:            "a",
				HeartbeatInterval: 200 * time.Millisecond,
				LeaseTTL:          c.lease,
				FenceMargin:       250 * time.Millisecond,
				Limiter:           adaptive.Config{InitialLimit: 4, MinLimit: 4, MaxLimit: 4, MaxQueued: 8},
				Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			var admitted atomic.Int64
			loadCtx, stopLoad := context.WithCancel(ctx)
			var load sync.WaitGroup
			t.Cleanup(func() { stopLoad(); load.Wait() })
			for range 6 {
				load.Go(func() {
					for loadCtx.Err() == nil {
						lease, err := node.Acquire(loadCtx)
						if err != nil {
							time.Sleep(5 * time.Millisecond)
							continue
						}
						admitted.Add(1)
						select {
						case <-loadCtx.Done():
						case <-time.After(20 * time.Millisecond):
						}
						lease.Release()
					}
				})
			}
			fleettest.WaitFor(t, node, 10*time.Second, func(st fleet.State) bool { return st.Share == 4 && st.Inflight > 0 })

			var fenced atomic.Bool
			watching := watch(func() bool { return node.State().Fenced }, &fenced)
			require.NoError(t, db.down(ctx, 2*time.Second))
			back := time.Now()
			st := fleettest.WaitFor(t, node, 10*time.Second, func(st fleet.State) bool { return !st.Outage })
			granted := time.Since(back)
			require.True(t, st.Learning, "the server's start did not put the key in learning mode")
			from := admitted.Load()
			time.Sleep(2 * time.Second)
			after := admitted.Load() - from
			watching()
			st = node.State()
			t.Logf("fenced in the outage: %v; first grant %.2f s after the database was back; admitted in the 2 s after it: %d; share %d, learning %v",
				fenced.Load(), granted.Seconds(), after, st.Share, st.Learning)
			require.Equal(t, c.fenced, fenced.Load(), "fenced in the outage")
			require.True(t, st.Learning, "the key learned for less than the request bound")
			if c.fenced {
				require.Zero(t, after, "a node fenced by the outage admitted while the key learns")
				return
			}
			require.Positive(t, st.Share, "a node that rode out the outage holds no share while the key learns")
			require.Greater(t, after, int64(50), "admitted while the key learns")
		})
	}
}
