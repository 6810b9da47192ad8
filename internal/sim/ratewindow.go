package sim

import (
	"fmt"
	"time"
)

// RateWindow is the accounting of a RateLimit: an exact sliding-window log
// of accepted requests, the quota schedule, and counts per window for
// benchmarks. It reads no clock: every method takes the time now, and a
// now before an earlier call's is treated as that earlier time.
//
// A RateWindow is not safe for concurrent use; a Provider guards its own.
type RateWindow struct {
	window time.Duration
	start  time.Time
	last   time.Time
	quota  RateQuota
	steps  []QuotaStep // remaining steps, At measured from start

	log          []rateEntry // accepted requests, oldest first, from head
	head         int
	used         RateUsage // sum of log[head:]
	lastTokensAt time.Time // newest accepted request with tokens > 0

	windows []WindowStats // the last one is in progress
}

type rateEntry struct {
	at     time.Time
	tokens int64
}

// RateDecision is what RateWindow.Admit decided about one request.
type RateDecision struct {
	// Admitted reports whether the request fit under the quota; it is
	// then counted in the window.
	Admitted bool
	// TooLarge reports a refused request whose tokens exceed the token
	// quota itself: no wait makes it fit under the quota in force.
	TooLarge bool
	// Quota is the quota the request was judged against.
	Quota RateQuota
	// Used is what the sliding window ending now holds after the decision,
	// the request included if admitted.
	Used RateUsage
	// RetryAfter, for a refused request that is not TooLarge, is how long
	// until it would fit if nothing else were accepted meanwhile.
	RetryAfter time.Duration
	// ResetRequests and ResetTokens are how long until the window holds no
	// accepted request, and no accepted token.
	ResetRequests, ResetTokens time.Duration
}

// WindowStats counts one window of a RateWindow's life: the windows are
// consecutive, of RateLimit.Window each, starting when the RateWindow was
// created. They are tumbling windows for reporting; admission uses the
// sliding window.
type WindowStats struct {
	// Start is when the window began.
	Start time.Time
	// Quota is the quota in force at Start; QuotaChanged reports that it
	// changed before the window ended.
	Quota        RateQuota
	QuotaChanged bool
	// Accepted and Refused count the requests decided in the window and
	// the tokens they stated.
	Accepted, Refused RateUsage
	// Peak is the most the sliding window held, per dimension, right after
	// an admission in this window: the requests and tokens accepted in the
	// Window ending at that admission.
	Peak RateUsage
}

// RateStats is a snapshot of a RateWindow.
type RateStats struct {
	// Window is RateLimit.Window.
	Window time.Duration
	// Quota is the quota in force now.
	Quota RateQuota
	// InWindow is what the sliding window ending now holds.
	InWindow RateUsage
	// Accepted and Refused are totals over Windows.
	Accepted, Refused RateUsage
	// Windows are the windows since the RateWindow was created or since
	// the one in progress at the last ResetStats, oldest first; the last
	// one is in progress.
	Windows []WindowStats
}

// NewRateWindow returns the accounting for rl, its schedule and windows
// starting at start. It returns an error naming the field when rl is
// invalid.
func NewRateWindow(rl RateLimit, start time.Time) (*RateWindow, error) {
	rl, err := rl.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &RateWindow{
		window: rl.Window,
		start:  start,
		last:   start,
		quota:  rl.Quota[0].Quota,
		steps:  rl.Quota[1:],
	}
	w.windows = []WindowStats{{Start: start, Quota: w.quota}}
	return w, nil
}

// Admit decides a request that states tokens tokens at now: it is admitted
// when the sliding window ending at now, with it added, holds no more
// requests than Quota.Requests and no more tokens than Quota.Tokens (for
// each limited dimension). A refused request is counted as refused and
// takes nothing from the quota. Admit panics if tokens is negative.
func (w *RateWindow) Admit(now time.Time, tokens int64) RateDecision {
	if tokens < 0 {
		panic(fmt.Sprintf("sim: RateWindow.Admit called with negative tokens %d", tokens))
	}
	now = w.advance(now)
	q := w.quota
	cur := &w.windows[len(w.windows)-1]
	d := RateDecision{Quota: q}
	overRequests := q.Requests > 0 && w.used.Requests+1 > q.Requests
	overTokens := q.Tokens > 0 && w.used.Tokens+tokens > q.Tokens
	if overRequests || overTokens {
		cur.Refused.Requests++
		cur.Refused.Tokens += tokens
		d.TooLarge = q.Tokens > 0 && tokens > q.Tokens
		if !d.TooLarge {
			d.RetryAfter = w.retryAfter(now, tokens, overRequests, overTokens)
		}
	} else {
		d.Admitted = true
		w.log = append(w.log, rateEntry{at: now, tokens: tokens})
		w.used.Requests++
		w.used.Tokens += tokens
		if tokens > 0 {
			w.lastTokensAt = now
		}
		cur.Accepted.Requests++
		cur.Accepted.Tokens += tokens
		cur.Peak.Requests = max(cur.Peak.Requests, w.used.Requests)
		cur.Peak.Tokens = max(cur.Peak.Tokens, w.used.Tokens)
	}
	d.Used = w.used
	d.ResetRequests, d.ResetTokens = w.resets(now)
	return d
}

