package fleet

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
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
		require.ErrorContains(t, err, fmt.Sprintf("Request.Weight = %d exceeds Config.Limiter.MaxLimit = 100", math.MaxInt))
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
		{"weight of the most a limit can be", coord.MaxCount, coord.MaxCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble.Test(t, func(t *testing.T) {
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
		bubble.Test(t, func(t *testing.T) {
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
	bubble.Test(t, func(t *testing.T) {
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

// Nodes whose every request is heavier than half of an L_global of 10:
// while all wait, the split gives each less than its weight, which holds
// none of them (before, the first node served 4-5 requests alone and then
// no node was served). A node that waits with nothing in flight for a
// weight its share cannot hold steps aside after its turn, or at random,
// so the nodes take turns: every node is served, whether its callers
// queue or poll.
func TestHeavyWaitersTakeTurns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		weights   []int
		try       bool
		maxQueued int
	}{
		{"2x6", []int{6, 6}, false, 10},
		{"6 and 8", []int{6, 8}, false, 10},
		{"6 and 9", []int{6, 9}, false, 10},
		{"2x9", []int{9, 9}, false, 10},
		{"3x6", []int{6, 6, 6}, false, 10},
		{"3x7", []int{7, 7, 7}, false, 10},
		{"4x6", []int{6, 6, 6, 6}, false, 10},
		{"2x6 polling", []int{6, 6}, true, 0},
		{"2x6 no queue", []int{6, 6}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := 3 * time.Second
			if len(c.weights) > 2 {
				d = 9 * time.Second // turns go round more nodes, at random
			}
			served := heavyLoops(t, c.weights, c.try, c.maxQueued, d)
			t.Logf("weights %v: served %v", c.weights, served)
			for i, s := range served {
				require.Positive(t, s, "node %d (weight %d) was never served", i, c.weights[i])
			}
		})
	}
}

// heavyLoops runs one node per weight under an L_global of 10, each with
// one caller that loops on AcquireRequest (or, with try, on
// TryAcquireRequest every 2 ms) at that weight and holds each lease 5 ms,
// for d; it returns how many requests each node served after the first
// third of d.
func heavyLoops(t *testing.T, weights []int, try bool, maxQueued int, d time.Duration) []int64 {
	t.Helper()
	nodes := make([]loopNode, len(weights))
	for i, w := range weights {
		nodes[i] = loopNode{weight: w, callers: 1}
	}
	return servedLoops(t, nodes, try, maxQueued, d)
}

// loopNode is one node of servedLoops: its callers each loop on requests
// of the given weight.
type loopNode struct{ weight, callers int }

// servedLoops runs the nodes under an L_global of 10, each caller looping
// on AcquireRequest (or, with try, on TryAcquireRequest every 2 ms) at its
// node's weight and holding each lease 5 ms, for d; it returns how many
// requests each node was admitted after the first third of d (the first
// admissions, before every node waits, say nothing of turns).
func servedLoops(t *testing.T, nodes []loopNode, try bool, maxQueued int, d time.Duration) []int64 {
	t.Helper()
	r := newRig(t, len(nodes), maxQueued, d, d/3)
	served := make([]atomic.Int64, len(nodes))
	for i, ln := range nodes {
		for range ln.callers {
			callerLoop(r.ctx, &r.wg, r.nodes[i], ln.weight, try, func() {
				if time.Now().After(r.warm) {
					served[i].Add(1)
				}
			})
		}
	}
	r.run()
	out := make([]int64, len(nodes))
	for i := range served {
		out[i] = served[i].Load()
	}
	return out
}

// callerLoop starts a caller on wg that, until ctx ends, admits requests
// of the given weight on n with AcquireRequest (or, with try, with
// TryAcquireRequest, 2 ms after each refusal), holds each lease 5 ms and
// calls served (if not nil) at each admission.
func callerLoop(ctx context.Context, wg *sync.WaitGroup, n *Node, weight int, try bool, served func()) {
	r := adaptive.Request{Priority: adaptive.DefaultPriority, Weight: weight}
	wg.Go(func() {
		for ctx.Err() == nil {
			var le Lease
			var err error
			if try {
				le, err = n.TryAcquireRequest(r)
			} else {
				le, err = n.AcquireRequest(ctx, r)
			}
			if err != nil {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			if served != nil {
				served()
			}
			time.Sleep(5 * time.Millisecond)
			le.Release()
		}
	})
}

// rig is a key held at 10 (or another limit, see newRigAt) on one memory coordinator, with nodes n0… that
// queue up to a given number of callers, and callers (see callerLoop)
// that run until ctx ends. Its cleanup ends ctx and waits for them.
type rig struct {
	ctx   context.Context
	wg    sync.WaitGroup
	nodes []*Node
	warm  time.Time // counted admissions are those after it
}

// newRig starts k nodes for d; admissions count from warm-up on.
func newRig(t *testing.T, k, maxQueued int, d, warmUp time.Duration) *rig {
	t.Helper()
	return newRigAt(t, 10, k, maxQueued, d, warmUp)
}

// newRigAt is newRig with the key held at limit instead of 10.
func newRigAt(t *testing.T, limit, k, maxQueued int, d, warmUp time.Duration) *rig {
	t.Helper()
	mem := coord.NewMemory(nil)
	limits := adaptive.Config{InitialLimit: limit, MinLimit: limit, MaxLimit: limit, MaxQueued: maxQueued}
	r := &rig{warm: time.Now().Add(warmUp)}
	for i := range k {
		cfg := testConfig("k", fmt.Sprintf("n%d", i))
		cfg.Limiter = limits
		r.nodes = append(r.nodes, startNode(t, mem, cfg))
	}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	r.ctx = ctx
	t.Cleanup(r.wg.Wait)
	t.Cleanup(cancel)
	return r
}

// callers starts count callers of the given weight on node i, each
// counting its admissions after warm-up in c (if not nil).
func (r *rig) callers(i, count, weight int, c *atomic.Int64) {
	var served func()
	if c != nil {
		served = func() {
			if time.Now().After(r.warm) {
				c.Add(1)
			}
		}
	}
	for range count {
		callerLoop(r.ctx, &r.wg, r.nodes[i], weight, false, served)
	}
}

// run waits until the rig's time is up and its callers have returned.
func (r *rig) run() {
	<-r.ctx.Done()
	r.wg.Wait()
}

// A node whose requests weigh 6 beside a busy node of light requests
// under an L_global of 10: the demand-proportional split gives the heavy
// node less than 6 (6 against 12 callers: 4) for as long as the light
// node stays busy, and stepping aside frees nothing the light node does
// not take. Before, the heavy node was never served.
func TestHeavyNodeBesideBusyLightPeerIsServed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		try       bool
		maxQueued int
	}{
		{"queued", false, 10},
		{"polling", true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			served := servedLoops(t, []loopNode{{weight: 6, callers: 1}, {weight: 1, callers: 12}}, c.try, c.maxQueued, 3*time.Second)
			t.Logf("served: heavy %d, light %d", served[0], served[1])
			require.Positive(t, served[0], "the heavy node was never served")
			require.Greater(t, served[1], 10*served[0], "the light node keeps most of the key")
		})
	}
}

// A node fenced under FailClosed keeps its queued callers; once its
// in-flight has drained, those light waiters (weight 1, which any share
// holds) wait with nothing in flight, as a heavy waiter does, but under a
// ceiling of 0 with no deadline. They are not waiting for a heavier
// weight: the first report after the outage asks for them, not for
// nothing (before, 4 to 6 trials of 6 reported a demand of 1).
func TestFencedLightWaitersDoNotStepAside(t *testing.T) {
	low := 0
	const trials = 6
	for trial := range trials {
		mem := coord.NewMemory(nil)
		oc := &failingCoord{Coordinator: mem}
		limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 100}
		cfgA, cfgB := testConfig("k", "a"), testConfig("k", "b")
		cfgA.Limiter, cfgB.Limiter = limits, limits
		a := startNode(t, oc, cfgA)
		b := startNode(t, mem, cfgB)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var bl []Lease
		for range 4 {
			le, err := b.Acquire(ctx)
			require.NoError(t, err)
			bl = append(bl, le)
		}
		// a fills its share, then queues 8 light callers behind it.
		var al []Lease
		first0, err := a.Acquire(ctx)
		require.NoError(t, err)
		al = append(al, first0)
		eventually(t, func() bool {
			st := a.State()
			return st.Share > 0 && st.Share < 10 && st.Limit == st.Share
		}, "a's share is below L_global, and its ceiling has ramped up to it")
		for {
			le, err := a.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1})
			if err != nil {
				break
			}
			al = append(al, le)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				le, err := a.Acquire(ctx)
				if err == nil {
					le.Release()
				}
			}()
		}
		eventually(t, func() bool { return a.State().Queued == 8 }, "8 light callers wait on a")
		oc.fail.Store(true)
		eventually(t, func() bool { return a.State().Fenced }, "a is fenced")
		for _, le := range al {
			le.Release()
		}
		from := len(oc.delivered())
		oc.fail.Store(false)
		eventually(t, func() bool { return len(oc.delivered()) > from }, "a reports again")
		first := oc.delivered()[from]
		t.Logf("trial %d: a held %d, first report after the outage: demand %d (8 light waiters queued)", trial, len(al), first.Demand)
		if first.Demand < 8 {
			low++
		}
		wg.Wait()
		for _, le := range bl {
			le.Release()
		}
		cancel()
	}
	t.Logf("%d of %d recoveries reported a demand below the 8 queued light waiters", low, trials)
	require.Zero(t, low)
}

