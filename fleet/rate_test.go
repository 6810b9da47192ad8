package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
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
)

// rateKey is a Memory coordinator whose key "k" has the operator rates
// rpm and tpm.
func rateKey(t *testing.T, rpm, tpm int64) *coord.Memory {
	t.Helper()
	c := coord.NewMemory(nil)
	require.NoError(t, c.CreateKey(t.Context(), "k", nil, nil))
	_, err := c.SetRates(t.Context(), "k", coord.RatesChange{SetRequests: true, Requests: rpm, SetTokens: true, Tokens: tpm})
	require.NoError(t, err)
	return c
}

// closedLoop runs workers that acquire, hold the slot 10 ms and release,
// tokens each, until ctx ends, recording when each request was let go. A
// refused admission is retried after 10 ms.
func closedLoop(ctx context.Context, n *Node, workers int, tokens int64, sent *[]time.Time, mu *sync.Mutex, wg *sync.WaitGroup) {
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				le, err := n.Acquire(WithTokens(ctx, tokens))
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				*sent = append(*sent, time.Now())
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				le.Release()
			}
		}()
	}
}

// maxInWindow is the most times in any window of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// TestRateSharedByDemand: two nodes with 4 and 1 saturating workers share
// a key of 600 requests a minute. No minute ever sees more than 600 of
// their requests, the fleet uses most of it, and the busier node gets the
// larger share.
func TestRateSharedByDemand(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 600, 0)
		a := startNode(t, c, testConfig("k", "a"))
		b := startNode(t, c, testConfig("k", "b"))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		var (
			mu             sync.Mutex
			wg             sync.WaitGroup
			sentA, sentB   []time.Time
			sharesA, total int64
		)
		closedLoop(ctx, a, 4, 0, &sentA, &mu, &wg)
		closedLoop(ctx, b, 1, 0, &sentB, &mu, &wg)
		time.Sleep(2 * time.Minute)
		sharesA = a.Rates().Share.Requests
		total = sharesA + b.Rates().Share.Requests
		<-ctx.Done()
		wg.Wait()
		mu.Lock()
		all := append(append([]time.Time{}, sentA...), sentB...)
		na, nb := len(sentA), len(sentB)
		mu.Unlock()
		peak := maxInWindow(all, time.Minute)
		t.Logf("3 minutes: a sent %d, b %d; the busiest minute %d of 600; shares a %d of %d", na, nb, peak, sharesA, total)
		require.LessOrEqual(t, peak, 600, "no minute above the key's rate")
		require.GreaterOrEqual(t, na+nb, 3*540, "the fleet uses at least 90%% of the rate")
		require.Greater(t, na, 2*nb, "the busier node gets more")
		require.LessOrEqual(t, total, int64(600))
		require.Equal(t, coord.Rates{Requests: 600}, a.Rates().Key)
	})
}

// TestJoinerClaimsRateWhileWaitingForASlot: a node joins a key of 600
// requests a minute whose whole rate and concurrency another node holds,
// heartbeats a second apart. Its requests wait for a slot first, before
// they reach its pacer; counted in its rate demand only from there, its
// rate share stayed 0 for 4 to 5 heartbeats (the concurrency handover,
// then the rate's), and it sent 1 request to the other's 42 in its first
// 5 s. Counted while they wait for the slot, its rate is claimed beside
// its concurrency, and it has a share within 3 heartbeats.
func TestJoinerClaimsRateWhileWaitingForASlot(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 600, 0)
		cfg := testConfig("k", "a")
		cfg.HeartbeatInterval, cfg.LeaseTTL, cfg.FenceMargin = time.Second, 4*time.Second, time.Second
		a := startNode(t, c, cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var (
			mu           sync.Mutex
			wg           sync.WaitGroup
			sentA, sentB []time.Time
		)
		closedLoop(ctx, a, 4, 0, &sentA, &mu, &wg)
		time.Sleep(10 * time.Second)
		require.Equal(t, int64(600), a.Rates().Share.Requests, "the first node holds the whole rate")
		cfg.NodeID = "b"
		b := startNode(t, c, cfg)
		closedLoop(ctx, b, 4, 0, &sentB, &mu, &wg)
		time.Sleep(3 * time.Second)
		share := b.Rates().Share.Requests
		<-ctx.Done()
		wg.Wait()
		t.Logf("the joiner's rate share 3 s after it joined: %d of 600", share)
		require.Positive(t, share, "the joiner claims its rate while its requests wait for a slot")
	})
}

