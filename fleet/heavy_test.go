package fleet

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// A request within L_global but heavier than the node's share waits for
// its share to grow, counted as demand, without holding back the lighter
// requests the share holds — of its own priority too. Before, the light
// request waited behind it for as long as the other node held its part.
func TestHeavierThanTheShareDoesNotBlockTheNode(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	rc := &recordingCoordinator{Coordinator: mem}
	limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 10}
	cfgA, cfgB := testConfig("k", "a"), testConfig("k", "b")
	cfgA.Limiter, cfgB.Limiter = limits, limits
	a := startNode(t, rc, cfgA)
	b := startNode(t, mem, cfgB)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	big, err := b.AcquireRequest(ctx, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 8})
	require.NoError(t, err)

	heavy := make(chan error, 1)
	go func() {
		le, err := a.AcquireRequest(t.Context(), adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 8})
		if err == nil {
			le.Release()
		}
		heavy <- err
	}()
	eventually(t, func() bool { return a.State().Queued == 1 }, "the heavy request waits")

	lightCtx, cancelLight := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancelLight()
	light, err := a.AcquireRequest(lightCtx, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1})
	require.NoError(t, err, "the light request does not wait behind one the share cannot hold")
	sa, sb := a.State(), b.State()
	require.LessOrEqual(t, sa.Share, 2, "b holds 8 of 10")
	require.LessOrEqual(t, sa.Inflight+sb.Inflight, 10)
	eventually(t, func() bool { return rc.maxDemand() >= 8+1 }, "the waiting weight counts as demand")

	big.Release()
	light.Release()
	select {
	case err := <-heavy:
		require.NoError(t, err, "admitted once the share held it")
	case <-time.After(5 * time.Second):
		t.Fatal("the heavy request was not admitted after b released its part")
	}
}

// A weight above L_global fails at once, through every admission path,
// with an error that says how to admit it, and its weight counts as demand
// the node could not serve (as much of it as a refusal adds: at most the
// peak again).
func TestHeavierThanLGlobalSaysHowAndCountsAsDemand(t *testing.T) {
	t.Parallel()
	rc := &recordingCoordinator{Coordinator: coord.NewMemory(nil)}
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 10, MaxLimit: 100, MaxQueued: 10}
	n := startNode(t, rc, cfg)
	require.Equal(t, 10, n.State().LGlobal)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	held, err := n.AcquireRequest(ctx, adaptive.Request{Weight: 10})
	require.NoError(t, err)
	defer held.Release()

	srv, release, _ := holdingServer(t)
	close(release)
	client := &http.Client{Transport: n.Transport(nil)}
	for _, tc := range []struct {
		path  string
		admit func(w int) error
	}{
		{"Acquire", func(w int) error { _, err := n.Acquire(WithWeight(t.Context(), w)); return err }},
		{"AcquireRequest", func(w int) error {
			_, err := n.AcquireRequest(t.Context(), adaptive.Request{Weight: w})
			return err
		}},
		{"TryAcquireRequest", func(w int) error { _, err := n.TryAcquireRequest(adaptive.Request{Weight: w}); return err }},
		{"Transport", func(w int) error { return send(t.Context(), client, srv.URL, "heavy", 9, w) }},
	} {
		from := rc.reports()
		err := tc.admit(30)
		require.ErrorIs(t, err, adaptive.ErrTooHeavy, tc.path)
		require.ErrorContains(t, err, "Request.Weight = 30 exceeds the key's global limit L_global = 10")
		require.ErrorContains(t, err, "'fleetctl limits set k --min 30'")
		require.ErrorContains(t, err, "Config.Limiter.InitialLimit of at least 30")
		eventually(t, func() bool { return rc.maxDemandSince(from) == 10+10 },
			"%s: the refused weight counts as demand, up to the peak again", tc.path)

		// A weight no L_global could help is the limiter's to refuse, and
		// sums no overflow into the demand.
		from = rc.reports()
		err = tc.admit(math.MaxInt)
		require.ErrorIs(t, err, adaptive.ErrTooHeavy, tc.path)
		require.ErrorContains(t, err, "Config.MaxLimit = 100")
		eventually(t, func() bool { return rc.reports() > from+2 }, "%s: reports go on", tc.path)
		for _, d := range rc.demandsSince(from) {
			require.GreaterOrEqual(t, d, 10, tc.path)
			require.LessOrEqual(t, d, 10+10, tc.path)
		}
	}
	require.Equal(t, 10, n.State().Inflight)
}

// reports returns how many reports r has seen.
func (r *recordingCoordinator) reports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.demands)
}

// demandsSince returns the demands of the reports after the first i.
func (r *recordingCoordinator) demandsSince(i int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.demands[i:]...)
}

// maxDemandSince returns the largest demand of the reports after the
// first i, or -1 if there are none.
func (r *recordingCoordinator) maxDemandSince(i int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := -1
	for _, d := range r.demands[i:] {
		m = max(m, d)
	}
	return m
}

