package test

import (
	"context"
	"fmt"
	"strings"
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
	served := servedOnPostgres(t, "turns", []callers{{6, 1}, {6, 1}})
	t.Logf("served: a %d, b %d", served[0], served[1])
	for i, s := range served {
		require.GreaterOrEqual(t, s, int64(3), "node %d was served too rarely", i)
	}
}

// TestHeavyNodeBesideBusyLightPeerOnPostgres: a node whose requests weigh
// 6 beside a node with 12 callers of weight 1, on a key held at 10. The
// split gives the heavy node 4 for as long as the light one stays busy;
// the heavy node presses for its weight (its reported demand doubles
// while its share does not grow), so it is served, and the light node
// keeps most of the key.
func TestHeavyNodeBesideBusyLightPeerOnPostgres(t *testing.T) {
	t.Parallel()
	served := servedOnPostgres(t, "press", []callers{{6, 1}, {1, 12}})
	t.Logf("served: heavy %d, light %d", served[0], served[1])
	require.GreaterOrEqual(t, served[0], int64(3), "the heavy node was served too rarely")
	require.Greater(t, served[1], 10*served[0], "the light node keeps most of the key")
}

// TestMoreNodesThanLGlobalTakeTurnsOnPostgres: four nodes of two busy
// callers each on a key held at 3. The floors of 1 add up to more than
// L_global; before, the three nodes that first held a slot kept it and
// the fourth was never admitted. Holders now give their turn to the
// node waiting (the grant's Waiting), and every node is served.
func TestMoreNodesThanLGlobalTakeTurnsOnPostgres(t *testing.T) {
	t.Parallel()
	served := servedOnPostgresAt(t, "over", 3, []callers{{1, 2}, {1, 2}, {1, 2}, {1, 2}})
	t.Logf("served: %v", served)
	for i, s := range served {
		require.GreaterOrEqual(t, s, int64(20), "node %d was served too rarely", i)
	}
}

// callers is one node of servedOnPostgres: that many callers, each
// looping on requests of that weight.
type callers struct{ weight, count int }

// servedOnPostgres runs one node per entry of nodes on a Postgres key held
// at 10, each of its callers looping on AcquireRequest at the node's
// weight (a queue that holds less than the weight makes a poller of it)
// and holding each lease 5 ms, for 4 s; it returns how many requests each
// node was admitted after the first second (the first admissions, before
// every node waits, say nothing of turns).
func servedOnPostgres(t *testing.T, key string, nodes []callers) []int64 {
	t.Helper()
	return servedOnPostgresAt(t, key, 10, nodes)
}

// servedOnPostgresAt is servedOnPostgres on a key held at limit.
func servedOnPostgresAt(t *testing.T, key string, limit int, nodes []callers) []int64 {
	t.Helper()
	c := postgresCoordinator(t)
	require.NoError(t, c.CreateKey(t.Context(), key, &limit, &limit))
	lim := adaptive.Config{InitialLimit: limit, MaxQueued: 4}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	warm := time.Now().Add(time.Second)
	served := make([]atomic.Int64, len(nodes))
	var wg sync.WaitGroup
	started := make([]*fleet.Node, len(nodes))
	for i, nc := range nodes {
		n := startNode(t, c, nodeConfig(key, fmt.Sprintf("n%d", i), lim))
		started[i] = n
		r := adaptive.Request{Priority: adaptive.DefaultPriority, Weight: nc.weight}
		for range nc.count {
			wg.Go(func() {
				for ctx.Err() == nil {
					le, err := n.AcquireRequest(ctx, r)
					if err != nil {
						time.Sleep(time.Millisecond)
						continue
					}
					if time.Now().After(warm) {
						served[i].Add(1)
					}
					time.Sleep(5 * time.Millisecond)
					le.Release()
				}
			})
		}
	}
	var trace []string
	wg.Go(func() { trace = traceNodes(ctx, started) })
	wg.Wait()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node states, every %v:\n%s", heartbeat/2, strings.Join(trace, "\n"))
		}
	})
	out := make([]int64, len(nodes))
	for i := range served {
		out[i] = served[i].Load()
	}
	return out
}

// traceNodes samples every node's state each half heartbeat until ctx
// ends, one line per sample: a split that starves a node shows in who
// held which share, with what in flight and admitting how much, when; a
// node fenced by late heartbeats shows as such.
func traceNodes(ctx context.Context, nodes []*fleet.Node) []string {
	start := time.Now()
	var lines []string
	for ctx.Err() == nil {
		line := fmt.Sprintf("%5.2fs", time.Since(start).Seconds())
		for _, n := range nodes {
			s := n.State()
			line += fmt.Sprintf(" %s{share=%d limit=%d est=%.1f in=%d L=%d waiting=%d fenced=%t outage=%t beat=%v ago}",
				n.ID(), s.Share, s.Limit, s.Estimate, s.Inflight, s.LGlobal, s.Waiting,
				s.Fenced, s.Outage, time.Since(s.LastHeartbeat).Round(time.Millisecond))
		}
		lines = append(lines, line)
		select {
		case <-ctx.Done():
		case <-time.After(heartbeat / 2):
		}
	}
	return lines
}
