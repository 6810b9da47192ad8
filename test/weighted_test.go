package test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/fleet"
)

// weightedWorker is a worker's loop on n: it acquires with weight w, holds
// the slot for hold — counting w in upstream while it does, as the
// upstream would see it — and releases it, counting the completed
// request's weight in done.
func weightedWorker(n *fleet.Node, w int, hold time.Duration, upstream *highWater, done *atomic.Int64) func(context.Context) {
	return func(ctx context.Context) {
		le, err := n.Acquire(fleet.WithWeight(ctx, w))
		if err != nil {
			sleep(ctx, time.Millisecond)
			return
		}
		upstream.add(w)
		sleep(ctx, hold)
		upstream.add(-w)
		le.Release()
		done.Add(int64(w))
	}
}

// highWater is a count whose highest value is kept.
type highWater struct{ now, high atomic.Int64 }

func (h *highWater) add(d int) {
	v := h.now.Add(int64(d))
	for {
		high := h.high.Load()
		if v <= high || h.high.CompareAndSwap(high, v) {
			return
		}
	}
}

// TestSharesFollowWeightedDemand: two nodes on Postgres with equal
// numbers of workers, so equal request counts, but node a's requests
// weigh 4 and node b's 1. Demand is reported in weight units — 160
// against 40 — so the coordinator splits L_global = 100 about 4:1 (the
// targets are 1 + ⌈98·160/200⌉ = 80 and 1 + ⌈98·40/200⌉ = 21, and the
// occupancy cap gives whichever asks last what the other leaves, so a's
// share is 79 or 80): both nodes then run about 20 requests at once — a's
// share holds ⌊share/4⌋ of its requests, 19 or 20. The weight and the
// requests each node completed follow what its shares held, sampled
// every 5 ms, not the 4:1 of the shares themselves, which a share of 79
// cannot fill with requests of 4. The shares are read from the nodes, the
// weight each node's requests held from the workers, outside the nodes;
// the weight held at once, summed over both nodes from outside, never
// passes L_global.
func TestSharesFollowWeightedDemand(t *testing.T) {
	t.Parallel()
	const (
		limit   = 100
		workers = 40
		hold    = 50 * time.Millisecond
		window  = 2 * time.Second
	)
	c := postgresCoordinator(t)
	a := startNode(t, c, nodeConfig("weighted", "heavy", fixedLimit(limit)))
	b := startNode(t, c, nodeConfig("weighted", "light", fixedLimit(limit)))
	var upstream highWater
	var doneA, doneB atomic.Int64
	loadA := startLoad(workers, weightedWorker(a, 4, hold, &upstream, &doneA))
	defer loadA.stop()
	loadB := startLoad(workers, weightedWorker(b, 1, hold, &upstream, &doneB))
	defer loadB.stop()

	nodes := []*fleet.Node{a, b}
	shareRatio := func() float64 { return float64(a.State().Share) / float64(max(b.State().Share, 1)) }
	require.Eventually(t, func() bool { r := shareRatio(); return r >= 3.6 && r <= 4.4 }, 15*time.Second, 10*time.Millisecond,
		"the shares never reached 4:1:%s", ids(nodes))

	// Measure over a window: the mean of the shares, sampled every 5 ms,
	// and the weight each node's requests held.
	var samples, sumA, sumB, sumGlobal, heldA, heldB atomic.Int64
	startA, startB := doneA.Load(), doneB.Load()
	s := sample(func() {
		sa, sb := a.State(), b.State()
		samples.Add(1)
		sumA.Add(int64(sa.Share))
		sumB.Add(int64(sb.Share))
		sumGlobal.Add(int64(sa.LGlobal))
		heldA.Add(int64(sa.Share / 4)) // requests of weight 4 the share holds
		heldB.Add(int64(min(sb.Share, workers)))
	})
	time.Sleep(window)
	s.stop()
	weightA, weightB := doneA.Load()-startA, doneB.Load()-startB
	loadA.stop()
	loadB.stop()

	n := float64(samples.Load())
	meanA, meanB, meanGlobal := float64(sumA.Load())/n, float64(sumB.Load())/n, float64(sumGlobal.Load())/n
	heldRatio := float64(heldA.Load()) / float64(heldB.Load()) // requests the shares held at once, a ÷ b
	t.Logf("over %v: mean shares %.1f and %.1f of L_global %.1f (ratio %.2f); weight completed %d and %d "+
		"(ratio %.2f), requests %d and %d (ratio %.2f, the shares held %.2f); most weight held at once %d",
		window, meanA, meanB, meanGlobal, meanA/meanB, weightA, weightB, float64(weightA)/float64(weightB),
		weightA/4, weightB, float64(weightA/4)/float64(weightB), heldRatio, upstream.high.Load())
	require.Equal(t, float64(limit), meanGlobal)
	require.InEpsilon(t, 4.0, meanA/meanB, 0.10, "shares follow weighted demand")
	require.InDelta(t, limit, meanA+meanB, 2, "the shares add up to L_global")
	// a's weight is 4 per request, so this is the weight served too.
	require.InEpsilon(t, heldRatio, float64(weightA/4)/float64(weightB), 0.10, "requests and weight served follow what the shares held")
	require.LessOrEqual(t, upstream.high.Load(), int64(limit), "Σ weight in flight ≤ L_global")
}
