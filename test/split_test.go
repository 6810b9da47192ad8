package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// TestEveryNodeWithDemandIsAdmitted: six nodes on Postgres, one caller
// each (demand 1), on a key capped at 10: R = 4 is less than the nodes,
// and the targets add up to exactly 10, so every node holds a share of at
// least 1 and admits. Rounded up, every target was 2 and the last node to
// ask was held at 0.
func TestEveryNodeWithDemandIsAdmitted(t *testing.T) {
	t.Parallel()
	c := postgresCoordinator(t)
	ten := 10
	require.NoError(t, c.CreateKey(t.Context(), "split", nil, &ten))
	lim := adaptive.Config{InitialLimit: 10, MaxQueued: 16}
	nodes := make([]*fleet.Node, 6)
	for i := range nodes {
		nodes[i] = startNode(t, c, nodeConfig("split", fmt.Sprintf("n%d", i), lim))
		time.Sleep(50 * time.Millisecond)
	}
	until := time.Now().Add(4 * time.Second)
	admitted := make([]atomic.Int64, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			for time.Now().Before(until) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				le, err := n.Acquire(ctx)
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				admitted[i].Add(1)
				time.Sleep(50 * time.Millisecond)
				le.Release()
			}
		})
	}
	wg.Wait()
	sum := 0
	for i, n := range nodes {
		require.Positive(t, admitted[i].Load(), "%s never admitted", n.ID())
		sum += n.State().Share
	}
	require.LessOrEqual(t, sum, ten)
}

// TestHeavyWaitersTakeTurnsOnPostgres: two nodes on Postgres whose every
// request weighs 6, on a key held at 10, and whose queues hold less than
// 6, so their callers poll: each refusal is a demand floor of 6. The
// split gives each 5 while both want 6; a node that wants more than its
// share with nothing in flight steps aside in half its reports, so the
// two take turns and both are served.
func TestHeavyWaitersTakeTurnsOnPostgres(t *testing.T) {
	t.Parallel()
	c := postgresCoordinator(t)
	ten := 10
	require.NoError(t, c.CreateKey(t.Context(), "turns", &ten, &ten))
	lim := adaptive.Config{InitialLimit: 10, MaxQueued: 4}
	nodes := []*fleet.Node{
		startNode(t, c, nodeConfig("turns", "a", lim)),
		startNode(t, c, nodeConfig("turns", "b", lim)),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	served := make([]atomic.Int64, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			for ctx.Err() == nil {
				le, err := n.AcquireRequest(ctx, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 6})
				if err != nil {
					time.Sleep(time.Millisecond) // the queue holds less than 6: a poller
					continue
				}
				served[i].Add(1)
				time.Sleep(5 * time.Millisecond)
				le.Release()
			}
		})
	}
	wg.Wait()
	t.Logf("served: a %d, b %d", served[0].Load(), served[1].Load())
	for i, n := range nodes {
		require.GreaterOrEqual(t, served[i].Load(), int64(3), "%s was served too rarely", n.ID())
	}
}
