package pace

import (
	"context"
	"fmt"
	"time"
)

// Config configures a Pacer. RequestRate and TokenRate are required; a
// zero Burst takes its default.
type Config struct {
	// RequestRate is the node's request rate, in requests per second (see
	// PerMinute). Must be >= 0 and not NaN: 0 admits nothing until SetRate
	// raises it, Unlimited leaves requests unpaced. Required.
	RequestRate float64
	// TokenRate is the node's token rate, in tokens per second, with the
	// same rules as RequestRate. Required.
	TokenRate float64
	// Burst is how much each bucket holds, as time at its rate (see
	// BucketConfig.Burst). Must be >= 0. Defaults to 1s.
	Burst time.Duration
}

// Pacer paces one node's requests to a request rate and a token rate: one
// Bucket for each, a request debiting 1 from the first and its estimated
// tokens from the second. It is safe for concurrent use. Reserve, Delay,
// Settle and a Wait that need not wait allocate nothing; a Wait that waits
// allocates a timer and the channels it is woken by.
//
// Its methods other than Wait take the time now; Wait reads time.Now, so a
// program that uses both must pass times from the same clock.
type Pacer struct {
	requests, tokens *Bucket
}

// Ticket is an admission by a Pacer: hand it back to Delay, Settle or
// Cancel of the same Pacer. Its zero value admits nothing and is accepted
// by every method.
type Ticket struct {
	requests, tokens Reservation
}

// Estimate returns the tokens t debited.
func (t Ticket) Estimate() int64 { return int64(t.tokens.n) }

// New returns a Pacer with both buckets full at now. It returns an error
// naming the field when cfg is invalid.
func New(cfg Config, now time.Time) (*Pacer, error) {
	if cfg.Burst < 0 {
		return nil, fmt.Errorf("pace: Config.Burst must be >= 0, got %v", cfg.Burst)
	}
	if _, err := checkRate(cfg.RequestRate); err != nil {
		return nil, fmt.Errorf("pace: Config.RequestRate %w", err)
	}
	if _, err := checkRate(cfg.TokenRate); err != nil {
		return nil, fmt.Errorf("pace: Config.TokenRate %w", err)
	}
	requests, err := NewBucket(BucketConfig{Rate: cfg.RequestRate, Burst: cfg.Burst}, now)
	if err != nil {
		return nil, err
	}
	tokens, err := NewBucket(BucketConfig{Rate: cfg.TokenRate, Burst: cfg.Burst}, now)
	if err != nil {
		return nil, err
	}
	return &Pacer{requests: requests, tokens: tokens}, nil
}

// Reserve admits a request estimated at tokens tokens at now: it debits
// one request and the estimate, and returns the ticket with how long from
// now until the request may be sent (0: at once), the longer of the two
// buckets' delays. A caller that sleeps should check Delay again when it
// wakes, or use Wait. It returns an error naming tokens when it is
// negative or above MaxUnits; nothing is debited then.
func (p *Pacer) Reserve(now time.Time, tokens int64) (Ticket, time.Duration, error) {
	if err := checkTokens("reserve: tokens", tokens); err != nil {
		return Ticket{}, 0, err
	}
	rr, dr, _ := p.requests.Reserve(now, 1)
	tr, dt, _ := p.tokens.Reserve(now, float64(tokens))
	return Ticket{requests: rr, tokens: tr}, max(dr, dt), nil
}

// TryReserve admits a request estimated at tokens tokens at now only if it
// may be sent at once, and reports whether it did. It returns an error
// naming tokens when it is negative or above MaxUnits.
func (p *Pacer) TryReserve(now time.Time, tokens int64) (Ticket, bool, error) {
	if err := checkTokens("reserve: tokens", tokens); err != nil {
		return Ticket{}, false, err
	}
	rr, ok, _ := p.requests.TryReserve(now, 1)
	if !ok {
		return Ticket{}, false, nil
	}
	tr, ok, _ := p.tokens.TryReserve(now, float64(tokens))
	if !ok {
		p.requests.Cancel(now, rr)
		return Ticket{}, false, nil
	}
	return Ticket{requests: rr, tokens: tr}, true, nil
}

