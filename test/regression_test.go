package test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// The regression tests of "the bound must cover requests, not admissions":
// each runs a real fleet on real Postgres against a simulated provider that
// counts its own in-flight, with requests that last longer than a lease,
// and requires the provider never to see more than L_global at once.

const (
	streamLatency = 2 * time.Second // each request: longer than a lease
	streamBound   = 3 * time.Second // MaxRequestDuration of these nodes
)

// streamProvider serves every request as a 4-chunk stream of
// streamLatency, with a capacity far above any L_global here: its
// MaxConcurrency is the fleet's real concurrency.
func streamProvider(t *testing.T) *sim.Provider {
	t.Helper()
	p, err := sim.StartProvider(sim.ProviderConfig{Capacity: sim.Fixed(1000), BaseLatency: streamLatency})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// streamConfig is a node with a fixed estimate of limit and request bound
// streamBound.
func streamConfig(key, id string, limit int) fleet.Config {
	cfg := nodeConfig(key, id, fixedLimit(limit))
	cfg.MaxRequestDuration = streamBound
	return cfg
}

// streamLoop sends one streamed request through n's transport and reads it
// to the end.
func streamLoop(n *fleet.Node, p *sim.Provider) func(context.Context) {
	client := &http.Client{Transport: n.Transport(nil)}
	return func(ctx context.Context) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/?stream=4", nil)
		if err != nil {
			panic(err)
		}
		req.Header.Set(sim.DefaultClientHeader, n.ID())
		resp, err := client.Do(req)
		if err != nil {
			sleep(ctx, 5*time.Millisecond)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// requireWithin checks the provider's own count against the limit.
func requireWithin(t *testing.T, p *sim.Provider, limit int, nodes []*fleet.Node) {
	t.Helper()
	st := p.Stats()
	t.Logf("provider: max concurrency %d (L_global %d), %d streams served, %d cut short;%s",
		st.MaxConcurrency, limit, st.Successes, st.Canceled, ids(nodes))
	require.LessOrEqual(t, st.MaxConcurrency, limit, "the provider saw more requests at once than L_global")
}

// TestShutdownPatternKeepsRequestsCovered is scenario 1: the README's
// pattern, Start(appCtx) then Stop(shutdownCtx) after appCtx is cancelled
// (SIGTERM), while the node has streams in flight longer than its lease.
// The heartbeats must go on until Stop has drained; the peer, hungry for
// capacity, must not get the stopping node's slots before its streams end.
func TestShutdownPatternKeepsRequestsCovered(t *testing.T) {
	t.Parallel()
	const limit = 8
	p := streamProvider(t)
	c := postgresCoordinator(t)
	appCtx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	a, err := fleet.NewWithCoordinator(c, streamConfig("shutdown", "a", limit))
	require.NoError(t, err)
	require.NoError(t, a.Start(appCtx))
	b := startNode(t, c, streamConfig("shutdown", "b", limit))
	loadA := startLoad(limit, streamLoop(a, p))
	loadB := startLoad(limit, streamLoop(b, p))
	defer loadB.stop()
	require.Eventually(t, func() bool { return a.State().Inflight >= 2 }, 10*time.Second, 10*time.Millisecond)

	sigterm() // the application's context ends: no new work…
	go loadA.finish()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopErr := a.Stop(shutdownCtx) // …and Stop waits for the streams in flight
	time.Sleep(streamLatency)      // b runs on with everything
	loadB.stop()
	requireWithin(t, p, limit, []*fleet.Node{a, b})
	require.NoError(t, stopErr, "Stop after the application's context ended")
}

// TestLongRequestsOutliveLapsedLease is scenario 2: a node partitioned
// from the database while its streams, longer than its fence margin, are
// in flight. Its capacity must stay reserved until they can have ended.
func TestLongRequestsOutliveLapsedLease(t *testing.T) {
	t.Parallel()
	const limit = 8
	p := streamProvider(t)
	c := postgresCoordinator(t)
	h := &hanging{Coordinator: c}
	a := startNode(t, h, streamConfig("partition-streams", "a", limit))
	b := startNode(t, c, streamConfig("partition-streams", "b", limit))
	loadA := startLoad(limit, streamLoop(a, p))
	loadB := startLoad(limit, streamLoop(b, p))
	defer loadB.stop()
	require.Eventually(t, func() bool { return a.State().Inflight >= 2 }, 10*time.Second, 10*time.Millisecond)

	h.hung.Store(true)
	require.Eventually(t, func() bool { return a.State().Fenced }, 10*time.Second, time.Millisecond)
	// b takes everything once a's streams must have ended: lease + bound.
	require.Eventually(t, func() bool { return b.State().Share == limit }, 10*time.Second, 10*time.Millisecond,
		"b never got the partitioned node's capacity:%s", ids([]*fleet.Node{a, b}))
	loadA.stop()
	h.hung.Store(false)
	time.Sleep(streamLatency)
	requireWithin(t, p, limit, []*fleet.Node{a, b})
}

// TestEvictedNodeLeavesAndReplacementJoins is scenario 4: an evicted node
// stops admitting for good, drains and leaves, never holds a share again,
// and a replacement process with the same node id joins at once.
func TestEvictedNodeLeavesAndReplacementJoins(t *testing.T) {
	t.Parallel()
	const limit = 8
	p := streamProvider(t)
	c := postgresCoordinator(t)
	a := startNode(t, c, streamConfig("evict", "a", limit))
	loadA := startLoad(4, streamLoop(a, p))
	defer loadA.stop()
	require.Eventually(t, func() bool { return a.State().Inflight >= 2 }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, c.Evict(t.Context(), "evict", "a"))
	require.Eventually(t, func() bool { return a.State().Status == coord.StatusEvicted }, 10*time.Second, 5*time.Millisecond)
	_, err := a.Acquire(t.Context())
	require.ErrorIs(t, err, fleet.ErrEvicted)

	// The replacement, with the same node id, joins at once.
	replacement, err := fleet.NewWithCoordinator(c, streamConfig("evict", "a", limit))
	require.NoError(t, err)
	require.NoError(t, replacement.Start(t.Context()), "a new process with the evicted node's id")
	t.Cleanup(func() { _ = replacement.Stop(context.Background()) })
	loadR := startLoad(4, streamLoop(replacement, p))
	defer loadR.stop()

	// Past the evicted node's lease and request bound: it never became a
	// member again, and the replacement has everything.
	deadline := time.Now().Add(leaseTTL + streamBound + time.Second)
	for time.Now().Before(deadline) {
		st := a.State()
		require.Zero(t, st.Limit, "the evicted node admits nothing")
		require.Equal(t, coord.StatusEvicted, st.Status)
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := c.Nodes(t.Context(), "evict")
	require.NoError(t, err)
	for _, r := range rows {
		if r.Status != coord.StatusActive {
			require.Zero(t, r.Share, "row %s/%s (%s) holds a share", r.NodeID, r.Instance, r.Status)
			require.Zero(t, r.Reserve, "the evicted node drained and left: row %s/%s", r.NodeID, r.Instance)
		}
	}
	require.Eventually(t, func() bool { return replacement.State().Share == limit }, 10*time.Second, 10*time.Millisecond,
		"the replacement never got the whole key:%s", ids([]*fleet.Node{a, replacement}))
	loadA.stop()
	loadR.stop()
	requireWithin(t, p, limit, []*fleet.Node{a, replacement})
}

// TestDrainSurvivesLeaseLapse is scenario 5: a drained node cut off from
// the database for longer than its lease comes back still draining.
func TestDrainSurvivesLeaseLapse(t *testing.T) {
	t.Parallel()
	const limit = 8
	c := postgresCoordinator(t)
	h := &hanging{Coordinator: c}
	a := startNode(t, h, nodeConfig("drain-lapse", "a", fixedLimit(limit)))
	b := startNode(t, c, nodeConfig("drain-lapse", "b", fixedLimit(limit)))
	loads := []*load{startLoad(8, holdLoop(a, 5*time.Millisecond)), startLoad(8, holdLoop(b, 5*time.Millisecond))}
	defer func() {
		for _, l := range loads {
			l.stop()
		}
	}()
	require.NoError(t, c.Drain(t.Context(), "drain-lapse", "a"))
	require.Eventually(t, func() bool { st := a.State(); return st.Status == coord.StatusDraining && st.Inflight == 0 },
		10*time.Second, 5*time.Millisecond)

	h.hung.Store(true)
	time.Sleep(leaseTTL + maxRequest + 2*heartbeat) // the lease lapses and the hold ends
	h.hung.Store(false)
	require.Eventually(t, func() bool { st := a.State(); return !st.Fenced && !st.Outage }, 10*time.Second, 5*time.Millisecond)
	for range 10 {
		st := a.State()
		require.Equal(t, coord.StatusDraining, st.Status, "the drain was lost across the lapse:%s", ids([]*fleet.Node{a, b}))
		require.Zero(t, st.Share)
		time.Sleep(heartbeat / 2)
	}
	require.NoError(t, c.Undrain(t.Context(), "drain-lapse", "a"))
	require.Eventually(t, func() bool { return a.State().Share > 0 }, 10*time.Second, 5*time.Millisecond)
}

// TestRestoredDatabaseGrantsNothingTwice is scenario 6: the database comes
// back from a copy taken before the latest grants (a point-in-time
// restore, an asynchronous replica). Node a holds the whole key under a
// grant the restored database never issued; when b asks again, the
// restored rows would hand b the whole key too.
func TestRestoredDatabaseGrantsNothingTwice(t *testing.T) {
	t.Parallel()
	const limit = 8
	p := streamProvider(t)
	pool := fleettest.Pool(t)
	c, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	a := startNode(t, c, streamConfig("restore", "a", limit))
	b := startNode(t, c, streamConfig("restore", "b", limit))
	nodes := []*fleet.Node{a, b}

	// b has (nearly) everything; a is idle. Take the copy.
	loadB := startLoad(limit, streamLoop(b, p))
	require.Eventually(t, func() bool { return b.State().Share >= limit-1 && a.State().Share <= 1 }, 10*time.Second,
		10*time.Millisecond, "b never held the key:%s", ids(nodes))
	ctx := t.Context()
	_, err = pool.Exec(ctx, `CREATE TABLE public.copy_keys AS SELECT * FROM fleetlimit.keys;
		CREATE TABLE public.copy_nodes AS SELECT * FROM fleetlimit.nodes`)
	require.NoError(t, err)

	// Now a has (nearly) everything and b is idle.
	loadB.stop()
	loadA := startLoad(limit, streamLoop(a, p))
	require.Eventually(t, func() bool { return a.State().Share >= limit-1 && a.State().Inflight >= limit-1 }, 15*time.Second,
		10*time.Millisecond, "a never took the key:%s", ids(nodes))

	// The database loses everything since the copy, and b wants it all
	// again while a's streams run.
	_, err = pool.Exec(ctx, `DELETE FROM fleetlimit.nodes;
		UPDATE fleetlimit.keys AS k SET generation = c.generation, l_global = c.l_global
		  FROM public.copy_keys AS c WHERE c.key = k.key;
		INSERT INTO fleetlimit.nodes SELECT * FROM public.copy_nodes`)
	require.NoError(t, err)
	p.Reset()
	loadB = startLoad(limit, streamLoop(b, p))
	time.Sleep(leaseTTL + streamLatency)
	loadA.stop()
	loadB.stop()
	requireWithin(t, p, limit, nodes)
}

// TestStopTimeoutKeepsRequestsCovered is scenario 1's other half: a Stop
// whose context expires with streams still in flight leaves with them
// reserved, and says so.
func TestStopTimeoutKeepsRequestsCovered(t *testing.T) {
	t.Parallel()
	const limit = 8
	p := streamProvider(t)
	c := postgresCoordinator(t)
	a, err := fleet.NewWithCoordinator(c, streamConfig("stop-timeout", "a", limit))
	require.NoError(t, err)
	require.NoError(t, a.Start(t.Context()))
	b := startNode(t, c, streamConfig("stop-timeout", "b", limit))
	loadA := startLoad(limit, streamLoop(a, p))
	loadB := startLoad(limit, streamLoop(b, p))
	defer loadB.stop()
	require.Eventually(t, func() bool { return a.State().Inflight >= 2 }, 10*time.Second, 10*time.Millisecond)

	go loadA.finish()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = a.Stop(ctx)
	time.Sleep(streamLatency + leaseTTL)
	loadB.stop()
	requireWithin(t, p, limit, []*fleet.Node{a, b})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "reserved", "Stop says the capacity stays reserved")
}
