package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// zeroWatch counts reports that ask for nothing while their node has
// callers queued.
type zeroWatch struct {
	coord.Coordinator
	mu    sync.Mutex
	nodes map[string]*Node
	bad   []string
	total atomic.Int64
}

func (z *zeroWatch) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	z.total.Add(1)
	z.mu.Lock()
	n := z.nodes[r.NodeID]
	z.mu.Unlock()
	if n != nil && r.Demand == 0 {
		if s := n.State(); s.Queued > 0 && !n.stopped() {
			z.mu.Lock()
			z.bad = append(z.bad, fmt.Sprintf("%s seq %d: demand 0, queued %d, share %d", r.NodeID, r.Seq, s.Queued, s.Share))
			z.mu.Unlock()
		}
	}
	return z.Coordinator.Heartbeat(ctx, r)
}

// A fleet of light requests (weight 1, mixed priorities, polling and
// queued callers, drops) never steps aside: no report asks for nothing
// while the node has callers queued.
func TestLightNodesNeverAskForNothing(t *testing.T) {
	t.Parallel()
	z := &zeroWatch{Coordinator: coord.NewMemory(nil), nodes: map[string]*Node{}}
	limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 100}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		cfg := testConfig("k", fmt.Sprintf("n%d", i))
		cfg.Limiter = limits
		n := startNode(t, z, cfg)
		z.mu.Lock()
		z.nodes[cfg.NodeID] = n
		z.mu.Unlock()
		for g := range 6 {
			wg.Go(func() {
				for ctx.Err() == nil {
					// bursts then idle, mixed priorities
					r := adaptive.Request{Priority: uint8(rand.IntN(3) * 50), Weight: 1}
					var le Lease
					var err error
					if g%3 == 0 {
						le, err = n.TryAcquireRequest(r)
					} else {
						le, err = n.AcquireRequest(ctx, r)
					}
					if err == nil {
						time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
						if rand.IntN(20) == 0 {
							le.Drop()
						} else {
							le.Release()
						}
					}
					time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d reports, %d asked for nothing with callers queued", z.total.Load(), len(z.bad))
	for _, b := range z.bad[:min(len(z.bad), 10)] {
		t.Log(b)
	}
	if len(z.bad) > 0 {
		t.Fail()
	}
}
