package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
	"github.com/fleetlimit/fleetlimit/pace"
	"github.com/fleetlimit/fleetlimit/quota"
)

// TestLeaseRefuseHoldsTheSlot: Lease.Refuse keeps a refusal's slot as
// Transport does — RTTNoload after the request was sent, then twice as
// long at each refusal in a row at the last slot beside a peer, up to
// 8 × RTTNoload; a Release starts again from one, and a lone node keeps
// the single hold — where Drop frees it at once.
//
// Each case runs in a bubble, so the waits are the node's own: exact
// whatever the machine's load.
func TestLeaseRefuseHoldsTheSlot(t *testing.T) {
	t.Parallel()
	const (
		noload = 100 * time.Millisecond
		rtt    = noload / 4 // each request's time at the upstream before it is settled
	)
	// held settles each lease with settle(i) and returns how long the
	// next admission waited after it.
	held := func(t *testing.T, peered bool, settle func(Lease, int)) []time.Duration {
		n := lastSlotNode(t, peered)
		measureNoload(t, n, noload)
		// The waits and sends add up to about 26·noload (2.6 s) by design.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		le, err := n.Acquire(ctx)
		require.NoError(t, err)
		var waits []time.Duration
		for i := range 8 {
			time.Sleep(rtt) // the hold counts from when the request was sent
			settled := time.Now()
			settle(le, i)
			le, err = n.Acquire(ctx)
			require.NoError(t, err, "admission %d", i+1)
			waits = append(waits, time.Since(settled))
		}
		le.Ignore()
		return waits
	}
	refuse := func(le Lease, i int) {
		if i == 5 {
			le.ReleaseRTT(noload)
			return
		}
		le.Refuse(0)
	}
	// in is the waits of holds of mults × RTTNoload, each counted from
	// when its request was sent, rtt before it was settled; 0 is none.
	in := func(mults ...time.Duration) []time.Duration {
		var out []time.Duration
		for _, m := range mults {
			out = append(out, max(m*noload-rtt, 0))
		}
		return out
	}
	t.Run("peered", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			// Twice as long at each refusal in a row, up to 8; the
			// served request (the sixth) frees its slot at once and
			// starts the streak again from one.
			require.Equal(t, in(1, 2, 4, 8, 8, 0, 1, 2), held(t, true, refuse))
		})
	})
	t.Run("lone", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			require.Equal(t, in(1, 1, 1, 1, 1, 0, 1, 1), held(t, false, refuse), "a lone node keeps the single hold")
		})
	})
	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			require.Equal(t, in(0, 0, 0, 0, 0, 0, 0, 0), held(t, true, func(le Lease, _ int) { le.Drop() }), "Drop frees the slot at once")
		})
	})
}

// lastSlotNode starts node a of a fresh key with a limit of exactly 1
// and, when peered, an idle node b beside it, so that a's last grant
// counts another live node.
func lastSlotNode(t *testing.T, peered bool) *Node {
	t.Helper()
	c := coord.NewMemory(nil)
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 1}
	n := startNode(t, c, cfg)
	if peered {
		startNode(t, c, testConfig("k", "b")) // idle: node a keeps the whole L_global of 1
		eventually(t, func() bool { return n.State().LiveNodes == 2 }, "b joined: %+v", n.State())
	}
	return n
}

// measureNoload serves three requests of n in noload each, so that
// noload is its RTTNoload.
func measureNoload(t *testing.T, n *Node, noload time.Duration) {
	t.Helper()
	for range 3 {
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		le.ReleaseRTT(noload)
	}
	require.Equal(t, noload, n.Limiter().RTTNoload())
}

// TestLeaseRefuseRetryAfter: a positive retryAfter pauses the node's
// admission, capped at quota.MaxRetryAfter; zero or a negative one
// pauses nothing; a lease settled before is left alone, and the zero
// Lease's Refuse does nothing.
func TestLeaseRefuseRetryAfter(t *testing.T) {
	t.Parallel()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	refuse := func(d time.Duration) {
		t.Helper()
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		le.Refuse(d)
	}
	refuse(0)
	refuse(-time.Hour)
	require.True(t, n.Limiter().Snapshot().PausedUntil.IsZero(), "no pause")

	le, err := n.Acquire(t.Context())
	require.NoError(t, err)
	le.Release()
	le.Refuse(time.Hour) // settled: nothing
	require.True(t, n.Limiter().Snapshot().PausedUntil.IsZero(), "a settled lease pauses nothing")
	Lease{}.Refuse(time.Hour)

	// A waiter queued behind the refused lease fails with ErrPaused: the
	// pause comes before the slot is freed, here at once (no RTTNoload
	// yet, so no hold).
	cfg := testConfig("k2", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 4}
	one := startNode(t, coord.NewMemory(nil), cfg)
	first, err := one.Acquire(t.Context())
	require.NoError(t, err)
	waiter := make(chan error, 1)
	go func() {
		le, err := one.Acquire(t.Context())
		if err == nil {
			le.Ignore()
		}
		waiter <- err
	}()
	eventually(t, func() bool { return one.Limiter().Queued() == 1 }, "the waiter queued")
	first.Refuse(time.Minute)
	require.ErrorIs(t, <-waiter, adaptive.ErrPaused, "the waiter is not sent to an upstream that asked for a pause")

	before := time.Now()
	refuse(1000 * time.Hour)
	until := n.Limiter().Snapshot().PausedUntil
	require.WithinRange(t, until, before.Add(quota.MaxRetryAfter), time.Now().Add(quota.MaxRetryAfter))
	_, err = n.Acquire(t.Context())
	require.ErrorIs(t, err, adaptive.ErrPaused)
}

