package pace

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return epoch.Add(d) }

const ms = time.Millisecond

func newBucket(t *testing.T, rate float64, burst time.Duration) *Bucket {
	t.Helper()
	b, err := NewBucket(BucketConfig{Rate: rate, Burst: burst}, epoch)
	require.NoError(t, err)
	return b
}

// randomBucket returns a bucket of a rate in [1, 1+maxRate) and a burst
// in [1ms, maxBurst], with its rate, burst and size.
func randomBucket(t *testing.T, rng *rand.Rand, maxRate float64, maxBurst time.Duration) (*Bucket, float64, time.Duration, float64) {
	t.Helper()
	rate := 1 + rng.Float64()*maxRate
	burst := time.Duration(1+rng.Int64N(int64(maxBurst/ms))) * ms
	return newBucket(t, rate, burst), rate, burst, rate * burst.Seconds()
}

func reserve(t *testing.T, b *Bucket, now time.Time, n float64) (Reservation, time.Duration) {
	t.Helper()
	r, d, err := b.Reserve(now, n)
	require.NoError(t, err)
	return r, d
}

// TestBucketReserveDelaysExact: a full bucket of 10 at 10/s lends the
// 11th unit 100ms ahead, the 12th 200ms, and the delays shorten as time
// passes.
func TestBucketReserveDelaysExact(t *testing.T) {
	t.Parallel()
	b := newBucket(t, 10, time.Second)
	for i := range 10 {
		_, d := reserve(t, b, epoch, 1)
		require.Zero(t, d, "unit %d of a full bucket", i)
	}
	r11, d := reserve(t, b, epoch, 1)
	require.Equal(t, 100*ms, d)
	r12, d := reserve(t, b, epoch, 1)
	require.Equal(t, 200*ms, d)
	require.InDelta(t, -2, b.Tokens(epoch), 1e-9)

	require.Equal(t, 50*ms, b.Delay(at(50*ms), r11))
	require.Zero(t, b.Delay(at(100*ms), r11))
	require.Equal(t, 100*ms, b.Delay(at(100*ms), r12))
	require.Zero(t, b.Delay(at(time.Hour), r12))
	require.InDelta(t, 10, b.Tokens(at(time.Hour)), 1e-9, "refilled to the size, no further")

	// Time going back reads as the last time seen.
	_, d = reserve(t, b, epoch, 10)
	require.Zero(t, d)
	require.InDelta(t, 0, b.Tokens(epoch), 1e-9)
}

// TestBucketSettle charges an under-estimate, so later reservations wait
// for it, and refunds an over-estimate, so they wait less, up to the size.
func TestBucketSettle(t *testing.T) {
	t.Parallel()
	t.Run("under-estimate is charged", func(t *testing.T) {
		t.Parallel()
		b := newBucket(t, 10, time.Second)
		r, d := reserve(t, b, epoch, 5)
		require.Zero(t, d)
		require.NoError(t, b.Settle(epoch, r, 12))
		require.InDelta(t, -2, b.Tokens(epoch), 1e-9, "in debt by 2")
		_, d = reserve(t, b, epoch, 1)
		require.Equal(t, 300*ms, d, "the debt and the unit")
	})
	t.Run("over-estimate is refunded", func(t *testing.T) {
		t.Parallel()
		b := newBucket(t, 10, time.Second)
		first, _ := reserve(t, b, epoch, 8)
		second, d := reserve(t, b, epoch, 5)
		require.Equal(t, 300*ms, d)
		require.NoError(t, b.Settle(at(10*ms), first, 2))
		require.Zero(t, b.Delay(at(10*ms), second), "6 back: the second is paid for")
		require.InDelta(t, 3.1, b.Tokens(at(10*ms)), 1e-9)
	})
	t.Run("refund stops at the size", func(t *testing.T) {
		t.Parallel()
		b := newBucket(t, 10, time.Second)
		r, _ := reserve(t, b, epoch, 4)
		require.NoError(t, b.Settle(at(time.Second), r, 0))
		require.InDelta(t, 10, b.Tokens(at(time.Second)), 1e-9)
	})
	t.Run("bad actual", func(t *testing.T) {
		t.Parallel()
		b := newBucket(t, 10, time.Second)
		r, _ := reserve(t, b, epoch, 4)
		require.EqualError(t, b.Settle(epoch, r, -1), "pace: settle: actual units must be in [0, 1e+09], got -1")
		require.ErrorContains(t, b.Settle(epoch, r, math.NaN()), "got NaN")
		require.InDelta(t, 6, b.Tokens(epoch), 1e-9, "nothing changed")
	})
}

