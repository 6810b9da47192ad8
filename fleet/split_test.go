package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// TestEveryNodeWithDemandIsAdmitted: n nodes, each with one caller sending
// one request after another (demand 1), under an L_global that leaves a
// rest R = L_global − n smaller than n to split. The targets add up to exactly L_global, so every
// node gets a share of at least 1 and admits; rounded up, every target
// was 2 and the last node to ask was held at 0 for good.
func TestEveryNodeWithDemandIsAdmitted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ l, nodes int }{{10, 6}, {4, 3}} {
		t.Run(fmt.Sprintf("L%d_nodes%d", tc.l, tc.nodes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := coord.NewMemory(nil)
				l := tc.l
				require.NoError(t, mem.CreateKey(t.Context(), "k", nil, &l))
				nodes := make([]*Node, tc.nodes)
				for i := range nodes {
					cfg := Config{Key: "k", NodeID: fmt.Sprintf("n%d", i), Logger: quiet,
						Limiter: adaptive.Config{InitialLimit: 10, MaxQueued: 16}}
					nodes[i] = startNode(t, mem, cfg)
					time.Sleep(100 * time.Millisecond)
				}
				until := time.Now().Add(20 * time.Second)
				admitted := make([]atomic.Int64, tc.nodes)
				var wg sync.WaitGroup
				for i, n := range nodes {
					wg.Go(func() {
						for time.Now().Before(until) {
							ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
							le, err := n.Acquire(ctx)
							cancel()
							if err != nil {
								continue
							}
							admitted[i].Add(1)
							time.Sleep(100 * time.Millisecond)
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
				require.LessOrEqual(t, sum, tc.l)
			})
		})
	}
}

// TestMoreNodesThanLGlobalTakeTurns: more nodes want capacity than the
// key's L_global holds, so their floors of 1 add up to more than it. The
// nodes that held a slot kept it for as long as their callers stayed
// busy and the others were never admitted (12 nodes under 10: two served
// 0 while the rest served about 700 each in 4 s; 3 nodes under 1: two
// served 0). Holders now give their turn to the waiting nodes, and every
// node is served a fair part.
func TestMoreNodesThanLGlobalTakeTurns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, nodes int }{{10, 12}, {1, 3}, {3, 4}} {
		t.Run(fmt.Sprintf("L%d_nodes%d", tc.limit, tc.nodes), func(t *testing.T) {
			t.Parallel()
			const d = 6 * time.Second
			r := newRigAt(t, tc.limit, tc.nodes, 10, d, d/3)
			served := make([]atomic.Int64, tc.nodes)
			for i := range tc.nodes {
				r.callers(i, 2, 1, &served[i])
			}
			r.run()
			var sum int64
			counts := make([]int64, tc.nodes)
			for i := range served {
				counts[i] = served[i].Load()
				sum += counts[i]
			}
			t.Logf("served %v", counts)
			mean := sum / int64(tc.nodes)
			for i, c := range counts {
				require.Greater(t, 4*c, mean, "node %d served %d, a quarter of the mean is %d", i, c, mean/4)
			}
		})
	}
}
