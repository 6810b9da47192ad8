package chaos

import (
	"context"
	"errors"
	"fmt"
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

// TestEvictDuringRestart: an operator evicts a busy node around a fast
// restart of the database (a SIGINT, then a start on the same port, as
// pg_ctl restart -m fast does), the evict retried until the database
// takes it, as an operator's tool would. The evict is sent at offsets
// from the restart's start, most inside it, and from its end, when the
// node has just been answered 'active' again on a new connection. The
// node has its own pool, so every restart cuts its connections and it
// goes through the outage. From a lease after the eviction committed (by
// the database's clock), the node must admit nothing, and it must learn
// that it was evicted. Its heartbeats before the commit are rightly
// answered 'active'.
func TestEvictDuringRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("eight database restarts take about twenty seconds")
	}
	requirePostgres(t)
	ctx := t.Context()
	const (
		key   = "evict-restart"
		limit = 4
		lease = time.Second
	)
	db := startPrimary(t, key)
	primary := db.primary

	cases := []struct {
		fromEnd bool // offset from the restart's end, not its start
		offset  time.Duration
	}{
		{false, 0}, {false, 20 * time.Millisecond}, {false, 40 * time.Millisecond}, {false, 60 * time.Millisecond},
		{true, 0}, {true, 50 * time.Millisecond}, {true, 150 * time.Millisecond}, {true, 300 * time.Millisecond},
	}
	for i, c := range cases {
		id := fmt.Sprintf("node-%d", i)
		when := fmt.Sprintf("%v after the restart began", c.offset)
		if c.fromEnd {
			when = fmt.Sprintf("%v after the restart ended", c.offset)
		}
		node := fleettest.StartNode(t, ownCoordinator(t, primary), fleet.Config{
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
		load := busy(ctx, node, 2*limit)
		t.Cleanup(load.stop)
		require.Eventually(t, func() bool { return node.State().Inflight > 0 }, 10*time.Second, 10*time.Millisecond,
			"%s never admitted", id)

		var outage atomic.Bool
		watching := watch(func() bool { return node.State().Outage }, &outage)
		t.Cleanup(watching)
		restarted := make(chan error, 1)
		var took time.Duration
		began := time.Now()
		go func() {
			err := primary.Restart(ctx)
			took = time.Since(began)
			restarted <- err
		}()
		if c.fromEnd {
			require.NoError(t, <-restarted)
			restarted <- nil
		}
		time.Sleep(c.offset)
		evicted, err := db.evict(ctx, key, id, i)
		require.NoError(t, err, "evict %s", id)

		for time.Since(evicted) < lease+time.Second {
			if st := node.State(); time.Since(evicted) > lease {
				require.Zero(t, st.Limit, "%s admits %.2fs after its eviction committed (sent %s): %+v",
					id, time.Since(evicted).Seconds(), when, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, <-restarted)
		require.Eventually(t, func() bool { return node.State().Status == coord.StatusEvicted }, 5*time.Second,
			10*time.Millisecond, "%s never learned of its eviction", id)
		_, err = node.Acquire(ctx)
		require.ErrorIs(t, err, fleet.ErrEvicted)
		watching()
		require.True(t, outage.Load(), "%s never lost the database in its restart: the case tests nothing", id)
		t.Logf("%s: restart took %.2fs; evict sent %s, committed %.2fs after the restart began",
			id, took.Seconds(), when, evicted.Sub(began).Seconds())
		load.stop()
	}
}

// watch polls seen every 2 ms and sets it once seen returns true, until
// the returned function is called; it may be called again.
func watch(seen func() bool, it *atomic.Bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if seen() {
				it.Store(true)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
}

// loadLoop is a set of goroutines that keep a node's slots taken.
type loadLoop struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// busy starts n goroutines, each acquiring a slot of node, holding it for
// 20 ms and releasing it, until stop or ctx ends.
func busy(ctx context.Context, node *fleet.Node, n int) *loadLoop {
	ctx, cancel := context.WithCancel(ctx)
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

// stop ends the goroutines and waits for them; it may be called again.
func (l *loadLoop) stop() {
	l.cancel()
	l.wg.Wait()
}

// startPrimary starts a Postgres cluster of the test's own, migrated, with
// key created at a max of 100, and returns it as a database whose admin
// pool connects straight to it.
func startPrimary(t *testing.T, key string) *database {
	t.Helper()
	ctx := t.Context()
	primary, err := pgtemp.Start(ctx, pgtemp.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	admin, err := pgxpool.New(ctx, primary.DSN("postgres"))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	require.NoError(t, prepare(ctx, admin, key, 100))
	return &database{primary: primary, pool: admin}
}

// ownCoordinator is a Postgres coordinator on a pool of its own, so that
// every restart of primary cuts its connections.
func ownCoordinator(t *testing.T, primary *pgtemp.Cluster) coord.Coordinator {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), primary.DSN("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	return c
}
