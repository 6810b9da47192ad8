package pace

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Unlimited is a rate without limit: a Bucket at this rate admits every
// reservation at once and keeps no account of it.
const Unlimited = math.MaxFloat64

// Never is the delay Bucket.Delay and Pacer.Delay return for a
// reservation that no passing of time admits: the rate is 0.
const Never = time.Duration(math.MaxInt64)

// PerMinute converts a rate per minute (a provider's RPM or TPM) to the
// per-second rate a BucketConfig or Config takes.
func PerMinute(n float64) float64 { return n / 60 }

// BucketConfig configures a Bucket. Rate is required; a zero Burst takes
// its default.
type BucketConfig struct {
	// Rate is how many units the bucket gains per second: requests per
	// second for a request bucket, tokens per second for a token bucket.
	// Must be >= 0 and not NaN: 0 admits nothing until SetRate raises it,
	// Unlimited admits everything. Required.
	Rate float64
	// Burst is how much the bucket holds when full, as time at Rate: the
	// bucket holds Rate×Burst units, and starts full. Must be >= 0.
	// Defaults to 1s.
	Burst time.Duration
}

func (cfg BucketConfig) withDefaults() (BucketConfig, error) {
	rate, err := checkRate(cfg.Rate)
	if err != nil {
		return cfg, fmt.Errorf("pace: BucketConfig.Rate %w", err)
	}
	cfg.Rate = rate
	if cfg.Burst < 0 {
		return cfg, fmt.Errorf("pace: BucketConfig.Burst must be >= 0, got %v", cfg.Burst)
	}
	if cfg.Burst == 0 {
		cfg.Burst = time.Second
	}
	return cfg, nil
}

// checkRate returns rate, +Inf read as Unlimited, or an error naming it.
func checkRate(rate float64) (float64, error) {
	if !(rate >= 0) { // also NaN
		return 0, fmt.Errorf("must be >= 0 (or Unlimited), got %v", rate)
	}
	return min(rate, Unlimited), nil
}

// MaxUnits is the most units one reservation, or one settlement, may
// carry (fleet.MaxTokens, the largest token count a fleet node debits, is
// as much). The bucket keeps its level and its marks in float64, and
// compares them within a rounding allowance that grows with the units
// ever reserved: a debit far beyond this would round away the units of
// the reservations beside it, or widen the allowance past a unit, and
// forgive their debts; an infinite one would be a debt no time repays,
// its level NaN.
const MaxUnits = 1e9

// checkTokens is checkUnits for a Pacer's token count, which the Pacer
// checks itself: it does not pass on its token bucket's error.
func checkTokens(what string, n int64) error {
	if n < 0 || n > MaxUnits {
		return fmt.Errorf("pace: %s must be in [0, %g], got %d", what, float64(MaxUnits), n)
	}
	return nil
}

// checkUnits returns an error naming n, for what, unless n is in
// [0, MaxUnits].
func checkUnits(what string, n float64) error {
	if !(n >= 0 && n <= MaxUnits) {
		return fmt.Errorf("pace: %s must be in [0, %g], got %v", what, float64(MaxUnits), n)
	}
	return nil
}

// Bucket is a token bucket for one dimension (requests, or tokens) that
// reads no clock: every method takes the time now, and a now before an
// earlier call's is treated as that earlier time. It lends against the
// future: Reserve always debits, and a reservation that finds the bucket
// short waits (Delay) until the rate has paid for it and for every
// reservation made before it. The level may go below zero, a debt that
// delays later reservations; the package documentation has the rules.
//
// A Bucket is safe for concurrent use. Reserve, Delay, Settle and Cancel
// allocate nothing, except that Cancel of a reservation that others
// follow and still wait on records it (see Cancel).
type Bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  time.Duration
	size   float64 // rate × burst; unused while Unlimited
	tokens float64 // the level at last, after every debit; below 0 is debt
	last   time.Time
	// issued is every unit ever reserved. A reservation's mark is issued
	// just after it; it may act once issued+tokens (credit) reaches its
	// mark, less its excess over size and the holes before it.
	issued  float64
	holes   []hole        // canceled reservations others follow, by mark
	changed chan struct{} // closed when waiters should look again; nil until watched
}