// TestFloorBackoffStreak: a streak of refusals at the last slot counts one
// per round trip — a request sent before the last refusal came back adds
// nothing — stops at maxFloorBackoff, and starts again after a request
// admitted since the last refusal came back is served, or twice the
// longest hold without a refusal; a request served that was admitted
// before it does not end the streak.
func TestFloorBackoffStreak(t *testing.T) {
	t.Parallel()
	const noload = 10 * time.Millisecond
	t0 := time.Unix(0, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var f floorBackoff
	// Each sent after the last came back: 1, 2, 4, 8, 8 × noload.
	var got []int
	for i := range 5 {
		sent := at(time.Duration(100*i) * time.Millisecond)
		got = append(got, f.refused(sent, sent.Add(time.Millisecond), noload))
	}
	require.Equal(t, []int{1, 2, 3, 4, 4}, got)

	f.served(at(401 * time.Millisecond)) // admitted after the last refusal came back
	require.Equal(t, 1, f.refused(at(time.Second), at(time.Second+time.Millisecond), noload))
	// Five sent together, refused together: one round trip.
	for range 5 {
		require.Equal(t, 2, f.refused(at(1010*time.Millisecond), at(1011*time.Millisecond), noload))
	}
	require.Equal(t, 3, f.refused(at(1020*time.Millisecond), at(1021*time.Millisecond), noload))
	// A request served that was admitted before the last refusal came back
	// (a long stream) leaves the streak alone.
	f.served(at(1020 * time.Millisecond))
	f.served(at(500 * time.Millisecond))
	f.mu.Lock()
	require.Equal(t, 3, f.k, "a served request admitted before the last refusal came back")
	f.mu.Unlock()
	// 2 × 8 × noload after the last refusal: still the streak; later: over.
	require.Equal(t, 4, f.refused(at(1180*time.Millisecond), at(1181*time.Millisecond), noload))
	require.Equal(t, 1, f.refused(at(1400*time.Millisecond), at(1401*time.Millisecond), noload))
}

// TestLeaseUnavailableSparesTheLearnedRate: Refuse counts against a
// learned rate as Transport's 429 does; Unavailable, like Transport's 503,
// does not.
func TestLeaseUnavailableSparesTheLearnedRate(t *testing.T) {
	t.Parallel()
	learning := func(key string) *Node {
		cfg := testConfig(key, "a")
		cfg.Rate = RateConfig{Learn: true, Learner: pace.LearnerConfig{SeedRate: 10, MinRate: 1, MaxRate: 100, CutEarlyAfter: 3}}
		return startNode(t, coord.NewMemory(nil), cfg)
	}
	refused, unavailable := learning("r"), learning("u")
	for range 6 {
		for n, settle := range map[*Node]func(Lease){
			refused:     func(le Lease) { le.Refuse(0) },
			unavailable: func(le Lease) { le.Unavailable(0) },
		} {
			le, err := n.Acquire(t.Context())
			require.NoError(t, err)
			settle(le)
		}
	}
	now := time.Now()
	require.Less(t, refused.learner().Rate(now), 10.0, "six 429s cut the learned rate")
	require.Equal(t, 10.0, unavailable.learner().Rate(now), "503s leave it")
	require.Equal(t, uint64(6), unavailable.State().Drops, "a 503 is still a drop")
}

// TestRefusalHoldAtLimitZeroKeepsTheSingleHold: at a limit of 0 (a node
// stopping, fenced, or granted nothing) a refusal holds its slot one
// no-load round trip, whatever streak of refusals at the last slot came
// before it; the doubling is for a limit of exactly 1.
func TestRefusalHoldAtLimitZeroKeepsTheSingleHold(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		const noload = 20 * time.Millisecond
		n := lastSlotNode(t, true)
		measureNoload(t, n, noload)
		require.Equal(t, 1, n.Limiter().Limit())
		for k := range 3 { // a streak at the last slot: each refusal admitted after the last came back
			time.Sleep(time.Millisecond)
			now := time.Now()
			require.Equal(t, noload<<k, n.refusalHold(now, 0, now), "refusal %d in a row", k+1)
		}
		n.lim.SetCeiling(0)
		time.Sleep(time.Millisecond)
		now := time.Now()
		require.Equal(t, noload, n.refusalHold(now, 0, now), "at a limit of 0, the single hold")
	})
}
