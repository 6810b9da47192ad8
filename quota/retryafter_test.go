package quota

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		ok      bool
	}{
		{"absent", nil, 0, false},
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second, true},
		{"zero", map[string]string{"Retry-After": "0"}, 0, true},
		{"negative", map[string]string{"Retry-After": "-1"}, 0, false},
		{"plus sign", map[string]string{"Retry-After": "+1"}, 0, false},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0, false},
		{"hexadecimal", map[string]string{"Retry-After": "0x1p3"}, 0, false},
		{"huge is capped", map[string]string{"Retry-After": "99999999"}, MaxRetryAfter, true},
		{"http date", map[string]string{"Retry-After": "Sun, 22 Nov 2026 12:00:05 GMT"}, 5 * time.Second, true},
		{"past date", map[string]string{"Retry-After": "Sun, 22 Nov 2026 11:00:00 GMT"}, 0, true},
		{"far date is capped", map[string]string{"Retry-After": "Fri, 22 Nov 2126 12:00:00 GMT"}, MaxRetryAfter, true},
		{"ms wins", map[string]string{"Retry-After": "3", "retry-after-ms": "250"}, 250 * time.Millisecond, true},
		{"fractional ms", map[string]string{"retry-after-ms": "1.5"}, 1500 * time.Microsecond, true},
		{"bad ms falls back", map[string]string{"Retry-After": "2", "retry-after-ms": "x"}, 2 * time.Second, true},
		{"seconds overflowing a Duration are capped", map[string]string{"Retry-After": "10000000000"}, MaxRetryAfter, true},
		{"seconds wrapping a Duration are capped", map[string]string{"Retry-After": "18446744074"}, MaxRetryAfter, true},
		{"beyond int64 is capped", map[string]string{"Retry-After": "99999999999999999999999"}, MaxRetryAfter, true},
		{"fractional seconds", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond, true},
		{"padded", map[string]string{"Retry-After": " \t2 "}, 2 * time.Second, true},
		{"two lines joined by a proxy", map[string]string{"Retry-After": "5, 10"}, 5 * time.Second, true},
		{"a list of garbage", map[string]string{"Retry-After": "soon, 10"}, 0, false},
		{"a list ending in garbage", map[string]string{"Retry-After": "120, soon"}, 0, false},
		{"a thousands separator is no list", map[string]string{"Retry-After": "1,000"}, 0, false},
		{"a decimal comma is no list", map[string]string{"Retry-After": "1,5"}, 0, false},
		{"huge ms is capped", map[string]string{"retry-after-ms": "1e300"}, MaxRetryAfter, true},
		{"NaN ms falls back", map[string]string{"Retry-After": "2", "retry-after-ms": "NaN"}, 2 * time.Second, true},
		{"beyond float64 is capped", map[string]string{"Retry-After": "1e400"}, MaxRetryAfter, true},
		{"Inf seconds is invalid", map[string]string{"Retry-After": "Inf"}, 0, false},
		{"underflow is zero", map[string]string{"Retry-After": "1e-400"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			got, ok := retryAfter(h, now)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
			info := Parse(h, now)
			require.Equal(t, tt.ok, info.HasRetryAfter)
			require.Equal(t, tt.want, info.RetryAfter)
		})
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "-5", "Sun, 22 Nov 2026 12:00:05 GMT", "1e9", "", "0.5"} {
		f.Add(s, s)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		h.Set("Retry-After", ra)
		h.Set("retry-after-ms", ms)
		d, ok := retryAfter(h, now)
		if d < 0 || d > MaxRetryAfter || (!ok && d != 0) {
			t.Fatalf("retryAfter(%q, %q) = %v, %v", ra, ms, d, ok)
		}
	})
}
