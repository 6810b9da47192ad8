package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// retryOnce is a coordinator wrapper that sends its first report twice,
// as a wrapper that retries a heartbeat whose answer was lost would: the
// second is answered Stale.
type retryOnce struct {
	coord.Coordinator
	done atomic.Bool
}

func (c *retryOnce) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	if c.done.CompareAndSwap(false, true) {
		_, _ = c.Coordinator.Heartbeat(ctx, r)
	}
	return c.Coordinator.Heartbeat(ctx, r)
}

// TestStaleFirstGrant: Start whose first grant is stale sends another
// report and joins. Before, it returned nil without having joined, and a
// Stop then panicked on the fence timer no grant had armed.
func TestStaleFirstGrant(t *testing.T) {
	t.Parallel()
	n, err := NewWithCoordinator(&retryOnce{Coordinator: coord.NewMemory(nil)}, testConfig("k", "a"))
	require.NoError(t, err)
	require.NoError(t, n.Start(t.Context()))
	require.True(t, n.State().Joined, "Start returns once a grant is applied")
	require.NotPanics(t, func() { require.NoError(t, n.Stop(context.Background())) })
}

// landing is a coordinator wrapper whose first heartbeat, once it has
// landed, signals landed and then waits for release before answering (with
// ctx's error if ctx ended meanwhile). Its Leave closes leaving, then
// waits for leaveGo, if set (whatever its ctx), and fails with leaveErr if
// set.
type landing struct {
	coord.Coordinator
	first           atomic.Bool
	landed, release chan struct{}
	leaving         chan struct{}
	leaveOnce       sync.Once
	leaveGo         chan struct{}
	leaveErr        error
}

func newLanding(c coord.Coordinator) *landing {
	return &landing{Coordinator: c, landed: make(chan struct{}), release: make(chan struct{}), leaving: make(chan struct{})}
}

func (c *landing) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	g, err := c.Coordinator.Heartbeat(ctx, r)
	if c.first.CompareAndSwap(false, true) {
		close(c.landed)
		<-c.release
		if err == nil && ctx.Err() != nil {
			return coord.Grant{}, ctx.Err() // it landed; its answer is lost
		}
	}
	return g, err
}

func (c *landing) Leave(ctx context.Context, d coord.Departure) error {
	c.leaveOnce.Do(func() { close(c.leaving) })
	if c.leaveGo != nil {
		<-c.leaveGo // whatever ctx says: the test decides when it ends
	}
	if c.leaveErr != nil {
		return c.leaveErr
	}
	return c.Coordinator.Leave(ctx, d)
}

// startLanding makes a node of key "k", id "a" on c (a landing wrapper),
// calls Start in a goroutine and returns once its first heartbeat has
// landed; done receives Start's result.
func startLanding(t *testing.T, c *landing) (n *Node, done <-chan error) {
	t.Helper()
	n, err := NewWithCoordinator(c, testConfig("k", "a"))
	require.NoError(t, err)
	done = async(func() error { return n.Start(context.Background()) })
	<-c.landed
	return n, done
}

// async runs f in a goroutine; the channel receives its result.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// notYet fails t if ch delivers within 50ms.
func notYet(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) too early", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

// requireDeparted checks that key "k" of mem has one row, departed.
func requireDeparted(t *testing.T, mem *coord.Memory) {
	t.Helper()
	rows, err := mem.Nodes(t.Context(), "k")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, coord.StatusDeparted, rows[0].Status, "%+v", rows[0])
	require.Zero(t, rows[0].Share)
}

// TestStopDuringStartWaitsForTheLeave: a Stop while Start's first
// heartbeat is answered returns once Start has left, not before: a process
// that exits when Stop returns leaves no row holding a share. Before, Stop
// returned at once with the row active and holding the whole limit.
func TestStopDuringStartWaitsForTheLeave(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	c := newLanding(mem)
	n, done := startLanding(t, c)
	stopped := async(func() error { return n.Stop(context.Background()) })
	notYet(t, stopped, "Stop, before Start had left,")
	close(c.release)
	require.NoError(t, <-stopped)
	require.ErrorIs(t, <-done, ErrStopped)
	requireDeparted(t, mem)
}