// TestRatePollingDoesNotClaimTheKey: on a key of 600 requests a minute, a
// node whose one caller polls TryAcquire every millisecond beside a node
// whose 8 callers wait in Acquire. Every refused try counted as a request
// asked for: the poller's demand was 52,534 a minute against 1,071, and it
// took 589 of the 600. A refused try counts as one request wanted, however
// many, so the waiting node's demand is the larger.
func TestRatePollingDoesNotClaimTheKey(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 600, 0)
		poll := startNode(t, c, testConfig("k", "poll"))
		wait := startNode(t, c, testConfig("k", "wait"))
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var (
			mu    sync.Mutex
			wg    sync.WaitGroup
			sentW []time.Time
			polls int
		)
		closedLoop(ctx, wait, 8, 0, &sentW, &mu, &wg)
		wg.Go(func() {
			for ctx.Err() == nil {
				le, ok := poll.TryAcquire()
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				polls++
				time.Sleep(10 * time.Millisecond)
				le.Release()
			}
		})
		time.Sleep(20 * time.Second)
		p, w := poll.Rates(), wait.Rates()
		<-ctx.Done()
		wg.Wait()
		t.Logf("poller: demand %d, share %d, %d sent; waiting node: demand %d, share %d, %d sent",
			p.Demand.Requests, p.Share.Requests, polls, w.Demand.Requests, w.Share.Requests, len(sentW))
		require.Greater(t, w.Share.Requests, p.Share.Requests, "8 callers waiting want more than one polling")
	})
}

// TestRateTokensSettled: a token rate of 6,000 a minute, requests
// estimated at 10 tokens that cost 100: the settled cost, not the
// estimate, bounds the pace.
func TestRateTokensSettled(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 0, 6000)
		n := startNode(t, c, testConfig("k", "a"))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		sent := 0
		for ctx.Err() == nil {
			le, err := n.Acquire(WithTokens(ctx, 10))
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			sent++
			require.NoError(t, le.SettleTokens(100))
			le.Release()
		}
		t.Logf("a minute at 6,000 tokens: %d requests of 100 tokens", sent)
		require.LessOrEqual(t, sent, 61, "at most the rate plus the bucket")
		require.GreaterOrEqual(t, sent, 54)

		// The usage reported counts the settled cost, not the estimate,
		// and is what operators read from the node's row.
		synctest.Wait()
		used := n.Rates().Used
		t.Logf("used in the last minute: %+v", used)
		require.InDelta(t, sent, used.Requests, 3, "the requests of the last minute")
		require.GreaterOrEqual(t, used.Tokens, 50*used.Requests, "settled at 100, estimated at 10")
		require.LessOrEqual(t, used.Tokens, 100*used.Requests)
		rows, err := c.Nodes(t.Context(), "k")
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, used, rows[0].RateUsed)
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		require.ErrorContains(t, le.SettleTokens(-1), "actual = -1, want 0..1000000000")
		// A cost no estimate may carry would leave the node in a debt it
		// never pays (and an int64 sum of two of them wraps): refused, and
		// the request may still be settled.
		require.ErrorContains(t, le.SettleTokens(1<<62), "actual = 4611686018427387904, want 0..1000000000")
		require.NoError(t, le.SettleTokens(MaxTokens))
		le.Release()
	})
}

// TestRateTryAcquire: TryAcquire does not wait for the rate: once the
// share is spent it refuses with ErrWouldWait, frees the slot, and counts
// the refusal at the request's priority.
func TestRateTryAcquire(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 60, 0)
		n := startNode(t, c, testConfig("k", "a"))
		// The first grant sees no demand; report some until the node has a
		// share of the concurrency and of the rate.
		for i := 0; n.State().Share == 0 || n.Rates().Share.Requests != 60; i++ {
			require.Less(t, i, 50, "no share after 5 s")
			if le, err := n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1}); err == nil {
				le.Release()
			}
			time.Sleep(100 * time.Millisecond)
		}
		before := statsAt(n, adaptive.DefaultPriority)
		admitted, refused := 0, 0
		for range 10 {
			le, err := n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1})
			switch {
			case err == nil:
				admitted++
				le.Release()
			case errors.Is(err, adaptive.ErrWouldWait):
				require.ErrorContains(t, err, "rate share is spent")
				refused++
			default:
				t.Fatal(err)
			}
		}
		require.Positive(t, refused)
		require.LessOrEqual(t, admitted, 2, "a one-second bucket at one request a second")
		require.Zero(t, n.Limiter().Inflight(), "refused requests hold no slot")
		after := statsAt(n, adaptive.DefaultPriority)
		require.Equal(t, uint64(refused), after.Refused-before.Refused, "refusals for the rate count at their priority")
		require.Equal(t, uint64(admitted), after.Admitted-before.Admitted, "and not as admitted: each call counts once")
		require.Equal(t, uint64(admitted), after.AdmittedWeight-before.AdmittedWeight)

		// A caller whose context ends while it waits for the rate is
		// cancelled, not admitted.
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		for ctx.Err() == nil {
			if le, err := n.Acquire(ctx); err == nil {
				le.Release()
				admitted++
			}
		}
		final := statsAt(n, adaptive.DefaultPriority)
		require.Equal(t, uint64(1), final.Cancelled-after.Cancelled, "the wait the context ended")
		require.Equal(t, uint64(admitted), final.Admitted-before.Admitted)
		require.Equal(t, after.Refused, final.Refused)
	})
}

