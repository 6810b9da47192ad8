package adaptive_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// Requests at several priorities and weights wait for a limit of 2 that a
// batch job holds. When it ends, the freed room goes by weighted fair
// queueing on virtual finish times, cost = weight·(256 − priority): the
// chat requests (priority 250: cost 6 and 12) finish first, then search
// (priority 100: 156), then the report (priority 10, weight 2: 492).
func ExampleLimiter_AcquireRequest() {
	limiter, err := adaptive.New(adaptive.Config{InitialLimit: 2, MaxLimit: 2, MaxQueued: 16})
	if err != nil {
		panic(err)
	}
	batch, _ := limiter.TryAcquireRequest(adaptive.Request{Priority: 10, Weight: 2})

	var wg sync.WaitGroup
	for _, r := range []struct {
		name string
		adaptive.Request
	}{
		{"report", adaptive.Request{Priority: 10, Weight: 2}},
		{"search", adaptive.Request{Priority: 100, Weight: 1}},
		{"chat 1", adaptive.Request{Priority: 250, Weight: 1}},
		{"chat 2", adaptive.Request{Priority: 250, Weight: 2}},
	} {
		queued := limiter.Queued()
		wg.Go(func() {
			lease, err := limiter.AcquireRequest(context.Background(), r.Request)
			if err != nil {
				panic(err)
			}
			fmt.Printf("%s (priority %d, weight %d)\n", r.name, r.Priority, r.Weight)
			lease.Release()
		})
		for limiter.Queued() == queued {
			time.Sleep(time.Millisecond) // until it waits in the queue
		}
	}
	_, err = limiter.AcquireRequest(context.Background(), adaptive.Request{Priority: 255, Weight: 3})
	fmt.Println(err)

	batch.Release()
	wg.Wait()
	for _, s := range limiter.PriorityStats() {
		fmt.Printf("priority %d: admitted %d (weight %d), refused %d, waited %d\n",
			s.Priority, s.Admitted, s.AdmittedWeight, s.Refused, s.Waits)
	}
	// Output:
	// adaptive: request heavier than the limit: Request.Weight = 3 exceeds Config.MaxLimit = 2: it can never be admitted
	// chat 1 (priority 250, weight 1)
	// chat 2 (priority 250, weight 2)
	// search (priority 100, weight 1)
	// report (priority 10, weight 2)
	// priority 10: admitted 2 (weight 4), refused 0, waited 1
	// priority 100: admitted 1 (weight 1), refused 0, waited 1
	// priority 250: admitted 2 (weight 3), refused 0, waited 2
	// priority 255: admitted 0 (weight 0), refused 1, waited 0
}