// TestStopReturnsStartsLeaveError: when the leave that Start sends for a
// Stop during its heartbeat fails, Stop says so rather than return nil:
// the row still holds its share until its lease ends.
func TestStopReturnsStartsLeaveError(t *testing.T) {
	t.Parallel()
	c := newLanding(coord.NewMemory(nil))
	c.leaveErr = errors.New("leave refused")
	n, done := startLanding(t, c)
	stopped := async(func() error { return n.Stop(context.Background()) })
	eventually(t, func() bool { return n.phase0() == phaseStopped }, "Stop marked the node")
	close(c.release)
	require.ErrorContains(t, <-stopped, "leave refused")
	require.ErrorIs(t, <-done, ErrStopped)
	require.ErrorContains(t, n.Stop(context.Background()), "leave refused", "a second Stop returns the first's result")
}

// TestSecondStopWaitsForStartEvenIfTheFirstGaveUp: a first Stop whose ctx
// ends while Start still runs returns with ctx's error; a second Stop
// still waits for Start to have left.
func TestSecondStopWaitsForStartEvenIfTheFirstGaveUp(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	c := newLanding(mem)
	n, done := startLanding(t, c)
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, n.Stop(short), context.DeadlineExceeded)
	second := async(func() error { return n.Stop(context.Background()) })
	notYet(t, second, "the second Stop, while Start was still running,")
	close(c.release)
	require.NoError(t, <-second)
	require.ErrorIs(t, <-done, ErrStopped)
	requireDeparted(t, mem)
}

// TestStartsLeaveDoesNotBlockAdmission: while Start leaves what its
// heartbeat joined (a Stop came meanwhile), admission answers at once.
// Before, Start held the node's lock across the leave's round trip, and
// TryAcquireRequest, which never waits, waited for it.
func TestStartsLeaveDoesNotBlockAdmission(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	c := newLanding(mem)
	c.leaveGo = make(chan struct{})
	n, done := startLanding(t, c)
	stopped := async(func() error { return n.Stop(context.Background()) })
	eventually(t, func() bool { return n.phase0() == phaseStopped }, "Stop marked the node")
	close(c.release)
	<-c.leaving // Start is in its leave, which waits for leaveGo
	admitted := async(func() error {
		_, err := n.TryAcquireRequest(RequestFrom(context.Background()))
		return err
	})
	select {
	case err := <-admitted:
		require.ErrorIs(t, err, ErrStopped)
	case <-time.After(5 * time.Second):
		t.Fatal("TryAcquireRequest waited for Start's leave, which waits for the test")
	}
	close(c.leaveGo)
	require.NoError(t, <-stopped)
	err := <-done
	require.ErrorIs(t, err, ErrStopped)
	require.NotContains(t, err.Error(), "(and", "the leave succeeded")
	requireDeparted(t, mem)
}

// schemaGate is a landing coordinator with a schema check: the first
// passes; the second closes entered, waits for out and fails.
type schemaGate struct {
	*landing
	calls        atomic.Int32
	entered, out chan struct{}
}

func (c *schemaGate) CheckSchema(ctx context.Context) error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	close(c.entered)
	<-c.out
	return errors.New("database unreachable")
}

