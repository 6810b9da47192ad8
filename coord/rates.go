package coord

import (
	"fmt"
	"time"
)

// Rates is a pair of rates, each in units per minute: requests (a
// provider's RPM) and tokens (its TPM). A zero field means no rate on that
// dimension. Every rate the coordinator handles lies in [0, MaxRate].
type Rates struct {
	Requests int64
	Tokens   int64
}

// MaxRate bounds every rate per minute a report, a grant or an operator
// carries.
const MaxRate = 1_000_000_000

// IsZero reports whether r has no rate on either dimension.
func (r Rates) IsZero() bool { return r == Rates{} }

// dims is r as an array, requests first, so each rule is written once.
func (r Rates) dims() [2]int64 { return [2]int64{r.Requests, r.Tokens} }

func ratesOf(d [2]int64) Rates { return Rates{Requests: d[0], Tokens: d[1]} }

// rateDims names the dimensions in validation errors, with their report
// fields.
var rateDims = [2]string{"requests", "tokens"}

// checkRates reports a rate outside [0, MaxRate] as ErrInvalidReport,
// naming the field (e.g. "rate_demand.tokens") and its value.
func checkRates(field string, r Rates) error {
	for i, v := range r.dims() {
		if v < 0 || v > MaxRate {
			return fmt.Errorf("%w: %s.%s = %d, want 0..%d", ErrInvalidReport, field, rateDims[i], v, MaxRate)
		}
	}
	return nil
}

// RatesChange is a partial change of a key's operator rates: a dimension
// whose Set flag is false keeps its value; one set to 0 is removed.
type RatesChange struct {
	SetRequests, SetTokens bool
	// Requests and Tokens are per minute, in [0, MaxRate].
	Requests, Tokens int64
}

// KeyOption adds a setting to a key that Admin.CreateKey creates.
type KeyOption func(*keyOptions)

type keyOptions struct{ rates Rates }

// WithRates gives a key that Admin.CreateKey creates operator rates per
// minute (see Admin.SetRates), each in [0, MaxRate], 0 for none. They are
// written with the key, so nodes never join it without them.
func WithRates(r Rates) KeyOption { return func(o *keyOptions) { o.rates = r } }

// newKeyOptions checks what Admin.CreateKey is asked to create — the
// key's name, its override and the rates opts give — and returns opts
// applied; an error is "coord: create key: " and ErrInvalidOverride
// naming the bad value.
func newKeyOptions(key string, minLimit, maxLimit *int, opts []KeyOption) (keyOptions, error) {
	var o keyOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkKeyName(key); err != nil {
		return o, fmt.Errorf("coord: create key: %w", err)
	}
	if err := validateLimits(minLimit, maxLimit); err != nil {
		return o, fmt.Errorf("coord: create key: %w", err)
	}
	if err := o.ratesChange().validate(); err != nil {
		return o, fmt.Errorf("coord: create key: %w", err)
	}
	return o, nil
}

// ratesChange is the change that gives a new key o's rates.
func (o keyOptions) ratesChange() RatesChange {
	return RatesChange{SetRequests: true, Requests: o.rates.Requests, SetTokens: true, Tokens: o.rates.Tokens}
}

// validate reports a rate outside [0, MaxRate] as ErrInvalidOverride.
func (c RatesChange) validate() error {
	for _, f := range []struct {
		name string
		set  bool
		v    int64
	}{{"rpm", c.SetRequests, c.Requests}, {"tpm", c.SetTokens, c.Tokens}} {
		if f.set && (f.v < 0 || f.v > MaxRate) {
			return fmt.Errorf("%w: %s = %d, want 0..%d (0 removes it)", ErrInvalidOverride, f.name, f.v, MaxRate)
		}
	}
	return nil
}