// TestBucketSetRate: a lowered rate applies at once, to reservations
// already waiting and to what the bucket had saved up; a raised one
// shortens the waits.
func TestBucketSetRate(t *testing.T) {
	t.Parallel()
	b := newBucket(t, 10, time.Second)
	reserve(t, b, epoch, 10)
	w, d := reserve(t, b, epoch, 5)
	require.Equal(t, 500*ms, d)

	require.NoError(t, b.SetRate(at(100*ms), 5))
	require.Equal(t, 800*ms, b.Delay(at(100*ms), w), "4 units still owed, at 5/s")
	require.NoError(t, b.SetRate(at(200*ms), 20))
	require.Equal(t, 175*ms, b.Delay(at(200*ms), w), "3.5 owed at 20/s")
	require.Equal(t, 20.0, b.Rate())

	b = newBucket(t, 10, time.Second)
	require.NoError(t, b.SetRate(epoch, 2))
	require.InDelta(t, 2, b.Tokens(epoch), 1e-9, "a full bucket of 10 cut to the new size")
	_, d = reserve(t, b, epoch, 3)
	require.Zero(t, d, "larger than the bucket: acts when the bucket is full")
	_, d = reserve(t, b, epoch, 1)
	require.Equal(t, 1000*ms, d)

	require.EqualError(t, b.SetRate(epoch, -1), "pace: set rate: rate must be >= 0 (or Unlimited), got -1")
	require.ErrorContains(t, b.SetRate(epoch, math.NaN()), "got NaN")
	require.Equal(t, 2.0, b.Rate())
}

// TestBucketZeroAndUnlimited: at rate 0 nothing that costs acts, until
// the rate rises; at Unlimited everything acts and nothing is counted.
func TestBucketZeroAndUnlimited(t *testing.T) {
	t.Parallel()
	b := newBucket(t, 0, time.Second)
	r, d := reserve(t, b, epoch, 1)
	require.Equal(t, Never, d)
	_, ok, err := b.TryReserve(epoch, 1)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, b.SetRate(at(time.Second), 4))
	require.Equal(t, 250*ms, b.Delay(at(time.Second), r), "the debt of 1 at 4/s; the bucket refills from 0")

	b = newBucket(t, 0, time.Second)
	_, d = reserve(t, b, epoch, 0)
	require.Zero(t, d, "a free reservation without debt acts")

	b = newBucket(t, Unlimited, time.Second)
	for range 1000 {
		_, d = reserve(t, b, epoch, 1e9)
		require.Zero(t, d)
	}
	require.Equal(t, Unlimited, b.Tokens(epoch))
	require.NoError(t, b.SetRate(epoch, 10))
	require.InDelta(t, 10, b.Tokens(epoch), 1e-9, "leaving Unlimited starts full")
	require.NoError(t, b.SetRate(epoch, math.Inf(1)))
	require.Equal(t, Unlimited, b.Rate(), "+Inf reads as Unlimited")
}

// TestBucketLargerThanBucket: a reservation above the size acts when the
// bucket is full and leaves it in debt; one behind it waits for the debt.
func TestBucketLargerThanBucket(t *testing.T) {
	t.Parallel()
	b := newBucket(t, 10, time.Second)
	heavy, d := reserve(t, b, epoch, 25)
	require.Zero(t, d)
	require.Equal(t, 25.0, heavy.Units())
	_, d = reserve(t, b, epoch, 1)
	require.Equal(t, 1600*ms, d, "15 of debt and the unit")

	b = newBucket(t, 10, time.Second)
	reserve(t, b, epoch, 5)
	_, d = reserve(t, b, epoch, 25)
	require.Equal(t, 500*ms, d, "waits for a full bucket, not for 25 units")
}

