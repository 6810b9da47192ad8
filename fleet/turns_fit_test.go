package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// reportCoord counts, after a start time, the reports of the nodes in
// steady that ask for nothing.
type reportCoord struct {
	coord.Coordinator
	from   time.Time
	steady map[string]bool
	zero   atomic.Int64
}

func (c *reportCoord) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	if c.steady[r.NodeID] && r.Demand == 0 && time.Now().After(c.from) {
		c.zero.Add(1)
	}
	return c.Coordinator.Heartbeat(ctx, r)
}

// TestNoTurnsWhileTheFloorsFit: 12 nodes under an L_global of 20, so
// every node's floor of 1 fits. A busy node of 30 callers takes what the
// floors leave; 8 steady nodes of one busy caller each hold a share of 1;
// 3 nodes whose callers come and go (60 ms on, 140 ms off) are granted 0
// for a heartbeat or two each time they come back, while the busy node's
// reserve drains. Those are not nodes the key cannot hold, and no steady
// node gives its turn to them: its reports never ask for nothing. Before,
// the steady nodes gave about 50 turns in 5 s, and served 5–13 % less
// than their peers' floor.
func TestNoTurnsWhileTheFloorsFit(t *testing.T) {
	t.Parallel()
	bubble.Test(t, noTurnsWhileTheFloorsFit)
}

// noTurnsWhileTheFloorsFit is TestNoTurnsWhileTheFloorsFit in a bubble:
// in real time a loaded machine held a steady node's one caller back for
// a whole heartbeat now and then, and its report asked for nothing.
func noTurnsWhileTheFloorsFit(t *testing.T) {
	steady := map[string]bool{}
	for i := 1; i <= 8; i++ {
		steady[fmt.Sprintf("n%d", i)] = true
	}
	c := &reportCoord{Coordinator: coord.NewMemory(nil), from: time.Now().Add(time.Second), steady: steady}
	limits := adaptive.Config{InitialLimit: 20, MinLimit: 20, MaxLimit: 20, MaxQueued: 40}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	for i := range 12 {
		cfg := testConfig("k", fmt.Sprintf("n%d", i))
		cfg.Limiter = limits
		n := startNode(t, c, cfg)
		switch {
		case i == 0:
			for range 30 {
				callerLoop(ctx, &wg, n, 1, false, nil)
			}
		case steady[cfg.NodeID]:
			callerLoop(ctx, &wg, n, 1, false, nil)
		default:
			for range 2 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if ph := time.Since(start) % (200 * time.Millisecond); ph >= 60*time.Millisecond {
							time.Sleep(200*time.Millisecond - ph)
							continue
						}
						le, err := n.Acquire(ctx)
						if err != nil {
							continue
						}
						time.Sleep(5 * time.Millisecond)
						le.Release()
					}
				})
			}
		}
	}
	<-ctx.Done()
	wg.Wait()
	require.Zero(t, c.zero.Load(), "steady nodes asked for nothing: they gave turns though every floor fits")
}