// TestRateStopWakesWaiters: a request waiting for a rate share of 0 ends
// with ErrStopped when the node stops.
func TestRateStopWakesWaiters(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 60, 0)
		cfg := testConfig("k", "a")
		n, err := NewWithCoordinator(c, cfg)
		require.NoError(t, err)
		require.NoError(t, n.Start(t.Context()))
		require.NoError(t, c.Drain(t.Context(), "k", "a")) // rate share 0 from the next heartbeat
		time.Sleep(time.Second)
		done := make(chan error, 1)
		go func() {
			_, err := n.Acquire(t.Context())
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("admitted or refused before Stop: %v", err)
		default:
		}
		require.NoError(t, n.Stop(t.Context()))
		require.ErrorIs(t, <-done, ErrStopped)
	})
}

// TestRateLearned: a node that learns reports its estimate, the key's
// rate becomes it, and a second node starts from the key's stored rate.
func TestRateLearned(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := coord.NewMemory(nil)
		cfg := testConfig("k", "a")
		cfg.Rate = RateConfig{Learn: true, Learner: pace.LearnerConfig{SeedRate: 5, MaxRate: 100}}
		a := startNode(t, c, cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			sent []time.Time
		)
		closedLoop(ctx, a, 2, 0, &sent, &mu, &wg)
		<-ctx.Done()
		wg.Wait()
		learned := a.Rates().Learned.Requests
		t.Logf("after 30 s without a 429: learned %d a minute from a seed of 300", learned)
		require.Greater(t, learned, int64(300), "saturated periods without 429s raise the rate")
		cfgB := cfg
		cfgB.NodeID = "b"
		b := startNode(t, c, cfgB)
		time.Sleep(time.Second)
		require.InDelta(t, float64(a.Rates().Key.Requests), float64(b.Rates().Learned.Requests), 30,
			"warm start at the key's rate, not the seed")
	})
}

func TestRateConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rc   RateConfig
		want string
	}{
		{RateConfig{Window: time.Millisecond}, "Config.Rate.Window = 1ms"},
		{RateConfig{Burst: 2 * time.Minute}, "Config.Rate.Burst = 2m0s"},
		{RateConfig{Learn: true}, "Config.Rate.Learner: pace: LearnerConfig.SeedRate must be > 0"},
	} {
		cfg := testConfig("k", "a")
		cfg.Rate = tt.rc
		_, err := NewWithCoordinator(coord.NewMemory(nil), cfg)
		require.ErrorContains(t, err, tt.want)
	}
	// A window out of range is reported once: not again through the burst
	// and the learner's windows that default after it.
	for _, w := range []time.Duration{-time.Second, time.Millisecond, 25 * time.Hour} {
		cfg := testConfig("k", "a")
		cfg.Rate = RateConfig{Window: w, Learn: true, Learner: pace.LearnerConfig{SeedRate: 10}}
		_, err := NewWithCoordinator(coord.NewMemory(nil), cfg)
		require.ErrorContains(t, err, fmt.Sprintf("Config.Rate.Window = %v, want [1s, 24h]", w))
		require.Equal(t, 1, strings.Count(err.Error(), "Config.Rate."), "one error: %v", err)
	}
	cfg := testConfig("k", "a")
	cfg.Rate = RateConfig{Window: -time.Second, Burst: -time.Second}
	_, err := NewWithCoordinator(coord.NewMemory(nil), cfg)
	require.ErrorContains(t, err, "Config.Rate.Burst = -1s, want 0 (Window/60) or in [1ms, Window]", "a burst set out of range is its own error")
}

