package adaptive_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

func Example() {
	limiter, err := adaptive.New(adaptive.Config{InitialLimit: 10, MaxQueued: 100})
	if err != nil {
		panic(err)
	}

	lease, err := limiter.Acquire(context.Background())
	if errors.Is(err, adaptive.ErrQueueFull) || errors.Is(err, adaptive.ErrPaused) {
		return // shed the request
	}
	if err != nil {
		return // the context ended
	}
	overloaded := false // the upstream's answer: a 429, a 503, a timeout
	if overloaded {
		lease.Drop()
	} else {
		lease.Release()
	}
	fmt.Println(limiter.Limit(), limiter.Inflight())
	// Output: 10 0
}

func ExampleLimiter_SetCeiling() {
	limiter, _ := adaptive.New(adaptive.Config{InitialLimit: 50})
	limiter.SetCeiling(0) // no grant yet: admit nothing
	_, ok := limiter.TryAcquire()
	fmt.Println(ok, limiter.Limit())

	limiter.SetCeiling(8) // this node's share of the fleet's limit
	limiter.SetPeerInflight(30)
	fmt.Println(limiter.Limit())
	// Output:
	// false 0
	// 8
}