// hole is a canceled reservation whose units are owed back to the
// reservations after it.
type hole struct{ mark, n float64 }

// Reservation is a debit made by Bucket.Reserve: hand it back to Delay,
// Settle or Cancel of the same Bucket. Its zero value is a reservation of
// nothing, which every method accepts.
type Reservation struct {
	mark, n float64
	free    bool // made while Unlimited: nothing was debited
}

// Units returns how much r debited.
func (r Reservation) Units() float64 { return r.n }

// NewBucket returns a full Bucket. It returns an error naming the field
// when cfg is invalid.
func NewBucket(cfg BucketConfig, now time.Time) (*Bucket, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bucket{burst: cfg.Burst, last: now}
	b.setRateLocked(cfg.Rate, true)
	return b, nil
}

// Reserve debits n units at now and returns the reservation with how long
// from now until it may act (0: at once), under the rate and the debts as
// they stand; see Delay for a later look. Reserve never refuses: a
// reservation larger than the bucket may act once the bucket is full and
// leaves it in debt. It returns an error naming n when n is negative,
// NaN or above MaxUnits; nothing is debited then.
func (b *Bucket) Reserve(now time.Time, n float64) (Reservation, time.Duration, error) {
	if err := checkUnits("reserve: units", n); err != nil {
		return Reservation{}, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == Unlimited {
		return Reservation{n: n, free: true}, 0, nil
	}
	b.advanceLocked(now)
	b.issued += n
	b.tokens -= n
	r := Reservation{mark: b.issued, n: n}
	return r, b.delayLocked(r), nil
}

// TryReserve reserves n units at now only if the reservation may act at
// once, and reports whether it did. It returns an error naming n when n is
// negative, NaN or above MaxUnits.
func (b *Bucket) TryReserve(now time.Time, n float64) (Reservation, bool, error) {
	if err := checkUnits("reserve: units", n); err != nil {
		return Reservation{}, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == Unlimited {
		return Reservation{n: n, free: true}, true, nil
	}
	b.advanceLocked(now)
	r := Reservation{mark: b.issued + n, n: n}
	if b.needLocked(r) > b.tolerance() {
		return Reservation{}, false, nil
	}
	b.issued += n
	b.tokens -= n
	return r, true, nil
}

// Delay returns how long from now until r may act under the rate, debts
// and refunds as they stand now: 0 once it may, Never while the rate is 0.
// A lowered rate or a charge (Settle) lengthens it, a raised rate, a
// refund or a cancellation before r shortens it; a caller that sleeps
// should look again when it wakes (Pacer.Wait does).
func (b *Bucket) Delay(now time.Time, r Reservation) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.free || b.rate == Unlimited {
		return 0
	}
	b.advanceLocked(now)
	return b.delayLocked(r)
}

// Settle corrects r, which has acted, to its actual cost: an over-estimate
// (actual < r.Units()) is refunded to the bucket, up to its size; an
// under-estimate is charged, taking the level below zero if need be, so
// that later reservations wait for it. Settle a reservation at most once,
// and not after Cancel. It returns an error naming actual when it is
// negative, NaN or above MaxUnits; nothing is changed then. While the rate is Unlimited,
// and for a reservation made then, it does nothing.
func (b *Bucket) Settle(now time.Time, r Reservation, actual float64) error {
	if err := checkUnits("settle: actual units", actual); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.free || b.rate == Unlimited {
		return nil
	}
	b.advanceLocked(now)
	diff := r.n - actual
	b.tokens = min(b.size, b.tokens+diff)
	if diff > 0 {
		b.wakeLocked()
	}
	return nil
}

// Cancel gives r's units back: r will not act, or acted and cost nothing.
// The newest reservation is undone outright, and one that may act already
// is refunded as Settle(now, r, 0) would. The units of one that still
// waits behind others are owed to the reservations after it only, so that
// none before it acts earlier than its own debits allow; recording that
// allocates. Cancel a reservation at most once, and not after Settle.
func (b *Bucket) Cancel(now time.Time, r Reservation) {
	if r.free || r.n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == Unlimited {
		return
	}
	b.advanceLocked(now)
	switch {
	case r.mark == b.issued:
		b.issued -= r.n
		b.tokens = min(b.size, b.tokens+r.n)
	case b.delayLocked(r) == 0:
		b.tokens = min(b.size, b.tokens+r.n)
	default:
		i := len(b.holes)
		for i > 0 && b.holes[i-1].mark > r.mark {
			i--
		}
		b.holes = append(b.holes, hole{})
		copy(b.holes[i+1:], b.holes[i:])
		b.holes[i] = hole{mark: r.mark, n: r.n}
	}
	b.wakeLocked()
}

// SetRate makes rate the bucket's rate from now: the bucket's size becomes
// rate×Burst at once, so a lowered rate also cuts what the bucket has
// saved up, and a debt is repaid at the new rate. Reservations already
// made keep their place; their delays follow the new rate. Leaving
// Unlimited starts the bucket full. It returns an error naming rate when
// it is negative or NaN.
func (b *Bucket) SetRate(now time.Time, rate float64) error {
	rate, err := checkRate(rate)
	if err != nil {
		return fmt.Errorf("pace: set rate: rate %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.setRateLocked(rate, b.rate == Unlimited)
	b.wakeLocked()
	return nil
}

// Rate returns the bucket's rate, in units per second.
func (b *Bucket) Rate() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate
}

// Tokens returns the bucket's level at now: what is left after every
// reservation made, those still waiting included, and every settlement. A
// level below zero is a debt. It is Unlimited while the rate is.
func (b *Bucket) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == Unlimited {
		return Unlimited
	}
	b.advanceLocked(now)
	return b.tokens
}

// watch returns a channel closed the next time the bucket changes in a way
// that may shorten a delay.
func (b *Bucket) watch() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.changed
}