// TestBucketCancel: the newest reservation is undone; one that waits
// behind others gives its units to those after it only.
func TestBucketCancel(t *testing.T) {
	t.Parallel()
	b := newBucket(t, 10, time.Second)
	reserve(t, b, epoch, 10)
	w1, d1 := reserve(t, b, epoch, 3)
	w2, d2 := reserve(t, b, epoch, 4)
	w3, d3 := reserve(t, b, epoch, 2)
	require.Equal(t, []time.Duration{300 * ms, 700 * ms, 900 * ms}, []time.Duration{d1, d2, d3})

	b.Cancel(epoch, w2)
	require.Equal(t, 300*ms, b.Delay(epoch, w1), "before the canceled one: unchanged")
	require.Equal(t, 500*ms, b.Delay(epoch, w3), "after it: 4 units sooner")
	_, d := reserve(t, b, epoch, 1)
	require.Equal(t, 600*ms, d, "a new one follows w3")

	require.Equal(t, 200*ms, b.Delay(at(300*ms), w3), "once w1 may act the hole is handed back")
	require.InDelta(t, -3, b.Tokens(at(300*ms)), 1e-9)

	// The newest is undone outright.
	last, _ := reserve(t, b, at(300*ms), 7)
	b.Cancel(at(300*ms), last)
	require.InDelta(t, -3, b.Tokens(at(300*ms)), 1e-9)

	// One that may act already is refunded.
	b = newBucket(t, 10, time.Second)
	first, _ := reserve(t, b, epoch, 6)
	reserve(t, b, epoch, 6)
	b.Cancel(epoch, first)
	require.InDelta(t, 4, b.Tokens(epoch), 1e-9)
	b.Cancel(epoch, Reservation{}) // the zero Reservation is nothing
	require.InDelta(t, 4, b.Tokens(epoch), 1e-9)
}

// TestBucketCancelMatchesNeverReserved: after any cancellations of
// reservations still waiting, every other reservation's delay is what it
// would be had the canceled ones never been made, at every step.
func TestBucketCancelMatchesNeverReserved(t *testing.T) {
	t.Parallel()
	type op struct {
		at       time.Time
		n        float64
		r        Reservation
		canceled bool
	}
	var cancels int
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 2))
		b, rate, burst, size := randomBucket(t, rng, 100, 2000*ms)
		var ops []*op
		now := epoch
		for step := range 150 {
			now = now.Add(time.Duration(rng.Int64N(int64(50 * ms))))
			if rng.IntN(3) == 0 && len(ops) > 0 {
				o := ops[rng.IntN(len(ops))]
				if !o.canceled && b.Delay(now, o.r) > 0 {
					b.Cancel(now, o.r)
					o.canceled = true
					cancels++
				}
			} else {
				o := &op{at: now, n: rng.Float64() * size * 1.5} // a third larger than the bucket
				o.r, _ = reserve(t, b, now, o.n)
				ops = append(ops, o)
			}
			// Replay the reservations that were not canceled, then compare.
			replay := newBucket(t, rate, burst)
			replayed := make([]Reservation, len(ops))
			for i, o := range ops {
				if !o.canceled {
					replayed[i], _ = reserve(t, replay, o.at, o.n)
				}
			}
			for i, o := range ops {
				if !o.canceled {
					want := replay.Delay(now, replayed[i])
					require.InDelta(t, float64(want), float64(b.Delay(now, o.r)), 2, "seed %d step %d reservation %d", seed, step, i)
				}
			}
		}
	}
	require.Greater(t, cancels, 300)
}

// TestBucketBound checks the package's claim: with exact estimates, the
// units that act in any interval of length T are at most Rate×Burst +
// Rate×T, plus once the largest excess of a reservation over the bucket.
func TestBucketBound(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 3))
		b, rate, _, size := randomBucket(t, rng, 50, 3000*ms)
		type act struct {
			at time.Time
			n  float64
		}
		var acts []act
		now := epoch
		var maxExcess float64
		for range 300 {
			// Arrivals about twice the rate on average, in clumps.
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(time.Second) / rate))
			n := rng.ExpFloat64() * 2
			if rng.IntN(20) == 0 {
				n = size * (1 + rng.Float64()) // larger than the bucket
			}
			maxExcess = max(maxExcess, n-size)
			_, d := reserve(t, b, now, n)
			acts = append(acts, act{now.Add(d), n})
		}
		// The most any interval took beyond Rate×T, against the claim.
		most := 0.0
		for i := range acts {
			sum := 0.0
			for j := i; j < len(acts); j++ {
				if acts[j].at.Before(acts[i].at) {
					t.Fatalf("seed %d: reservation %d acts before %d", seed, j, i)
				}
				sum += acts[j].n
				most = max(most, sum-rate*acts[j].at.Sub(acts[i].at).Seconds())
			}
		}
		require.LessOrEqual(t, most, size+max(0, maxExcess)+1e-6, "seed %d", seed)
		require.Greater(t, most, size/2, "seed %d: the bucket bursts", seed)
	}
}