// TestRateSettleTokensThroughClientTimeout: an http.Client with a Timeout
// wraps the response body; SettleTokens still finds the request's debit,
// through resp.Request, and charges the actual cost.
func TestRateSettleTokensThroughClientTimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	c := rateKey(t, 0, 6_000_000)
	n := startNode(t, c, testConfig("k", "a"))
	client := &http.Client{Transport: n.Transport(nil), Timeout: 10 * time.Second}
	send := func() *http.Response {
		req, err := http.NewRequestWithContext(WithTokens(t.Context(), 10), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp := send() // demand, so that the node gets a token share
	resp.Body.Close()
	eventually(t, func() bool { return n.Rates().Share.Tokens > 0 }, "a token share")
	resp = send()
	_, isLease := resp.Body.(*leaseBody)
	require.False(t, isLease, "the client wrapped the body")
	_, before := n.rate.pacer.Levels(time.Now())
	require.NoError(t, SettleTokens(resp, 1_000_010))
	_, after := n.rate.pacer.Levels(time.Now())
	resp.Body.Close()
	require.Less(t, after, before-900_000, "the under-estimate of 1,000,000 tokens is charged")
	require.ErrorContains(t, SettleTokens(&http.Response{Body: http.NoBody}, 1), "did not come through a fleet Transport")
	require.EqualError(t, SettleTokens(nil, 1), "fleet: settle tokens: nil response")
}

// beatCounter counts the heartbeats that reach a coordinator, by node.
type beatCounter struct {
	coord.Coordinator
	mu    sync.Mutex
	beats map[string]int
}

func (c *beatCounter) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	c.mu.Lock()
	c.beats[r.NodeID]++
	c.mu.Unlock()
	return c.Coordinator.Heartbeat(ctx, r)
}

// TestOneHeartbeatPerInterval: two nodes whose demand swaps every second, on
// a key with a rate and a concurrency ceiling far above their in-flight,
// send one heartbeat per interval: their shares move at every heartbeat,
// but a lowered share that nobody waits for is acknowledged by the next
// periodic heartbeat, and an early heartbeat moves the period.
func TestOneHeartbeatPerInterval(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := &beatCounter{Coordinator: rateKey(t, 6000, 0), beats: map[string]int{}}
		cfgA, cfgB := testConfig("k", "a"), testConfig("k", "b")
		cfgA.Limiter.InitialLimit, cfgB.Limiter.InitialLimit = 100, 100
		a, b := startNode(t, c, cfgA), startNode(t, c, cfgB)
		const run = 20 * time.Second
		var (
			mu   sync.Mutex
			sent []time.Time
			wg   sync.WaitGroup
		)
		const phases = 20
		start := time.Now()
		for i := range phases {
			ctx, cancel := context.WithTimeout(t.Context(), run/phases)
			busy, idle := a, b
			if i%2 == 1 {
				busy, idle = b, a
			}
			closedLoop(ctx, busy, 8, 0, &sent, &mu, &wg)
			closedLoop(ctx, idle, 1, 0, &sent, &mu, &wg)
			wg.Wait()
			cancel()
		}
		intervals := int(time.Since(start) / cfgA.HeartbeatInterval)
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, id := range []string{"a", "b"} {
			t.Logf("node %s: %d heartbeats in %d intervals", id, c.beats[id], intervals)
			require.LessOrEqual(t, c.beats[id], intervals+3, "node %s: more than the joining heartbeats above one per interval", id)
		}
		require.Greater(t, len(sent), 1000)
	})
}

// TestRateLearnerCutsAtOnce: a learning node whose requests start drawing
// 429s paces below its share as soon as its learner cuts, without waiting
// for the heartbeat that brings the key's new rate.
func TestRateLearnerCutsAtOnce(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := coord.NewMemory(nil)
		cfg := testConfig("k", "a")
		cfg.HeartbeatInterval, cfg.LeaseTTL, cfg.FenceMargin = 10*time.Second, 30*time.Second, 5*time.Second
		cfg.Rate = RateConfig{Learn: true, Learner: pace.LearnerConfig{SeedRate: 10, MinRate: 1, MaxRate: 100}}
		a := startNode(t, c, cfg)

		var (
			mu      sync.Mutex
			sent    []time.Time
			limited atomic.Bool
			wg      sync.WaitGroup
		)
		start := time.Now()
		// The join heartbeat asks for no rate; the waiting requests call an
		// early one (at 2.5 s, a quarter interval); the next is at 12.5 s.
		ctx, cancel := context.WithTimeout(t.Context(), 10500*time.Millisecond)
		defer cancel()
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					le, err := a.Acquire(ctx)
					if err != nil {
						continue
					}
					mu.Lock()
					sent = append(sent, time.Now())
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					if limited.Load() {
						le.Drop()
					} else {
						le.Release()
					}
				}
			})
		}
		time.Sleep(4 * time.Second)
		share := a.Rates().Share.Requests
		require.Equal(t, int64(600), share, "the whole learned rate")
		time.Sleep(2500 * time.Millisecond)
		limited.Store(true) // the upstream answers 429 from 6.5 s on
		wg.Wait()
		count := func(from, to time.Duration) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, s := range sent {
				if d := s.Sub(start); d >= from && d < to {
					n++
				}
			}
			return n
		}
		before, after := count(3500*time.Millisecond, 6500*time.Millisecond), count(7500*time.Millisecond, 10500*time.Millisecond)
		t.Logf("requests sent in 3 s: %d before the 429s, %d after; share %d a minute, reported estimate %d",
			before, after, a.Rates().Share.Requests, a.Rates().Learned.Requests)
		require.Equal(t, int64(600), a.Rates().Share.Requests, "no heartbeat brought a new share")
		require.Less(t, float64(after), 0.7*float64(before), "the node cut its own pacing")
	})
}