// A refusal that no share cures — a weight above L_global, which grows
// only with the load the fleet admits, or a pause — counts as demand at
// most up to the peak again, and holds no floor: a node retrying one
// takes no share from a busy peer, and a paused node asks for no more
// than one slot.
func TestRefusalsNoShareCuresHoldNoFloor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxLimit int
		weight   int
	}{
		{"weight above L_global", 100, 30},
		{"weight L_global can never reach", 2_000_000, 1_500_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := coord.NewMemory(nil)
				ten := 10
				require.NoError(t, mem.CreateKey(t.Context(), "k", &ten, &ten))
				cfgA, cfgB := testConfig("k", "a"), testConfig("k", "b")
				cfgA.Limiter = adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 100, MaxQueued: 100}
				cfgB.Limiter = cfgA.Limiter
				cfgB.Limiter.MaxLimit = tc.maxLimit
				a, b := startNode(t, mem, cfgA), startNode(t, mem, cfgB)
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				for range 20 { // a is busy: 20 callers of weight 1
					wg.Go(func() {
						for ctx.Err() == nil {
							if le, err := a.Acquire(ctx); err == nil {
								time.Sleep(10 * time.Millisecond)
								le.Release()
							}
						}
					})
				}
				wg.Go(func() { // b retries its heavy request
					for ctx.Err() == nil {
						_, _ = b.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: tc.weight})
						time.Sleep(50 * time.Millisecond)
					}
				})
				time.Sleep(time.Second)
				for range 20 {
					require.GreaterOrEqual(t, a.State().Share, 9, "the busy node keeps all but b's one slot")
					time.Sleep(25 * time.Millisecond)
				}
				cancel()
				wg.Wait()
			})
		})
	}
	t.Run("paused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rc := &recordingCoordinator{Coordinator: coord.NewMemory(nil)}
			cfg := testConfig("k", "b")
			cfg.Limiter = adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 100, MaxQueued: 100}
			n := startNode(t, rc, cfg)
			time.Sleep(100 * time.Millisecond)
			n.Limiter().RetryAfter(3 * time.Second)
			from := rc.reports()
			for range 50 {
				_, err := n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 8})
				require.ErrorIs(t, err, adaptive.ErrPaused)
				time.Sleep(20 * time.Millisecond)
			}
			require.Equal(t, 1, rc.maxDemandSince(from), "a paused node with nothing in flight")
		})
	})
}

// A request queued for its share fails with ErrTooHeavy once L_global
// falls below its weight (an operator's lower max), as a new one would,
// instead of waiting for a share that can no longer hold it.
func TestQueuedHeavierThanAFallenLGlobalFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := coord.NewMemory(nil)
		cfg := testConfig("k", "a")
		cfg.Limiter = adaptive.Config{InitialLimit: 20, MaxLimit: 100, MaxQueued: 16}
		n := startNode(t, mem, cfg)
		held, err := n.AcquireRequest(t.Context(), adaptive.Request{Weight: 10})
		require.NoError(t, err)
		defer held.Release()
		heavy := make(chan error, 1)
		light := make(chan error, 1)
		go func() {
			_, err := n.AcquireRequest(context.Background(), adaptive.Request{Weight: 15})
			heavy <- err
		}()
		synctest.Wait()
		go func() {
			le, err := n.AcquireRequest(context.Background(), adaptive.Request{Weight: 2})
			if err == nil {
				le.Release()
			}
			light <- err
		}()
		synctest.Wait()
		twelve := 12
		require.NoError(t, mem.SetLimits(t.Context(), "k", nil, &twelve))
		time.Sleep(time.Second)
		select {
		case err := <-heavy:
			require.ErrorIs(t, err, adaptive.ErrTooHeavy)
			require.ErrorContains(t, err, "Request.Weight = 15 exceeds the fleet's limit 12")
		default:
			t.Fatal("the weight-15 request still waits under L_global 12")
		}
		require.NoError(t, <-light, "the lighter one behind it is admitted")
	})
}

// Two nodes whose every request weighs 6 under an L_global of 10: the
// split gives each 5 while both wait, which holds neither (before: 4-5
// and 0 served in 3 s). A node that waits with nothing in flight for a
// weight its share cannot hold steps aside after its turn, or at random,
// so the nodes take turns: both are served.
func TestHeavyWaitersTakeTurns(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 10}
	var served [2]atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, id := range []string{"a", "b"} {
		cfg := testConfig("k", id)
		cfg.Limiter = limits
		n := startNode(t, mem, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				le, err := n.AcquireRequest(ctx, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 6})
				if err != nil {
					continue
				}
				served[i].Add(1)
				time.Sleep(5 * time.Millisecond)
				le.Release()
			}
		}()
	}
	wg.Wait()
	a, b := served[0].Load(), served[1].Load()
	t.Logf("served: a %d, b %d", a, b)
	require.GreaterOrEqual(t, a, int64(5), "a was served")
	require.GreaterOrEqual(t, b, int64(5), "b was served")
}
