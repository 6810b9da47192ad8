package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// TestEvictDuringRestart: an operator evicts a busy node while the
// database restarts (pg_ctl restart -m fast), at offsets from the
// restart's start to after it. The evict is retried until the database
// takes it, as an operator's tool would. From a lease after the evict
// returned, the node must admit nothing, and it must learn that it was
// evicted. A node whose heartbeat the database answered before the
// evict committed is rightly still active until then: the check counts
// from the evict's return.
func TestEvictDuringRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("five database restarts take about twenty seconds")
	}
	requirePostgres(t)
	ctx := t.Context()
	const (
		key   = "evict-restart"
		limit = 4
		lease = time.Second
	)
	primary, err := pgtemp.Start(ctx, pgtemp.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	pool, err := pgxpool.New(ctx, primary.DSN("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Up(ctx, pool))
	require.NoError(t, createKey(ctx, pool, key, 100))
	db := &database{primary: primary, pool: pool}

	// A restart takes about 0.1s here: four offsets fall inside it, the
	// last after it, on connections the restart closed.
	for i, offset := range []time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond,
		60 * time.Millisecond, 200 * time.Millisecond} {
		id := fmt.Sprintf("node-%d", i)
		node, err := fleet.New(pool, fleet.Config{
			Key:               key,
			NodeID:            id,
			HeartbeatInterval: 100 * time.Millisecond,
			LeaseTTL:          lease,
			FenceMargin:       250 * time.Millisecond,

			// A restart starts learning mode for the longest lease plus
			// request bound: keep it short, so the next node gets a share.
			MaxRequestDuration: 300 * time.Millisecond,
			Limiter:            adaptive.Config{InitialLimit: limit, MinLimit: limit, MaxLimit: limit},
			Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		require.NoError(t, err)
		require.NoError(t, node.Start(ctx))
		load := busy(node, 2*limit)
		require.Eventually(t, func() bool { return node.State().Inflight > 0 }, 10*time.Second, 10*time.Millisecond,
			"%s never admitted", id)

		restarted := make(chan error, 1)
		var took time.Duration
		began := time.Now()
		go func() {
			err := primary.Restart(ctx)
			took = time.Since(began)
			restarted <- err
		}()
		time.Sleep(offset)
		attempts := 0
		require.NoError(t, db.retry(ctx, func(ctx context.Context, pool *pgxpool.Pool) error {
			attempts++
			_, err := pool.Exec(ctx, `SELECT fleetlimit.evict($1, $2)`, key, id)
			return err
		}), "evict %s", id)
		evicted := time.Now()

		for time.Since(evicted) < lease+time.Second {
			if st := node.State(); time.Since(evicted) > lease {
				require.Zero(t, st.Limit, "%s admits %.2fs after its eviction, %v into a restart: %+v",
					id, time.Since(evicted).Seconds(), offset, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, <-restarted)
		t.Logf("%s: restart took %.2fs; evict sent %v into it, returned after %.2fs, attempts: %d",
			id, took.Seconds(), offset, evicted.Sub(began).Seconds(), attempts)
		require.Eventually(t, func() bool { return node.State().Status == coord.StatusEvicted }, 5*time.Second,
			10*time.Millisecond, "%s never learned of its eviction", id)
		_, err = node.Acquire(ctx)
		require.ErrorIs(t, err, fleet.ErrEvicted)
		load.stop()
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		require.NoError(t, node.Stop(stopCtx))
		cancel()
	}
}

// loadLoop is a set of goroutines that keep a node's slots taken.
type loadLoop struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// busy starts n goroutines, each acquiring a slot of node, holding it for
// 20 ms and releasing it, until stop.
func busy(node *fleet.Node, n int) *loadLoop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadLoop{cancel: cancel}
	for range n {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				lease, err := node.Acquire(ctx)
				if err != nil {
					if errors.Is(err, fleet.ErrEvicted) || errors.Is(err, fleet.ErrStopped) {
						return
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				time.Sleep(20 * time.Millisecond)
				lease.Release()
			}
		})
	}
	return l
}

// stop ends the goroutines and waits for them.
func (l *loadLoop) stop() {
	l.cancel()
	l.wg.Wait()
}