// TestDrainEndsTheWaitsForTheRate: a drained node's rate share is 0 until
// an operator undrains it, so its requests waiting for the rate fail with
// the drain's reason and give their slots back, which the drain waits
// for; after an undrain they wait for the rate again.
func TestDrainEndsTheWaitsForTheRate(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 60, 0) // one request a second
		a := startNode(t, c, testConfig("k", "a"))
		send := func(errs chan<- error) {
			le, err := a.Acquire(t.Context())
			if err == nil {
				le.Release()
			}
			errs <- err
		}
		errs := make(chan error, 4)
		for range 4 {
			go send(errs)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		waiting := a.Rates().Waiting
		require.Positive(t, waiting, "requests wait for the rate")

		require.NoError(t, c.Drain(t.Context(), "k", "a"))
		time.Sleep(100 * time.Millisecond) // a heartbeat brings the drain
		synctest.Wait()
		drained := 0
		for range 4 {
			var err error
			select {
			case err = <-errs:
			case <-time.After(10 * time.Second):
				t.Fatal("a request still waits for the rate 10s after the drain")
			}
			if err != nil {
				require.ErrorIs(t, err, adaptive.ErrQueueFull)
				require.ErrorIs(t, err, ErrDraining)
				require.ErrorContains(t, err, `while waiting for the rate: node "a" of key "k" is draining, with no share`)
				drained++
			}
		}
		require.Equal(t, int(waiting), drained, "every wait ended")
		require.Zero(t, a.Rates().Waiting)
		require.Zero(t, a.State().Inflight, "the slots are given back")

		require.NoError(t, c.Undrain(t.Context(), "k", "a"))
		time.Sleep(100 * time.Millisecond)
		go send(errs)
		require.NoError(t, <-errs, "an undrained node sends again")
	})
}

// TestOversizedRequestIdlesTheKeyForAWindowAtMost: a request whose token
// estimate, or actual cost, is more than the key's token rate allows in a
// window takes no more than that from the node's share and counts no
// more in its demand: its debt idles the node, and through its demand the
// key, for about a window, not the days a debt of 10⁹ tokens at 60,000 a
// minute would last. With a 1s Window the demand matters most: counted
// raw, the estimate kept the key's token rate from the peer for about a
// minute (demandMemory), 60 windows.
func TestOversizedRequestIdlesTheKeyForAWindowAtMost(t *testing.T) {
	for _, tc := range []struct {
		window      time.Duration
		resumed     time.Duration // a sends again within it
		after, span time.Duration // b's sends counted from after the request, for span
		minTokens   int           // at least this many of b's tokens then
	}{
		{time.Minute, 3 * time.Minute, 3 * time.Minute, time.Minute, 30000},
		{time.Second, 5 * time.Second, 5 * time.Second, 10 * time.Second, 2500}, // 1000 a second
	} {
		for _, how := range []string{"estimate", "actual"} {
			t.Run(tc.window.String()+"/"+how, func(t *testing.T) {
				bubble.Test(t, func(t *testing.T) {
					c := rateKey(t, 0, 60000)
					ca, cb := testConfig("k", "a"), testConfig("k", "b")
					ca.Rate.Window, cb.Rate.Window = tc.window, tc.window
					a := startNode(t, c, ca)
					b := startNode(t, c, cb)
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					var (
						sent []time.Time
						mu   sync.Mutex
						wg   sync.WaitGroup
					)
					closedLoop(ctx, b, 2, 100, &sent, &mu, &wg)
					time.Sleep(10 * time.Second)

					estimate := int64(MaxTokens)
					if how == "actual" {
						estimate = 100
					}
					le, err := a.Acquire(WithTokens(t.Context(), estimate))
					require.NoError(t, err)
					if how == "actual" {
						require.NoError(t, le.SettleTokens(MaxTokens))
					}
					le.Release()
					start := time.Now()

					within, stop := context.WithTimeout(t.Context(), tc.resumed)
					defer stop()
					le, err = a.Acquire(WithTokens(within, 0))
					require.NoError(t, err, "a's debt outlasted %v", tc.resumed)
					le.Release()

					time.Sleep(tc.after - time.Since(start))
					mu.Lock()
					before := len(sent)
					mu.Unlock()
					time.Sleep(tc.span)
					mu.Lock()
					tokens := 100 * (len(sent) - before)
					mu.Unlock()
					require.Greater(t, tokens, tc.minTokens, "b sent %d tokens in the %v from %v after a's request", tokens, tc.span, tc.after)
					cancel()
					wg.Wait()
				})
			})
		}
	}
}