// A node whose requests weigh 6 beside a busy node of light requests,
// under an L_global of 10, whose grants count the peer's in-flight one
// below what it holds: a busy peer's in-flight is sampled at its report,
// and the sample lands now and then between two of its requests. Before,
// the node pressed only while the peer's in-flight filled every slot its
// own share left (7 beside a share of 3), so at a sample of 6 it stepped
// aside, which the peer filled; under CPU load the heavy node of
// TestHeavyNodeBesideBusyLightPeerOnPostgres went unserved for seconds,
// and here it was never served. It now presses while the peer holds more
// than L_global leaves beside the weight (4).
func TestHeavyNodeBesidePeerSampledBetweenRequestsIsServed(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	limits := adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 20}
	cfgH, cfgL := testConfig("k", "heavy"), testConfig("k", "light")
	cfgH.Limiter, cfgL.Limiter = limits, limits
	heavy := startNode(t, sampledBetweenRequests{mem}, cfgH)
	light := startNode(t, mem, cfgL)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	warm := time.Now().Add(time.Second)
	var servedHeavy, servedLight atomic.Int64
	count := func(c *atomic.Int64) func() {
		return func() {
			if time.Now().After(warm) {
				c.Add(1)
			}
		}
	}
	callerLoop(ctx, &wg, heavy, 6, false, count(&servedHeavy))
	for range 12 {
		callerLoop(ctx, &wg, light, 1, false, count(&servedLight))
	}
	wg.Wait()
	t.Logf("served in 2 s: heavy %d, light %d", servedHeavy.Load(), servedLight.Load())
	require.GreaterOrEqual(t, servedHeavy.Load(), int64(5), "the heavy node was served too rarely")
	require.Greater(t, servedLight.Load(), 10*servedHeavy.Load(), "the light node keeps most of the key")
}

