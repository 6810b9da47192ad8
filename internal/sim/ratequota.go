package sim

import (
	"errors"
	"fmt"
	"time"
)

// MaxRequestTokens is the largest token cost a request may state with
// ?tokens=N.
const MaxRequestTokens = 1 << 40

// HeaderUsageTokens is the response header in which a rate-limited
// Provider with RateLimit.Usage reports the tokens an accepted request
// was charged, for a client to settle its estimate by.
const HeaderUsageTokens = "X-Sim-Usage-Tokens"

// RateQuota is a rate limit over one sliding window: at most Requests
// requests and at most Tokens tokens accepted in any window. A zero field
// leaves that dimension unlimited. A RateQuota is a plain value, safe to
// copy.
type RateQuota struct {
	Requests int64
	Tokens   int64
}

// QuotaStep is one stage of a RateLimit's Quota schedule: from At after the
// provider started, the quota is Quota.
type QuotaStep struct {
	At    time.Duration
	Quota RateQuota
}

// RateUsage counts requests and the tokens they stated.
type RateUsage struct {
	Requests int64
	Tokens   int64
}

// RateLimit configures the rate quotas a Provider enforces on top of its
// concurrency capacity (ProviderConfig.RateLimit), as an LLM provider's
// requests- and tokens-per-minute limits do. Only Quota is required; zero
// values of the other fields take the defaults stated on each.
type RateLimit struct {
	// Window is the length of the sliding window the quota applies to: a
	// request accepted at t counts against every admission in [t, t+Window).
	// Must be >= 0. Defaults to one minute.
	Window time.Duration
	// Quota is the quota over time, measured on the provider's Clock from
	// when the provider was created. Required: non-empty, starting At 0,
	// with strictly increasing At and fields >= 0. The slice is copied.
	Quota []QuotaStep
	// RetryAfter adds Retry-After to a rate-limited 429: whole seconds,
	// rounded up, until the request would fit if nothing else were
	// accepted meanwhile. A request whose tokens exceed the token quota
	// fits never and gets none.
	RetryAfter bool
	// Headers adds OpenAI's x-ratelimit-{limit,remaining,reset}-requests
	// and -tokens to every response that reached the rate check, for each
	// limited dimension: the quota, what is left of it in the window after
	// this request, and how long until the window holds nothing (a Go
	// duration such as "1.5s", rounded up to the millisecond).
	Headers bool
	// Usage adds HeaderUsageTokens, the tokens the request was charged, to
	// every accepted response.
	Usage bool
}

// withDefaults returns rl with zero fields filled in, or an error naming
// the first invalid field.
func (rl RateLimit) withDefaults() (RateLimit, error) {
	if rl.Window < 0 {
		return rl, fmt.Errorf("sim: RateLimit.Window must be >= 0, got %v", rl.Window)
	}
	if rl.Window == 0 {
		rl.Window = time.Minute
	}
	if len(rl.Quota) == 0 {
		return rl, errors.New("sim: RateLimit.Quota needs at least one step")
	}
	if rl.Quota[0].At != 0 {
		return rl, fmt.Errorf("sim: RateLimit.Quota must start At 0, got %v", rl.Quota[0].At)
	}
	for i, s := range rl.Quota {
		if s.Quota.Requests < 0 || s.Quota.Tokens < 0 {
			return rl, fmt.Errorf("sim: RateLimit.Quota step %d must have Requests and Tokens >= 0, got %+v", i, s.Quota)
		}
		if i > 0 && s.At <= rl.Quota[i-1].At {
			return rl, fmt.Errorf("sim: RateLimit.Quota step %d At (%v) must be after step %d At (%v)", i, s.At, i-1, rl.Quota[i-1].At)
		}
	}
	rl.Quota = append([]QuotaStep(nil), rl.Quota...)
	return rl, nil
}