func (b *Bucket) wakeLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

func (b *Bucket) setRateLocked(rate float64, full bool) {
	b.rate = rate
	if rate == Unlimited {
		return
	}
	b.size = rate * b.burst.Seconds()
	if full {
		b.tokens = b.size
	} else {
		b.tokens = min(b.tokens, b.size)
	}
}

// advanceLocked refills the bucket from b.last to now, then hands each hole
// whose predecessors may all act back to the level.
func (b *Bucket) advanceLocked(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.size, b.tokens+b.rate*now.Sub(b.last).Seconds())
		b.last = now
	}
	for len(b.holes) > 0 && b.issued+b.tokens >= b.holes[0].mark-b.holes[0].n-b.tolerance() {
		b.tokens = min(b.size, b.tokens+b.holes[0].n)
		b.holes = b.holes[1:]
	}
	if len(b.holes) == 0 && cap(b.holes) > 0 {
		b.holes = nil
	}
}

// needLocked returns how many more units of credit r needs before it may
// act. The credit, issued+tokens, is the same before and after a debit.
func (b *Bucket) needLocked(r Reservation) float64 {
	threshold := r.mark
	if b.rate > 0 && r.n > b.size {
		threshold -= r.n - b.size // larger than the bucket: acts when the bucket is full
	}
	for _, h := range b.holes {
		if h.mark >= r.mark {
			break
		}
		threshold -= h.n
	}
	return threshold - (b.issued + b.tokens)
}

func (b *Bucket) delayLocked(r Reservation) time.Duration {
	need := b.needLocked(r)
	switch {
	case need <= b.tolerance():
		return 0
	case b.rate == 0:
		return Never
	}
	ns := math.Ceil(need / b.rate * 1e9)
	if ns >= float64(Never) {
		return Never
	}
	return time.Duration(ns)
}

// tolerance is the rounding error allowed when comparing credit with a
// mark, which grow with everything ever reserved.
func (b *Bucket) tolerance() float64 { return 1e-9 + 1e-12*math.Abs(b.issued) }
