package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// The demo fleet's tuning.
const (
	// demoBaseLatency is how long the provider takes per request within
	// capacity: capacity 40 serves 400 req/s.
	demoBaseLatency = 100 * time.Millisecond
	// demoHeartbeat is the nodes' heartbeat interval: short, so the fleet
	// reacts within a fraction of a second.
	demoHeartbeat = 250 * time.Millisecond
	// demoBackoff is how long a worker waits after a 429 or a refused
	// admission before trying again, as a well-behaved client would.
	demoBackoff = 50 * time.Millisecond
	// demoHeartbeatTimeout bounds each heartbeat: the whole lease (2 ×
	// demoHeartbeat), so that a slow first connection does not fail a start.
	demoHeartbeatTimeout = 2 * demoHeartbeat
	// demoMaxRequest bounds every request: the simulated provider answers
	// within its 10s latency cap.
	demoMaxRequest = 10 * time.Second
	// demoAbandonedHold is how long a request the demo gives up on keeps
	// its slot: the simulated provider stops serving at once when its
	// client goes away.
	demoAbandonedHold = 100 * time.Millisecond
	// demoStartAttempts is how often a node's Start (its first heartbeat)
	// is tried.
	demoStartAttempts = 3
	// demoStopTimeout bounds each node's graceful Stop.
	demoStopTimeout = 10 * time.Second
)

// demoSchedule is the provider's hidden capacity over a run of length d:
// 40, then 20 from d/3, then 60 from 2d/3.
func demoSchedule(d time.Duration) []sim.Step {
	return []sim.Step{{At: 0, Capacity: 40}, {At: d / 3, Capacity: 20}, {At: 2 * d / 3, Capacity: 60}}
}

// demoNode is one fleet node of the demo and its workers' counts.
type demoNode struct {
	id   string
	node *fleet.Node
	base *http.Transport
	// counted by the workers
	ok, rejected, refused, failed atomic.Int64
	// shareSum and samples give the mean share over the run, sampled every
	// demoShareTick and at the end (see sampleShares).
	shareSum, samples int64
	lastShare         int
}

// demoShareTick is how often the demo samples each node's share for the
// summary, whatever --interval says.
const demoShareTick = 100 * time.Millisecond

// sampleShares samples each node's share every demoShareTick until ctx
// ends, and once more then. The only writer of the nodes' share counts.
func sampleShares(ctx context.Context, nodes []*demoNode) {
	t := time.NewTicker(demoShareTick)
	defer t.Stop()
	sample := func() {
		for _, dn := range nodes {
			share := dn.node.State().Share
			dn.shareSum += int64(share)
			dn.samples++
			dn.lastShare = share
		}
	}
	for {
		select {
		case <-ctx.Done():
			sample()
			return
		case <-t.C:
			sample()
		}
	}
}

// demoLimiter configures the nodes' limiters for the demo's provider, whose
// latency stays flat up to its capacity and which answers 429 above it:
// latency carries no signal, so the nodes use the library's preset for
// such an upstream, adaptive.FlatLatency.
func demoLimiter(workers int) adaptive.Config {
	cfg := adaptive.FlatLatency()
	cfg.MaxQueued = workers
	return cfg
}

