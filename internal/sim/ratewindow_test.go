package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newRateWindow(t *testing.T, rl RateLimit) *RateWindow {
	t.Helper()
	w, err := NewRateWindow(rl, epoch)
	require.NoError(t, err)
	return w
}

func at(d time.Duration) time.Time { return epoch.Add(d) }

// TestRateWindowSlidingExact walks one request at a time through a 10s
// window holding at most 3 requests and 100 tokens: each decision, what the
// window holds after it, and how long a refused request is told to wait
// are exact, including the instant an entry leaves (t+Window, excluded).
func TestRateWindowSlidingExact(t *testing.T) {
	t.Parallel()
	w := newRateWindow(t, RateLimit{Window: 10 * time.Second, Quota: []QuotaStep{{Quota: RateQuota{Requests: 3, Tokens: 100}}}})
	ms := time.Millisecond
	steps := []struct {
		at         time.Duration
		tokens     int64
		admitted   bool
		used       RateUsage
		retryAfter time.Duration
	}{
		{0, 10, true, RateUsage{1, 10}, 0},
		{1 * time.Second, 20, true, RateUsage{2, 30}, 0},
		{2 * time.Second, 30, true, RateUsage{3, 60}, 0},
		// Fourth request: the request quota is full until the t=0 entry leaves at 10s.
		{3 * time.Second, 0, false, RateUsage{3, 60}, 7 * time.Second},
		{10*time.Second - ms, 0, false, RateUsage{3, 60}, ms},
		// At exactly 10s the t=0 entry has left: 2 requests, 50 tokens.
		{10 * time.Second, 51, false, RateUsage{2, 50}, 1 * time.Second}, // 50+51 > 100 until the t=1s entry (20) leaves
		{10 * time.Second, 50, true, RateUsage{3, 100}, 0},
		// Both quotas full; 40 tokens fit once the 1s and 2s entries (20, 30) have left.
		{10*time.Second + ms, 40, false, RateUsage{3, 100}, 2*time.Second - ms},
		{12 * time.Second, 40, true, RateUsage{2, 90}, 0},
		{30 * time.Second, 0, true, RateUsage{1, 0}, 0},
	}
	for i, s := range steps {
		d := w.Admit(at(s.at), s.tokens)
		require.Equal(t, s.admitted, d.Admitted, "step %d at %v", i, s.at)
		require.Equal(t, s.used, d.Used, "step %d at %v", i, s.at)
		require.Equal(t, s.retryAfter, d.RetryAfter, "step %d at %v", i, s.at)
		require.False(t, d.TooLarge, "step %d", i)
	}
	st := w.Stats(at(30 * time.Second))
	require.Equal(t, RateUsage{Requests: 6, Tokens: 150}, st.Accepted)
	require.Equal(t, RateUsage{Requests: 4, Tokens: 91}, st.Refused)
	require.Len(t, st.Windows, 4, "windows [0,10) [10,20) [20,30) [30,40)")
	require.Equal(t, WindowStats{Start: epoch, Quota: RateQuota{3, 100}, Accepted: RateUsage{3, 60}, Refused: RateUsage{2, 0}, Peak: RateUsage{3, 60}}, st.Windows[0])
	require.Equal(t, RateUsage{2, 90}, st.Windows[1].Accepted)
	require.Equal(t, RateUsage{3, 100}, st.Windows[1].Peak)
	require.Equal(t, RateUsage{}, st.Windows[2].Accepted)
}

