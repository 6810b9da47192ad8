package examples_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/examples"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// TestMain starts the test Postgres on first use and stops it at the end.
func TestMain(m *testing.M) { fleettest.Main(m) }

// upstream is a partner API that counts the requests it is serving.
type upstream struct {
	inflight, peak, served atomic.Int64
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := u.inflight.Add(1)
	defer u.inflight.Add(-1)
	for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	u.served.Add(1)
	_, _ = w.Write([]byte("ok"))
}

// TestTwoNodesShareTheQuota runs two fleet nodes, as two processes of a
// service would, on a key capped at 8 before either joins. Each node's
// client keeps 16 requests going for at least two seconds. Both nodes are granted a
// share, their shares never add up to more than the cap, and the upstream
// never serves more than 8 requests at once.
func TestTwoNodesShareTheQuota(t *testing.T) {
	t.Parallel()
	const key, maxLimit = "partner-api", 8
	u := &upstream{}
	srv := httptest.NewServer(u) // listens on 127.0.0.1
	defer srv.Close()

	c := fleettest.Coordinator(t)
	capped := maxLimit
	if err := c.CreateKey(t.Context(), key, nil, &capped); err != nil {
		t.Fatal(err)
	}
	t.Logf("Postgres backend: %s", fleettest.Backend())

	var nodes []*fleet.Node
	for _, id := range []string{"node-a", "node-b"} {
		nodes = append(nodes, fleettest.StartNode(t, c, fleet.Config{
			Key:               key,
			NodeID:            id,
			HeartbeatInterval: 100 * time.Millisecond,
			LeaseTTL:          2 * time.Second, // no fence for a heartbeat delayed on a loaded machine
			Limiter:           adaptive.Config{InitialLimit: 20, MaxQueued: 64},
		}))
	}

	// The load runs for at least 2s, and until the checks below are done
	// (at most 30s): they watch the shares it brings. Each worker ends
	// after a request, not in one: a request cancelled once sent keeps its
	// slot for AbandonedHold.
	var wg sync.WaitGroup
	started := time.Now()
	var done atomic.Bool
	var failed atomic.Int64
	var firstErr atomic.Value // the first client error, for the report
	// Ends the load whatever the outcome (a failed check stops the test
	// early), before the nodes' Stop.
	t.Cleanup(func() { done.Store(true); wg.Wait() })
	for _, n := range nodes {
		client := examples.NewClient(n, srv.URL)
		for range 16 {
			wg.Go(func() {
				for !done.Load() && time.Since(started) < 30*time.Second {
					if _, err := client.Get(t.Context(), "/"); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			})
		}
	}

	for _, n := range nodes {
		s := fleettest.WaitFor(t, n, 5*time.Second, func(s fleet.State) bool {
			return s.LiveNodes == 2 && s.Share > 0
		})
		t.Logf("%s: share %d of %d", n.ID(), s.Share, s.LGlobal)
		if s.LGlobal > maxLimit {
			t.Errorf("%s: L_global %d above the key's max %d", n.ID(), s.LGlobal, maxLimit)
		}
	}
	a, b := nodes[0].State(), nodes[1].State()
	if a.Share+b.Share > maxLimit {
		t.Errorf("shares %d + %d exceed the key's max %d", a.Share, b.Share, maxLimit)
	}
	time.Sleep(time.Until(started.Add(2 * time.Second)))
	done.Store(true)
	wg.Wait()

	t.Logf("upstream served %d requests, peak %d in flight; %d client errors", u.served.Load(), u.peak.Load(), failed.Load())
	if p := u.peak.Load(); p > maxLimit {
		t.Errorf("upstream saw %d requests in flight, above the key's max %d", p, maxLimit)
	}
	if u.served.Load() == 0 {
		t.Error("upstream served nothing")
	}
	// The upstream refuses nothing and the nodes queue what their shares
	// cannot take: every request the clients sent is served.
	if n := failed.Load(); n > 0 {
		t.Errorf("%d client errors, the first: %v", n, firstErr.Load())
	}
}
