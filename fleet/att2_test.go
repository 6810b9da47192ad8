package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
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

// Light-only fleet: no report asks for nothing while callers wait.
func TestAtt2LightOnlyNeverAsksForNothing(t *testing.T) {
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

// Two nodes each with one heavy (weight 6) caller that waits, and a
// sparse stream of light (weight 1, 2 ms) requests. How long do the
// light requests wait?
func TestAtt2LightWaitOnHeavyNodes(t *testing.T) {
	for _, heavy := range []bool{false, true} {
		mem := coord.NewMemory(nil)
		limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 100}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var waits []time.Duration
		var heavyServed atomic.Int64
		for i := range 2 {
			cfg := testConfig("k", fmt.Sprintf("h%v%d", heavy, i))
			cfg.Limiter = limits
			n := startNode(t, mem, cfg)
			if heavy {
				wg.Go(func() {
					r := adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 6}
					for ctx.Err() == nil {
						le, err := n.AcquireRequest(ctx, r)
						if err != nil {
							time.Sleep(2 * time.Millisecond)
							continue
						}
						heavyServed.Add(1)
						time.Sleep(5 * time.Millisecond)
						le.Release()
					}
				})
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					start := time.Now()
					le, err := n.Acquire(ctx)
					if err != nil {
						continue
					}
					mu.Lock()
					waits = append(waits, time.Since(start))
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					le.Release()
					time.Sleep(25 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		cancel()
		sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
		over := 0
		for _, w := range waits {
			if w > 20*time.Millisecond {
				over++
			}
		}
		t.Logf("heavy callers %v: heavy served %d; light served %d, wait p50 %v p90 %v max %v, %d over 20ms",
			heavy, heavyServed.Load(), len(waits), waits[len(waits)/2], waits[len(waits)*9/10], waits[len(waits)-1], over)
	}
}

// Learning mode caps a share at what the node proves it holds (its
// in-flight, or the share this epoch already granted it). A node that
// steps aside during learning is granted 0, and with nothing in flight it
// can prove nothing more: it stays at 0, its light callers too, until
// learning ends (LeaseTTL + MaxRequestDuration: 5 minutes by default).
func TestAtt2StepAsideDuringLearning(t *testing.T) {
	mem := coord.NewMemory(nil)
	limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 100}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	nodes := make([]*Node, 2)
	var lightServed [2]atomic.Int64
	var learning atomic.Bool
	var lightInLearning [2]atomic.Int64
	for i := range 2 {
		cfg := testConfig("k", fmt.Sprintf("n%d", i))
		cfg.Limiter = limits
		cfg.MaxRequestDuration = 3 * time.Second // learning lasts LeaseTTL + 3 s
		n := startNode(t, mem, cfg)
		nodes[i] = n
		wg.Go(func() {
			r := adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 6}
			for ctx.Err() == nil {
				le, err := n.AcquireRequest(ctx, r)
				if err != nil {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				time.Sleep(5 * time.Millisecond)
				le.Release()
			}
		})
		wg.Go(func() {
			for ctx.Err() == nil {
				le, err := n.Acquire(ctx)
				if err != nil {
					continue
				}
				lightServed[i].Add(1)
				if learning.Load() {
					lightInLearning[i].Add(1)
				}
				time.Sleep(30 * time.Millisecond)
				le.Release()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("before relearn: light served %d, %d", lightServed[0].Load(), lightServed[1].Load())
	_, err := mem.Relearn(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	learning.Store(true)
	var zero, lost [2]int
	var had [2]bool
	samples := 0
	for range 100 { // 2 s of learning
		time.Sleep(20 * time.Millisecond)
		samples++
		for i, n := range nodes {
			if n.State().Share == 0 {
				zero[i]++
				if had[i] {
					lost[i]++
				}
			} else {
				had[i] = true
			}
		}
	}
	learning.Store(false)
	t.Logf("during 2 s of learning: light served %d, %d; share 0 in %d, %d of %d samples, after a share > 0 in %d, %d",
		lightInLearning[0].Load(), lightInLearning[1].Load(), zero[0], zero[1], samples, lost[0], lost[1])
	cancel()
	wg.Wait()
	// A node granted nothing at its first report in learning mode (it had
	// nothing in flight) stays at 0 by the learning rule; but one that held
	// a share in learning mode must not give it up by stepping aside.
	if lightInLearning[0].Load()+lightInLearning[1].Load() == 0 {
		t.Errorf("no node served a light request in 2 s of learning mode")
	}
	for i := range 2 {
		if lost[i] > 0 {
			t.Errorf("node %d lost its learning-mode share: 0 in %d samples after holding one", i, lost[i])
		}
	}
}
