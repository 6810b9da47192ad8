package fleet

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/quota"
)

// quotaNode starts a node and a server that answers every request with
// status and the headers headers returns. It returns the node, a client
// through its Transport, the server's URL and the count of requests the
// server received.
func quotaNode(t *testing.T, status int, headers func() map[string]string) (*Node, *http.Client, string, *atomic.Int64) {
	t.Helper()
	calls := new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		for k, v := range headers() {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	return n, &http.Client{Transport: n.Transport(nil)}, srv.URL, calls
}

// requirePausedFor fails t unless the node's admission is paused until d
// after a request: no earlier than d after it was sent (less slack), no
// later than d after its response arrived.
func requirePausedFor(t *testing.T, n *Node, sent, received time.Time, d, slack time.Duration) {
	t.Helper()
	until := n.Limiter().Snapshot().PausedUntil
	require.False(t, until.Before(sent.Add(d-slack)), "paused until %v after sending, want %v", until.Sub(sent), d)
	require.False(t, until.After(received.Add(d)), "paused until %v after the response, want %v", until.Sub(received), d)
}

// sendOnce sends one request through client and returns the times just
// before it was sent and just after its response was read.
func sendOnce(t *testing.T, client *http.Client, url string, status int) (sent, received time.Time) {
	t.Helper()
	sent = time.Now()
	resp, err := get(t, client, url)
	require.NoError(t, err)
	received = time.Now()
	require.Equal(t, status, resp.StatusCode)
	resp.Body.Close()
	return sent, received
}

// TestTransportQuotaExhaustedPausesAdmission: a 200 whose quota headers say
// nothing is left until a reset pauses the node's admission until that
// reset, in every header form, and admission resumes by itself after it.
func TestTransportQuotaExhaustedPausesAdmission(t *testing.T) {
	t.Parallel()
	const pause = 300 * time.Millisecond
	tests := []struct {
		name    string
		pause   time.Duration
		headers func() map[string]string
	}{
		{"openai", pause, func() map[string]string {
			return map[string]string{
				"x-ratelimit-limit-requests":     "500",
				"x-ratelimit-remaining-requests": "0",
				"x-ratelimit-reset-requests":     "300ms",
				"x-ratelimit-limit-tokens":       "30000",
				"x-ratelimit-remaining-tokens":   "29000",
				"x-ratelimit-reset-tokens":       "2s",
			}
		}},
		{"anthropic", pause, func() map[string]string {
			return map[string]string{
				"anthropic-ratelimit-input-tokens-limit":     "40000",
				"anthropic-ratelimit-input-tokens-remaining": "0",
				"anthropic-ratelimit-input-tokens-reset":     time.Now().Add(pause).UTC().Format(time.RFC3339Nano),
			}
		}},
		// The draft's t is whole seconds.
		{"ietf", time.Second, func() map[string]string {
			return map[string]string{"RateLimit-Policy": `"burst";q=100;w=60`, "RateLimit": `"burst";r=0;t=1`}
		}},
		{"x-ratelimit", time.Second, func() map[string]string {
			return map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, client, url, calls := quotaNode(t, http.StatusOK, tt.headers)

			sent, received := sendOnce(t, client, url, http.StatusOK)
			// The anthropic reset is an RFC 3339 time, read by the wall clock.
			requirePausedFor(t, n, sent, received, tt.pause, time.Millisecond)
			st := n.State()
			require.Zero(t, st.Drops, "a 200 is no drop, whatever its quota says")
			require.Zero(t, st.Inflight)

			_, err := get(t, client, url)
			require.ErrorIs(t, err, adaptive.ErrPaused)
			require.Equal(t, int64(1), calls.Load(), "nothing is sent while paused")

			var admitted time.Time
			eventually(t, func() bool {
				resp, err := get(t, client, url)
				if err != nil {
					return false
				}
				admitted = time.Now()
				resp.Body.Close()
				return true
			}, "admission resumes after the reset")
			require.GreaterOrEqual(t, admitted.Sub(sent), tt.pause-time.Millisecond)
			require.Less(t, admitted.Sub(received), tt.pause+time.Second, "admission resumes soon after the reset")
		})
	}
}

func TestTransportQuotaLeftDoesNotPause(t *testing.T) {
	t.Parallel()
	n, client, url, calls := quotaNode(t, http.StatusOK, func() map[string]string {
		return map[string]string{
			"x-ratelimit-limit-requests":     "500",
			"x-ratelimit-remaining-requests": "1",
			"x-ratelimit-reset-requests":     "300ms",
			// Nothing left, but no reset to wait for.
			"RateLimit": `"daily";r=0`,
			// Nothing left until a reset already passed.
			"anthropic-ratelimit-tokens-remaining": "0",
			"anthropic-ratelimit-tokens-reset":     "2020-01-01T00:00:00Z",
		}
	})

	_, received := sendOnce(t, client, url, http.StatusOK)
	require.False(t, n.Limiter().Snapshot().PausedUntil.After(received), "no pause")
	sendOnce(t, client, url, http.StatusOK)
	require.Equal(t, int64(2), calls.Load())

	q := n.Quota()
	require.False(t, q.IsZero())
	require.Len(t, q.Policies, 3)
	requests := q.Policies[1]
	require.Equal(t, quota.OpenAI, requests.Source)
	require.Equal(t, quota.Requests, requests.Unit)
	require.Equal(t, int64(500), requests.Limit)
	require.Equal(t, int64(1), requests.Remaining)
	require.WithinDuration(t, q.At.Add(300*time.Millisecond), requests.Reset, 0)
}

func TestTransportRetryAfterTakesPrecedenceOverQuota(t *testing.T) {
	t.Parallel()
	n, client, url, _ := quotaNode(t, http.StatusTooManyRequests, func() map[string]string {
		return map[string]string{
			"Retry-After":                    "1",
			"x-ratelimit-remaining-requests": "0",
			"x-ratelimit-reset-requests":     "5m",
		}
	})

	sent, received := sendOnce(t, client, url, http.StatusTooManyRequests)
	requirePausedFor(t, n, sent, received, time.Second, 0) // not the reset's 5 minutes
	require.Equal(t, uint64(1), n.State().Drops, "a 429 is still a drop")
}

// TestTransportZeroRetryAfterLeavesTheQuotaPause: a Retry-After that asks
// for no wait — 0, or a date already past (a provider whose clock runs
// behind) — says nothing of how long the quota stays empty, so the quota
// fields' reset decides the pause.
func TestTransportZeroRetryAfterLeavesTheQuotaPause(t *testing.T) {
	t.Parallel()
	for _, ra := range []string{"0", "Thu, 01 Jun 2000 12:00:30 GMT"} {
		n, client, url, _ := quotaNode(t, http.StatusTooManyRequests, func() map[string]string {
			return map[string]string{
				"Retry-After":                    ra,
				"x-ratelimit-remaining-requests": "0",
				"x-ratelimit-reset-requests":     "2s",
			}
		})
		sent, received := sendOnce(t, client, url, http.StatusTooManyRequests)
		requirePausedFor(t, n, sent, received, 2*time.Second, 0)
	}
}

func TestTransportQuotaPauseOn429WithoutRetryAfter(t *testing.T) {
	t.Parallel()
	n, client, url, _ := quotaNode(t, http.StatusTooManyRequests, func() map[string]string {
		return map[string]string{"RateLimit": `"default";r=0;t=2`}
	})

	sent, received := sendOnce(t, client, url, http.StatusTooManyRequests)
	requirePausedFor(t, n, sent, received, 2*time.Second, 0)
	require.Equal(t, uint64(1), n.State().Drops)
}

func TestTransportQuotaPauseIsCapped(t *testing.T) {
	t.Parallel()
	n, client, url, _ := quotaNode(t, http.StatusOK, func() map[string]string {
		return map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "99999h"}
	})

	sent, received := sendOnce(t, client, url, http.StatusOK)
	requirePausedFor(t, n, sent, received, quota.MaxRetryAfter, 0)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(n.Collector()))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleetlimit_quota_pauses_total Admission pauses a response's headers started: a Retry-After on a 429, 503 or 529 (or given to Lease.Refuse or Unavailable), or quota headers saying nothing was left until a reset (responses asking while a pause lasts extend it).
