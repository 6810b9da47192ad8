package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// fleetNodes is the admission side of one way: what each node puts in
// front of its HTTP transport.
type fleetNodes struct {
	way        FleetWay
	sems       []chan struct{}     // StaticSplit, StaticFull
	limiters   []*adaptive.Limiter // IndependentAdaptive
	nodes      []*fleet.Node       // Fleetlimit
	cancelBeat context.CancelFunc  // Fleetlimit: ends the heartbeat loops
}

// newFleetNodes builds the nodes of way; for Fleetlimit it starts them
// (each has its first grant when it returns).
func newFleetNodes(ctx context.Context, sc FleetScenario, way FleetWay, env FleetEnv) (*fleetNodes, error) {
	f := &fleetNodes{way: way}
	switch way {
	case StaticSplit, StaticFull:
		size := sc.Capacity / sc.Nodes
		if way == StaticFull {
			size = sc.Capacity
		}
		for range sc.Nodes {
			f.sems = append(f.sems, make(chan struct{}, size))
		}
	case IndependentAdaptive:
		for i := range sc.Nodes {
			l, err := adaptive.New(env.Limiter(sc.WorkersOf(i)))
			if err != nil {
				return nil, fmt.Errorf("bench: fleet: %w", err)
			}
			f.limiters = append(f.limiters, l)
		}
	case Fleetlimit:
		if env.Pool == nil {
			return nil, errors.New("bench: fleet: the fleetlimit way needs FleetEnv.Pool")
		}
		if env.Key == "" {
			return nil, errors.New("bench: fleet: the fleetlimit way needs FleetEnv.Key")
		}
		beatCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f.cancelBeat = cancel
		for i := range sc.Nodes {
			n, err := fleet.New(env.Pool, fleet.Config{
				Key:               env.Key,
				NodeID:            fmt.Sprintf("node-%d", i),
				HeartbeatInterval: sc.Heartbeat,
				LeaseTTL:          4 * sc.Heartbeat,
				FenceMargin:       sc.Heartbeat,
				// The simulated provider answers within its latency cap
				// and stops serving as soon as its client goes away.
				MaxRequestDuration: 10 * time.Second,
				AbandonedHold:      100 * time.Millisecond,
				Limiter:            env.Limiter(sc.WorkersOf(i)),
				Logger:             env.Logger,
			})
			if err == nil {
				err = n.Start(beatCtx)
			}
			if err != nil {
				f.stop()
				return nil, fmt.Errorf("bench: fleet: node %d: %w", i, err)
			}
			f.nodes = append(f.nodes, n)
		}
	default:
		return nil, fmt.Errorf("bench: fleet: unknown way %v", way)
	}
	return f, nil
}

// transport returns node i's RoundTripper over base.
func (f *fleetNodes) transport(i int, base http.RoundTripper) http.RoundTripper {
	switch f.way {
	case StaticSplit, StaticFull:
		return &semaphoreTransport{sem: f.sems[i], base: base}
	case IndependentAdaptive:
		return &limiterTransport{lim: f.limiters[i], base: base}
	default:
		return f.nodes[i].Transport(base)
	}
}

// probe returns what the way's limiters say now: the global limit node 0
// last heard (0 when the way has none), the mean of the nodes' estimates
// and the total of their drops (both 0 for the static ways).
func (f *fleetNodes) probe() (lGlobal int, meanEstimate float64, drops uint64) {
	switch {
	case len(f.nodes) > 0:
		for i, n := range f.nodes {
			st := n.State()
			if i == 0 {
				lGlobal = st.LGlobal
			}
			meanEstimate += st.Estimate
			drops += st.Drops
		}
		meanEstimate /= float64(len(f.nodes))
	case len(f.limiters) > 0:
		for _, l := range f.limiters {
			snap := l.Snapshot()
			meanEstimate += snap.Estimate
			drops += snap.Drops
		}
		meanEstimate /= float64(len(f.limiters))
	}
	return lGlobal, meanEstimate, drops
}

// stop stops the fleet nodes, if any: each drains and leaves.
func (f *fleetNodes) stop() {
	for _, n := range f.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = n.Stop(ctx)
		cancel()
	}
	f.nodes = nil
	if f.cancelBeat != nil {
		f.cancelBeat()
	}
}

// semaphoreTransport admits a request when a slot of sem is free, waiting
// with the request's context, and frees it when the response body is
// closed or the request fails: a static concurrency cap.
type semaphoreTransport struct {
	sem  chan struct{}
	base http.RoundTripper
}

func (t *semaphoreTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case t.sem <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	release := func() { <-t.sem }
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		release()
		return nil, err
	}
	resp.Body = &onClose{ReadCloser: resp.Body, fn: release}
	return resp, nil
}

// limiterTransport admits through an adaptive.Limiter and classifies the
// response as fleet.Transport does: 429 and 503 (the simulated provider
// answers no 529) are drops settled at
// once, a timeout is a drop, another transport error is ignored, any
// other response releases its lease with the time to its headers as the
// sample once its body is closed.
type limiterTransport struct {
	lim  *adaptive.Limiter
	base http.RoundTripper
}

func (t *limiterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	le, err := t.lim.Acquire(req.Context())
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			le.Drop()
		} else {
			le.Ignore()
		}
		return nil, err
	}
	rtt := time.Since(start)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		le.Drop()
	default:
		resp.Body = &onClose{ReadCloser: resp.Body, fn: func() { le.ReleaseRTT(rtt) }}
	}
	return resp, nil
}

// onClose calls fn once, when the body is first closed.
type onClose struct {
	io.ReadCloser
	fn   func()
	done bool
}

func (b *onClose) Close() error {
	err := b.ReadCloser.Close()
	if !b.done {
		b.done = true
		b.fn()
	}
	return err
}
