package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// LivenessScenario is a fleet of busy nodes on a 429-mode provider of
// fixed capacity, for the liveness measurements: how fast L_global climbs
// from a low start, and how a rolling restart moves it.
type LivenessScenario struct {
	Capacity       int
	Nodes          int
	WorkersPerNode int
	BaseLatency    time.Duration
	Heartbeat      time.Duration
	// Limiter is every node's limiter configuration (MaxQueued is set to
	// WorkersPerNode).
	Limiter adaptive.Config
}

// livenessFleet is a running LivenessScenario: the provider, the nodes
// and their workers.
type livenessFleet struct {
	sc    LivenessScenario
	pool  *pgxpool.Pool
	key   string
	prov  *sim.Provider
	log   *slog.Logger
	mu    sync.Mutex
	nodes []*livenessNode
}

// livenessNode is one node and the workers sending through it.
type livenessNode struct {
	node   *fleet.Node
	cancel context.CancelFunc // ends the workers
	wg     sync.WaitGroup
	base   *http.Transport
}

// startLivenessFleet starts the provider and the first running of sc's
// nodes (all of them when running is sc.Nodes); startNode starts the rest.
func startLivenessFleet(ctx context.Context, pool *pgxpool.Pool, key string, sc LivenessScenario, running int) (*livenessFleet, error) {
	prov, err := sim.StartProvider(sim.ProviderConfig{
		Capacity:    sim.Fixed(sc.Capacity),
		BaseLatency: sc.BaseLatency,
		Reject429:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: liveness: %w", err)
	}
	f := &livenessFleet{sc: sc, pool: pool, key: key, prov: prov, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.nodes = make([]*livenessNode, sc.Nodes)
	for i := range running {
		if err := f.startNode(ctx, i); err != nil {
			f.stop()
			return nil, err
		}
	}
	return f, nil
}

// startNode starts node i (a new instance if it ran before) and its
// workers.
func (f *livenessFleet) startNode(ctx context.Context, i int) error {
	lim := f.sc.Limiter
	lim.MaxQueued = f.sc.WorkersPerNode
	n, err := fleet.New(f.pool, fleet.Config{
		Key:                f.key,
		NodeID:             fmt.Sprintf("node-%d", i),
		HeartbeatInterval:  f.sc.Heartbeat,
		LeaseTTL:           4 * f.sc.Heartbeat,
		FenceMargin:        f.sc.Heartbeat,
		MaxRequestDuration: 10 * time.Second,
		AbandonedHold:      100 * time.Millisecond,
		Limiter:            lim,
		Logger:             f.log,
	})
	if err == nil {
		err = n.Start(context.WithoutCancel(ctx))
	}
	if err != nil {
		return fmt.Errorf("bench: liveness: node %d: %w", i, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ln := &livenessNode{node: n, cancel: cancel, base: &http.Transport{MaxIdleConnsPerHost: 2 * f.sc.WorkersPerNode}}
	client := &http.Client{Transport: n.Transport(ln.base)}
	sc := FleetScenario{RequestTimeout: time.Second, Pause: 20 * time.Millisecond}
	for range f.sc.WorkersPerNode {
		ln.wg.Go(func() { worker(wctx, sc, client, f.prov.URL(), i) })
	}
	f.mu.Lock()
	f.nodes[i] = ln
	f.mu.Unlock()
	return nil
}

// stopNode stops node i's workers and then the node, gracefully.
func (f *livenessFleet) stopNode(i int) {
	f.mu.Lock()
	ln := f.nodes[i]
	f.nodes[i] = nil
	f.mu.Unlock()
	if ln == nil {
		return
	}
	ln.cancel()
	ln.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = ln.node.Stop(ctx)
	cancel()
	ln.base.CloseIdleConnections()
}

// lGlobal returns the lowest L_global the running nodes last heard.
func (f *livenessFleet) lGlobal() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	low := 0
	for _, ln := range f.nodes {
		if ln == nil {
			continue
		}
		if l := ln.node.State().LGlobal; low == 0 || l < low {
			low = l
		}
	}
	return low
}

// lowest watches L_global (see lGlobal) every 5 ms for d, or until ctx
// ends, and returns the lowest value above 0 it saw, or low if none was
// lower.
func (f *livenessFleet) lowest(ctx context.Context, d time.Duration, low int) int {
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(5 * time.Millisecond) {
		if l := f.lGlobal(); l > 0 && l < low {
			low = l
		}
	}
	return low
}

func (f *livenessFleet) stop() {
	for i := range f.nodes {
		f.stopNode(i)
	}
	_ = f.prov.Close()
}

// ClimbResult is what MeasureClimb measured.
type ClimbResult struct {
	// Reached is when the lowest L_global any node heard first reached
	// the target, after the fleet started; Ok is false if it never did
	// within the deadline.
	Reached time.Duration
	Ok      bool
	// Final is the lowest L_global at the end.
	Final int
}

// MeasureClimb starts sc's fleet and measures how long L_global takes to
// reach target, for at most deadline.
func MeasureClimb(ctx context.Context, pool *pgxpool.Pool, key string, sc LivenessScenario, target int, deadline time.Duration) (ClimbResult, error) {
	start := time.Now()
	f, err := startLivenessFleet(ctx, pool, key, sc, sc.Nodes)
	if err != nil {
		return ClimbResult{}, err
	}
	defer f.stop()
	var res ClimbResult
	for time.Since(start) < deadline {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if l := f.lGlobal(); l >= target {
			res.Reached, res.Ok = time.Since(start), true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.Final = f.lGlobal()
	return res, nil
}

// RestartResult is what MeasureRollingRestart or MeasureHold measured.
type RestartResult struct {
	// Before is the median L_global over the second before the first
	// restart; Low the lowest any running node heard from the first
	// restart until settle after the last (for MeasureHold: over the
	// same watches, with no restart between them).
	Before, Low int
}

// MeasureRollingRestart runs sc's fleet for warmup, then restarts its
// nodes one at a time (graceful stop, then a new instance with the same
// NodeID), waiting settle after each, and reports L_global before and
// its lowest value during the restarts.
func MeasureRollingRestart(ctx context.Context, pool *pgxpool.Pool, key string, sc LivenessScenario, warmup, settle time.Duration) (RestartResult, error) {
	return measureRestarts(ctx, pool, key, sc, warmup, settle, true)
}

// MeasureHold is MeasureRollingRestart's control: the same fleet, watched
// for as long, with no restart. What it reports is how far L_global
// moves by itself (the law's own probing and backoffs), which a rolling
// restart's lowest value includes too.
func MeasureHold(ctx context.Context, pool *pgxpool.Pool, key string, sc LivenessScenario, warmup, settle time.Duration) (RestartResult, error) {
	return measureRestarts(ctx, pool, key, sc, warmup, settle, false)
}

func measureRestarts(ctx context.Context, pool *pgxpool.Pool, key string, sc LivenessScenario, warmup, settle time.Duration, restart bool) (RestartResult, error) {
	if warmup < 2*time.Second {
		return RestartResult{}, errors.New("bench: liveness: warmup must be ≥ 2s")
	}
	f, err := startLivenessFleet(ctx, pool, key, sc, sc.Nodes)
	if err != nil {
		return RestartResult{}, err
	}
	defer f.stop()
	sleepCtx(ctx, warmup-time.Second)
	var before []float64
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		before = append(before, float64(f.lGlobal()))
	}
	res := RestartResult{Before: int(Summarize(before).Median)}
	res.Low = res.Before
	for i := range sc.Nodes {
		if restart {
			f.stopNode(i)
			if err := f.startNode(ctx, i); err != nil {
				return res, err
			}
		}
		res.Low = f.lowest(ctx, settle, res.Low)
	}
	return res, ctx.Err()
}

// JoinResult is what MeasureJoin measured.
type JoinResult struct {
	// Served is each node's successes over the span after the join, the
	// first node's first, as the provider counted them.
	Served [2]int64
	// Ideal is the most the provider could serve over that span: its
	// capacity, each request taking BaseLatency.
	Ideal float64
	// Before is L_global just before the join; Low the lowest any running
	// node heard over the span.
	Before, Low int
	// Filled is how many requests of the first node the provider held
	// just before the join: the capacity, when the joiner meets a full
	// upstream.
	Filled int
}

// MeasureJoin runs the first node of sc (which must have 2) alone for
// warmup, busy enough to fill the provider, then starts the second and
// counts over span what each node is served: the second meets an
// upstream the first already fills.
func MeasureJoin(ctx context.Context, pool *pgxpool.Pool, key string, sc LivenessScenario, warmup, span time.Duration) (JoinResult, error) {
	if sc.Nodes != 2 {
		return JoinResult{}, fmt.Errorf("bench: liveness: a join needs 2 nodes, not %d", sc.Nodes)
	}
	f, err := startLivenessFleet(ctx, pool, key, sc, 1)
	if err != nil {
		return JoinResult{}, err
	}
	defer f.stop()
	sleepCtx(ctx, warmup)
	res := JoinResult{Before: f.lGlobal(), Ideal: float64(sc.Capacity) * span.Seconds() / sc.BaseLatency.Seconds()}
	res.Low = res.Before
	res.Filled = f.prov.Stats().Clients["node-0"].Current
	if err := f.startNode(ctx, 1); err != nil {
		return res, err
	}
	f.prov.Reset() // the joiner's workers start now
	res.Low = f.lowest(ctx, span, res.Low)
	clients := f.prov.Stats().Clients
	for i := range res.Served {
		res.Served[i] = clients[fmt.Sprintf("node-%d", i)].Successes
	}
	return res, ctx.Err()
}
