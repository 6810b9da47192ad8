package fleet

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
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
	"github.com/fleetlimit/fleetlimit/pace"
	"github.com/fleetlimit/fleetlimit/quota"
)

// tokensInAMinute runs one worker for a minute of fake time: each request
// is estimated at est tokens, costs actual, and is settled settles times;
// it returns how many were sent and the errors of the settles after the
// first.
func tokensInAMinute(t *testing.T, n *Node, est, actual int64, settles int) (sent, refused int) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		le, err := n.Acquire(WithTokens(ctx, est))
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		sent++
		require.NoError(t, le.SettleTokens(actual))
		for range settles - 1 {
			if le.SettleTokens(actual) != nil {
				refused++
			}
		}
		le.Release()
		time.Sleep(10 * time.Millisecond)
	}
	return sent, refused
}

// TestRateSettleTokensOnce: a request's tokens are settled once. Requests
// estimated at 100 tokens that cost 50, settled twice, on a key of 6,000
// tokens a minute: the second settle is refused, not refunded again, so
// the node sends no more than when it settles once.
func TestRateSettleTokensOnce(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 0, 6000)
		n := startNode(t, c, testConfig("k", "a"))
		_, _ = tokensInAMinute(t, n, 100, 50, 1) // a share
		once, _ := tokensInAMinute(t, n, 100, 50, 1)
		twice, refused := tokensInAMinute(t, n, 100, 50, 2)
		t.Logf("a minute at 6,000 tokens, requests costing 50: %d sent settling once, %d settling twice", once, twice)
		require.Equal(t, twice, refused, "every second settle is refused")
		require.LessOrEqual(t, twice*50, 6000+100, "a second settle refunds nothing")
	})
}

// TestRateSettleTokensOnceThroughResponse: the Transport's response and
// its request's context share the debit: settling through one, then the
// other, is refused the second time.
func TestRateSettleTokensOnceThroughResponse(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	n := startNode(t, rateKey(t, 0, 600000), testConfig("k", "a"))
	req, err := http.NewRequestWithContext(WithTokens(t.Context(), 10), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(nil), Timeout: 5 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, SettleTokens(resp, 20))
	require.ErrorContains(t, SettleTokens(resp, 20), "settled already")
}

// TestRateHugeEstimateRefused: an estimate above MaxTokens (math.MaxInt64,
// a sentinel for "unknown") is refused with an error naming it, and the
// token share binds as before.
func TestRateHugeEstimateRefused(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 0, 6000)
		n := startNode(t, c, testConfig("k", "a"))
		_, _ = tokensInAMinute(t, n, 100, 100, 1) // a share
		_, err := n.Acquire(WithTokens(t.Context(), math.MaxInt64))
		require.ErrorIs(t, err, adaptive.ErrInvalidRequest)
		require.ErrorContains(t, err, "token estimate = 9223372036854775807, want 0..1000000000")
		after, _ := tokensInAMinute(t, n, 100, 100, 1)
		t.Logf("requests of 100 tokens in a minute at 6,000 tokens after a refused estimate: %d", after)
		require.LessOrEqual(t, after, 61, "the token share still binds")
	})
}

// TestRateHeadersIgnoredWithoutLearn: the zero RateConfig learns no rate,
// from 429s or from quota headers: a response carrying
// x-ratelimit-limit-tokens gives the key no token rate.
func TestRateHeadersIgnoredWithoutLearn(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("x-ratelimit-limit-tokens", "30000")
	}))
	t.Cleanup(srv.Close)
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := n.Transport(nil).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	time.Sleep(200 * time.Millisecond) // a few heartbeats
	st := n.Rates()
	require.Zero(t, st.Learned.Tokens)
	require.Zero(t, st.Key.Tokens, "a node that learns nothing gave the key a token rate")
}

// TestRateTightestQuotaPolicy: with several quota policies (an IETF
// RateLimit-Policy of a minute and of an hour), the tightest caps the
// learned request rate, in whatever order they come.
func TestRateTightestQuotaPolicy(t *testing.T) {
	t.Parallel()
	rate := func(policy string) float64 {
		cfg := testConfig("k", "a")
		cfg.Rate = RateConfig{Learn: true, Learner: pace.LearnerConfig{SeedRate: 10, MaxRate: 100}}
		n, err := NewWithCoordinator(coord.NewMemory(nil), cfg)
		require.NoError(t, err)
		now := time.Now()
		h := http.Header{}
		h.Set("RateLimit-Policy", policy)
		n.readRateQuota(quota.Parse(h, now), now)
		// Then a minute and a half of saturated periods without a 429.
		l := n.learner()
		for i := range 18 {
			at := now.Add(time.Duration(i) * 5 * time.Second)
			l.Saturated(at)
			l.Record(at, false)
		}
		return l.Rate(now.Add(90*time.Second)) * 60
	}
	a := rate(`"minute";q=600;w=60, "hour";q=3600;w=3600`)
	b := rate(`"hour";q=3600;w=3600, "minute";q=600;w=60`)
	t.Logf("learned requests a minute: %.0f (minute policy first), %.0f (hour policy first); the hour allows 60 a minute", a, b)
	require.Equal(t, a, b, "the ceiling depends on the order of the policies")
	require.LessOrEqual(t, b, 60.0, "the hour's quota allows 60 a minute")
}

// failingCoord fails every heartbeat while fail is set, and keeps every
// heartbeat it saw.
type failingCoord struct {
	coord.Coordinator
	fail  atomic.Bool
	lose  atomic.Bool   // the report reaches the coordinator; its answer is lost
	delay time.Duration // how long a failure takes (set before the node starts)
	mu    sync.Mutex
	tried []attempt // every heartbeat, failed or not
}

