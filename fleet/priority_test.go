package fleet

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

func TestRequestFromContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.Equal(t, adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1}, RequestFrom(ctx))
	ctx = WithPriority(ctx, 250)
	require.Equal(t, adaptive.Request{Priority: 250, Weight: 1}, RequestFrom(ctx))
	ctx = WithWeight(ctx, 7)
	require.Equal(t, adaptive.Request{Priority: 250, Weight: 7}, RequestFrom(ctx))
	require.Equal(t, adaptive.Request{Priority: 0, Weight: 7}, RequestFrom(WithPriority(ctx, 0)))
}

// recordingCoordinator remembers the demand of every report.
type recordingCoordinator struct {
	coord.Coordinator
	mu      sync.Mutex
	demands []int
}

func (r *recordingCoordinator) Heartbeat(ctx context.Context, rep coord.Report) (coord.Grant, error) {
	r.mu.Lock()
	r.demands = append(r.demands, rep.Demand)
	r.mu.Unlock()
	return r.Coordinator.Heartbeat(ctx, rep)
}

func (r *recordingCoordinator) maxDemand() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := 0
	for _, d := range r.demands {
		m = max(m, d)
	}
	return m
}

// holdingServer answers each request on 127.0.0.1 once release is closed,
// and records the X-Name header of each request in arrival order.
func holdingServer(t *testing.T) (srv *httptest.Server, release chan struct{}, arrived func() []string) {
	t.Helper()
	release = make(chan struct{})
	var mu sync.Mutex
	var names []string
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		names = append(names, r.Header.Get("X-Name"))
		mu.Unlock()
		<-release
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, release, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), names...)
	}
}

// send issues a GET through client with the given name, priority and
// weight, closes the body and returns the error.
func send(ctx context.Context, client *http.Client, url, name string, p uint8, w int) error {
	req, err := http.NewRequestWithContext(WithWeight(WithPriority(ctx, p), w), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Name", name)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// Transport admits each request with the priority and weight of its
// context: the node's in-flight and the demand it reports are in weight
// units, and freed room goes to the higher priority first. Each waiter
// weighs more than half the limit, so they are admitted one at a time
// and reach the server in admission order.
func TestTransportWeightAndPriority(t *testing.T) {
	t.Parallel()
	srv, release, arrived := holdingServer(t)
	rc := &recordingCoordinator{Coordinator: coord.NewMemory(nil)}
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 10}
	n := startNode(t, rc, cfg)
	eventually(t, func() bool { return n.State().Limit == 10 }, "the node is granted the key's limit")
	client := &http.Client{Transport: n.Transport(nil)}
	ctx := t.Context()

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := func(name string, p uint8, w int) {
		wg.Go(func() { errs <- send(ctx, client, srv.URL, name, p, w) })
	}
	start("batch", 10, 8)
	eventually(t, func() bool { return n.State().Inflight == 8 }, "one request holds 8 units")
	start("bulk", 0, 6) // does not fit: waits
	eventually(t, func() bool { return n.State().Queued == 1 }, "bulk queued")
	start("chat", 255, 6) // finishes at 6, before bulk's 1536: first in line
	eventually(t, func() bool { return n.State().Queued == 2 }, "chat queued")
	eventually(t, func() bool { return rc.maxDemand() >= 8+6+6 }, "demand counts weight in flight and queued")

	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, []string{"batch", "chat", "bulk"}, arrived())
	require.Equal(t, 0, n.State().Inflight)
	require.Equal(t, 20, rc.maxDemand(), "never more than the weights asked for")

	// A weight above the whole limit fails at once and sends nothing.
	err := send(ctx, client, srv.URL, "huge", 255, 11)
	require.ErrorIs(t, err, adaptive.ErrTooHeavy)
	require.ErrorContains(t, err, "Request.Weight = 11 exceeds Config.Limiter.MaxLimit = 10")
	err = send(ctx, client, srv.URL, "zero", 255, 0)
	require.ErrorIs(t, err, adaptive.ErrInvalidRequest)
	require.Len(t, arrived(), 3)
}

