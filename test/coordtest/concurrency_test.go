package coordtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// TestConcurrentHeartbeats runs 50 nodes heartbeating one key as fast as
// they can for a few seconds, with an operator draining, undraining and
// evicting them, while a watcher snapshots Σ share and L_global in single
// statements. Every node enforces its newest grant, admits only below it,
// and fences itself (cancelling its requests) when its lease is about to
// end; a shared counter of simulated in-flight requests is checked against
// L at every admission. No call may fail: no deadlock, no serialization
// error.
func TestConcurrentHeartbeats(t *testing.T) {
	t.Parallel()
	const nodes = 50
	duration := 5 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	pool := openPool(t, nodes+5)
	p, err := coord.NewPostgres(pool)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var (
		wg    sync.WaitGroup
		c     counters
		snaps atomic.Int64
		errs  = make(chan error, nodes+2)
	)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel()
	}
	live := func() bool { return ctx.Err() == nil }

	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runNode(ctx, p, i, &c, fail)
		}()
	}

	wg.Add(1)
	go func() { // the watcher
		defer wg.Done()
		for live() {
			var sum, lGlobal int64
			err := pool.QueryRow(context.WithoutCancel(ctx), `SELECT coalesce(sum(n.share), 0), k.l_global
			   FROM fleetlimit.keys AS k LEFT JOIN fleetlimit.nodes AS n ON n.key = k.key
			  WHERE k.key = $1 GROUP BY k.l_global`, key).Scan(&sum, &lGlobal)
			if err != nil {
				continue // the key may not exist yet
			}
			snaps.Add(1)
			if sum > lGlobal {
				fail(fmt.Errorf("snapshot: Σ share = %d > L_global = %d", sum, lGlobal))
				return
			}
		}
	}()

	wg.Add(1)
	go func() { // the operator
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 7))
		for live() {
			time.Sleep(20 * time.Millisecond)
			id := fmt.Sprintf("node-%02d", rng.IntN(nodes))
			var err error
			switch rng.IntN(10) {
			case 0:
				err = p.Evict(context.WithoutCancel(ctx), key, id)
			case 1, 2, 3:
				err = p.Drain(context.WithoutCancel(ctx), key, id)
			default:
				err = p.Undrain(context.WithoutCancel(ctx), key, id)
			}
			if err != nil && !errors.Is(err, coord.ErrUnknownNode) && !errors.Is(err, coord.ErrUnknownKey) {
				fail(fmt.Errorf("operator: %w", err))
				return
			}
			if _, err := p.Keys(context.WithoutCancel(ctx)); err != nil {
				fail(fmt.Errorf("operator: %w", err))
				return
			}
		}
	}()

	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d heartbeats (%.0f/s, slowest %dms), %d snapshots, %d admissions, max Σ in-flight %d of L = %d",
		c.heartbeats.Load(), float64(c.heartbeats.Load())/duration.Seconds(), c.slowest.Load(), snaps.Load(),
		c.admits.Load(), c.maxInflight.Load(), lLocal)
	require.Positive(t, snaps.Load())
	require.Greater(t, c.heartbeats.Load(), int64(nodes))
	require.Positive(t, c.admits.Load())
}

const (
	lLocal     = 40
	key        = "hot key"
	leaseTTL   = 2 * time.Second
	fenceSlack = 100 * time.Millisecond
)

// simNode is one simulated node: its in-flight requests and its fence.
type simNode struct {
	mu       sync.Mutex
	mine     int       // requests in flight
	enforced int       // the share it enforces
	deadline time.Time // its fence: no requests may run after it
	fence    *time.Timer
	global   *atomic.Int64
}

// cancel drops every request, as a fenced node does.
func (n *simNode) cancel() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.global.Add(int64(-n.mine))
	n.mine, n.enforced = 0, 0
}

// counters are the fleet-wide tallies of the simulation.
type counters struct {
	inflight    atomic.Int64 // Σ simulated in-flight over all nodes
	maxInflight atomic.Int64
	heartbeats  atomic.Int64
	admits      atomic.Int64
	slowest     atomic.Int64 // the slowest heartbeat, in ms
}

func runNode(ctx context.Context, p *coord.Postgres, i int, c *counters, fail func(error)) {
	inflight, maxInflight, heartbeats, admits, slowest := &c.inflight, &c.maxInflight, &c.heartbeats, &c.admits, &c.slowest
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	id := fmt.Sprintf("node-%02d", i)
	n := &simNode{global: inflight}
	n.fence = time.AfterFunc(time.Hour, n.cancel)
	defer n.fence.Stop()
	var (
		seq, epoch, applied int64
		run                 int
	)
	for ctx.Err() == nil {
		n.mu.Lock()
		mine := n.mine
		n.mu.Unlock()
		demand := mine + rng.IntN(8)
		seq++
		sent := time.Now()
		g, err := p.Heartbeat(context.WithoutCancel(ctx), coord.Report{Key: key, NodeID: id,
			Instance: fmt.Sprintf("%s/run-%d", id, run), Seq: seq, LLocal: lLocal, Inflight: mine,
			Demand: demand, Epoch: epoch, AppliedGen: applied, LeaseTTL: leaseTTL})
		if err != nil {
			fail(fmt.Errorf("%s: %w", id, err))
			return
		}
		heartbeats.Add(1)
		if d := time.Since(sent).Milliseconds(); d > slowest.Load() {
			slowest.Store(d)
		}
		if g.Status == coord.StatusEvicted {
			// Fenced for good: cancel everything and come back as a new
			// run once the lease has run out.
			n.cancel()
			time.Sleep(g.LeaseRemaining + 10*time.Millisecond)
			run++
			seq, epoch, applied = 0, 0, 0
			continue
		}
		n.mu.Lock()
		n.deadline = sent.Add(g.LeaseRemaining - fenceSlack)
		n.fence.Reset(time.Until(n.deadline))
		if g.Epoch > epoch || g.Epoch == epoch && g.Generation > applied {
			n.enforced, epoch, applied = g.Share, g.Epoch, g.Generation
		}
		// Finish some requests, admit up to the share while the lease holds.
		done := rng.IntN(n.mine + 1)
		n.mine -= done
		inflight.Add(int64(-done))
		for n.mine < min(n.enforced, demand) && time.Now().Before(n.deadline) {
			n.mine++
			admits.Add(1)
			total := inflight.Add(1)
			for m := maxInflight.Load(); total > m && !maxInflight.CompareAndSwap(m, total); m = maxInflight.Load() {
			}
			if total > lLocal {
				n.mu.Unlock()
				fail(fmt.Errorf("%s admitted a request: %d in flight > L = %d", id, total, lLocal))
				return
			}
		}
		n.mu.Unlock()
	}
}