// runDemo runs the fleet on key for cfg.duration (or until ctx ends) and
// returns the summary. It stops every node and the provider before it
// returns.
func (r *runner) runDemo(ctx context.Context, pool *pgxpool.Pool, key string, cfg demoConfig) (sum demoSummary, err error) {
	admin, err := coord.NewPostgres(pool)
	if err != nil {
		return sum, err
	}
	schedule := demoSchedule(cfg.duration)
	provider, err := sim.StartProvider(sim.ProviderConfig{
		Capacity:    sim.Stepped(schedule),
		BaseLatency: demoBaseLatency,
		Reject429:   true,
	})
	if err != nil {
		return sum, err
	}
	providerStart := time.Now()
	defer func() { err = errors.Join(err, provider.Close()) }()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodes := make([]*demoNode, cfg.nodes)
	defer func() { err = errors.Join(err, stopDemoNodes(ctx, nodes)) }()
	for i := range nodes {
		id := fmt.Sprintf("node-%d", i+1)
		n, err := fleet.New(pool, fleet.Config{
			Key:                key,
			NodeID:             id,
			Labels:             map[string]string{"demo": "fleetctl"},
			HeartbeatInterval:  demoHeartbeat,
			HeartbeatTimeout:   demoHeartbeatTimeout,
			MaxRequestDuration: demoMaxRequest,
			AbandonedHold:      demoAbandonedHold,
			Limiter:            demoLimiter(cfg.workers),
			Logger:             quiet,
		})
		if err != nil {
			return sum, err
		}
		if err := startNode(ctx, n); err != nil {
			return sum, fmt.Errorf("start node %s: %w", id, err)
		}
		nodes[i] = &demoNode{id: id, node: n, base: &http.Transport{MaxIdleConnsPerHost: cfg.workers, IdleConnTimeout: 30 * time.Second}}
	}

	r.progress("running %s × %s against a simulated provider for %s (key %q)...",
		plural(cfg.nodes, "node", "nodes"), plural(cfg.workers, "worker", "workers"), cfg.duration, key)
	start := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, start.Add(cfg.duration))
	defer cancel()
	var wg sync.WaitGroup
	for _, dn := range nodes {
		client := &http.Client{Transport: dn.node.Transport(dn.base)}
		for range cfg.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dn.work(runCtx, client, provider.URL())
			}()
		}
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		sampleShares(runCtx, nodes)
	}()

	v := r.newView(formatTable, "")
	// A refresh the database fails (a restart, say) is said and tried
	// again, as in watch; the fleet rides it out on its own.
	w := r.newWatcher("demo", admin, pool, key, cfg.interval)
	var learning demoLearning
	w.show = func(f frame) error {
		learning.note(f)
		st := provider.Stats()
		f.Provider = &providerView{Capacity: st.Capacity, Current: st.Current, Successes: st.Successes, Rejected: st.Rejected}
		v.title = fmt.Sprintf("fleetctl demo  %s × %s  %s / %s  (Ctrl-C stops early)",
			plural(cfg.nodes, "node", "nodes"), plural(cfg.workers, "worker", "workers"), time.Since(start).Truncate(100*time.Millisecond), cfg.duration)
		return v.show(f)
	}
	viewErr := watchLoop(runCtx, cfg.interval, 0, func() error { return w.refresh(runCtx) })
	cancel()
	wg.Wait()
	v.close()
	if v.live {
		fmt.Fprintln(r.env.Stdout)
	}
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		r.progress("interrupted after %s; stopping the fleet", elapsed.Truncate(100*time.Millisecond))
	}
	if viewErr != nil {
		return sum, viewErr
	}
	st := provider.Stats()
	sum = newDemoSummary(key, cfg, schedule, start.Sub(providerStart), elapsed, st, nodes)
	sum.learning = learning
	return sum, nil
}

// startNode starts n, trying its first heartbeat up to demoStartAttempts
// times.
func startNode(ctx context.Context, n *fleet.Node) error {
	var err error
	for range demoStartAttempts {
		if err = n.Start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// work sends requests through the node until ctx ends, or until it ends
// too soon for one more round trip. A 429, an error or a refused
// admission makes it back off for demoBackoff.
func (dn *demoNode) work(ctx context.Context, client *http.Client, url string) {
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			dn.failed.Add(1)
			return
		}
		req.Header.Set(sim.DefaultClientHeader, dn.id)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, fleet.ErrLate) {
				// The run is over, or ends within a round trip: its end is
				// the only deadline a request has here, and Transport sends
				// none it leaves less than that (ErrLate).
				return
			}
			if isAdmissionError(err) {
				dn.refused.Add(1)
			} else {
				dn.failed.Add(1)
			}
			sleep(ctx, demoBackoff)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			dn.ok.Add(1)
		case resp.StatusCode == http.StatusTooManyRequests:
			dn.rejected.Add(1)
			sleep(ctx, demoBackoff)
		default:
			dn.failed.Add(1)
			sleep(ctx, demoBackoff)
		}
	}
}

// isAdmissionError reports whether err is the node refusing to admit: a
// full queue, a pause, a fence, an eviction (fleetctl evict during the
// demo), or a node not started or stopped.
func isAdmissionError(err error) bool {
	for _, target := range []error{adaptive.ErrQueueFull, adaptive.ErrPaused, fleet.ErrFenced, fleet.ErrEvicted,
		fleet.ErrNotStarted, fleet.ErrStopped} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stopDemoNodes stops every started node gracefully (each leaves the
// fleet), even when ctx has ended.
func stopDemoNodes(ctx context.Context, nodes []*demoNode) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoStopTimeout)
	defer cancel()
	var errs []error
	for _, dn := range nodes {
		if dn == nil {
			continue
		}
		if err := dn.node.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop node %s: %w", dn.id, err))
		}
		dn.base.CloseIdleConnections()
	}
	return errors.Join(errs...)
}