// TestStopDuringAFailingSchemaCheck: a Start whose first heartbeat landed
// but whose answer was lost fails; a second Start's schema check fails
// too, while a Stop waits for it. The row the first heartbeat made must
// still go: before, Start returned at the failed check and Stop returned
// nil with the row active, holding the whole limit.
func TestStopDuringAFailingSchemaCheck(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	c := &schemaGate{landing: newLanding(mem), entered: make(chan struct{}), out: make(chan struct{})}
	n, err := NewWithCoordinator(c, testConfig("k", "a"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := async(func() error { return n.Start(ctx) })
	<-c.landed
	cancel()
	close(c.release)
	require.Error(t, <-done, "its answer was lost")
	done = async(func() error { return n.Start(context.Background()) })
	<-c.entered
	stopped := async(func() error { return n.Stop(context.Background()) })
	eventually(t, func() bool { return n.phase0() == phaseStopped }, "Stop marked the node")
	close(c.out)
	require.ErrorIs(t, <-done, ErrStopped)
	require.NoError(t, <-stopped)
	requireDeparted(t, mem)
}

// TestStopBoundedByTheRequestBound: a slot never freed holds Stop for
// MaxRequestDuration at most (by then every request admitted before Stop
// has reached its bound); Stop then leaves, reporting it in flight. (A
// Lease of the node's is freed at its bound, see TestUnsettledLeaseFreedAtItsBound:
// here the slot is one taken from the node's limiter directly.)
func TestStopBoundedByTheRequestBound(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	cfg := testConfig("k", "a")
	cfg.MaxRequestDuration = 300 * time.Millisecond
	n := startNode(t, mem, cfg)
	eventually(t, func() bool { _, ok := n.Limiter().TryAcquire(); return ok }, "a slot of the limiter's") // never settled
	err := n.Stop(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "left with 1 request still in flight")
	require.ErrorContains(t, err, "MaxRequestDuration (300ms) passed since Stop")
	rows, err := mem.Nodes(t.Context(), "k")
	require.NoError(t, err)
	require.Equal(t, coord.StatusDeparted, rows[0].Status)
	require.Equal(t, 1, rows[0].Inflight, "the request still counts until its hold ends")
}

// shortBoundNode starts node "a" of key "k" with a MaxRequestDuration of
// 300 ms, logging to logs.
func shortBoundNode(t *testing.T, logs *syncBuffer) *Node {
	t.Helper()
	cfg := testConfig("k", "a")
	cfg.MaxRequestDuration = 300 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return startNode(t, coord.NewMemory(nil), cfg)
}

// TestUnsettledLeaseFreedAtItsBound: a lease its caller never settles
// (lost on a path that forgot it) frees its slot a second after its bound,
// counted in the metric and warned of in the log (once for the leases of
// a minute, the rest at Stop); a settle after it does nothing. Before, the
// slot stayed held for the life of the process.
func TestUnsettledLeaseFreedAtItsBound(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		var logs syncBuffer
		n := shortBoundNode(t, &logs)
		lost, err := n.Acquire(t.Context())
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
		lost2, err := n.Acquire(t.Context())
		require.NoError(t, err)
		settled, err := n.Acquire(t.Context())
		require.NoError(t, err)
		settled.Release()
		require.Equal(t, 2, n.State().Inflight)
		time.Sleep(time.Until(lost.Deadline()) + expiryGrace - time.Millisecond)
		require.Equal(t, 2, n.State().Inflight, "held until a second after the bound")
		time.Sleep(time.Until(lost2.Deadline()) + expiryGrace)
		synctest.Wait()
		require.Zero(t, n.State().Inflight, "freed a second after the bound")
		require.Equal(t, uint64(2), n.expired.total.Load())
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(n.Collector()))
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleetlimit_leases_expired_total Leases nobody settled, freed a second after their bound (fleet.Lease).
# TYPE fleetlimit_leases_expired_total counter
fleetlimit_leases_expired_total{key="k",node="a"} 2
`), "fleetlimit_leases_expired_total"))
		lost.Release()
		lost2.Drop()
		require.Zero(t, n.Limiter().Snapshot().Drops, "a settle after the expiry does nothing")
		require.Equal(t, 1, strings.Count(logs.String(), "leases nobody settled were freed"), "one warning in a minute")
		require.NoError(t, n.Stop(context.Background()), "nothing left in flight")
		warned := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "leases nobody settled were freed") {
				var k int
				_, err := fmt.Sscanf(line[strings.Index(line, "leases="):], "leases=%d", &k)
				require.NoError(t, err)
				warned += k
			}
		}
		require.Equal(t, 2, warned, "every expired lease warned of, the last at Stop:\n%s", logs.String())
	})
}

// TestTimeoutAtTheBoundKeepsItsDrop: a request that runs to its bound and
// is settled at once with Abandon(true), as the README's program does,
// counts its drop, and no warning blames its caller: the expiry of a lease
// nobody settled waits a second past the bound.
func TestTimeoutAtTheBoundKeepsItsDrop(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		var logs syncBuffer
		n := shortBoundNode(t, &logs)
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		drops := n.Limiter().Snapshot().Drops
		<-le.Context().Done()
		le.Abandon(true)
		require.Equal(t, drops+1, n.Limiter().Snapshot().Drops, "the timeout is a drop")
		time.Sleep(2 * expiryGrace)
		synctest.Wait()
		require.Zero(t, n.State().Inflight)
		require.NotContains(t, logs.String(), "leases nobody settled")
		require.Zero(t, n.expired.total.Load())
	})
}

// TestStopDrainedAsItsWaitEndsIsClean: a lease lost just before Stop is
// freed about when Stop's wait of MaxRequestDuration ends; a Stop that
// finds nothing in flight once it ends leaves cleanly, instead of saying
// it left with 0 requests still in flight.
func TestStopDrainedAsItsWaitEndsIsClean(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		cfg := testConfig("k", "a")
		cfg.MaxRequestDuration = 302 * time.Millisecond // Stop's wait polls every 5 ms: it ends between two polls
		n := startNode(t, coord.NewMemory(nil), cfg)
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		// Freed within Stop's wait, after its last poll.
		time.AfterFunc(cfg.MaxRequestDuration-time.Millisecond, le.Ignore)
		require.NoError(t, n.Stop(context.Background()))
	})
}

// TestStopAfterFailedStartLeaves: a Start whose first heartbeat reached
// the coordinator but whose answer did not returns an error; a Stop then
// sends the departure, so the row frees its share at once rather than
// when its lease ends.
func TestStopAfterFailedStartLeaves(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	c := newLanding(mem)
	n, err := NewWithCoordinator(c, testConfig("k", "a"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := async(func() error { return n.Start(ctx) })
	<-c.landed
	cancel()
	close(c.release)
	require.Error(t, <-done, "a Start whose answer was lost fails")
	require.NoError(t, n.Stop(context.Background()))
	requireDeparted(t, mem)
}

// TestSecondStopWaitsForTheFirst: a second Stop returns once the first
// has left, not while requests still run on a live row.
func TestSecondStopWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	n := startNode(t, mem, testConfig("k", "a"))
	le, err := n.Acquire(t.Context())
	require.NoError(t, err)
	first := async(func() error { return n.Stop(context.Background()) })
	eventually(t, func() bool { return n.phase0() == phaseStopping }, "the first Stop drains")
	second := async(func() error { return n.Stop(context.Background()) })
	notYet(t, second, "the second Stop, while a request was in flight,")
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, n.Stop(short), context.DeadlineExceeded, "a Stop whose ctx ends first says so")
	le.Release()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	requireDeparted(t, mem)
}

// TestQueuedAcquireFailsOnEviction: an Acquire queued when the node is
// evicted fails with ErrEvicted. Before, it waited for good: no grant
// renews an evicted node's lease.
func TestQueuedAcquireFailsOnEviction(t *testing.T) {
	t.Parallel()
	c := coord.NewMemory(nil)
	n, le, got := queuedBehindOne(t, c)
	require.NoError(t, c.Evict(t.Context(), "k", "a"))
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrEvicted)
	case <-time.After(5 * time.Second):
		t.Fatalf("the queued Acquire still waits on an evicted node: %+v", n.State())
	}
	le.Release()
}

// queuedBehindOne starts a node of key "k", id "a" on c with a limit of 1,
// takes the slot (le) and returns once a second Acquire waits in the
// queue; got receives that Acquire's error.
func queuedBehindOne(t *testing.T, c coord.Coordinator) (n *Node, le Lease, got <-chan error) {
	t.Helper()
	cfg := testConfig("k", "a")
	cfg.Limiter.InitialLimit = 1
	n = startNode(t, c, cfg)
	le, err := n.Acquire(t.Context())
	require.NoError(t, err)
	got = async(func() error {
		_, err := n.Acquire(context.Background())
		return err
	})
	eventually(t, func() bool { return n.State().Queued == 1 }, "queued")
	return n, le, got
}

// TestAbandonThenRelease: a Release after Abandon (a deferred one) does
// not free the slot the abandoned request may still hold upstream; the
// hold frees it.
func TestAbandonThenRelease(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 200 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	le, err := n.Acquire(t.Context())
	require.NoError(t, err)
	abandoned := time.Now()
	le.Abandon(false)
	le.Release()
	le.Drop()
	le.Ignore()
	require.Equal(t, 1, n.State().Inflight, "the slot is held after Abandon and Release")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "the hold frees the slot")
	require.GreaterOrEqual(t, time.Since(abandoned), cfg.AbandonedHold)
	require.Zero(t, n.Limiter().Snapshot().Drops, "a Drop after Abandon counts nothing")
}

// TestAbandonRacingRelease runs Abandon(true) and Release at once on one
// lease, many times: exactly one may take effect. Abandon's counts a drop
// and keeps the slot held; Release's frees it and counts none. A drop
// counted with the slot freed is both.
func TestAbandonRacingRelease(t *testing.T) {
	t.Parallel()
	const rounds = 20000
	lim, err := adaptive.New(adaptive.Config{InitialLimit: 2 * rounds, MinLimit: 2 * rounds, MaxLimit: 2 * rounds})
	require.NoError(t, err)
	cfg := Config{MaxRequestDuration: time.Hour, AbandonedHold: time.Hour}
	for i := range rounds {
		inflight, drops := lim.Inflight(), lim.Snapshot().Drops
		al, ok := lim.TryAcquire()
		require.True(t, ok)
		le := bound(context.Background(), al, &cfg)
		var wg sync.WaitGroup
		wg.Go(func() { le.Abandon(true) })
		wg.Go(le.Release)
		wg.Wait()
		held, dropped := lim.Inflight()-inflight, lim.Snapshot().Drops-drops
		require.Truef(t, held == 1 && dropped == 1 || held == 0 && dropped == 0,
			"round %d: slot held %d, drops counted %d: Abandon and Release both took effect", i, held, dropped)
		require.Error(t, le.Context().Err(), "either one ends the context")
	}
}

// replayer is a Coordinator that passes every heartbeat through and, once
// armed, answers one with the first grant it saw instead: a wrapper that
// caches or reorders replies.
type replayer struct {
	coord.Coordinator
	mu    sync.Mutex
	first *coord.Grant
	armed atomic.Bool
	fired atomic.Bool
}

func (r *replayer) Heartbeat(ctx context.Context, rep coord.Report) (coord.Grant, error) {
	g, err := r.Coordinator.Heartbeat(ctx, rep)
	if err != nil {
		return g, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = &g
	}
	if r.armed.Load() && r.fired.CompareAndSwap(false, true) {
		return *r.first, nil
	}
	return g, nil
}

// TestAnOlderGrantIsIgnored: the safety argument takes it that a node
// never goes back to a grant older than the one it applied; the node took
// whatever grant it was given. Replayed by a wrapper after a peer joined,
// its first grant, alone on the key, took it back to the whole max while
// the peer held half: 9 in flight at an upstream on a max of 6.
func TestAnOlderGrantIsIgnored(t *testing.T) {
	t.Parallel()
	m := coord.NewMemory(nil)
	require.NoError(t, m.CreateKey(t.Context(), "k", nil, new(6)))
	rp := &replayer{Coordinator: m}
	a := startNode(t, rp, testConfig("k", "a"))
	hold := func(n *Node) {
		for range 6 {
			if le, err := n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1}); err == nil {
				t.Cleanup(le.Release)
			}
		}
	}
	hold(a) // demand
	eventually(t, func() bool { return a.State().Share == 6 }, "a alone holds the max")
	b := startNode(t, m, testConfig("k", "b"))
	le, err := b.Acquire(t.Context())
	require.NoError(t, err)
	t.Cleanup(le.Release)
	eventually(t, func() bool { return a.State().Share < 6 && b.State().Share > 0 }, "a's share falls as b asks")
	gen := a.State().Generation
	rp.armed.Store(true)
	eventually(t, func() bool { return rp.fired.Load() }, "the old grant is replayed")
	st := a.State()
	require.GreaterOrEqual(t, st.Generation, gen, "the older generation is not applied")
	require.Less(t, st.Share, 6, "nor its share")
}
