package chaos

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// TestRateAfterDatabaseOutage: two busy nodes share a key's 1,200
// requests a minute, with the default request bound of 5 minutes; their
// requests take 3 s, as streamed completions do. The database goes down
// for 2 s and comes back (a server start counts as a possible loss of
// state), long enough for both nodes to fence themselves, so each reports
// pacing to 0, with requests still in flight. Learning mode grants each
// node no more slots than it proves it holds, for the request bound; it
// caps a rate share at what its node paces to only for one lease from the
// loss's discovery, so each node must send requests again within seconds,
// within the slots it held, while the key still learns.
func TestRateAfterDatabaseOutage(t *testing.T) {
	requirePostgres(t)
	ctx := t.Context()
	const (
		key  = "rate-restart"
		rate = 1200
	)
	primary, err := pgtemp.Start(ctx, pgtemp.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	admin, err := pgxpool.New(ctx, primary.DSN("postgres"))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	require.NoError(t, prepare(ctx, admin, key, 100))
	operator, err := coord.NewPostgres(admin)
	require.NoError(t, err)
	_, err = operator.SetRates(ctx, key, coord.RatesChange{SetRequests: true, Requests: rate})
	require.NoError(t, err)
	db := &database{primary: primary, pool: admin}

	var nodes []*fleet.Node
	var sent [2]atomic.Int64 // admissions per node
	var last [2]atomic.Int64 // the newest admission per node, Unix ns
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	t.Cleanup(func() { stopLoad(); load.Wait() })
	for i, id := range []string{"a", "b"} {
		pool, err := pgxpool.New(ctx, primary.DSN("postgres"))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		coordinator, err := coord.NewPostgres(pool)
		require.NoError(t, err)
		node := fleettest.StartNode(t, coordinator, fleet.Config{
			Key:               key,
			NodeID:            id,
			HeartbeatInterval: 200 * time.Millisecond,
			LeaseTTL:          time.Second,
			FenceMargin:       250 * time.Millisecond,
			Limiter:           adaptive.Config{InitialLimit: 4, MinLimit: 4, MaxLimit: 4},
			Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		nodes = append(nodes, node)
		for range 8 {
			load.Go(func() {
				for loadCtx.Err() == nil {
					lease, err := node.Acquire(loadCtx)
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					sent[i].Add(1)
					last[i].Store(time.Now().UnixNano())
					select {
					case <-loadCtx.Done():
					case <-time.After(3 * time.Second):
					}
					lease.Release()
				}
			})
		}
	}
	require.Eventually(t, func() bool {
		return nodes[0].Rates().Share.Requests > 0 && nodes[1].Rates().Share.Requests > 0 &&
			nodes[0].State().Inflight > 0 && nodes[1].State().Inflight > 0
	}, 10*time.Second, 10*time.Millisecond, "the nodes never both had a rate share and requests in flight")

	var fenced atomic.Bool
	stop := make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() {
		for {
			for _, n := range nodes {
				if n.State().Fenced {
					fenced.Store(true)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	err = db.down(ctx, 2*time.Second)
	back := time.Now()
	close(stop)
	watching.Wait()
	require.NoError(t, err)
	require.True(t, fenced.Load(), "no node fenced itself in the outage: the case tests nothing")

	for time.Since(back) < 15*time.Second {
		sum := nodes[0].Rates().Share.Requests + nodes[1].Rates().Share.Requests
		require.LessOrEqual(t, sum, int64(rate), "rate shares add up to more than the key's rate")
		if last[0].Load() > back.UnixNano() && last[1].Load() > back.UnixNano() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, n := range nodes {
		at := time.Unix(0, last[i].Load())
		require.True(t, at.After(back), "node %s sent nothing within 15 s of the database's return (rate share %d, share %d, learning %v)",
			n.ID(), n.Rates().Share.Requests, n.State().Share, n.State().Learning)
		require.True(t, n.State().Learning, "the key learned for less than the request bound")
		t.Logf("node %s sent again %.2fs after the database came back, the key still learning (share %d)",
			n.ID(), at.Sub(back).Seconds(), n.State().Share)
	}
}