// SetRates applies c to the key's operator rates (KeyState.RateLimit) from
// the next heartbeat on. It returns an error wrapping ErrInvalidOverride,
// naming the value, for a rate outside [0, MaxRate].
func (s State) SetRates(c RatesChange) (State, error) {
	if err := c.validate(); err != nil {
		return s, err
	}
	next := s.Clone()
	if c.SetRequests {
		next.Key.RateLimit.Requests = c.Requests
	}
	if c.SetTokens {
		next.Key.RateLimit.Tokens = c.Tokens
	}
	return next, nil
}

// RateReserve is what the rate rule holds back for the row when granting
// rates to others: on each dimension, max(RateHigh, RateShare) while the
// row's lease runs and it has not departed, 0 after. Unlike Reserve it
// ends with the lease, not the hold: a rate is spent when a request is
// sent, and a node sends nothing once its lease has run out (it fences
// itself first, on its own clock, with the margin for clock rates).
func (n NodeState) RateReserve(now time.Time) Rates {
	if !n.LeaseExpiresAt.After(now) || n.Departed {
		return Rates{}
	}
	return Rates{Requests: max(n.RateHigh.Requests, n.RateShare.Requests), Tokens: max(n.RateHigh.Tokens, n.RateShare.Tokens)}
}

// rateGrant computes the key's rates and self's rate shares at now, on each
// dimension separately (docs/design.md, "Rate budgets"):
//
//   - The key's rate: the aggregate (lower median or min) of RateLocal over
//     the members that report one (> 0), self included, capped by the
//     operator's rate (KeyState.RateLimit) when there is one; the
//     operator's rate alone when no member reports one; 0 — no rate, every
//     node unpaced — when neither does.
//   - Target: 0 when draining or without rate demand; otherwise self's part
//     of R split by rate demand among the eligible members (not draining,
//     rate demand > 0, self included) by largest remainder (see
//     apportion): all of R is split, and the targets add up to exactly R.
//   - Share = max(0, min(target, R − Σ RateReserve of every other row));
//     when learning is set also at most what the node reports it enforces
//     (RateApplied), since the database may have forgotten rate shares it
//     granted. Heartbeat sets it for the first lease of learning mode
//     only (see KeyState.rateLearning).
//
// others are the key's other rows that are still kept; self has taken the
// report.
func (s State) rateGrant(self NodeState, others []NodeState, r Report, learning bool, now time.Time) (rate, share Rates) {
	var votes [2][]int64
	var reserve [2]int64
	var claims [2][]claim[int64] // the other eligible members' rate demands
	for i, v := range self.RateLocal.dims() {
		if v > 0 {
			votes[i] = append(votes[i], v)
		}
	}
	eligible := !self.Draining
	for _, n := range others {
		res := n.RateReserve(now).dims()
		for i := range 2 {
			reserve[i] += res[i]
		}
		if !n.Member(now) {
			continue
		}
		local, want := n.RateLocal.dims(), n.RateDemand.dims()
		for i := range 2 {
			if local[i] > 0 {
				votes[i] = append(votes[i], local[i])
			}
			if !n.Draining && want[i] > 0 {
				claims[i] = append(claims[i], claim[int64]{n.NodeID, n.Instance, want[i]})
			}
		}
	}
	limit, want, applied := s.Key.RateLimit.dims(), self.RateDemand.dims(), r.RateApplied.dims()
	var rates, shares [2]int64
	for i := range 2 {
		var l int64
		switch {
		case len(votes[i]) > 0:
			l = fold(s.Key.Aggregate, votes[i])
			if limit[i] > 0 {
				l = min(l, limit[i])
			}
		default:
			l = limit[i]
		}
		rates[i] = l
		if l == 0 || !eligible || want[i] == 0 {
			continue
		}
		target := apportion(l, claim[int64]{self.NodeID, self.Instance, want[i]}, claims[i])
		shares[i] = max(0, min(target, l-reserve[i]))
		if learning {
			shares[i] = min(shares[i], applied[i])
		}
	}
	return ratesOf(rates), ratesOf(shares)
}