// A weight above the key's L_global fails at once even when the node's
// own estimate is higher: no share could ever hold it.
func TestAcquireTooHeavyForTheFleet(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	maxLimit := 5
	require.NoError(t, mem.CreateKey(t.Context(), "k", nil, &maxLimit))
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 20, MaxQueued: 10}
	n := startNode(t, mem, cfg)
	eventually(t, func() bool { return n.State().LGlobal == 5 }, "the operator's max caps L_global")
	_, err := n.Acquire(WithWeight(t.Context(), 6))
	require.ErrorIs(t, err, adaptive.ErrTooHeavy)
	require.ErrorContains(t, err, "Request.Weight = 6 exceeds the key's global limit L_global = 5")
	le, err := n.Acquire(WithWeight(t.Context(), 5))
	require.NoError(t, err)
	require.Equal(t, 5, n.State().Inflight)
	le.Release()
}

func TestCollectorReportsPriorities(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 10, MinLimit: 10, MaxLimit: 10, MaxQueued: 10}
	n := startNode(t, coord.NewMemory(nil), cfg)
	eventually(t, func() bool { return n.State().Limit == 10 }, "granted")
	le, err := n.Acquire(WithWeight(WithPriority(t.Context(), 200), 3))
	require.NoError(t, err)
	le.Release()
	le, err = n.Acquire(t.Context())
	require.NoError(t, err)
	le.Release()
	full, err := n.Acquire(WithWeight(WithPriority(t.Context(), 1), 10))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, err = n.Acquire(WithPriority(ctx, 7))
	require.ErrorIs(t, err, context.DeadlineExceeded, "waited for room that did not come")
	full.Release()

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(n.Collector()))
	want := `
# HELP fleetlimit_priority_admitted_total Requests at this priority handed a lease, past the local limiter and the key's rate.
# TYPE fleetlimit_priority_admitted_total counter
fleetlimit_priority_admitted_total{key="k",node="a",priority="1"} 1
fleetlimit_priority_admitted_total{key="k",node="a",priority="128"} 1
fleetlimit_priority_admitted_total{key="k",node="a",priority="200"} 1
fleetlimit_priority_admitted_total{key="k",node="a",priority="7"} 0
# HELP fleetlimit_priority_admitted_weight_total Sum of the weights of the requests admitted at this priority.
# TYPE fleetlimit_priority_admitted_weight_total counter
fleetlimit_priority_admitted_weight_total{key="k",node="a",priority="1"} 10
fleetlimit_priority_admitted_weight_total{key="k",node="a",priority="128"} 1
fleetlimit_priority_admitted_weight_total{key="k",node="a",priority="200"} 3
fleetlimit_priority_admitted_weight_total{key="k",node="a",priority="7"} 0
# HELP fleetlimit_priority_cancelled_total Requests at this priority whose context ended before a lease was handed over, waiting for a slot or for the rate.
# TYPE fleetlimit_priority_cancelled_total counter
fleetlimit_priority_cancelled_total{key="k",node="a",priority="1"} 0
fleetlimit_priority_cancelled_total{key="k",node="a",priority="128"} 0
fleetlimit_priority_cancelled_total{key="k",node="a",priority="200"} 0
fleetlimit_priority_cancelled_total{key="k",node="a",priority="7"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleetlimit_priority_admitted_total", "fleetlimit_priority_admitted_weight_total",
		"fleetlimit_priority_cancelled_total"))
	count, err := testutil.GatherAndCount(reg, "fleetlimit_priority_refused_total", "fleetlimit_priority_queued",
		"fleetlimit_priority_wait_seconds_total", "fleetlimit_priority_waits_total",
		"fleetlimit_priority_timed_out_total")
	require.NoError(t, err)
	require.Equal(t, 5*4, count, "every series for each of the four priorities seen")
}
