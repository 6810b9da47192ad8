package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// TryAcquireRequest admits a Request now or says why not, like the
// limiter's: no room (counted as unmet demand of the request's weight), a
// bad weight, or the node's own refusals. AcquireRequest takes its
// Request as given, whatever the context carries.
func TestTryAcquireRequest(t *testing.T) {
	t.Parallel()
	rc := &recordingCoordinator{Coordinator: coord.NewMemory(nil)}
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 10}
	n := startNode(t, rc, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// An idle node's share is 0: the first request waits for the share
	// its demand brings, and while it is held the share stays the limit.
	six, err := n.AcquireRequest(ctx, adaptive.Request{Priority: 200, Weight: 6})
	require.NoError(t, err)
	eventually(t, func() bool { return n.State().Limit == 10 }, "the node is granted the key's limit")

	four, err := n.TryAcquireRequest(adaptive.Request{Priority: 201, Weight: 4})
	require.NoError(t, err)
	require.Equal(t, 10, n.State().Inflight)
	require.WithinDuration(t, time.Now().Add(DefaultMaxRequestDuration), four.Deadline(), time.Second,
		"the lease carries the request's hard bound")
	_, err = n.TryAcquireRequest(adaptive.Request{Priority: 202, Weight: 5})
	require.ErrorIs(t, err, adaptive.ErrWouldWait)
	eventually(t, func() bool { return rc.maxDemand() >= 10+5 }, "the refused weight is reported as demand")
	_, ok := n.TryAcquire()
	require.False(t, ok, "the limit is full")
	_, err = n.TryAcquireRequest(adaptive.Request{Priority: 202, Weight: 0})
	require.ErrorIs(t, err, adaptive.ErrInvalidRequest)
	_, err = n.TryAcquireRequest(adaptive.Request{Priority: 202, Weight: 11})
	require.ErrorIs(t, err, adaptive.ErrTooHeavy)
	require.EqualError(t, err, "adaptive: request heavier than the limit: Request.Weight = 11 exceeds Config.Limiter.MaxLimit = 10: it can never be admitted")
	four.Release()

	// The Request given wins over the context's weight and priority.
	four, err = n.AcquireRequest(WithWeight(WithPriority(ctx, 9), 5), adaptive.Request{Priority: 250, Weight: 4})
	require.NoError(t, err)
	require.Equal(t, 10, n.State().Inflight)
	require.Equal(t, uint64(1), statsAt(n, 250).Admitted)
	require.Zero(t, statsAt(n, 9).Admitted+statsAt(n, 9).Refused)
	require.Equal(t, uint64(1), statsAt(n, 201).Admitted)
	require.Equal(t, uint64(2), statsAt(n, 202).Refused, "no room, and too heavy; a bad weight is no refusal")
	six.Release()
	four.Release()
	require.Zero(t, n.State().Inflight)
}

// statsAt returns n's counters for priority p (zero if it saw nothing).
func statsAt(n *Node, p uint8) adaptive.PriorityStats {
	for _, s := range n.PriorityStats() {
		if s.Priority == p {
			return s
		}
	}
	return adaptive.PriorityStats{Priority: p}
}