// sampledBetweenRequests is a coordinator whose grants count the peers'
// in-flight one below what they reported, as a sample taken between two
// of a busy peer's requests does.
type sampledBetweenRequests struct{ coord.Coordinator }

func (c sampledBetweenRequests) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	g, err := c.Coordinator.Heartbeat(ctx, r)
	g.PeerInflight = max(g.PeerInflight-1, 0)
	return g, err
}

// A weight that no split holds while the peers are busy — 9 under an
// L_global of 10 beside two busy nodes, which keep a slot each — is not
// pressed for for good: its node stops pressing once its share reached
// the most a split gives (8) and did not grow for three reports pressing
// with the most demand, and steps aside as before pressing was added
// (a mean share of about 1), rather than hold 8 slots for nothing
// (pressing without the stop: a share of 8 all the time) or its demand's
// part, 3, which the busy peers lose (the stop without stepping aside).
func TestWeightNoSplitHoldsIsNotPressedFor(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, 20, 3*time.Second, 0)
	heavy := r.nodes[0]
	r.callers(0, 1, 9, nil)
	r.callers(1, 12, 1, nil)
	r.callers(2, 12, 1, nil)
	time.Sleep(time.Second)
	var shares []int
	for r.ctx.Err() == nil {
		shares = append(shares, heavy.State().Share)
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(shares)
	median := shares[len(shares)/2]
	sum := 0
	for _, s := range shares {
		sum += s
	}
	mean := float64(sum) / float64(len(shares))
	t.Logf("the heavy node's share: median %d, mean %.2f, p90 %d", median, mean, shares[len(shares)*9/10])
	require.LessOrEqual(t, mean, 2.0, "the heavy node steps aside once pressing is done, rather than hold its demand's part of the key for a weight it cannot run")
}

