package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// TestShareRiseIsRamped: a share that rises reaches the limiter as a
// straight line over half a heartbeat interval (no round trip has ended,
// so no shorter span is known), its first slot at once; a share that
// falls and a fence apply at once, and after a fence the share is taken
// up from nothing again.
func TestShareRiseIsRamped(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		mem := coord.NewMemory(nil)
		h := &hangingCoordinator{Coordinator: mem}
		cfg := testConfig("k", "a") // heartbeat 20ms: a span of 10ms
		span := cfg.HeartbeatInterval / 2
		n := startNode(t, h, cfg)
		require.Equal(t, 10, n.State().Share)
		require.Equal(t, 1, n.State().Limit, "the first slot at once")

		// Hold requests as they are admitted, so the demand keeps the
		// share at 10.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		held := make(chan Lease, 100)
		for range 10 {
			go func() {
				if le, err := n.Acquire(ctx); err == nil {
					held <- le
				}
			}()
		}
		time.Sleep(span / 2)
		require.InDelta(t, 5, n.State().Limit, 1, "halfway along the line")
		time.Sleep(span/2 + time.Millisecond)
		require.Equal(t, 10, n.State().Limit, "the whole share after the span")
		require.Len(t, held, 10)

		// A lower share (an operator's max) applies at the grant itself.
		four := 4
		require.NoError(t, mem.SetLimits(t.Context(), "k", nil, &four))
		st := waitState(t, n, func(st State) bool { return st.Share != 10 })
		require.Equal(t, 4, st.Share)
		require.Equal(t, 4, st.Limit, "a fall applies at once")

		// A higher one (an operator's min) starts again from there.
		ten := 10
		require.NoError(t, mem.SetLimits(t.Context(), "k", &ten, nil))
		st = waitState(t, n, func(st State) bool { return st.Share != 4 })
		require.Equal(t, 10, st.Share)
		require.Equal(t, 5, st.Limit, "one slot more at once")
		time.Sleep(span + time.Millisecond)
		require.Equal(t, 10, n.State().Limit)

		// A fence takes the limit to 0 at once; the share after it is
		// taken up from nothing.
		h.setHang(true)
		st = waitState(t, n, func(st State) bool { return st.Fenced })
		require.Zero(t, st.Limit, "fenced")
		h.setHang(false)
		st = waitState(t, n, func(st State) bool { return !st.Fenced })
		require.Positive(t, st.Share)
		require.Less(t, st.Limit, max(st.Share, 2), "taken up from nothing, not at once")
		time.Sleep(span + time.Millisecond)
		st = n.State()
		require.Equal(t, st.Share, st.Limit)
		for range 10 {
			(<-held).Release()
		}
	})
}

// waitState polls n's state every virtual millisecond until cond holds
// and returns it; inside a bubble, so the state is read at the instant it
// first holds, before any later timer runs.
func waitState(t *testing.T, n *Node, cond func(State) bool) State {
	t.Helper()
	for range 10_000 {
		if st := n.State(); cond(st) {
			return st
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the state never came: %+v", n.State())
	return State{}
}

// TestRampRefusalsAreNoDemand: while the limiter's ceiling climbs to a
// share the node holds, a TryAcquire it refuses within that share asks
// for no more share: the report after it carries the in-flight peak
// alone, not the refusals as unmet demand.
func TestRampRefusalsAreNoDemand(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		rc := &recordingCoordinator{Coordinator: coord.NewMemory(nil)}
		n := startNode(t, rc, testConfig("k", "a")) // share 10
		from := rc.reports()
		le, ok := n.TryAcquire()
		require.True(t, ok, "the first slot at once")
		defer le.Release()
		for range 4 {
			_, ok := n.TryAcquire()
			require.False(t, ok, "refused by the ramp")
		}
		n.mu.Lock()
		unmet := n.unmet
		n.mu.Unlock()
		require.Zero(t, unmet, "a refusal within the share is no unmet demand")
		waitState(t, n, func(State) bool { return rc.reports() > from })
		require.Equal(t, []int{1}, rc.demandsSince(from)[:1], "the peak in flight, no more")
	})
}

// TestRampAfterAnExpiredCeiling: a ceiling whose deadline passed admits
// nothing; a renewal that comes before the fence's timer runs is taken
// up from nothing, as after a fence.
func TestRampAfterAnExpiredCeiling(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
		time.Sleep(15 * time.Millisecond) // ramped up, before the next heartbeat
		n.mu.Lock()
		require.Equal(t, 10, n.ramp.level)
		n.ramp.until = time.Now() // as if the deadline had just passed
		n.applyCeilingLocked()
		level := n.ramp.level
		n.mu.Unlock()
		require.Equal(t, 1, level, "taken up from nothing, its first slot at once")
	})
}