// retryAfter returns how long until a request of tokens fits, if nothing
// else is accepted: until enough of the oldest entries have left the
// window. The caller has checked that it can fit at all.
func (w *RateWindow) retryAfter(now time.Time, tokens int64, overRequests, overTokens bool) time.Duration {
	var until time.Time
	if overRequests {
		k := w.used.Requests + 1 - w.quota.Requests // entries that must leave
		until = w.log[w.head+int(k)-1].at.Add(w.window)
	}
	if overTokens {
		need := w.used.Tokens + tokens - w.quota.Tokens
		for i := w.head; need > 0; i++ {
			need -= w.log[i].tokens
			if t := w.log[i].at.Add(w.window); t.After(until) {
				until = t
			}
		}
	}
	return until.Sub(now)
}

// resets returns how long until the window holds no request and no token.
func (w *RateWindow) resets(now time.Time) (requests, tokens time.Duration) {
	if w.used.Requests > 0 {
		requests = w.log[len(w.log)-1].at.Add(w.window).Sub(now)
	}
	if w.used.Tokens > 0 {
		tokens = w.lastTokensAt.Add(w.window).Sub(now)
	}
	return requests, tokens
}

// SetQuota replaces the quota schedule with q from now on. It panics if a
// field of q is negative. What the window already holds stays counted: a
// lowered quota refuses requests until enough of it has left the window.
func (w *RateWindow) SetQuota(now time.Time, q RateQuota) {
	if q.Requests < 0 || q.Tokens < 0 {
		panic(fmt.Sprintf("sim: RateWindow.SetQuota called with a negative quota %+v", q))
	}
	now = w.advance(now)
	w.steps = nil
	w.setQuota(now, q)
}

// Quota returns the quota in force at now.
func (w *RateWindow) Quota(now time.Time) RateQuota {
	w.advance(now)
	return w.quota
}

// Stats returns a snapshot of the accounting at now.
func (w *RateWindow) Stats(now time.Time) RateStats {
	w.advance(now)
	s := RateStats{
		Window:   w.window,
		Quota:    w.quota,
		InWindow: w.used,
		Windows:  append([]WindowStats(nil), w.windows...),
	}
	for _, ws := range w.windows {
		s.Accepted.Requests += ws.Accepted.Requests
		s.Accepted.Tokens += ws.Accepted.Tokens
		s.Refused.Requests += ws.Refused.Requests
		s.Refused.Tokens += ws.Refused.Tokens
	}
	return s
}

// ResetStats forgets the windows before the one in progress at now and
// clears that one's counts. The sliding window is untouched: what it holds
// still counts against the quota.
func (w *RateWindow) ResetStats(now time.Time) {
	w.advance(now)
	cur := w.windows[len(w.windows)-1]
	w.windows = append(w.windows[:0], WindowStats{Start: cur.Start, Quota: cur.Quota, QuotaChanged: cur.QuotaChanged})
}

// advance moves the accounting to now, applying each scheduled quota step
// and opening each window in time order, and drops the entries that have
// left the sliding window. It returns now, or the last time seen if now is
// earlier.
func (w *RateWindow) advance(now time.Time) time.Time {
	if now.Before(w.last) {
		now = w.last
	}
	w.last = now
	for {
		nextWindow := w.windows[len(w.windows)-1].Start.Add(w.window)
		if len(w.steps) > 0 {
			if at := w.start.Add(w.steps[0].At); at.Before(nextWindow) && !at.After(now) {
				w.setQuota(at, w.steps[0].Quota)
				w.steps = w.steps[1:]
				continue
			}
		}
		if nextWindow.After(now) {
			break
		}
		w.windows = append(w.windows, WindowStats{Start: nextWindow, Quota: w.quota})
	}
	for w.head < len(w.log) && !w.log[w.head].at.Add(w.window).After(now) {
		e := w.log[w.head]
		w.used.Requests--
		w.used.Tokens -= e.tokens
		w.head++
	}
	if w.head == len(w.log) {
		w.log, w.head = w.log[:0], 0
	} else if w.head >= 1024 && w.head*2 >= len(w.log) {
		w.log, w.head = append(w.log[:0], w.log[w.head:]...), 0
	}
	return now
}

// setQuota makes q the quota from at, within the window in progress.
func (w *RateWindow) setQuota(at time.Time, q RateQuota) {
	cur := &w.windows[len(w.windows)-1]
	if at.Equal(cur.Start) {
		cur.Quota = q
	} else if q != w.quota {
		cur.QuotaChanged = true
	}
	w.quota = q
}