// TestSettleAtEstimateAfterRateChange: a request settled at exactly its
// estimate changes nothing in the token bucket, even when the key's token
// rate, and with it the cap on a request's charge, changed since it was
// let go: the settle charges under the cap its estimate was charged
// under.
func TestSettleAtEstimateAfterRateChange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to int64
	}{{"raised", 60000, 600000}, {"lowered", 600000, 60000}} {
		t.Run(tc.name, func(t *testing.T) {
			bubble.Test(t, func(t *testing.T) {
				c := rateKey(t, 0, tc.from)
				a := startNode(t, c, testConfig("k", "a"))
				time.Sleep(time.Second)
				est := int64(1_000_000)
				le, err := a.Acquire(WithTokens(t.Context(), est))
				require.NoError(t, err)
				le.Release()
				_, err = c.SetRates(t.Context(), "k", coord.RatesChange{SetTokens: true, Tokens: tc.to})
				require.NoError(t, err)
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				require.Equal(t, tc.to, a.Rates().Key.Tokens)
				_, before := a.rate.pacer.Levels(time.Now())
				require.NoError(t, le.SettleTokens(est)) // the estimate was exact
				_, after := a.rate.pacer.Levels(time.Now())
				require.InDelta(t, before, after, 1, "settling an exact estimate moved the bucket by %.0f tokens", after-before)
			})
		})
	}
}

// TestRateWaitEndsAtTheBound: a request that waits for the key's rate
// share holds its slot meanwhile, and its bound runs from that slot, so
// its wait ends at the bound: ErrLate (and context.DeadlineExceeded),
// naming the rate and MaxRequestDuration, and nothing is sent. A caller's
// own deadline still ends it with the caller's error.
func TestRateWaitEndsAtTheBound(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 6, 0) // one request every 10 s
		cfg := testConfig("k", "a")
		cfg.MaxRequestDuration = 2 * time.Second
		n := startNode(t, c, cfg)
		for i := 0; n.Rates().Share.Requests != 6; i++ {
			require.Less(t, i, 50, "no rate share after 5 s")
			if le, err := n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1}); err == nil {
				le.Release()
			}
			time.Sleep(100 * time.Millisecond)
		}
		le, err := n.Acquire(t.Context()) // the next request owes the rest of this one
		require.NoError(t, err)
		le.Release()
		start := time.Now()
		_, err = n.Acquire(t.Context())
		require.ErrorIs(t, err, ErrLate)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "waited for the key's rate share until its bound, MaxRequestDuration (2s)")
		require.GreaterOrEqual(t, time.Since(start), cfg.MaxRequestDuration, "the wait ends at the bound")
		require.Less(t, time.Since(start), cfg.MaxRequestDuration+time.Second, "the wait ends at the bound, not at the rate")
		require.Zero(t, n.Limiter().Inflight(), "the slot is freed")

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = n.Acquire(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, ErrLate, "the caller's own deadline came first")
	})
}

// TestRateRestartsKeepTheRate: a node restarted every 8 s (a new
// process each time, leaving cleanly) on a key of 600 requests a minute
// keeps every minute within 600: each process's buckets start empty, so
// it does not bring a bucket saved before it existed.
func TestRateRestartsKeepTheRate(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 600, 0)
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			sent []time.Time
		)
		for range 20 { // each a new instance of node a
			n, err := NewWithCoordinator(c, testConfig("k", "a"))
			require.NoError(t, err)
			require.NoError(t, n.Start(t.Context()))
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
			closedLoop(ctx, n, 4, 0, &sent, &mu, &wg)
			<-ctx.Done()
			wg.Wait()
			cancel()
			require.NoError(t, n.Stop(t.Context()))
		}
		peak := maxInWindow(sent, time.Minute)
		t.Logf("20 processes of 8 s: %d requests, the busiest minute %d of 600", len(sent), peak)
		require.LessOrEqual(t, peak, 600)
		require.GreaterOrEqual(t, peak, 500, "the processes use the rate")
	})
}

