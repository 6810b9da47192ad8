package quota

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryAfter returns how long the response asks clients to wait, read from
// retry-after-ms (milliseconds) or Retry-After (delay-seconds, which may
// carry a fraction or an exponent, or an HTTP date, RFC 9110 §10.2.3), and whether either
// was present and valid. A wait longer than MaxRetryAfter, however large the
// number, is MaxRetryAfter; a date in the past is 0.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseDelay(first(h, "Retry-After-Ms"), time.Millisecond, MaxRetryAfter); ok {
		return d, true
	}
	v := trim(first(h, "Retry-After"))
	if v == "" {
		return 0, false
	}
	if d, ok := parseDelay(v, time.Second, MaxRetryAfter); ok {
		return d, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return clamp(t.Sub(now), MaxRetryAfter), true
	}
	if i := strings.IndexByte(v, ','); i > 0 && i+1 < len(v) && (v[i+1] == ' ' || v[i+1] == '\t') {
		// Two lines a proxy joined into one ("5, 10"): the first, as
		// with two lines, when the rest is a valid value too. An HTTP
		// date's comma follows a day's name, which is no number; "1,000"
		// and "1,5" are no list.
		rest := trim(v[i+1:])
		_, delay := parseDelay(rest, time.Second, MaxRetryAfter)
		_, date := http.ParseTime(rest)
		if d, ok := parseDelay(v[:i], time.Second, MaxRetryAfter); ok && (delay || date == nil) {
			return d, true
		}
	}
	return 0, false
}

// parseDelay reads v as a non-negative number of units, capped at limit; it
// refuses NaN, infinities and anything else.
func parseDelay(v string, unit, limit time.Duration) (time.Duration, bool) {
	f, ok := parseNumber(v)
	if !ok {
		return 0, false
	}
	return parseDelayFloat(f, unit, limit), true
}

// parseDelayFloat returns f units, f ≥ 0, capped at limit.
func parseDelayFloat(f float64, unit, limit time.Duration) time.Duration {
	if f >= float64(limit)/float64(unit) {
		return limit
	}
	return time.Duration(f * float64(unit))
}

// parseNumber reads v as a non-negative decimal number. A number with more
// digits than a float64 holds is +Inf, which every caller caps; NaN, a
// written infinity, a negative number or anything else is refused.
func parseNumber(v string) (float64, bool) {
	v = trim(v)
	if v == "" || (v[0] != '.' && !isDigit(v[0])) {
		return 0, false // refuses "Inf", "NaN", "+1" and "-1"
	}
	for i := range len(v) {
		if c := v[i]; !isDigit(c) && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-' {
			return 0, false // refuses hexadecimal and underscores
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if errors.Is(err, strconv.ErrRange) && f > 0 {
		return math.Inf(1), true
	}
	if err != nil || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	return f, true
}

// clamp returns d within [0, limit].
func clamp(d, limit time.Duration) time.Duration { return min(max(d, 0), limit) }
