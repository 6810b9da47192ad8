package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sampleOne admits one lease, lets rtt pass and releases it.
func sampleOne(t *testing.T, l *Limiter, clk *fakeClock, rtt time.Duration) {
	t.Helper()
	settleOne(t, l, clk, rtt, Lease.Release)
}

// settleOne admits one lease, lets rtt pass and settles it with settle.
func settleOne(t *testing.T, l *Limiter, clk *fakeClock, rtt time.Duration, settle func(Lease)) {
	t.Helper()
	le, ok := l.TryAcquire()
	require.True(t, ok)
	clk.Advance(rtt)
	settle(le)
}

func TestGuardLoneIdleProcessDoesNotGrow(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	for range 100 {
		sampleOne(t, l, clk, 10*time.Millisecond)
	}
	require.Equal(t, 100.0, l.Estimate(), "one request at a time says nothing about a capacity of 100")
}

func TestGuardFleetLoadNearEstimateGrows(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(3) // this node's share: its own in-flight stays tiny
	l.SetPeerInflight(60)
	sampleOne(t, l, clk, 10*time.Millisecond)
	require.Greater(t, l.Estimate(), 100.0, "own 1 + peers 60 ≥ 0.5·100")
	require.Equal(t, 3, l.Limit(), "the ceiling still caps admission")
}

func TestGuardFleetIdleDoesNotGrow(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetPeerInflight(60)
	sampleOne(t, l, clk, 10*time.Millisecond)
	grown := l.Estimate()
	require.Greater(t, grown, 100.0)

	l.SetPeerInflight(0) // the fleet went idle
	for range 50 {
		sampleOne(t, l, clk, 10*time.Millisecond)
	}
	require.Equal(t, grown, l.Estimate())

	l.SetPeerInflight(-5) // counts as 0
	require.Zero(t, l.Snapshot().PeerInflight)
}

func TestGuardNeverBlocksDecreases(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond)
	// Idle here, but latency triples: the peers are loading the backend.
	// (By default the first round beyond the noise band may be noise; the
	// second in a row cuts.)
	sampleOne(t, l, clk, 30*time.Millisecond)
	sampleOne(t, l, clk, 30*time.Millisecond)
	require.Less(t, l.Estimate(), 100.0)

	le, _ := l.TryAcquire()
	before := l.Estimate()
	le.Drop()
	// After a round trip at three times rttNoload a drop halves the
	// estimate (see TestDropAfterQueueingBacksOffByTheQueue).
	require.InDelta(t, before*0.5, l.Estimate(), 1e-9)
}

func TestGuardLoadIsMaxOfAdmissionAndSettlement(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20})
	// Admitted alone, settled while 10 others run: load 11 at settlement.
	first, _ := l.TryAcquire()
	others := acquireN(t, l, 10)
	clk.Advance(10 * time.Millisecond)
	first.Release()
	require.Greater(t, l.Estimate(), 20.0)

	// Admitted while 10 others ran (load 11), settled alone.
	e := l.Estimate()
	last, _ := l.TryAcquire()
	for _, le := range others {
		le.Ignore()
	}
	clk.Advance(10 * time.Millisecond)
	last.Release()
	require.Greater(t, l.Estimate(), e)
}

func TestGuardThreshold(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20, UtilizationThreshold: 1})
	leases := acquireN(t, l, 19)
	clk.Advance(10 * time.Millisecond)
	leases[0].Release()
	require.Equal(t, 20.0, l.Estimate(), "19 < 1.0·20")
	for _, le := range leases[1:] {
		le.Ignore()
	}
}
