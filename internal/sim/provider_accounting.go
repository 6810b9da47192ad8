package sim

import "time"

// Stats is a snapshot of a Provider's accounting since it was created or
// last Reset.
type Stats struct {
	// Successes counts requests served to completion (200, whole body
	// written).
	Successes int64
	// Rejected counts 429s (429 mode only).
	Rejected int64
	// RateLimited counts 429s of the rate quota (ProviderConfig.RateLimit
	// only), and Tokens the tokens of the requests it accepted.
	RateLimited, Tokens int64
	// Canceled counts accepted requests abandoned before completion: the
	// client went away or the provider closed.
	Canceled int64
	// Current is the number of requests in flight now.
	Current int
	// MaxConcurrency is the largest in-flight count seen.
	MaxConcurrency int
	// Capacity is the capacity now.
	Capacity float64
	// OverCapacity is the total time during which the in-flight count
	// exceeded the capacity, integrated exactly on the provider's Clock.
	OverCapacity time.Duration
	// ModelSteps is how many steps a FollowModel capacity has taken since
	// the provider was created (not cleared by Reset).
	ModelSteps int
	// Clients holds the counts per value of the client header.
	Clients map[string]ClientStats
}

// ClientStats is the part of Stats that one client caused.
type ClientStats struct {
	Successes, Rejected, Canceled int64
	// RateLimited and Tokens are this client's part of Stats.RateLimited
	// and Stats.Tokens.
	RateLimited, Tokens int64
	// Current and MaxConcurrency are this client's in-flight counts.
	Current, MaxConcurrency int
}

// Stats returns a snapshot of the accounting, integrated up to the clock's
// now.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(p.clock.Now())
	s := Stats{
		Successes:      p.successes,
		Rejected:       p.rejected,
		RateLimited:    p.rateLimited,
		Tokens:         p.rateTokens,
		Canceled:       p.canceled,
		Current:        p.current,
		MaxConcurrency: p.maxConc,
		Capacity:       p.capacity,
		OverCapacity:   p.overCap,
		ModelSteps:     p.modelStep,
		Clients:        make(map[string]ClientStats, len(p.clients)),
	}
	for k, c := range p.clients {
		s.Clients[k] = *c
	}
	return s
}

// Reset clears the counters and the integrated over-capacity time. The
// requests still in flight stay counted in Current, and MaxConcurrency
// restarts from Current. The capacity schedule and a followed model go on
// unchanged. With a RateLimit it also clears the rate windows (see
// RateWindow.ResetStats); what the sliding window holds still counts
// against the quota.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(p.clock.Now())
	p.successes, p.rejected, p.canceled = 0, 0, 0
	p.rateLimited, p.rateTokens = 0, 0
	if p.rate != nil {
		p.rate.ResetStats(p.clock.Now())
	}
	p.overCap = 0
	p.maxConc = p.current
	for k, c := range p.clients {
		if c.Current == 0 {
			delete(p.clients, k)
			continue
		}
		*c = ClientStats{Current: c.Current, MaxConcurrency: c.Current}
	}
}

// advanceLocked integrates the accounting from p.last to now, applying
// every capacity change (Stepped stage, model second) that falls in
// between at its exact time. A now before p.last (a clock that went back)
// is treated as p.last. The loop runs once per change passed: a
// FollowModel provider idle for an hour takes 3600 model steps on its next
// event.
func (p *Provider) advanceLocked(now time.Time) {
	if now.Before(p.last) {
		now = p.last
	}
	for {
		next, ok := p.nextChangeLocked()
		if !ok || next.After(now) {
			break
		}
		p.integrateLocked(next)
		p.applyChangeLocked()
	}
	p.integrateLocked(now)
}

// nextChangeLocked returns when the capacity next changes on its own.
func (p *Provider) nextChangeLocked() (time.Time, bool) {
	switch {
	case len(p.steps) > 0:
		return p.start.Add(p.steps[0].At), true
	case p.model != nil:
		return p.secStart.Add(time.Second), true
	}
	return time.Time{}, false
}

func (p *Provider) applyChangeLocked() {
	switch {
	case len(p.steps) > 0:
		p.capacity = float64(p.steps[0].Capacity)
		p.steps = p.steps[1:]
	case p.model != nil:
		p.model.step(float64(p.secBusy) / float64(time.Second)) // mean in-flight over the second
		p.modelStep++
		p.capacity = p.model.Capacity()
		p.secStart = p.secStart.Add(time.Second)
		p.secBusy = 0
	}
}

// integrateLocked accounts for [p.last, t) at the current in-flight count
// and capacity.
func (p *Provider) integrateLocked(t time.Time) {
	dt := t.Sub(p.last)
	if dt <= 0 {
		return
	}
	if float64(p.current) > p.capacity {
		p.overCap += dt
	}
	if p.model != nil {
		p.secBusy += int64(p.current) * int64(dt)
	}
	p.last = t
}
