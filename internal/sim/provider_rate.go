package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// parseTokens reads ?tokens=N, the token cost a request states. It is 0
// when absent, and not read at all without a RateLimit.
func (p *Provider) parseTokens(r *http.Request) (int64, error) {
	if p.rate == nil {
		return 0, nil
	}
	v := r.URL.Query().Get("tokens")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > MaxRequestTokens {
		return 0, fmt.Errorf("sim: tokens must be an integer in [0, %d], got %q", int64(MaxRequestTokens), v)
	}
	return n, nil
}

// admitRate puts a request through the rate quota, setting the
// x-ratelimit-* headers when asked. A refused request is answered 429 here
// and admitRate returns false.
func (p *Provider) admitRate(w http.ResponseWriter, client string, tokens int64) bool {
	p.mu.Lock()
	d := p.rate.Admit(p.clock.Now(), tokens)
	cs := p.clientLocked(client)
	if d.Admitted {
		p.rateTokens += tokens
		cs.Tokens += tokens
	} else {
		p.rateLimited++
		cs.RateLimited++
	}
	p.mu.Unlock()

	rl, h := p.cfg.RateLimit, w.Header()
	if rl.Headers {
		setRateHeaders(h, d)
	}
	switch {
	case d.Admitted:
		return true
	case d.TooLarge:
		http.Error(w, fmt.Sprintf("sim: request of %d tokens exceeds the token quota %d", tokens, d.Quota.Tokens), http.StatusTooManyRequests)
	default:
		if rl.RetryAfter {
			h.Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
		}
		http.Error(w, "sim: rate limited", http.StatusTooManyRequests)
	}
	return false
}

// setRateHeaders sets OpenAI's x-ratelimit-* headers for each limited
// dimension of d.Quota.
func setRateHeaders(h http.Header, d RateDecision) {
	if q := d.Quota.Requests; q > 0 {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(q, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(max(0, q-d.Used.Requests), 10))
		h.Set("x-ratelimit-reset-requests", ceilMillis(d.ResetRequests).String())
	}
	if q := d.Quota.Tokens; q > 0 {
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(q, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(max(0, q-d.Used.Tokens), 10))
		h.Set("x-ratelimit-reset-tokens", ceilMillis(d.ResetTokens).String())
	}
}

func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// clientLocked returns the counts of client, creating them. The caller
// holds p.mu.
func (p *Provider) clientLocked(client string) *ClientStats {
	cs := p.clients[client]
	if cs == nil {
		cs = &ClientStats{}
		p.clients[client] = cs
	}
	return cs
}

// RateStats returns a snapshot of the rate accounting at the clock's now:
// the quota, what the sliding window holds, and the counts per window. It
// is the zero RateStats without ProviderConfig.RateLimit.
func (p *Provider) RateStats() RateStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate == nil {
		return RateStats{}
	}
	return p.rate.Stats(p.clock.Now())
}

// SetRateQuota replaces the rate quota schedule with q from now on (see
// RateWindow.SetQuota). It panics if a field of q is negative or the
// provider was built without ProviderConfig.RateLimit.
func (p *Provider) SetRateQuota(q RateQuota) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate == nil {
		panic("sim: Provider.SetRateQuota called on a provider without RateLimit")
	}
	p.rate.SetQuota(p.clock.Now(), q)
}
