package pace_test

import (
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/pace"
)

// A node learns its request rate from 429s and paces requests and tokens
// to it, settling each request's estimate by the usage the response
// reports.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	learner, err := pace.NewLearner(pace.LearnerConfig{SeedRate: pace.PerMinute(600)}, now) // start at 10 req/s
	if err != nil {
		panic(err)
	}
	pacer, err := pace.New(pace.Config{RequestRate: learner.Rate(now), TokenRate: pace.PerMinute(60_000)}, now)
	if err != nil {
		panic(err)
	}

	// A request estimated at 800 tokens (its prompt and max_tokens).
	ticket, delay, err := pacer.Reserve(now, 800)
	if err != nil {
		panic(err)
	}
	fmt.Println("send after", delay)
	// The response: 429, and a usage of 1,200 tokens charged all the same.
	learner.Record(now, true)
	if err := pacer.Settle(now, ticket, 1200); err != nil {
		panic(err)
	}
	_, tokens := pacer.Levels(now)
	fmt.Println("tokens left:", tokens)

	// The check period ends with 100% errors: the rate is cut by 1.5.
	now = now.Add(5 * time.Second)
	rate := learner.Rate(now)
	if err := pacer.SetRate(now, rate, pace.PerMinute(60_000)); err != nil {
		panic(err)
	}
	check, _ := learner.LastCheck(now)
	fmt.Printf("%s to %.2f req/s; store %.2f for the next run's WarmRate\n", check.Action, rate, rate)
	// Output:
	// send after 0s
	// tokens left: -200
	// decreased to 6.67 req/s; store 6.67 for the next run's WarmRate
}
