package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type rateResult struct {
	status int
	body   string
	header http.Header
}

// serveRate sends one request straight to the handler, with ?tokens=tokens
// unless tokens is "".
func serveRate(p *Provider, node, tokens string) rateResult {
	url := "/v1/chat"
	if tokens != "" {
		url += "?tokens=" + tokens
	}
	req := httptest.NewRequest(http.MethodPost, url, nil)
	if node != "" {
		req.Header.Set(DefaultClientHeader, node)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rateResult{status: rec.Code, body: string(body), header: rec.Header()}
}

// newRateProvider returns an unserved provider with a latency of 0, so
// ServeHTTP returns at once even on a ManualClock.
func newRateProvider(t *testing.T, clock Clock, rl RateLimit) *Provider {
	t.Helper()
	p, err := NewProvider(ProviderConfig{Capacity: Fixed(1000), Clock: clock, RateLimit: &rl})
	require.NoError(t, err)
	p.cfg.BaseLatency = 0 // a zero BaseLatency defaults to 20ms; these tests want none
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

var rateHeaders = []string{
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
}

// TestProviderRateHeaders checks every rate header on and off: OpenAI's
// x-ratelimit-*, Retry-After on a rate 429 and the usage header.
func TestProviderRateHeaders(t *testing.T) {
	t.Parallel()
	quota := []QuotaStep{{Quota: RateQuota{Requests: 2, Tokens: 1000}}}
	t.Run("on", func(t *testing.T) {
		t.Parallel()
		clock := NewManualClock(epoch)
		p := newRateProvider(t, clock, RateLimit{Window: 10 * time.Second, Quota: quota, Headers: true, RetryAfter: true, Usage: true})

		r := serveRate(p, "a", "300")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "300", r.header.Get(HeaderUsageTokens))
		want := map[string]string{
			"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "10s",
			"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "700", "x-ratelimit-reset-tokens": "10s",
		}
		for k, v := range want {
			require.Equal(t, v, r.header.Get(k), k)
		}

		clock.Advance(2500 * time.Millisecond)
		r = serveRate(p, "a", "") // no tokens: charged 0
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "0", r.header.Get(HeaderUsageTokens))
		require.Equal(t, "0", r.header.Get("x-ratelimit-remaining-requests"))
		require.Equal(t, "10s", r.header.Get("x-ratelimit-reset-requests"))
		require.Equal(t, "7.5s", r.header.Get("x-ratelimit-reset-tokens"), "the 300 tokens leave at 10s")

		clock.Advance(time.Millisecond + 300*time.Microsecond)
		r = serveRate(p, "a", "10")
		require.Equal(t, http.StatusTooManyRequests, r.status)
		require.Equal(t, "8", r.header.Get("Retry-After"), "the first request leaves 7.4987s from now: rounded up")
		require.Empty(t, r.header.Get(HeaderUsageTokens))
		require.Equal(t, "0", r.header.Get("x-ratelimit-remaining-requests"))
		require.Equal(t, "700", r.header.Get("x-ratelimit-remaining-tokens"))
		require.Equal(t, "9.999s", r.header.Get("x-ratelimit-reset-requests"), "9.9987s rounded up to the millisecond")

		r = serveRate(p, "a", "2000")
		require.Equal(t, http.StatusTooManyRequests, r.status)
		require.Contains(t, r.body, "request of 2000 tokens exceeds the token quota 1000")
		require.Empty(t, r.header.Get("Retry-After"), "no wait makes it fit")
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		p := newRateProvider(t, NewManualClock(epoch), RateLimit{Quota: quota})
		r := serveRate(p, "a", "300")
		require.Equal(t, http.StatusOK, r.status)
		require.Empty(t, r.header.Get(HeaderUsageTokens))
		serveRate(p, "a", "1")
		r = serveRate(p, "a", "1")
		require.Equal(t, http.StatusTooManyRequests, r.status)
		require.Equal(t, "sim: rate limited\n", r.body)
		require.Empty(t, r.header.Get("Retry-After"))
		for _, k := range rateHeaders {
			require.Empty(t, r.header.Get(k), k)
		}
	})
	t.Run("one dimension", func(t *testing.T) {
		t.Parallel()
		p := newRateProvider(t, NewManualClock(epoch), RateLimit{Quota: []QuotaStep{{Quota: RateQuota{Tokens: 50}}}, Headers: true})
		r := serveRate(p, "a", "20")
		require.Equal(t, "30", r.header.Get("x-ratelimit-remaining-tokens"))
		require.Empty(t, r.header.Get("x-ratelimit-limit-requests"), "the request dimension is unlimited")
	})
}

func TestProviderRateBadTokens(t *testing.T) {
	t.Parallel()
	p := newRateProvider(t, NewManualClock(epoch), RateLimit{Quota: []QuotaStep{{Quota: RateQuota{Requests: 10}}}})
	for _, v := range []string{"abc", "-1", "1.5", "1099511627777", "99999999999999999999"} {
		r := serveRate(p, "a", v)
		require.Equal(t, http.StatusBadRequest, r.status, v)
		require.Contains(t, r.body, fmt.Sprintf("sim: tokens must be an integer in [0, 1099511627776], got %q", v))
	}
	require.Equal(t, RateUsage{}, p.RateStats().Accepted, "a 400 is not counted")
	require.Equal(t, RateUsage{}, p.RateStats().Refused)
	require.Equal(t, http.StatusOK, serveRate(p, "a", "1099511627776").status)

	// Without a RateLimit, ?tokens= is not read.
	plain, err := NewProvider(ProviderConfig{Capacity: Fixed(1), Clock: NewManualClock(epoch)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, plain.Close()) })
	_, err = plain.parseTokens(httptest.NewRequest(http.MethodGet, "/?tokens=abc", nil))
	require.NoError(t, err)
}