// TestRateWindowMatchesBruteForce compares every decision of a RateWindow
// with a recount over the whole history of accepted requests, for random
// arrivals, costs and quota changes; and checks that what the window holds
// right after an admission never exceeds the quota it was admitted under.
func TestRateWindowMatchesBruteForce(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	var refused, tooLarge int
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		q := RateQuota{Requests: 1 + rng.Int64N(20), Tokens: 50 + rng.Int64N(500)}
		w := newRateWindow(t, RateLimit{Window: window, Quota: []QuotaStep{{Quota: q}}})
		var accepted []rateEntry
		now := epoch
		for i := range 3000 {
			now = now.Add(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
			if i%500 == 499 {
				q = RateQuota{Requests: rng.Int64N(20), Tokens: rng.Int64N(500)} // 0 means unlimited
				w.SetQuota(now, q)
			}
			// Recount from the history, less what has left every window from now on.
			live := accepted[:0]
			var used RateUsage
			for _, e := range accepted {
				if now.Before(e.at.Add(window)) {
					live = append(live, e)
					used.Requests++
					used.Tokens += e.tokens
				}
			}
			accepted = live
			tokens := rng.Int64N(100)
			want := (q.Requests == 0 || used.Requests+1 <= q.Requests) && (q.Tokens == 0 || used.Tokens+tokens <= q.Tokens)
			d := w.Admit(now, tokens)
			require.Equal(t, want, d.Admitted, "seed %d request %d", seed, i)
			require.Equal(t, q, d.Quota)
			if want {
				accepted = append(accepted, rateEntry{now, tokens})
				used.Requests++
				used.Tokens += tokens
				if q.Requests > 0 {
					require.LessOrEqual(t, d.Used.Requests, q.Requests)
				}
				if q.Tokens > 0 {
					require.LessOrEqual(t, d.Used.Tokens, q.Tokens)
				}
			} else if refused++; d.TooLarge {
				tooLarge++
			} else {
				// Waiting RetryAfter is enough and necessary.
				require.Positive(t, d.RetryAfter)
				require.True(t, fitsAt(accepted, now.Add(d.RetryAfter), window, q, tokens), "seed %d request %d fits after RetryAfter", seed, i)
				require.False(t, fitsAt(accepted, now.Add(d.RetryAfter-1), window, q, tokens), "seed %d request %d fits before RetryAfter", seed, i)
			}
			require.Equal(t, used, d.Used, "seed %d request %d", seed, i)
		}
	}
	require.Greater(t, refused, 10000, "the quotas bind")
	require.Positive(t, tooLarge)
}

// fitsAt reports whether a request of tokens fits under q at t, given the
// accepted history and nothing else accepted.
func fitsAt(accepted []rateEntry, t time.Time, window time.Duration, q RateQuota, tokens int64) bool {
	var used RateUsage
	for _, e := range accepted {
		if !e.at.After(t) && t.Before(e.at.Add(window)) {
			used.Requests++
			used.Tokens += e.tokens
		}
	}
	return (q.Requests == 0 || used.Requests+1 <= q.Requests) && (q.Tokens == 0 || used.Tokens+tokens <= q.Tokens)
}

// TestRateWindowQuotaSchedule lowers the quota mid-window by schedule: what
// the window already holds keeps counting, so requests are refused until it
// has left; the windows record the quota at their start and the change.
func TestRateWindowQuotaSchedule(t *testing.T) {
	t.Parallel()
	w := newRateWindow(t, RateLimit{Window: 10 * time.Second, Quota: []QuotaStep{
		{At: 0, Quota: RateQuota{Requests: 4}},
		{At: 15 * time.Second, Quota: RateQuota{Requests: 2}},
		{At: 30 * time.Second, Quota: RateQuota{Requests: 6}},
	}})
	for i := range 4 {
		require.True(t, w.Admit(at(12*time.Second+time.Duration(i)*time.Millisecond), 0).Admitted)
	}
	require.False(t, w.Admit(at(14*time.Second), 0).Admitted, "4 of 4")
	require.Equal(t, RateQuota{Requests: 4}, w.Quota(at(15*time.Second-1)))
	require.Equal(t, RateQuota{Requests: 2}, w.Quota(at(15*time.Second)))

	d := w.Admit(at(16*time.Second), 0)
	require.False(t, d.Admitted, "the window still holds 4 > 2")
	require.Equal(t, RateQuota{Requests: 2}, d.Quota)
	require.Equal(t, 6*time.Second+2*time.Millisecond, d.RetryAfter, "three of the four must leave: the third leaves at 22.002s")
	require.True(t, w.Admit(at(22*time.Second+2*time.Millisecond), 0).Admitted)
	require.False(t, w.Admit(at(22*time.Second+2*time.Millisecond), 0).Admitted)

	st := w.Stats(at(35 * time.Second))
	require.Equal(t, RateQuota{Requests: 6}, st.Quota)
	require.Len(t, st.Windows, 4)
	require.Equal(t, RateQuota{Requests: 4}, st.Windows[1].Quota)
	require.True(t, st.Windows[1].QuotaChanged, "window [10s,20s) saw 4 become 2")
	require.Equal(t, RateQuota{Requests: 2}, st.Windows[2].Quota)
	require.False(t, st.Windows[2].QuotaChanged)
	require.Equal(t, RateQuota{Requests: 6}, st.Windows[3].Quota, "a step on a window's start is that window's quota")
	require.False(t, st.Windows[3].QuotaChanged)
	require.Equal(t, RateUsage{Requests: 4}, st.Windows[1].Accepted)
	require.Equal(t, RateUsage{Requests: 2}, st.Windows[1].Refused)
	require.Equal(t, RateUsage{Requests: 1}, st.Windows[2].Accepted)

	// SetQuota replaces what is left of the schedule.
	w.SetQuota(at(36*time.Second), RateQuota{Requests: 1})
	require.Equal(t, RateQuota{Requests: 1}, w.Quota(at(time.Hour)))
}