// A weight of 9 under an L_global of 10 beside one busy node of light
// requests and one live node that wants nothing: the split among the
// nodes with demand gives the heavy node 9, though L_global − (live nodes
// − 1) is 8. Before, the node stopped pressing at a share of 8 and was
// never served (and held 4 slots idle beside the busy peer).
func TestHeavyNodeBesideIdleLiveNodeIsServed(t *testing.T) {
	t.Parallel()
	served := servedLoops(t, []loopNode{{weight: 9, callers: 1}, {weight: 1, callers: 12}, {weight: 1, callers: 0}}, false, 10, 3*time.Second)
	t.Logf("served: heavy %d, light %d", served[0], served[1])
	require.Positive(t, served[0], "the heavy node was never served")
}

// A node that stopped pressing for a weight of 9 beside two busy nodes
// under an L_global of 10 (no split holds it: see
// TestWeightNoSplitHoldsIsNotPressedFor) presses again once one of them
// leaves, when the split beside the one left holds 9. Before, it stopped
// until one of its own requests was admitted, which never came: stepping
// aside frees nothing the busy node does not take.
func TestStoppedPressingResumesWhenAPeerLeaves(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, 20, 4*time.Second, 0)
	var served atomic.Int64
	r.callers(0, 1, 9, &served)
	r.callers(1, 13, 1, nil)
	leaving, leave := context.WithCancel(r.ctx)
	defer leave()
	for range 12 {
		callerLoop(leaving, &r.wg, r.nodes[2], 1, false, nil)
	}
	time.Sleep(1500 * time.Millisecond)
	before := served.Load()
	leave()
	stopCtx, cancelStop := context.WithTimeout(r.ctx, time.Second)
	require.NoError(t, r.nodes[2].Stop(stopCtx))
	cancelStop()
	eventually(t, func() bool { return r.nodes[0].State().LiveNodes == 2 }, "the node that stopped has left")
	time.Sleep(time.Second)
	after := served.Load() - before
	t.Logf("heavy served %d beside two busy nodes, %d in 1 s after one left", before, after)
	require.Positive(t, after, "the heavy node is served beside one busy node")
}

