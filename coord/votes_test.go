package coord_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// TestFallKeepsItsVoters, on Memory and on Postgres: a fall of L_global
// does not lose the votes that made it. Under min, four busy nodes at 6
// each of 24; a measures 3, and L_global falls to 3. The others' requests
// still hold the key, so a is granted 0, and once its own requests have
// ended it reports no share and nothing in flight. Were its vote lost
// then, the next fold, over the others alone, would give 24 again. It
// keeps its vote while it wants capacity, and loses it once it wants
// nothing; a node that never measured does not vote.
func TestFallKeepsItsVoters(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, c coordinator, _ *fakeClock) {
		ctx := context.Background()
		limit := 24
		require.NoError(t, c.CreateKey(ctx, "k", nil, &limit))
		require.NoError(t, c.SetAggregate(ctx, "k", coord.AggregateMin))
		type node struct {
			seq, epoch, gen int64
			share           int
		}
		busy := func(n *node) int {
			if n == nil {
				return 0
			}
			return n.share
		}
		nodes := map[string]*node{}
		beat := func(id string, lLocal, inflight, demand int) coord.Grant {
			t.Helper()
			n := nodes[id]
			if n == nil {
				n = &node{}
				nodes[id] = n
			}
			n.seq++
			r := rep(id, n.seq, lLocal, inflight, demand, n.gen)
			r.Epoch = n.epoch
			g, err := c.Heartbeat(ctx, r)
			require.NoError(t, err)
			n.epoch, n.gen, n.share = g.Epoch, g.Generation, g.Share
			return g
		}
		ids := []string{"a", "b", "c", "d"}
		for range 4 {
			for _, id := range ids {
				beat(id, 24, busy(nodes[id]), 10)
			}
		}
		for _, id := range ids {
			require.Equal(t, 6, nodes[id].share, "%s: the split of 24 among four", id)
		}

		g := beat("a", 3, 6, 10)
		require.Equal(t, 3, g.LGlobal, "a measured 3")
		for _, id := range ids[1:] {
			require.Equal(t, 3, beat(id, 24, 6, 10).LGlobal, "%s: its requests run on", id)
		}
		g = beat("a", 3, 0, 10)
		require.Zero(t, g.Share, "the others' requests hold the key")
		require.Equal(t, 3, g.LGlobal, "a keeps its vote with no share and nothing in flight")
		for _, id := range ids[1:] {
			require.Equal(t, 3, beat(id, 24, 0, 10).LGlobal, "%s: a still votes", id)
		}
		require.Equal(t, 3, beat("e", 1, 0, 10).LGlobal, "a joiner does not vote")

		beat("a", 3, 0, 0)
		require.Equal(t, 24, beat("b", 24, 0, 10).LGlobal, "a wants nothing: its vote is gone")
	})
}
