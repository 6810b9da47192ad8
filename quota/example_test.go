package quota_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fleetlimit/fleetlimit/quota"
)

// A response from OpenAI whose requests-per-minute quota is used up for the
// next 300 ms.
func ExampleParse() {
	received := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "300ms")
	h.Set("x-ratelimit-limit-tokens", "30000")
	h.Set("x-ratelimit-remaining-tokens", "29200")
	h.Set("x-ratelimit-reset-tokens", "1.6s")

	info := quota.Parse(h, received)
	for _, p := range info.Policies {
		fmt.Printf("%s %s: %d of %d left, reset in %v\n", p.Source, p.Unit, p.Remaining, p.Limit, p.Reset.Sub(received))
	}
	if until, ok := info.Exhausted(received); ok {
		fmt.Println("nothing left for", until.Sub(received))
	}
	// Output:
	// openai requests: 0 of 500 left, reset in 300ms
	// openai tokens: 29200 of 30000 left, reset in 1.6s
	// nothing left for 300ms
}

// The IETF fields: two policies, the per-minute one reported.
func ExampleParse_ietf() {
	received := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("RateLimit-Policy", `"permin";q=50;w=60, "perhr";q=1000;w=3600`)
	h.Set("RateLimit", `"permin";r=0;t=12`)

	info := quota.Parse(h, received)
	for _, p := range info.Policies {
		fmt.Printf("%s %q: %d %s per %v, %d left\n", p.Source, p.Name, p.Limit, p.Unit, p.Window, p.Remaining)
	}
	until, _ := info.Exhausted(received)
	fmt.Println("nothing left for", until.Sub(received))
	// Output:
	// ietf "permin": 50 requests per 1m0s, 0 left
	// ietf "perhr": 1000 requests per 1h0m0s, -1 left
	// nothing left for 12s
}
