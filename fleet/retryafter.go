package fleet

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter bounds how long one response may pause admission, so a
// garbled header cannot stop a node for days.
const maxRetryAfter = 10 * time.Minute

// retryAfter returns how long the response asks clients to wait, read from
// retry-after-ms (milliseconds, as some LLM providers send) or Retry-After
// (delay-seconds, which may carry a fraction, or an HTTP date, RFC 9110
// §10.2.3), and whether either was present and valid. A wait longer than
// maxRetryAfter, however large the number, is maxRetryAfter. now is used
// only for the HTTP-date form.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseDelay(h.Get("retry-after-ms"), time.Millisecond); ok {
		return d, true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if d, ok := parseDelay(v, time.Second); ok {
		return d, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// parseDelay reads v as a non-negative number of units, capped at
// maxRetryAfter; it refuses NaN, infinities and anything else.
func parseDelay(v string, unit time.Duration) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	f, err := strconv.ParseFloat(v, 64)
	if errors.Is(err, strconv.ErrRange) && f > 0 {
		return maxRetryAfter, true // more digits than a float64 holds
	}
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	if f >= float64(maxRetryAfter)/float64(unit) {
		return maxRetryAfter, true
	}
	return time.Duration(f * float64(unit)), true
}