func TestRateWindowTooLargeAndResets(t *testing.T) {
	t.Parallel()
	w := newRateWindow(t, RateLimit{Window: 10 * time.Second, Quota: []QuotaStep{{Quota: RateQuota{Tokens: 100}}}})
	d := w.Admit(epoch, 101)
	require.False(t, d.Admitted)
	require.True(t, d.TooLarge)
	require.Zero(t, d.RetryAfter)

	require.True(t, w.Admit(at(time.Second), 30).Admitted)
	d = w.Admit(at(2*time.Second), 0)
	require.True(t, d.Admitted, "no request quota; a 0-token request always fits")
	require.Equal(t, 10*time.Second, d.ResetRequests, "the newest request leaves at 12s")
	require.Equal(t, 9*time.Second, d.ResetTokens, "the newest request with tokens leaves at 11s")
	d = w.Admit(at(11*time.Second), 0)
	require.Equal(t, RateUsage{Requests: 2}, d.Used)
	require.Zero(t, d.ResetTokens)
}

// TestRateWindowResetStats keeps the sliding window but forgets the counts.
func TestRateWindowResetStats(t *testing.T) {
	t.Parallel()
	w := newRateWindow(t, RateLimit{Window: 10 * time.Second, Quota: []QuotaStep{{Quota: RateQuota{Requests: 1}}}})
	require.True(t, w.Admit(epoch, 0).Admitted)
	w.ResetStats(at(25 * time.Second))
	st := w.Stats(at(25 * time.Second))
	require.Equal(t, []WindowStats{{Start: at(20 * time.Second), Quota: RateQuota{Requests: 1}}}, st.Windows)
	require.True(t, w.Admit(at(26*time.Second), 0).Admitted)
	w.ResetStats(at(27 * time.Second))
	require.False(t, w.Admit(at(28*time.Second), 0).Admitted, "the window still holds the 26s request")
	require.Equal(t, RateUsage{Requests: 1}, w.Stats(at(28*time.Second)).Refused)
}

// TestRateWindowTimeGoingBack treats an earlier now as the latest seen.
func TestRateWindowTimeGoingBack(t *testing.T) {
	t.Parallel()
	w := newRateWindow(t, RateLimit{Window: 10 * time.Second, Quota: []QuotaStep{{Quota: RateQuota{Requests: 1}}}})
	require.True(t, w.Admit(at(10*time.Second), 0).Admitted)
	d := w.Admit(at(time.Second), 0)
	require.False(t, d.Admitted)
	require.Equal(t, 10*time.Second, d.RetryAfter, "judged at 10s")
}

func TestRateLimitValidate(t *testing.T) {
	t.Parallel()
	one := []QuotaStep{{Quota: RateQuota{Requests: 1}}}
	tests := []struct {
		name string
		rl   RateLimit
		want string
	}{
		{"negative window", RateLimit{Window: -time.Second, Quota: one}, "RateLimit.Window must be >= 0, got -1s"},
		{"no quota", RateLimit{}, "RateLimit.Quota needs at least one step"},
		{"not at 0", RateLimit{Quota: []QuotaStep{{At: time.Second}}}, "must start At 0, got 1s"},
		{"negative requests", RateLimit{Quota: []QuotaStep{{Quota: RateQuota{Requests: -2}}}}, "step 0 must have Requests and Tokens >= 0, got {Requests:-2 Tokens:0}"},
		{"negative tokens", RateLimit{Quota: []QuotaStep{{}, {At: 1, Quota: RateQuota{Tokens: -3}}}}, "step 1 must have Requests and Tokens >= 0"},
		{"not increasing", RateLimit{Quota: []QuotaStep{{}, {At: time.Second}, {At: time.Second}}}, "step 2 At (1s) must be after step 1 At (1s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewProvider(ProviderConfig{Capacity: Fixed(1), RateLimit: &tt.rl})
			require.ErrorContains(t, err, tt.want)
			_, err = NewRateWindow(tt.rl, epoch)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func BenchmarkRateWindowAdmit(b *testing.B) {
	w, err := NewRateWindow(RateLimit{Window: time.Minute, Quota: []QuotaStep{{Quota: RateQuota{Requests: 1000, Tokens: 100000}}}}, epoch)
	require.NoError(b, err)
	now := epoch
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		w.Admit(now, 50)
	}
}
