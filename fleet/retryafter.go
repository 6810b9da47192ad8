package fleet

import (
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
// (delay-seconds or an HTTP date, RFC 9110 §10.2.3), and whether either was
// present and valid. now is used only for the HTTP-date form.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < float64(maxRetryAfter/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return min(time.Duration(secs)*time.Second, maxRetryAfter), true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return min(max(d, 0), maxRetryAfter), true
	}
	return 0, false
}
