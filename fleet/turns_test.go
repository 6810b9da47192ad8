package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// Two nodes whose every request weighs 6 under an L_global of 10: the
// split gives each 5 while both wait, which holds neither (before: 4-5
// and 0 served in 3 s). A node that waits with nothing in flight for a
// weight its share cannot hold steps aside after its turn, or at random,
// so the nodes take turns: both are served.
func TestHeavyWaitersTakeTurns(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 10}
	var served [2]atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, id := range []string{"a", "b"} {
		cfg := testConfig("k", id)
		cfg.Limiter = limits
		n := startNode(t, mem, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				le, err := n.AcquireRequest(ctx, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 6})
				if err != nil {
					continue
				}
				served[i].Add(1)
				time.Sleep(5 * time.Millisecond)
				le.Release()
			}
		}()
	}
	wg.Wait()
	a, b := served[0].Load(), served[1].Load()
	t.Logf("served: a %d, b %d", a, b)
	require.GreaterOrEqual(t, a, int64(5), "a was served")
	require.GreaterOrEqual(t, b, int64(5), "b was served")
}