// The admissions the node refuses itself — not started, heavier than
// L_global, fenced, stopped — count at their priority in PriorityStats and
// in fleetlimit_priority_refused_total, as the limiter's refusals do.
func TestNodeRefusalsCountPerPriority(t *testing.T) {
	t.Parallel()
	h := &hangingCoordinator{Coordinator: coord.NewMemory(nil)}
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 100, MaxQueued: 10}
	n, err := NewWithCoordinator(h, cfg)
	require.NoError(t, err)

	_, err = n.Acquire(WithPriority(t.Context(), 1))
	require.ErrorIs(t, err, ErrNotStarted)
	require.NoError(t, n.Start(t.Context()))
	eventually(t, func() bool { return n.State().LGlobal == 10 }, "granted")

	_, err = n.Acquire(WithWeight(WithPriority(t.Context(), 2), 11))
	require.ErrorIs(t, err, adaptive.ErrTooHeavy)
	require.ErrorContains(t, err, "exceeds the key's global limit L_global = 10")
	_, err = n.TryAcquireRequest(adaptive.Request{Priority: 2, Weight: 12})
	require.ErrorIs(t, err, adaptive.ErrTooHeavy)

	h.setHang(true)
	eventually(t, func() bool { return n.State().Fenced }, "fenced during the partition")
	_, err = n.Acquire(WithPriority(t.Context(), 3))
	require.ErrorIs(t, err, ErrFenced)
	_, err = n.TryAcquireRequest(adaptive.Request{Priority: 3, Weight: 1})
	require.ErrorIs(t, err, ErrFenced)
	_, ok := n.TryAcquire()
	require.False(t, ok)
	h.setHang(false)
	eventually(t, func() bool { return !n.State().Fenced }, "renewed")

	// One the limiter refuses (the limit is full) counts once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	full, err := n.AcquireRequest(ctx, adaptive.Request{Priority: 4, Weight: 10})
	require.NoError(t, err)
	_, err = n.TryAcquireRequest(adaptive.Request{Priority: 4, Weight: 1})
	require.ErrorIs(t, err, adaptive.ErrWouldWait)
	full.Release()

	require.NoError(t, n.Stop(ctx))
	_, err = n.Acquire(WithPriority(t.Context(), 5))
	require.ErrorIs(t, err, ErrStopped)

	refused := map[uint8]uint64{}
	for _, s := range n.PriorityStats() {
		refused[s.Priority] = s.Refused
	}
	require.Equal(t, map[uint8]uint64{1: 1, 2: 2, 3: 2, 4: 1, 5: 1, adaptive.DefaultPriority: 1}, refused)
	require.Equal(t, uint64(1), statsAt(n, 4).Admitted, "the limiter's counters are kept")

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(n.Collector()))
	want := `
# HELP fleetlimit_priority_refused_total Requests at this priority refused: by the local limiter (no room for TryAcquire, queue full on arrival or evicted, paused, heavier than MaxLimit) or by the node (not started, stopped, evicted, fenced, heavier than L_global, the rate share spent for TryAcquire, a wait for the rate past MaxRequestDuration).
# TYPE fleetlimit_priority_refused_total counter
fleetlimit_priority_refused_total{key="k",node="a",priority="1"} 1
fleetlimit_priority_refused_total{key="k",node="a",priority="128"} 1
fleetlimit_priority_refused_total{key="k",node="a",priority="2"} 2
fleetlimit_priority_refused_total{key="k",node="a",priority="3"} 2
fleetlimit_priority_refused_total{key="k",node="a",priority="4"} 1
fleetlimit_priority_refused_total{key="k",node="a",priority="5"} 1
# HELP fleetlimit_rejections_total ` + rejectionsHelp + `
# TYPE fleetlimit_rejections_total counter
fleetlimit_rejections_total{key="k",node="a"} 8
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleetlimit_priority_refused_total", "fleetlimit_rejections_total"))
}

// A request heavier than the limit fails at once, even before the limit
// has had the load to grow: with the default InitialLimit of 20, a weight
// of 50 on a new key is refused, and the error names the fix. With
// InitialLimit sized for the heaviest request it is admitted as soon as
// Start returns; and a node joining a key whose L_global already holds it
// starts there (the warm start, applied before Start returns), whatever
// its own InitialLimit.
func TestHeavyRequestAtStart(t *testing.T) {
	t.Parallel()
	heavy := func(ctx context.Context) context.Context { return WithWeight(WithPriority(ctx, 200), 50) }

	t.Run("default InitialLimit", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig("k", "a")
		cfg.Limiter = adaptive.Config{MaxQueued: 10} // InitialLimit 20
		n := startNode(t, coord.NewMemory(nil), cfg)
		require.Equal(t, 20, n.State().LGlobal)
		_, err := n.Acquire(heavy(t.Context())) // a context without deadline: it must not wait
		require.ErrorIs(t, err, adaptive.ErrTooHeavy)
		require.ErrorContains(t, err, "Request.Weight = 50 exceeds the key's global limit L_global = 20")
		require.ErrorContains(t, err, "Config.Limiter.InitialLimit")
		require.Zero(t, n.State().Queued, "nothing waits")
		require.Equal(t, uint64(1), statsAt(n, 200).Refused)
	})

	t.Run("InitialLimit sized for it", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig("k", "a")
		cfg.Limiter = adaptive.Config{InitialLimit: 64, MaxQueued: 10}
		n := startNode(t, coord.NewMemory(nil), cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		le, err := n.Acquire(heavy(ctx))
		require.NoError(t, err)
		require.Equal(t, 50, n.State().Inflight)
		le.Release()
	})

	t.Run("joining a key that holds it", func(t *testing.T) {
		t.Parallel()
		c := coord.NewMemory(nil)
		cfg := testConfig("k", "a")
		cfg.Limiter = adaptive.Config{InitialLimit: 64, MaxQueued: 10}
		startNode(t, c, cfg)
		cfg = testConfig("k", "b")
		cfg.Limiter = adaptive.Config{MaxQueued: 10} // InitialLimit 20
		b := startNode(t, c, cfg)
		require.Equal(t, 64.0, b.State().Estimate, "warm-started before Start returned")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		le, err := b.Acquire(heavy(ctx)) // waits, if at all, for the share
		require.NoError(t, err)
		require.Equal(t, 50, b.State().Inflight)
		le.Release()
	})
}

// A caller that polls TryAcquire less often than the node heartbeats is
// admitted: its refusal keeps counting as demand for LeaseTTL, so the
// share it wins is still there at its next try.
func TestPollingTryAcquireIsServed(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
		time.Sleep(time.Second) // no demand: the share goes back to 0
		require.Zero(t, n.State().Share)
		admitted := 0
		for range 20 {
			if le, ok := n.TryAcquire(); ok {
				admitted++
				le.Release()
			}
			time.Sleep(5 * n.cfg.HeartbeatInterval)
		}
		require.Equal(t, 19, admitted, "every try but the first finds a share")
	})
}

// A caller whose wait ends (its deadline) before the share its demand
// asks for arrives holds that demand as a floor too: its next try, within
// a lease TTL, finds the share.
func TestShortDeadlineAcquireIsServed(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		cfg := testConfig("k", "a")
		cfg.Limiter.MaxQueued = 16
		n := startNode(t, coord.NewMemory(nil), cfg)
		time.Sleep(time.Second) // no demand: the share goes back to 0
		require.Zero(t, n.State().Share)
		admitted := 0
		for range 20 {
			ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
			if le, err := n.Acquire(ctx); err == nil {
				admitted++
				le.Release()
			}
			cancel()
			time.Sleep(5 * n.cfg.HeartbeatInterval)
		}
		require.Equal(t, 19, admitted, "every try but the first finds a share")
	})
}

// TestIdleNodeSaysWhyItRefuses: a node that gave its share up while idle
// refuses a request it cannot queue (MaxQueued 0, the default) with the
// reason and the fix, and its demand wins a share at its next heartbeat.
func TestIdleNodeSaysWhyItRefuses(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		cfg := testConfig("k", "a")
		cfg.Limiter.MaxQueued = 0
		n := startNode(t, coord.NewMemory(nil), cfg)
		// Wake between the loop's timers (heartbeats every interval, polls
		// every 5 ms): at one of them a heartbeat could run beside the
		// refusals below and report their demand before they are checked.
		time.Sleep(3*cfg.HeartbeatInterval + time.Millisecond)
		require.Zero(t, n.State().Share, "idle: no share")
		_, err := n.Acquire(t.Context())
		require.ErrorIs(t, err, adaptive.ErrQueueFull)
		require.ErrorIs(t, err, ErrNoShare)
		require.NotErrorIs(t, err, ErrShareRising)
		require.ErrorContains(t, err, `node "a" of key "k" holds no share now`)
		require.ErrorContains(t, err, "its demand asks for one at its next heartbeat: set Limiter.MaxQueued so that requests wait for it, or retry")
		_, err = n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1})
		require.ErrorIs(t, err, adaptive.ErrWouldWait)
		require.ErrorContains(t, err, "at its next heartbeat: retry after its next heartbeat", "TryAcquire never waits")
		time.Sleep(cfg.HeartbeatInterval)
		le, err := n.Acquire(t.Context())
		require.NoError(t, err, "its demand won a share")
		le.Release()
	})
}

// TestRampingNodeSaysWhyItRefuses: right after Start a node takes its
// share up over half a heartbeat (no round trip measured yet), its first
// slot at once. A request it cannot queue meanwhile (MaxQueued 0, the
// default) is refused with that reason and the fix; once the rise is
// over the whole share admits at once.
func TestRampingNodeSaysWhyItRefuses(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		cfg := testConfig("k", "a")
		cfg.HeartbeatInterval = time.Second
		cfg.LeaseTTL = 4 * time.Second
		cfg.FenceMargin = time.Second
		cfg.Limiter = adaptive.Config{} // InitialLimit 20, MaxQueued 0
		n := startNode(t, coord.NewMemory(nil), cfg)
		require.Equal(t, 20, n.State().Share)
		first, err := n.Acquire(t.Context())
		require.NoError(t, err, "the first slot at once")
		_, err = n.Acquire(t.Context())
		require.ErrorIs(t, err, adaptive.ErrQueueFull)
		require.ErrorIs(t, err, ErrShareRising)
		require.NotErrorIs(t, err, ErrNoShare)
		require.ErrorContains(t, err, `node "a" of key "k" is taking up its share of 20 over 500ms and admits 1 now`)
		require.ErrorContains(t, err, "set Limiter.MaxQueued so that requests wait for their turn, or retry")
		_, err = n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1})
		require.ErrorIs(t, err, adaptive.ErrWouldWait)
		require.ErrorContains(t, err, "admits 1 now")
		require.ErrorContains(t, err, "one after another): retry", "TryAcquire never waits")
		first.Release()

		time.Sleep(cfg.HeartbeatInterval/2 + time.Millisecond) // past the rise's last step
		var held []Lease
		for range 20 {
			le, err := n.Acquire(t.Context())
			require.NoError(t, err, "after the rise, the whole share")
			held = append(held, le)
		}
		for _, le := range held {
			le.Release()
		}
	})
}
