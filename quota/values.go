package quota

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// first returns the first value of the header key, which must be in
// canonical form, or "". Unlike http.Header.Get it does not canonicalize
// key, so it never allocates.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// trim removes the optional white space (spaces and tabs) around v.
func trim(v string) string { return strings.Trim(v, " \t") }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseCount reads v as a non-negative integer, saturating at MaxCount.
func parseCount(v string) (int64, bool) {
	v = trim(v)
	if v == "" {
		return 0, false
	}
	var n int64
	for i := range len(v) {
		if !isDigit(v[i]) {
			return 0, false
		}
		n = min(n*10+int64(v[i]-'0'), MaxCount)
	}
	return n, true
}

const (
	// unixThreshold is the least number of seconds read as a Unix time
	// rather than a delay: 10⁹ seconds is 2001-09-09, and a delay of 31
	// years.
	unixThreshold = 1e9
	// unixMilliThreshold is the least number read as a Unix time in
	// milliseconds, as some providers send their resets: 10¹² milliseconds
	// is 2001-09-09 too, and 10¹² seconds the year 33658.
	unixMilliThreshold = 1e12
)

// parseResetSeconds reads a reset given in seconds, a delay or (from
// unixThreshold on) a Unix time — in milliseconds from
// unixMilliThreshold on — and returns it as a time within
// [now, now+MaxReset].
func parseResetSeconds(v string, now time.Time) (time.Time, bool) {
	f, ok := parseNumber(v)
	switch {
	case !ok:
		return time.Time{}, false
	case f >= unixMilliThreshold:
		return unixReset(f, time.Millisecond, now), true
	case f >= unixThreshold:
		return unixReset(f, time.Second, now), true
	}
	d, _ := parseDelay(v, time.Second, MaxReset)
	return now.Add(d), true
}

// unixReset is the Unix time f, counted in unit since the epoch, as a
// time within [now, now+MaxReset]; one past the year 2262, which
// time.Time's nanoseconds since the epoch cannot hold, is now+MaxReset.
func unixReset(f float64, unit time.Duration, now time.Time) time.Time {
	if f >= float64(math.MaxInt64/int64(unit)) {
		return now.Add(MaxReset)
	}
	whole, frac := math.Modf(f)
	at := time.Unix(0, 0).Add(time.Duration(whole) * unit).Add(time.Duration(frac * float64(unit)))
	return now.Add(clamp(at.Sub(now), MaxReset))
}

// parseResetTime reads an RFC 3339 time (Anthropic's resets) and returns it
// as a time within [now, now+MaxReset].
func parseResetTime(v string, now time.Time) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, trim(v))
	if err != nil {
		return time.Time{}, false
	}
	return now.Add(clamp(at.Sub(now), MaxReset)), true
}

// parseResetSpan reads a duration as OpenAI writes its resets ("1s", "6m0s",
// "20ms", "1h2m3.5s") and returns it as a time within [now, now+MaxReset].
func parseResetSpan(v string, now time.Time) (time.Time, bool) {
	d, ok := parseSpan(v, MaxReset)
	if !ok {
		return time.Time{}, false
	}
	return now.Add(d), true
}

// spanUnits are the units parseSpan knows, longest first where one is the
// prefix of another.
var spanUnits = [...]struct {
	name string
	unit time.Duration
}{
	{"ms", time.Millisecond},
	{"us", time.Microsecond},
	{"µs", time.Microsecond},
	{"ns", time.Nanosecond},
	{"h", time.Hour},
	{"m", time.Minute},
	{"s", time.Second},
	{"d", 24 * time.Hour},
}

// parseSpan reads a sequence of non-negative decimal numbers, each followed
// by a unit (h, m, s, ms, us, µs, ns, or d for days), as Go's
// time.Duration.String writes them; a bare number is seconds. The sum is
// capped at limit.
func parseSpan(v string, limit time.Duration) (time.Duration, bool) {
	v = trim(v)
	if f, ok := parseNumber(v); ok {
		return parseDelayFloat(f, time.Second, limit), true
	}
	if v == "" {
		return 0, false
	}
	var total float64 // in nanoseconds
	for v != "" {
		i := 0
		for i < len(v) && (isDigit(v[i]) || v[i] == '.') {
			i++
		}
		f, ok := parseNumber(v[:i])
		if !ok {
			return 0, false
		}
		v = v[i:]
		var unit time.Duration
		for _, u := range spanUnits {
			if strings.HasPrefix(v, u.name) {
				unit, v = u.unit, v[len(u.name):]
				break
			}
		}
		if unit == 0 {
			return 0, false
		}
		total += f * float64(unit)
	}
	return parseDelayFloat(total, time.Nanosecond, limit), true
}
