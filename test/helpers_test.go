package test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The fleet timing every test uses: heartbeats fast enough that a test
// takes seconds, with a lease long enough that a loaded CI machine (every
// test package running at once under the race detector) does not expire
// live nodes.
const (
	heartbeat   = 200 * time.Millisecond
	leaseTTL    = 1200 * time.Millisecond
	fenceMargin = 300 * time.Millisecond
	// maxRequest bounds every request in these tests (they last at most
	// a few tens of milliseconds).
	maxRequest = 500 * time.Millisecond
)

func nodeConfig(key, id string, lim adaptive.Config) fleet.Config {
	return fleet.Config{
		Key:                key,
		NodeID:             id,
		HeartbeatInterval:  heartbeat,
		LeaseTTL:           leaseTTL,
		FenceMargin:        fenceMargin,
		HeartbeatTimeout:   leaseTTL - fenceMargin,
		MaxRequestDuration: maxRequest,
		Limiter:            lim,
		Logger:             quiet,
	}
}

// startNode starts a node on c and stops it at cleanup.
func startNode(t *testing.T, c coord.Coordinator, cfg fleet.Config) *fleet.Node {
	t.Helper()
	n, err := fleet.NewWithCoordinator(c, cfg)
	require.NoError(t, err)
	require.NoError(t, n.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Stop(ctx)
	})
	return n
}

// load runs workers that call fn in a loop until stop or finish is called.
type load struct {
	cancel context.CancelFunc
	quit   atomic.Bool
	wg     sync.WaitGroup
}

func startLoad(workers int, fn func(ctx context.Context)) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for range workers {
		l.wg.Go(func() {
			for ctx.Err() == nil && !l.quit.Load() {
				fn(ctx)
			}
		})
	}
	return l
}

// stop cancels the calls in progress and waits for the workers.
func (l *load) stop() { l.cancel(); l.wg.Wait() }

// finish lets the calls in progress end by themselves, starts no more and
// waits for the workers, as a server that shuts down gracefully does.
func (l *load) finish() { l.quit.Store(true); l.wg.Wait(); l.cancel() }

// holdLoop acquires through n, holds the slot for hold and releases it; a
// refused admission backs off for a millisecond.
func holdLoop(n *fleet.Node, hold time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		le, err := n.Acquire(ctx)
		if err != nil {
			sleep(ctx, time.Millisecond)
			return
		}
		sleep(ctx, hold)
		le.Release()
	}
}

// httpLoop sends one request to the provider through n's transport.
func httpLoop(n *fleet.Node, p *sim.Provider) func(context.Context) {
	client := &http.Client{Transport: n.Transport(nil)}
	return func(ctx context.Context) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL(), nil)
		if err != nil {
			panic(err)
		}
		req.Header.Set(sim.DefaultClientHeader, n.ID())
		resp, err := client.Do(req)
		if err != nil {
			sleep(ctx, time.Millisecond)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sampler calls fn every 5 ms until stopped.
type sampler struct {
	stopCh chan struct{}
	done   chan struct{}
}

func sample(fn func()) *sampler {
	s := &sampler{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stopCh:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return s
}

func (s *sampler) stop() { close(s.stopCh); <-s.done }

func ids(nodes []*fleet.Node) string {
	out := ""
	for _, n := range nodes {
		st := n.State()
		out += fmt.Sprintf(" %s{share=%d in=%d queued=%d est=%.1f status=%s fenced=%v outage=%v err=%v gen=%d}",
			n.ID(), st.Share, st.Inflight, st.Queued, st.Estimate, st.Status, st.Fenced, st.Outage, st.LastError, st.Generation)
	}
	return out
}