// A heavy request whose caller gives up before it is admitted leaves its
// weight as a demand floor for LeaseTTL (see holdWanted), for a caller
// that polls; but nobody waits any more, and pressing for it would take
// the slots of a busy peer for nothing. Before, the node went on pressing
// after the caller gave up: its share reached 6 to 9 of 10, idle, and the
// busy peer served a sixth less beside a caller that gave up every 300 ms.
func TestAbandonedHeavyRequestIsNotPressedFor(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, 20, 3*time.Second, 0)
	heavy := r.nodes[0]
	r.callers(1, 12, 1, nil)
	time.Sleep(500 * time.Millisecond)
	waitCtx, cancelWait := context.WithTimeout(r.ctx, 30*time.Millisecond)
	_, err := heavy.AcquireRequest(waitCtx, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 6})
	cancelWait()
	require.Error(t, err, "the caller gives up before its request is admitted")
	time.Sleep(2 * testConfig("k", "x").HeartbeatInterval)
	top := 0
	for end := time.Now().Add(testConfig("k", "x").LeaseTTL); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		top = max(top, heavy.State().Share)
	}
	t.Logf("the heavy node's largest share after its caller gave up: %d", top)
	require.Less(t, top, 6, "the node does not press for a request nobody waits for")
}

// A node with one caller of weight 6 and four of weight 1, beside a node
// with 12 callers of weight 1, under an L_global of 10: the split gives it
// about 5, which holds its light requests but not the heavy one, and with
// light requests always in flight it never waits with nothing in flight,
// so it neither stepped aside nor pressed, and the heavy request was
// never served. The node now presses while a caller waits in
// AcquireRequest for a weight above its share.
func TestHeavyBesideOwnLightRequestsIsServed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, 20, 3*time.Second, time.Second)
	var heavy, light, peer atomic.Int64
	r.callers(0, 1, 6, &heavy)
	r.callers(0, 4, 1, &light)
	r.callers(1, 12, 1, &peer)
	r.run()
	t.Logf("served in 2 s: heavy %d, its node's light %d, the peer %d", heavy.Load(), light.Load(), peer.Load())
	require.Positive(t, heavy.Load(), "the heavy request was never served")
	require.Positive(t, light.Load(), "its node's light requests are served too")
}

// As TestHeavyBesideOwnLightRequestsIsServed, but the heavy node's other
// callers weigh 2 and the peer has 40 light callers: the node's first
// pressing report (twice its demand, 20 against 40) gives it 4, and each
// admission of a weight of 2 restarted the pressing, so its demand stayed
// at 20 and the weight of 6 was never served (0 in 2 s; the node took a
// slot from the peer for its weights of 2). Only the admission of the
// weight the node presses for restarts it now.
func TestHeavyBesideOwnWeightedRequestsIsServed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, 50, 3*time.Second, time.Second)
	var heavy, light, peer atomic.Int64
	r.callers(0, 1, 6, &heavy)
	r.callers(0, 2, 2, &light)
	r.callers(1, 40, 1, &peer)
	r.run()
	t.Logf("served in 2 s: heavy %d, its node's weight 2 %d, the peer %d", heavy.Load(), light.Load(), peer.Load())
	require.Positive(t, heavy.Load(), "the heavy request was never served")
	require.Positive(t, light.Load(), "its node's lighter requests are served too")
}

// As TestHeavyBesideOwnLightRequestsIsServed, but the heavy node's one
// light caller pauses 15 ms between its requests of 5 ms: the node has
// requests in flight at some reports and none at others, and pressing
// counted the heavy caller's admissions at the first and every admission
// at the second, so each switch started it again from twice the demand.
// The weight of 6 was served 2-8 times in 2 s; about 50 now.
func TestHeavyBesideSparseOwnLightRequestsIsServed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, 20, 3*time.Second, time.Second)
	var heavy, light, peer atomic.Int64
	r.callers(0, 1, 6, &heavy)
	r.wg.Go(func() {
		req := adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1}
		for r.ctx.Err() == nil {
			le, err := r.nodes[0].AcquireRequest(r.ctx, req)
			if err == nil {
				if time.Now().After(r.warm) {
					light.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
				le.Release()
			}
			time.Sleep(15 * time.Millisecond)
		}
	})
	r.callers(1, 12, 1, &peer)
	r.run()
	t.Logf("served in 2 s: heavy %d, its node's light %d, the peer %d", heavy.Load(), light.Load(), peer.Load())
	require.GreaterOrEqual(t, heavy.Load(), int64(25), "the heavy request is served at least every other heartbeat or so")
	require.Positive(t, light.Load(), "its node's light requests are served too")
}