// TestRateSmallSharesWithABurstThatHoldsARequest: on a key of 6 requests
// a minute over three nodes, shares of 2 hold less than one request in the
// default one-second bucket; with Burst = Window/(2 − 1) a node's bucket
// holds a whole one, and the nodes, joining 4 s apart, keep every minute
// within 6 (design §17).
func TestRateSmallSharesWithABurstThatHoldsARequest(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := rateKey(t, 6, 0)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			sent []time.Time
		)
		for _, id := range []string{"a", "b", "c"} {
			cfg := testConfig("k", id)
			cfg.Rate.Burst = time.Minute
			closedLoop(ctx, startNode(t, c, cfg), 1, 0, &sent, &mu, &wg)
			time.Sleep(4 * time.Second)
		}
		<-ctx.Done()
		wg.Wait()
		peak := maxInWindow(sent, time.Minute)
		t.Logf("3 nodes, 5 minutes: %d requests, the busiest minute %d of 6", len(sent), peak)
		require.LessOrEqual(t, peak, 6)
		require.GreaterOrEqual(t, len(sent), 10, "the fleet is served")
	})
}

// TestSettleAfterARateAppearsChargesNothing: a request let go while the
// key had no token rate took nothing from the pacer; settled after an
// operator set a rate, its actual cost was charged in full against the
// new buckets (a zero ticket is no free one), far past the one Window a
// request may take: a million tokens put the node 166 windows in debt,
// and its demand claimed nearly the whole key's rate for hours.
func TestSettleAfterARateAppearsChargesNothing(t *testing.T) {
	t.Parallel()
	c := coord.NewMemory(nil)
	require.NoError(t, c.CreateKey(t.Context(), "k", nil, nil))
	n := startNode(t, c, testConfig("k", "a"))
	le, err := n.Acquire(WithTokens(t.Context(), 100))
	require.NoError(t, err)
	_, err = c.SetRates(t.Context(), "k", coord.RatesChange{SetTokens: true, Tokens: 6000})
	require.NoError(t, err)
	waitForTokenShare(t, n)
	require.NoError(t, le.SettleTokens(1_000_000))
	le.Release()
	require.Greater(t, tokenLevel(n), -10.0, "nothing was debited, so nothing is charged")
}

// TestUnsentGivesTheDebitBack: a slot is taken even for a context already
// done, and the request is then not sent; a caller of Acquire had no way
// to give back the request and tokens it was debited, which Transport
// gives back for a request it does not send. Lease.Unsent does.
func TestUnsentGivesTheDebitBack(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, rateKey(t, 600, 60000), testConfig("k", "a"))
		for range 5 { // demand, for a share of the rates
			le, err := n.Acquire(WithTokens(t.Context(), 100))
			require.NoError(t, err)
			le.Release()
		}
		hold, err := n.Acquire(t.Context()) // the share in use: the next caller is admitted, not queued
		require.NoError(t, err)
		defer hold.Release()
		time.Sleep(2 * time.Second)
		now := time.Now()
		r0, t0 := n.rate.pacer.Levels(now)
		done, cancel := context.WithCancel(t.Context())
		cancel()
		le, err := n.Acquire(WithTokens(done, 100))
		require.NoError(t, err, "a free slot is taken even for a done context")
		require.Error(t, le.Context().Err())
		le.Unsent()
		r1, t1 := n.rate.pacer.Levels(now)
		require.Equal(t, r0, r1, "the request is given back")
		require.Equal(t, t0, t1, "and its token estimate")
		require.Equal(t, 1, n.State().Inflight, "its slot is free")
		require.Error(t, le.SettleTokens(5), "settled already")
	})
}