func TestBucketBadInput(t *testing.T) {
	t.Parallel()
	_, err := NewBucket(BucketConfig{Rate: -1}, epoch)
	require.EqualError(t, err, "pace: BucketConfig.Rate must be >= 0 (or Unlimited), got -1")
	_, err = NewBucket(BucketConfig{Rate: math.NaN()}, epoch)
	require.ErrorContains(t, err, "BucketConfig.Rate must be >= 0 (or Unlimited), got NaN")
	_, err = NewBucket(BucketConfig{Rate: 1, Burst: -time.Second}, epoch)
	require.EqualError(t, err, "pace: BucketConfig.Burst must be >= 0, got -1s")

	b := newBucket(t, 1, 0)
	require.InDelta(t, 1, b.Tokens(epoch), 1e-9, "Burst defaults to 1s")
	_, _, err = b.Reserve(epoch, -2)
	require.EqualError(t, err, "pace: reserve: units must be in [0, 1e+09], got -2")
	_, _, err = b.TryReserve(epoch, math.NaN())
	require.EqualError(t, err, "pace: reserve: units must be in [0, 1e+09], got NaN")
	_, _, err = b.Reserve(epoch, math.Inf(1))
	require.EqualError(t, err, "pace: reserve: units must be in [0, 1e+09], got +Inf")
	_, _, err = b.TryReserve(epoch, math.Inf(1))
	require.EqualError(t, err, "pace: reserve: units must be in [0, 1e+09], got +Inf")
	r, _, err := b.Reserve(epoch, 0.5)
	require.NoError(t, err)
	require.EqualError(t, b.Settle(epoch, r, math.Inf(1)), "pace: settle: actual units must be in [0, 1e+09], got +Inf")
	require.InDelta(t, 0.5, b.Tokens(epoch), 1e-9, "nothing debited by a refused call")
	_, d, err := b.Reserve(epoch.Add(time.Second), 1)
	require.NoError(t, err)
	require.Zero(t, d, "and the bucket refills as before")
}

// TestBucketRefusesUnitsPastMaxUnits: a reservation of 1e17 units, then
// undone, rounded away the 3.5 units of debt a reservation beside it had
// to wait for: its delay went from 3.5 s to 0. Units past MaxUnits are
// refused, naming them, and nothing is debited.
func TestBucketRefusesUnitsPastMaxUnits(t *testing.T) {
	t.Parallel()
	b, err := NewBucket(BucketConfig{Rate: 1, Burst: 10 * time.Second}, epoch)
	require.NoError(t, err)
	_, _, err = b.Reserve(epoch, 10)
	require.NoError(t, err)
	r, d, err := b.Reserve(epoch, 3.5)
	require.NoError(t, err)
	require.Equal(t, 3500*time.Millisecond, d)
	_, _, err = b.Reserve(epoch, 1e17)
	require.EqualError(t, err, "pace: reserve: units must be in [0, 1e+09], got 1e+17")
	_, _, err = b.TryReserve(epoch, 1e17)
	require.Error(t, err)
	require.EqualError(t, b.Settle(epoch, r, 1e13), "pace: settle: actual units must be in [0, 1e+09], got 1e+13")
	big, _, err := b.Reserve(epoch, MaxUnits)
	require.NoError(t, err)
	b.Cancel(epoch, big)
	require.Equal(t, 3500*time.Millisecond, b.Delay(epoch, r), "undoing the largest reservation forgives no other debt")

	// Nor does the allowance for rounding, which grows with the units
	// ever reserved, forgive a debt of less than a unit.
	b, err = NewBucket(BucketConfig{Rate: 1, Burst: 10 * time.Second}, epoch)
	require.NoError(t, err)
	big, _, err = b.Reserve(epoch, MaxUnits)
	require.NoError(t, err)
	require.NoError(t, b.Settle(epoch, big, 0))
	_, _, err = b.Reserve(epoch, 10)
	require.NoError(t, err)
	_, d, err = b.Reserve(epoch, 0.9)
	require.NoError(t, err)
	require.InDelta(t, 900*time.Millisecond, d, float64(time.Millisecond))
}
