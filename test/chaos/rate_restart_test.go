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
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// TestRateAfterDatabaseOutage: two busy nodes share a key's 1,200
// requests a minute, with the default request bound of 5 minutes. Each
// holds one long request (a stream) from before an outage until 3 s
// after it, and sends short ones beside it. The database goes down for
// 2 s and comes back (a server start counts as a possible loss of state),
// long enough for both nodes to fence themselves, so each reports pacing
// to 0, its long request still in flight. Learning mode grants each node
// no more slots than it proves it holds — at least its long request's —
// for the request bound; it caps a rate share at what its node paces to
// only for one lease from the loss's discovery. So once its long request
// ends, each node must send again in its slot, while the key still
// learns.
func TestRateAfterDatabaseOutage(t *testing.T) {
	requirePostgres(t)
	ctx := t.Context()
	const (
		key  = "rate-restart"
		rate = 1200
	)
	db := startPrimary(t, key)
	operator, err := coord.NewPostgres(db.pool)
	require.NoError(t, err)
	_, err = operator.SetRates(ctx, key, coord.RatesChange{SetRequests: true, Requests: rate})
	require.NoError(t, err)

	var nodes []*fleet.Node
	var last [2]atomic.Int64 // the newest short request's admission per node, Unix ns
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	t.Cleanup(func() { stopLoad(); load.Wait() })
	for i, id := range []string{"a", "b"} {
		node := fleettest.StartNode(t, ownCoordinator(t, db.primary), fleet.Config{
			Key:               key,
			NodeID:            id,
			HeartbeatInterval: 200 * time.Millisecond,
			LeaseTTL:          time.Second,
			FenceMargin:       250 * time.Millisecond,
			Limiter:           adaptive.Config{InitialLimit: 4, MinLimit: 4, MaxLimit: 4, MaxQueued: 8},
			Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		nodes = append(nodes, node)
		for range 4 {
			load.Go(func() {
				for loadCtx.Err() == nil {
					lease, err := node.Acquire(loadCtx)
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					last[i].Store(time.Now().UnixNano())
					select {
					case <-loadCtx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					lease.Release()
				}
			})
		}
	}
	require.Eventually(t, func() bool {
		return nodes[0].Rates().Share.Requests > 0 && nodes[1].Rates().Share.Requests > 0
	}, 10*time.Second, 10*time.Millisecond, "the nodes never both had a rate share")
	var long []fleet.Lease
	for _, n := range nodes {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		le, err := n.Acquire(lctx) // queued among the short requests
		cancel()
		require.NoError(t, err, "node %s's long request", n.ID())
		long = append(long, le)
	}

	var fenced atomic.Bool
	watching := watch(func() bool { return nodes[0].State().Fenced || nodes[1].State().Fenced }, &fenced)
	err = db.down(ctx, 2*time.Second)
	back := time.Now()
	watching()
	require.NoError(t, err)
	require.True(t, fenced.Load(), "no node fenced itself in the outage: the case tests nothing")

	time.Sleep(time.Until(back.Add(3 * time.Second)))
	ended := time.Now()
	for _, le := range long {
		le.Release()
	}
	for time.Since(back) < 15*time.Second {
		sum := nodes[0].Rates().Share.Requests + nodes[1].Rates().Share.Requests
		require.LessOrEqual(t, sum, int64(rate), "rate shares add up to more than the key's rate")
		if last[0].Load() > ended.UnixNano() && last[1].Load() > ended.UnixNano() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, n := range nodes {
		at := time.Unix(0, last[i].Load())
		st := n.State()
		require.True(t, at.After(ended), "node %s sent nothing in the 12 s after its long request ended (rate share %d, share %d, learning %v)",
			n.ID(), n.Rates().Share.Requests, st.Share, st.Learning)
		require.True(t, st.Learning, "the key learned for less than the request bound")
		t.Logf("node %s sent again %.0f ms after its long request ended, %.2fs after the database came back (share %d, the key still learning)",
			n.ID(), float64(at.Sub(ended).Microseconds())/1000, at.Sub(back).Seconds(), st.Share)
	}
}