// TestRateBelowTheKeysWithoutACutPacesAtTheShare: the key's rate is the
// lower median of the nodes' learned rates, so some nodes learn less than
// it with no 429 at all. Such a node paces at its whole share, as its
// peers do; only a cut since its last report scales its pacing down, until
// a grant answers a report that carried it.
func TestRateBelowTheKeysWithoutACutPacesAtTheShare(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		c := coord.NewMemory(nil)
		nodes := make([]*Node, 3)
		for i, id := range []string{"a", "b", "c"} {
			cfg := testConfig("k", id)
			cfg.Rate = RateConfig{Learn: true, Learner: pace.LearnerConfig{SeedRate: 10, MinRate: 1, MaxRate: 100}}
			nodes[i] = startNode(t, c, cfg)
		}
		time.Sleep(10 * nodes[0].cfg.HeartbeatInterval)
		// c's learner now holds 8/s where its peers hold 10/s: the key's
		// rate stays at 600 a minute.
		low := nodes[2]
		low.rate.mu.Lock()
		lcfg := low.rate.learner.Config()
		lcfg.WarmRate = 8
		var err error
		low.rate.learner, err = pace.NewLearner(lcfg, time.Now())
		low.rate.mu.Unlock()
		require.NoError(t, err)
		time.Sleep(10 * nodes[0].cfg.HeartbeatInterval)
		require.Equal(t, int64(480), low.Rates().Learned.Requests)
		require.Equal(t, int64(600), low.Rates().Key.Requests)

		paced := func(n *Node) float64 {
			n.rate.mu.Lock()
			defer n.rate.mu.Unlock()
			req, _ := n.rate.pacer.Rates()
			return req / float64(n.rate.share.Requests)
		}
		for _, n := range nodes {
			le, err := n.Acquire(t.Context())
			require.NoError(t, err)
			le.Release()
		}
		require.InDelta(t, paced(nodes[0]), paced(low), 1e-12, "paced at the share, as a peer")

		// A cut since the last report a grant answered acts at once.
		le, err := low.Acquire(t.Context())
		require.NoError(t, err)
		low.rate.mu.Lock()
		lcfg.WarmRate = 4
		low.rate.learner, err = pace.NewLearner(lcfg, time.Now())
		low.rate.mu.Unlock()
		require.NoError(t, err)
		le.Release()
		require.InDelta(t, paced(nodes[0])*4.0/10, paced(low), 1e-12, "paced at the share × 4/10")
	})
}

// seededLearnerNode returns an unstarted node that learns the key's rate
// from a seed of 10/s, within 1..100/s.
func seededLearnerNode(t *testing.T) *Node {
	t.Helper()
	cfg := testConfig("k", "c")
	cfg.Rate = RateConfig{Learn: true, Learner: pace.LearnerConfig{SeedRate: 10, MinRate: 1, MaxRate: 100}}
	n, err := NewWithCoordinator(coord.NewMemory(nil), cfg)
	require.NoError(t, err)
	return n
}

// relearnAt replaces n's learner by one of the same configuration that
// starts at rate per second at now.
func relearnAt(t *testing.T, n *Node, rate float64, now time.Time) {
	t.Helper()
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.learner.Config()
	cfg.WarmRate = rate
	l, err := pace.NewLearner(cfg, now)
	require.NoError(t, err)
	r.learner = l
}

// TestRateCutAfterAWarmStartActsAtOnce: a node whose first grant with a
// rate warm-starts its learner at the key's rate, above the seed its
// report carried, takes a cut from there before its next grant — below
// the key's rate, above the seed — at once.
func TestRateCutAfterAWarmStartActsAtOnce(t *testing.T) {
	t.Parallel()
	n := seededLearnerNode(t)
	now := time.Now()
	n.rateReport(now, time.Second) // carries the seed, 10/s
	n.applyRates(now, coord.Grant{Rate: coord.Rates{Requests: 1200}, RateShare: coord.Rates{Requests: 400}})
	r := n.rate
	r.mu.Lock()
	require.InDelta(t, 20, r.learner.Rate(now), 1e-9, "warm-started at the key's rate")
	r.mu.Unlock()
	relearnAt(t, n, 13, now) // a cut, above the seed
	n.observeRate(now, now, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.InDelta(t, 13.0/20, r.cutFactor, 1e-12, "paced at the share × 13/20 at once")
}

// TestRateCutOutlivesAnAnswerToAnEarlierReport: a grant that answers a
// report sampled before the learner's cut (a failed report resent after
// the cut) does not carry the cut, so the node keeps pacing below its
// share; the answer to a report sampled after the cut ends that. Judged by
// the report's send time, the resend's answer ended it.
func TestRateCutOutlivesAnAnswerToAnEarlierReport(t *testing.T) {
	t.Parallel()
	n := seededLearnerNode(t)
	g := coord.Grant{Rate: coord.Rates{Requests: 1200}, RateShare: coord.Rates{Requests: 400}}
	now := time.Now()
	n.rateReport(now, time.Second)
	n.applyRates(now, g) // warm-started at the key's rate, 20/s
	r := n.rate
	sampled := now.Add(time.Second)
	n.rateReport(sampled, time.Second) // a report that fails, carrying 20/s
	relearnAt(t, n, 13, now)
	cut := sampled.Add(100 * time.Millisecond)
	n.observeRate(cut, cut, false)        // the cut, after the report was sampled
	n.applyRates(cut.Add(time.Second), g) // the answer to its resend
	r.mu.Lock()
	require.InDelta(t, 13.0/20, r.cutFactor, 1e-12, "the answer to a report sampled before the cut ended it")
	r.mu.Unlock()
	later := cut.Add(2 * time.Second)
	n.rateReport(later, time.Second)
	n.applyRates(later, g)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Equal(t, 1.0, r.cutFactor, "the answer to a report sampled after the cut keeps it")
}
