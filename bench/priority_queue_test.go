package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/priority"
	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/handoff"
)

// BenchmarkPriorityQueueHandoff compares the waiting path of fleetlimit's
// weighted fair queue with failsafe-go's prioritized limiter
// (adaptivelimiter.BuildPrioritized), whose waiters queue FIFO in a
// container/list behind a priority threshold that a Prioritizer
// recalibrates: waiters+1 goroutines at assorted priorities loop on
// acquire and release under a limit of 1, so about waiters of them are
// queued at any time and every op is one freed slot handed to a waiter.
// allocs/op is the allocation per waiting request. Run it with
//
//	go test -run '^$' -bench PriorityQueueHandoff -benchmem
func BenchmarkPriorityQueueHandoff(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("fleetlimit/waiters=%d", n), func(b *testing.B) {
			l, err := adaptive.New(adaptive.Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: n + 1})
			if err != nil {
				b.Fatal(err)
			}
			handoff.Bench(b, n+1, func(i int) func() error {
				r := adaptive.Request{Priority: uint8(i % 256), Weight: 1}
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
		b.Run(fmt.Sprintf("failsafe/waiters=%d", n), func(b *testing.B) {
			l := adaptivelimiter.NewBuilder[any]().
				WithLimits(1, 1, 1).
				WithQueueing(float64(n+1), float64(n+1)).
				BuildPrioritized(adaptivelimiter.NewPrioritizer())
			handoff.Bench(b, n+1, func(i int) func() error {
				p := priority.Priority(i % 5)
				return func() error {
					permit, err := l.AcquirePermitWithPriority(context.Background(), p)
					if err != nil {
						return err
					}
					permit.Record()
					return nil
				}
			})
		})
	}
}
