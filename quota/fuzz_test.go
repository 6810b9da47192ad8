package quota

import (
	"net/http"
	"testing"
	"time"
)

// fuzzNames are every header Parse reads.
var fuzzNames = func() []string {
	names := []string{"Retry-After", "Retry-After-Ms", "Ratelimit", "Ratelimit-Policy"}
	for _, f := range triples {
		names = append(names, f.limit, f.remaining, f.rset)
	}
	return names
}()

func FuzzParse(f *testing.F) {
	for _, seed := range [][4]string{
		{`"default";r=0;t=30`, `"default";q=100;w=60`, "6m0s", "2026-11-22T12:00:01Z"},
		{"10, 10;w=1", "0", "1795435200", "1h2m3.5s"},
		{"Sun, 22 Nov 2026 12:00:05 GMT", "1e400", "-1", "99999999999999999999"},
		{`("a" "b");r=1`, `"x";r=?1;t=@12`, ":YQ==:", `%"caf%c3%a9"`},
		{"", " ", "\t", "µs"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], int64(0))
	}
	f.Fuzz(func(t *testing.T, a, b, c, d string, offset int64) {
		values := []string{a, b, c, d}
		h := http.Header{}
		for i, name := range fuzzNames {
			h[name] = []string{values[i%len(values)]}
		}
		h["Ratelimit"] = append(h["Ratelimit"], c) // a second line
		at := now.Add(time.Duration(offset))
		info := Parse(h, at)
		checkInfo(t, info, at)
		if again := Parse(h, at); len(again.Policies) != len(info.Policies) || again.At != info.At {
			t.Fatalf("Parse is not deterministic: %+v, then %+v", info, again)
		}
	})
}

// checkInfo fails t unless info keeps Parse's promises for a response
// received at now. It does not check Remaining ≤ Limit: providers do not
// promise it.
func checkInfo(t *testing.T, info Info, now time.Time) {
	t.Helper()
	if info.RetryAfter < 0 || info.RetryAfter > MaxRetryAfter || (!info.HasRetryAfter && info.RetryAfter != 0) {
		t.Fatalf("RetryAfter %v, HasRetryAfter %v", info.RetryAfter, info.HasRetryAfter)
	}
	if info.IsZero() != info.At.IsZero() || (!info.IsZero() && !info.At.Equal(now)) {
		t.Fatalf("At %v for %+v", info.At, info)
	}
	for _, p := range info.Policies {
		switch {
		case p.Source < IETF || p.Source > Anthropic:
			t.Fatalf("source %d in %+v", p.Source, p)
		case p.Limit < -1 || p.Limit > MaxCount || p.Remaining < -1 || p.Remaining > MaxCount:
			t.Fatalf("counts out of range in %+v", p)
		case !p.Reset.IsZero() && (p.Reset.Before(now) || p.Reset.Sub(now) > MaxReset):
			t.Fatalf("reset %v not within [now, now+MaxReset] in %+v", p.Reset.Sub(now), p)
		case p.Window < 0 || p.Window > MaxReset:
			t.Fatalf("window out of range in %+v", p)
		case p.Limit < 0 && p.Remaining < 0 && p.Reset.IsZero():
			t.Fatalf("a policy that says nothing: %+v", p)
		}
	}
	if until, ok := info.Exhausted(now); ok && (!until.After(now) || until.Sub(now) > MaxReset) {
		t.Fatalf("exhausted until %v", until.Sub(now))
	}
}