// attempt is one heartbeat a failingCoord saw.
type attempt struct {
	at     time.Time
	report coord.Report
	failed bool // the report did not reach the coordinator
	lost   bool // it did, and its answer was lost
}

func (c *failingCoord) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	a := attempt{at: time.Now(), report: r, failed: c.fail.Load()}
	a.lost = !a.failed && c.lose.Load()
	c.mu.Lock()
	c.tried = append(c.tried, a)
	c.mu.Unlock()
	switch {
	case a.failed:
		time.Sleep(c.delay)
		return coord.Grant{}, context.DeadlineExceeded
	case a.lost:
		_, _ = c.Coordinator.Heartbeat(ctx, r)
		return coord.Grant{}, context.DeadlineExceeded
	}
	return c.Coordinator.Heartbeat(ctx, r)
}

// attempts returns a copy of every heartbeat seen so far.
func (c *failingCoord) attempts() []attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tried)
}

// delivered returns the reports that got through and were answered, in
// order.
func (c *failingCoord) delivered() []coord.Report {
	var out []coord.Report
	for _, a := range c.attempts() {
		if !a.failed && !a.lost {
			out = append(out, a.report)
		}
	}
	return out
}

// TestRateFencedNodeReportsNoneApplied: a node whose lease ran out (fenced
// under FailClosed, sending nothing) reports no rate share applied, so
// that in learning mode, after a failover that lost a peer's newer grant,
// the coordinator does not take its old share as held and grant it again.
func TestRateFencedNodeReportsNoneApplied(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := &failingCoord{Coordinator: rateKey(t, 600, 0)}
		n := startNode(t, c, testConfig("k", "a"))
		_, _ = n.TryAcquire()
		time.Sleep(time.Second)
		require.Equal(t, int64(600), n.Rates().Share.Requests)
		got := c.delivered()
		require.Equal(t, int64(600), got[len(got)-1].RateApplied.Requests, "a live node reports the share it paces to")
		c.fail.Store(true)
		time.Sleep(time.Second) // far past the lease (200 ms)
		_, err := n.Acquire(t.Context())
		require.ErrorIs(t, err, ErrFenced)
		from := len(c.delivered())
		c.fail.Store(false)
		// The first report to get through again:
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && len(c.delivered()) == from; {
			time.Sleep(time.Millisecond)
		}
		got = c.delivered()
		require.Greater(t, len(got), from, "a report got through again")
		require.Zero(t, got[from].RateApplied.Requests, "a fenced node claims the rate share its lease no longer covers")
	})
}

// TestRateUsedLateSettle: a stream estimated at 100,000 tokens that
// settles at 1,000 after 90 s takes nothing off the usage of the minute
// in which it settles: its correction goes to the second it was let go,
// which has left the minute with its estimate. The 20 requests of 2,000
// tokens sent in that minute show.
func TestRateUsedLateSettle(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 6000, 10_000_000)
		n := startNode(t, c, testConfig("k", "a"))
		time.Sleep(time.Second)
		long, err := n.Acquire(WithTokens(t.Context(), 100_000))
		require.NoError(t, err)
		time.Sleep(61 * time.Second)
		for range 20 {
			le, err := n.Acquire(WithTokens(t.Context(), 2000))
			require.NoError(t, err)
			require.NoError(t, le.SettleTokens(2000))
			le.Release()
			time.Sleep(time.Second)
		}
		require.NoError(t, long.SettleTokens(1000))
		long.Release()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		used := n.Rates().Used
		rows, err := c.Nodes(t.Context(), "k")
		require.NoError(t, err)
		t.Logf("node reports %+v; row %+v; sent in the last minute: 20 requests, 40,000 tokens", used, rows[0].RateUsed)
		require.Equal(t, coord.Rates{Requests: 20, Tokens: 40000}, used)
		require.Equal(t, used, rows[0].RateUsed)
	})
}

// TestRateUsedSettledInTheMinute: a request settled within the minute it
// was let go counts at its actual cost, on a key without a token rate as
// well; a second settle is refused there too.
func TestRateUsedSettledInTheMinute(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, rateKey(t, 6000, 0), testConfig("k", "a"))
		time.Sleep(time.Second)
		le, err := n.Acquire(WithTokens(t.Context(), 500))
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		require.NoError(t, le.SettleTokens(120))
		require.ErrorContains(t, le.SettleTokens(120), "settled already")
		le.Release()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, coord.Rates{Requests: 1, Tokens: 120}, n.Rates().Used)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, coord.Rates{}, n.Rates().Used, "a minute later it has left")
	})
}

// TestRateUsedClockBack: a log fed times without a monotonic reading
// whose clock steps back starts again instead of counting the seconds
// before the step as recent for as long as the step.
func TestRateUsedClockBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := &rateState{origin: t0}
	for s := 0; s < 60; s += 5 {
		r.sent(50, 5000)
		r.usedLocked(t0.Add(time.Duration(s) * time.Second))
	}
	require.Equal(t, coord.Rates{Requests: 600, Tokens: 60000}, r.usedLocked(t0.Add(59*time.Second)))
	back := t0.Add(-time.Hour)
	require.Equal(t, coord.Rates{}, r.usedLocked(back), "nothing sent since the step")
	r.sent(1, 10)
	require.Equal(t, coord.Rates{Requests: 1, Tokens: 10}, r.usedLocked(back.Add(5*time.Second)))
}