// Delay returns how long from now until t may be sent under the rates and
// debts as they stand now: 0 once it may, Never while a rate it waits on
// is 0 (see Bucket.Delay).
func (p *Pacer) Delay(now time.Time, t Ticket) time.Duration {
	return max(p.requests.Delay(now, t.requests), p.tokens.Delay(now, t.tokens))
}

// Wait admits a request estimated at tokens tokens and blocks until it may
// be sent, looking again whenever a rate changes or units are given back.
// If ctx ends first, the reservation is canceled and Wait returns ctx's
// error, wrapped; it returns an error naming tokens when it is negative
// or above MaxUnits.
// It reads time.Now.
func (p *Pacer) Wait(ctx context.Context, tokens int64) (Ticket, error) {
	if err := ctx.Err(); err != nil {
		return Ticket{}, fmt.Errorf("pace: wait: %w", err)
	}
	t, d, err := p.Reserve(time.Now(), tokens)
	if err != nil || d == 0 {
		return t, err
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// Watch before looking, so that a change after the look wakes us.
		requestsChanged, tokensChanged := p.requests.watch(), p.tokens.watch()
		d := p.Delay(time.Now(), t)
		if d == 0 {
			return t, nil
		}
		var fire <-chan time.Time
		if d != Never {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			p.Cancel(time.Now(), t)
			return Ticket{}, fmt.Errorf("pace: wait: %w", ctx.Err())
		case <-fire:
		case <-requestsChanged:
		case <-tokensChanged:
		}
	}
}

// Settle corrects t, which was sent, to the tokens it actually cost (an
// LLM response's usage): an over-estimate is refunded, an under-estimate
// charged, taking the token bucket into debt if need be so that later
// requests wait for it (see Bucket.Settle). Settle a ticket at most once,
// and not after Cancel. It returns an error naming actual when it is
// negative or above MaxUnits; nothing is changed then.
func (p *Pacer) Settle(now time.Time, t Ticket, actual int64) error {
	if err := checkTokens("settle: actual tokens", actual); err != nil {
		return err
	}
	return p.tokens.Settle(now, t.tokens, float64(actual))
}

// Cancel gives back both debits of t: the request was not sent, or cost
// nothing (see Bucket.Cancel). Cancel a ticket at most once, and not after
// Settle.
func (p *Pacer) Cancel(now time.Time, t Ticket) {
	p.requests.Cancel(now, t.requests)
	p.tokens.Cancel(now, t.tokens)
}

// SetRate sets both rates from now, when the node's share of the fleet's
// rate changes: a lowered rate applies at once, to the requests already
// waiting as well, and cuts what each bucket has saved up (see
// Bucket.SetRate). It returns an error naming the rate when one is
// negative or NaN; neither rate changes then.
func (p *Pacer) SetRate(now time.Time, requestRate, tokenRate float64) error {
	if _, err := checkRate(requestRate); err != nil {
		return fmt.Errorf("pace: set rate: request rate %w", err)
	}
	if _, err := checkRate(tokenRate); err != nil {
		return fmt.Errorf("pace: set rate: token rate %w", err)
	}
	_ = p.requests.SetRate(now, requestRate)
	_ = p.tokens.SetRate(now, tokenRate)
	return nil
}

// Rates returns the request and token rates, per second.
func (p *Pacer) Rates() (requestRate, tokenRate float64) {
	return p.requests.Rate(), p.tokens.Rate()
}

// Levels returns both buckets' levels at now (see Bucket.Tokens): below
// zero, a debt.
func (p *Pacer) Levels(now time.Time) (requests, tokens float64) {
	return p.requests.Tokens(now), p.tokens.Tokens(now)
}
