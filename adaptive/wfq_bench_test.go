package adaptive

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/handoff"
)

var queueSizes = []int{10, 1000, 100000}

// BenchmarkQueue measures the admission queue itself, with the given
// number of waiters resident at random priorities and weights: one op of
// "push+pop" queues a waiter and admits the head; one op of "push+remove"
// queues a waiter and takes it out again (a cancellation or a timeout);
// one op of "evict" is a full queue choosing the waiter that an arrival
// at priority 255 evicts, evicting it, and queueing it again.
func BenchmarkQueue(b *testing.B) {
	for _, n := range queueSizes {
		b.Run(fmt.Sprintf("push+pop/waiters=%d", n), func(b *testing.B) {
			q, pool := residentQueue(n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w := pool[i%len(pool)]
				i++
				q.push(w)
				pool[(i-1)%len(pool)] = q.pop()
			}
		})
		b.Run(fmt.Sprintf("push+remove/waiters=%d", n), func(b *testing.B) {
			q, pool := residentQueue(n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w := pool[i%len(pool)]
				i++
				q.push(w)
				q.remove(w)
			}
		})
		b.Run(fmt.Sprintf("evict/waiters=%d", n), func(b *testing.B) {
			q, _ := residentQueue(n)
			b.ReportAllocs()
			for b.Loop() {
				worst := q.worse(255, cost(255, 1))
				if worst == nil {
					b.Fatal("nothing to evict")
				}
				q.remove(worst)
				q.push(worst) // back in line, so the queue stays as it was
			}
		})
	}
}

// residentQueue returns a queue holding n waiters of random priorities
// below 255 and weights 1–4, and 64 spare waiters.
func residentQueue(n int) (*wfq, []*waiter) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := &wfq{heads: make([]head, 0, 256)}
	for range n {
		q.push(newQueueWaiter(uint8(rng.IntN(255)), 1+rng.IntN(4)))
	}
	pool := make([]*waiter, 64)
	for i := range pool {
		pool[i] = newQueueWaiter(uint8(rng.IntN(255)), 1+rng.IntN(4))
	}
	return q, pool
}

// BenchmarkQueueHandoff measures the whole waiting path through
// AcquireRequest: waiters+1 goroutines at assorted priorities loop on
// AcquireRequest and Release under a limit of 1, so about waiters of them
// are queued at any time and every op is one freed slot handed to the
// queue's head, which wakes, releases and queues again. allocs/op is the
// allocation per waiting request. "timeout" sets Config.TimeoutFactor, so
// every wait also arms and stops a timer.
func BenchmarkQueueHandoff(b *testing.B) {
	for _, n := range queueSizes {
		for _, timeout := range []time.Duration{0, time.Hour} {
			name := fmt.Sprintf("waiters=%d", n)
			if timeout > 0 {
				name += "/timeout"
			}
			b.Run(name, func(b *testing.B) {
				l, err := New(Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: n + 1, TimeoutFactor: timeout})
				if err != nil {
					b.Fatal(err)
				}
				handoff.Bench(b, n+1, func(i int) func() error {
					r := Request{Priority: uint8(i % 256), Weight: 1}
					return func() error {
						le, err := l.AcquireRequest(context.Background(), r)
						if err != nil {
							return err
						}
						le.Release()
						return nil
					}
				})
			})
		}
	}
}