# TYPE fleetlimit_quota_pauses_total counter
fleetlimit_quota_pauses_total{key="k",node="a"} 1
`), "fleetlimit_quota_pauses_total"))
}

// TestQuotaPausesCountPauses: fleetlimit_quota_pauses_total counts the
// pauses the headers start, a 429's Retry-After included, not the
// responses: responses that arrive while a pause lasts extend it.
func TestQuotaPausesCountPauses(t *testing.T) {
	t.Parallel()
	n, _, _, _ := quotaNode(t, http.StatusOK, func() map[string]string { return nil })
	now := time.Now().Add(-10 * time.Second) // the responses' times; each pause runs from the real now
	exhausted := http.Header{}
	exhausted.Set("x-ratelimit-remaining-requests", "0")
	exhausted.Set("x-ratelimit-reset-requests", "1s")
	for i := range 8 { // eight responses of one burst
		n.readQuota(exhausted, http.StatusOK, now.Add(time.Duration(i)*time.Millisecond))
	}
	require.Equal(t, uint64(1), n.metrics.quotaPaused.Load(), "one pause, however many responses said so")
	retry := exhausted.Clone()
	retry.Set("Retry-After", "1")
	n.readQuota(retry, http.StatusTooManyRequests, now.Add(1500*time.Millisecond))
	require.Equal(t, uint64(2), n.metrics.quotaPaused.Load(), "a 429's Retry-After after the first pause ended")
	n.readQuota(retry, http.StatusTooManyRequests, now.Add(2*time.Second))
	require.Equal(t, uint64(2), n.metrics.quotaPaused.Load(), "extended, not another")

	// A Retry-After given to Lease.Refuse, past that pause, is one more.
	time.Sleep(1100 * time.Millisecond) // the limiter's pause, from the real now
	le, err := n.Acquire(t.Context())
	require.NoError(t, err)
	le.Refuse(time.Second)
	require.Equal(t, uint64(3), n.metrics.quotaPaused.Load(), "a caller's own Retry-After")
}

// TestNodeQuotaConcurrent reads Node.Quota while responses update it; run
// with -race.
func TestNodeQuotaConcurrent(t *testing.T) {
	t.Parallel()
	var seq atomic.Int64
	n, client, url, _ := quotaNode(t, http.StatusOK, func() map[string]string {
		return map[string]string{"x-ratelimit-remaining-requests": strings.Repeat("9", int(seq.Add(1)%5)+1)}
	})
	require.True(t, n.Quota().IsZero(), "no response yet")

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				resp, err := get(t, client, url)
				if err == nil {
					resp.Body.Close()
				}
			}
		})
		wg.Go(func() {
			for range 100 {
				if q := n.Quota(); !q.IsZero() {
					q.Policies[0].Remaining = -5 // a copy: the node's is untouched
				}
			}
		})
	}
	wg.Wait()
	q := n.Quota()
	require.Len(t, q.Policies, 1)
	require.Positive(t, q.Policies[0].Remaining)
}
