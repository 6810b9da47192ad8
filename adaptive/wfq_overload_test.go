package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// overload is a deterministic single-goroutine run of a limiter under a
// steady offered load: every tick each class offers its arrivals through
// the limiter's own admission path (enter, as AcquireRequest takes it),
// every admitted request holds its weight for hold ticks and is then
// released, and queued waiters are collected from their ready channels as
// the limiter grants or refuses them.
type overload struct {
	t       *testing.T
	l       *Limiter
	clk     *fakeClock
	hold    int
	classes []overloadClass
	tick    int
	running []overloadLease
	waiting []overloadWaiter
}

type overloadClass struct {
	req      Request
	perTick  float64 // arrivals per tick, on average (a fractional part accrues)
	credit   float64
	admitted int
	refused  int
}

type overloadLease struct {
	lease Lease
	end   int
}

type overloadWaiter struct {
	w     *waiter
	class int
}

const overloadTick = time.Millisecond

func newOverload(t *testing.T, limit, maxQueued, hold int, classes ...overloadClass) *overload {
	t.Helper()
	l, clk := newTestLimiter(t, Config{InitialLimit: limit, MinLimit: limit, MaxLimit: limit, MaxQueued: maxQueued})
	return &overload{t: t, l: l, clk: clk, hold: hold, classes: classes}
}

// collect takes the outcome of every waiter the limiter has answered.
func (o *overload) collect() {
	kept := o.waiting[:0]
	for _, ow := range o.waiting {
		select {
		case <-ow.w.ready:
			o.done(ow.class, ow.w.lease, ow.w.err)
			o.l.putWaiter(ow.w)
		default:
			kept = append(kept, ow)
		}
	}
	o.waiting = kept
}

func (o *overload) done(class int, le Lease, err error) {
	c := &o.classes[class]
	if err != nil {
		require.ErrorIs(o.t, err, ErrQueueFull)
		c.refused++
		return
	}
	c.admitted++
	o.running = append(o.running, overloadLease{le, o.tick + o.hold})
}

// run advances ticks ticks.
func (o *overload) run(ticks int) {
	ctx := context.Background()
	for range ticks {
		o.tick++
		o.clk.Advance(overloadTick)
		kept := o.running[:0]
		for _, r := range o.running {
			if r.end <= o.tick {
				r.lease.Release()
			} else {
				kept = append(kept, r)
			}
		}
		o.running = kept
		o.collect()
		for i := range o.classes {
			c := &o.classes[i]
			c.credit += c.perTick
			for ; c.credit >= 1; c.credit-- {
				le, w, err := o.l.enter(ctx, c.req)
				if w != nil {
					o.waiting = append(o.waiting, overloadWaiter{w, i})
				} else {
					o.done(i, le, err)
				}
			}
		}
		o.collect()
		snap := o.l.Snapshot()
		require.LessOrEqual(o.t, snap.Inflight, snap.Limit)
		require.LessOrEqual(o.t, snap.Queued, o.l.cfg.MaxQueued)
	}
}

// resetCounts starts counting admissions and refusals afresh.
func (o *overload) resetCounts() {
	for i := range o.classes {
		o.classes[i].admitted, o.classes[i].refused = 0, 0
	}
}

// admittedWeight returns the weight class i was admitted for in all.
func (o *overload) admittedWeight(i int) int {
	return o.classes[i].admitted * o.classes[i].req.Weight
}

// Under 2× overload, at equal weights, priority 255 (cost 1 per request)
// is admitted twice as often as 254 (cost 2), and priority 200 (cost 56)
// 156/56 ≈ 2.786 times as often as 100 (cost 156). The capacity is 10
// slots held 10 ticks each, one admission per tick; each class offers one
// request per tick.
func TestWFQAcceptanceRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		high, low uint8
		want      float64
	}{
		{255, 254, 2.0},
		{200, 100, 156.0 / 56.0},
		{128, 0, 256.0 / 128.0},
	} {
		o := newOverload(t, 10, 20, 10,
			overloadClass{req: Request{Priority: tc.high, Weight: 1}, perTick: 1},
			overloadClass{req: Request{Priority: tc.low, Weight: 1}, perTick: 1},
		)
		o.run(100)
		o.resetCounts()
		o.run(20000)
		high, low := o.classes[0], o.classes[1]
		ratio := float64(high.admitted) / float64(low.admitted)
		t.Logf("priority %d vs %d: admitted %d vs %d, ratio %.3f (formula %.3f); refused %d vs %d",
			tc.high, tc.low, high.admitted, low.admitted, ratio, tc.want, high.refused, low.refused)
		require.InEpsilon(t, tc.want, ratio, 0.10)
		require.InDelta(t, 20000, high.admitted+low.admitted, 20, "the limit stays full")
	}
}

// Weight multiplies cost: weight 2 at priority 255 costs what weight 1 at
// 254 does, so both are admitted equally often, and the heavier class
// gets twice the weight.
func TestWFQAcceptanceByWeight(t *testing.T) {
	t.Parallel()
	o := newOverload(t, 12, 24, 10,
		overloadClass{req: Request{Priority: 255, Weight: 2}, perTick: 1},
		overloadClass{req: Request{Priority: 254, Weight: 1}, perTick: 1},
	)
	o.run(20000)
	heavy, light := o.classes[0], o.classes[1]
	t.Logf("admitted %d (weight 2) vs %d (weight 1)", heavy.admitted, light.admitted)
	require.InEpsilon(t, 1.0, float64(heavy.admitted)/float64(light.admitted), 0.10)
	require.InEpsilon(t, 2.0, float64(o.admittedWeight(0))/float64(o.admittedWeight(1)), 0.10)
}

// The lowest priority takes whatever the higher ones leave: priority 255
// offering half the capacity is admitted in full, and priority 0, offering
// twice the capacity, gets the other half.
func TestWFQLowestPriorityTakesTheRest(t *testing.T) {
	t.Parallel()
	o := newOverload(t, 10, 20, 10,
		overloadClass{req: Request{Priority: 255, Weight: 1}, perTick: 0.5},
		overloadClass{req: Request{Priority: 0, Weight: 1}, perTick: 2},
	)
	o.run(20000)
	high, low := o.classes[0], o.classes[1]
	t.Logf("admitted %d (255, offered 10000) and %d (0, offered 40000)", high.admitted, low.admitted)
	require.Zero(t, high.refused, "the high priority is never refused")
	require.InDelta(t, 10000, high.admitted, 20)
	require.InDelta(t, 10000, low.admitted, 20, "the lowest priority fills the rest of the limit")
}

// Nobody starves when the queue is long enough: with both overloaded,
// priority 0 (cost 256) is still admitted once for every 256 admissions
// of priority 255 (cost 1).
func TestWFQLowestPriorityProgressesUnderOverload(t *testing.T) {
	t.Parallel()
	o := newOverload(t, 100, 600, 10,
		overloadClass{req: Request{Priority: 255, Weight: 1}, perTick: 20},
		overloadClass{req: Request{Priority: 0, Weight: 1}, perTick: 20},
	)
	o.run(500) // the limit fills up from idle: both classes are admitted at once
	o.resetCounts()
	o.run(6000)
	high, low := o.classes[0], o.classes[1]
	t.Logf("admitted %d (255) and %d (0), ratio %.1f", high.admitted, low.admitted, float64(high.admitted)/float64(low.admitted))
	require.Positive(t, low.admitted)
	require.InEpsilon(t, 256.0, float64(high.admitted)/float64(low.admitted), 0.10)
}