// TestProviderRateQuotaChanges runs a schedule that lowers the quota
// mid-run and a SetRateQuota that raises it, through the handler: the
// counts per window and per client, and Stats, agree.
func TestProviderRateQuotaChanges(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p := newRateProvider(t, clock, RateLimit{Window: 10 * time.Second, Quota: []QuotaStep{
		{At: 0, Quota: RateQuota{Requests: 5, Tokens: 500}},
		{At: 10 * time.Second, Quota: RateQuota{Requests: 2, Tokens: 500}},
	}})
	send := func(n int, node string) (ok, limited int) {
		for range n {
			switch r := serveRate(p, node, "100"); r.status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Fatalf("status %d: %s", r.status, r.body)
			}
		}
		return ok, limited
	}
	ok, limited := send(8, "a")
	require.Equal(t, []int{5, 3}, []int{ok, limited})

	clock.Advance(10 * time.Second) // the window has emptied; the quota is 2
	ok, limited = send(3, "b")
	require.Equal(t, []int{2, 1}, []int{ok, limited})

	clock.Advance(time.Second)
	p.SetRateQuota(RateQuota{Requests: 4, Tokens: 300})
	ok, limited = send(3, "b")
	require.Equal(t, []int{1, 2}, []int{ok, limited}, "300 tokens: 200 held, one more fits")

	rs := p.RateStats()
	require.Equal(t, RateQuota{Requests: 4, Tokens: 300}, rs.Quota)
	require.Equal(t, RateUsage{Requests: 3, Tokens: 300}, rs.InWindow)
	require.Len(t, rs.Windows, 2)
	require.Equal(t, WindowStats{Start: epoch, Quota: RateQuota{5, 500}, Accepted: RateUsage{5, 500}, Refused: RateUsage{3, 300}, Peak: RateUsage{5, 500}}, rs.Windows[0])
	require.Equal(t, WindowStats{Start: epoch.Add(10 * time.Second), Quota: RateQuota{2, 500}, QuotaChanged: true, Accepted: RateUsage{3, 300}, Refused: RateUsage{3, 300}, Peak: RateUsage{3, 300}}, rs.Windows[1])

	s := p.Stats()
	require.Equal(t, int64(6), s.RateLimited)
	require.Equal(t, int64(800), s.Tokens)
	require.Equal(t, int64(8), s.Successes)
	require.Equal(t, ClientStats{Successes: 5, RateLimited: 3, Tokens: 500, MaxConcurrency: 1}, s.Clients["a"])
	require.Equal(t, ClientStats{Successes: 3, RateLimited: 3, Tokens: 300, MaxConcurrency: 1}, s.Clients["b"])

	p.Reset()
	s, rs = p.Stats(), p.RateStats()
	require.Zero(t, s.RateLimited+s.Tokens)
	require.Equal(t, RateUsage{}, rs.Accepted)
	require.Equal(t, RateUsage{Requests: 3, Tokens: 300}, rs.InWindow, "Reset keeps the sliding window")
	require.Equal(t, http.StatusTooManyRequests, serveRate(p, "c", "1").status)
}

// TestProviderRateConcurrentClients sends 40 requests at once from 8
// clients against a quota of 15 per window on a clock that does not move:
// exactly 15 are accepted, whatever the interleaving.
func TestProviderRateConcurrentClients(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p, err := StartProvider(ProviderConfig{Capacity: Fixed(1000), BaseLatency: time.Millisecond, Clock: clock,
		RateLimit: &RateLimit{Quota: []QuotaStep{{Quota: RateQuota{Requests: 15, Tokens: 10000}}}}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	client := newClient(t)

	const n = 40
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, p.URL()+"?tokens=7", nil)
			if err != nil {
				statuses <- -1
				return
			}
			req.Header.Set(DefaultClientHeader, fmt.Sprintf("node-%d", i%8))
			resp, err := client.Do(req)
			if err != nil {
				statuses <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	// The 15 accepted requests wait on the clock; release them once all
	// 40 have been decided.
	waitUntil(t, func() bool { s := p.Stats(); return s.Current == 15 && s.RateLimited == n-15 }, "all decided")
	clock.Advance(time.Millisecond)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	require.Equal(t, map[int]int{http.StatusOK: 15, http.StatusTooManyRequests: n - 15}, count)
	s := p.Stats()
	require.Equal(t, int64(15*7), s.Tokens)
	var perClient int64
	for _, c := range s.Clients {
		perClient += c.Tokens
	}
	require.Equal(t, s.Tokens, perClient)
	require.Equal(t, RateUsage{Requests: 15, Tokens: 105}, p.RateStats().Windows[0].Peak)
}

func TestProviderSetRateQuotaWithoutRateLimit(t *testing.T) {
	t.Parallel()
	p, err := NewProvider(ProviderConfig{Capacity: Fixed(1)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	require.Panics(t, func() { p.SetRateQuota(RateQuota{Requests: 1}) })
	require.Equal(t, RateStats{}, p.RateStats())
}
