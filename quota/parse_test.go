package quota

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// header builds a header from name, value pairs, adding each so that a name
// may have several lines.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func in(d time.Duration) time.Time { return now.Add(d) }

// pol is a Policy with the given counts and no reset or window.
func pol(src Source, unit Unit, name string, limit, remaining int64) Policy {
	return Policy{Source: src, Unit: unit, Name: name, Limit: limit, Remaining: remaining}
}

func (p Policy) resetIn(d time.Duration) Policy { p.Reset = in(d); return p }

func (p Policy) window(d time.Duration) Policy { p.Window = d; return p }

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		want   []Policy
	}{
		{"none", header("Content-Type", "application/json"), nil},

		// IETF RateLimit and RateLimit-Policy (draft 11).
		{"ietf limit", header("RateLimit", `"default";r=50;t=30`),
			[]Policy{pol(IETF, Requests, "default", -1, 50).resetIn(30 * time.Second)}},
		{"ietf limit and policy", header("RateLimit-Policy", `"fixedwindow";q=100;w=60`, "RateLimit", `"fixedwindow";r=99;t=50`),
			[]Policy{pol(IETF, Requests, "fixedwindow", 100, 99).resetIn(50 * time.Second).window(time.Minute)}},
		{"ietf several policies", header(
			"RateLimit-Policy", `"hour";q=1000;w=3600, "day";q=5000;w=86400`,
			"RateLimit", `"day";r=100;t=36000`),
			[]Policy{
				pol(IETF, Requests, "day", 5000, 100).resetIn(10 * time.Hour).window(24 * time.Hour),
				pol(IETF, Requests, "hour", 1000, -1).window(time.Hour),
			}},
		{"ietf lists split over lines", header(
			"RateLimit-Policy", `"permin";q=50;w=60`, "RateLimit-Policy", `"perhr";q=1000;w=3600`,
			"RateLimit", `"permin";r=0;t=12`, "RateLimit", `"perhr";r=900;t=1800`),
			[]Policy{
				pol(IETF, Requests, "permin", 50, 0).resetIn(12 * time.Second).window(time.Minute),
				pol(IETF, Requests, "perhr", 1000, 900).resetIn(30 * time.Minute).window(time.Hour),
			}},
		{"ietf unit and partition key", header(
			"RateLimit-Policy", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`,
			"RateLimit", `"peruser";r=300;t=5;pk=:sdfjLJUOUH==:`),
			[]Policy{pol(IETF, "content-bytes", "peruser", 65535, 300).resetIn(5 * time.Second).window(10 * time.Second)}},
		{"ietf token names and other parameters", header("RateLimit", `default;r=1;t=7;acme-burst=?1;comment="a \"b\""`),
			[]Policy{pol(IETF, Requests, "default", -1, 1).resetIn(7 * time.Second)}},
		{"ietf escaped name", header("RateLimit", `"a\"b\\c";r=3`),
			[]Policy{pol(IETF, Requests, `a"b\c`, -1, 3)}},
		{"ietf no window", header("RateLimit", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`),
			[]Policy{pol(IETF, Requests, "default", -1, 999)}},
		{"ietf huge values are capped", header("RateLimit", `"x";r=99999999999999999999;t=99999999999999999999`),
			[]Policy{pol(IETF, Requests, "x", -1, MaxCount).resetIn(MaxReset)}},
		{"ietf decimal reset", header("RateLimit", `"x";r=0;t=0.5`),
			[]Policy{pol(IETF, Requests, "x", -1, 0).resetIn(500 * time.Millisecond)}},
		{"ietf member without r is dropped", header("RateLimit", `"a";t=5, "b";r=-1;t=5, "c";r=1.5, "d";r="1", ("e");r=1, "f";r=2`),
			[]Policy{pol(IETF, Requests, "f", -1, 2)}},
		{"ietf bad reset is dropped alone", header("RateLimit", `"x";r=2;t=-3, "y";r=2;t="soon"`),
			[]Policy{pol(IETF, Requests, "x", -1, 2), pol(IETF, Requests, "y", -1, 2)}},
		{"ietf policy without q is dropped", header("RateLimit-Policy", `"a";w=60, "b";q=-1, "c";q=10;w=0, "d";q=10;w=-5`),
			[]Policy{pol(IETF, Requests, "c", 10, -1), pol(IETF, Requests, "d", 10, -1)}},
		{"ietf malformed field is ignored whole", header("RateLimit", `"a";r=1, "b";r=2,`, "RateLimit-Policy", `"a";q=5`),
			[]Policy{pol(IETF, Requests, "a", 5, -1)}},
		{"ietf malformed line spoils its field", header("RateLimit", `"a";r=1`, "RateLimit", `"b";r=`), nil},
		{"ietf draft 07 dictionary is not read", header("RateLimit", "limit=10, remaining=1, reset=7"), nil},
		{"ietf garbage", header("RateLimit", "\x00\xff;;", "RateLimit-Policy", `"unterminated;q=1`), nil},
		{"ietf empty", header("RateLimit", ""), nil},

		// The drafts' older RateLimit-Limit, -Remaining, -Reset.
		{"ietf legacy", header("RateLimit-Limit", "100", "RateLimit-Remaining", "0", "RateLimit-Reset", "7"),
			[]Policy{pol(IETFLegacy, "", "", 100, 0).resetIn(7 * time.Second)}},
		{"ietf legacy with policies", header("RateLimit-Limit", "10, 10;w=1, 1000;w=3600", "RateLimit-Remaining", "9"),
			[]Policy{pol(IETFLegacy, "", "", 10, 9).window(time.Second)}},
		{"ietf legacy unix reset", header("RateLimit-Remaining", "5", "RateLimit-Reset", "1795435200"),
			[]Policy{pol(IETFLegacy, "", "", -1, 5).resetIn(24 * time.Hour)}},
		{"ietf legacy garbage", header("RateLimit-Limit", "lots", "RateLimit-Remaining", "-1", "RateLimit-Reset", "later"), nil},

		// X-RateLimit-* and X-Rate-Limit-*.
		{"x-ratelimit", header("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", "60"),
			[]Policy{pol(XRateLimit, "", "", 5000, 4999).resetIn(time.Minute)}},
		{"x-ratelimit unix reset", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1795435230.5"),
			[]Policy{pol(XRateLimit, "", "", -1, 0).resetIn(24*time.Hour + 30500*time.Millisecond)}},
		{"x-ratelimit past unix reset", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1700000000"),
			[]Policy{pol(XRateLimit, "", "", -1, 0).resetIn(0)}},
		{"x-ratelimit far unix reset is capped", header("X-RateLimit-Reset", "99999999999"),
			[]Policy{pol(XRateLimit, "", "", -1, -1).resetIn(MaxReset)}},
		{"x-ratelimit unix reset in milliseconds", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1795348830500"),
			[]Policy{pol(XRateLimit, "", "", -1, 0).resetIn(30500 * time.Millisecond)}},
		{"ietf legacy unix reset in milliseconds", header("RateLimit-Remaining", "0", "RateLimit-Reset", "1795348801000.5"),
			[]Policy{pol(IETFLegacy, "", "", -1, 0).resetIn(time.Second + 500*time.Microsecond)}},
		{"x-ratelimit far unix reset in milliseconds is capped", header("X-RateLimit-Reset", "1e300"),
			[]Policy{pol(XRateLimit, "", "", -1, -1).resetIn(MaxReset)}},
		{"x-rate-limit", header("X-Rate-Limit-Limit", "15", "X-Rate-Limit-Remaining", "14", "X-Rate-Limit-Reset", "900"),
			[]Policy{pol(XRateLimit, "", "", 15, 14).resetIn(15 * time.Minute)}},
		{"x-ratelimit wins over x-rate-limit", header("X-RateLimit-Limit", "1", "X-Rate-Limit-Limit", "2"),
			[]Policy{pol(XRateLimit, "", "", 1, -1)}},
		{"x-ratelimit garbage", header("X-RateLimit-Limit", "1e3", "X-RateLimit-Remaining", "ten", "X-RateLimit-Reset", "NaN"), nil},
		{"x-ratelimit huge counts are capped", header("X-RateLimit-Limit", "123456789012345678901234567890"),
			[]Policy{pol(XRateLimit, "", "", MaxCount, -1)}},

		// OpenAI.
		{"openai", header(
			"x-ratelimit-limit-requests", "60",
			"x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-requests", "59",
			"x-ratelimit-remaining-tokens", "149984",
			"x-ratelimit-reset-requests", "1s",
			"x-ratelimit-reset-tokens", "6m0s"),
			[]Policy{
				pol(OpenAI, Requests, "", 60, 59).resetIn(time.Second),
				pol(OpenAI, Tokens, "", 150000, 149984).resetIn(6 * time.Minute),
			}},
		{"openai durations", header("x-ratelimit-reset-requests", "20ms", "x-ratelimit-reset-tokens", "1h2m3.5s"),
			[]Policy{
				pol(OpenAI, Requests, "", -1, -1).resetIn(20 * time.Millisecond),
				pol(OpenAI, Tokens, "", -1, -1).resetIn(time.Hour + 2*time.Minute + 3500*time.Millisecond),
			}},
		{"openai small units and bare seconds", header("x-ratelimit-reset-requests", "1.5µs2ns", "x-ratelimit-reset-tokens", "7.66"),
			[]Policy{
				pol(OpenAI, Requests, "", -1, -1).resetIn(1502 * time.Nanosecond),
				pol(OpenAI, Tokens, "", -1, -1).resetIn(7660 * time.Millisecond),
			}},
		{"openai huge reset is capped", header("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "99999999999h"),
			[]Policy{pol(OpenAI, Requests, "", -1, 0).resetIn(MaxReset)}},
		{"openai garbage", header(
			"x-ratelimit-limit-requests", "sixty",
			"x-ratelimit-remaining-requests", "-3",
			"x-ratelimit-reset-requests", "-1s",
			"x-ratelimit-limit-tokens", "",
			"x-ratelimit-reset-tokens", "1x"), nil},
		{"openai bad reset is dropped alone", header("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "s"),
			[]Policy{pol(OpenAI, Tokens, "", -1, 0)}},

		// Anthropic.
		{"anthropic", header(
			"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", "2026-11-22T12:00:01Z",
			"anthropic-ratelimit-tokens-limit", "100000",
			"anthropic-ratelimit-tokens-remaining", "0",
			"anthropic-ratelimit-tokens-reset", "2026-11-22T12:00:30.25Z",
			"anthropic-ratelimit-input-tokens-limit", "80000",
			"anthropic-ratelimit-input-tokens-remaining", "80000",
			"anthropic-ratelimit-input-tokens-reset", "2026-11-22T13:00:00+01:00",
			"anthropic-ratelimit-output-tokens-limit", "20000",
			"anthropic-ratelimit-output-tokens-remaining", "25000",
			"anthropic-ratelimit-output-tokens-reset", "2026-11-22T11:59:00Z"),
			[]Policy{
				pol(Anthropic, Requests, "", 50, 49).resetIn(time.Second),
				pol(Anthropic, Tokens, "", 100000, 0).resetIn(30250 * time.Millisecond),
				pol(Anthropic, InputTokens, "", 80000, 80000).resetIn(0),
				pol(Anthropic, OutputTokens, "", 20000, 25000).resetIn(0),
			}},
		{"anthropic far reset is capped", header("anthropic-ratelimit-tokens-reset", "9999-12-31T23:59:59Z"),
			[]Policy{pol(Anthropic, Tokens, "", -1, -1).resetIn(MaxReset)}},
		{"anthropic garbage", header(
			"anthropic-ratelimit-requests-limit", "5O",
			"anthropic-ratelimit-requests-remaining", "4.9",
			"anthropic-ratelimit-requests-reset", "tomorrow",
			"anthropic-ratelimit-tokens-reset", "1795435200"), nil},

		// Several forms at once, in the documented order.
		{"all forms", header(
			"anthropic-ratelimit-requests-remaining", "1",
			"x-ratelimit-remaining-requests", "2",
			"X-RateLimit-Remaining", "3",
			"RateLimit-Remaining", "4",
			"RateLimit", `"d";r=5`),
			[]Policy{
				pol(IETF, Requests, "d", -1, 5),
				pol(IETFLegacy, "", "", -1, 4),
				pol(XRateLimit, "", "", -1, 3),
				pol(OpenAI, Requests, "", -1, 2),
				pol(Anthropic, Requests, "", -1, 1),
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			info := Parse(tt.header, now)
			require.Equal(t, tt.want, info.Policies)
			require.Equal(t, info.IsZero(), info.At.IsZero())
			if tt.want == nil {
				require.Equal(t, Info{}, info, "garbage says nothing")
			} else {
				require.Equal(t, now, info.At)
			}
		})
	}
}

func TestParseRetryAfterWithPolicies(t *testing.T) {
	t.Parallel()
	info := Parse(header("Retry-After", "20", "RateLimit-Policy", `"dynamic";q=100;w=60`, "RateLimit", `"dynamic";r=15;t=40`), now)
	require.Equal(t, Info{
		At:            now,
		RetryAfter:    20 * time.Second,
		HasRetryAfter: true,
		Policies:      []Policy{pol(IETF, Requests, "dynamic", 100, 15).resetIn(40 * time.Second).window(time.Minute)},
	}, info)
}

// TestParseOversizedDecimalKeepsTheField: a member whose reset is a
// 400-digit Decimal dropped the whole RateLimit field, and with it a
// sibling's nothing-left-for-5-s; it is capped as an Integer is.
func TestParseOversizedDecimalKeepsTheField(t *testing.T) {
	t.Parallel()
	huge := "1" + strings.Repeat("0", 400)
	for _, v := range []string{huge, huge + ".5"} {
		until, ok := Parse(header("RateLimit", `"a";r=0;t=5, "b";r=1;t=`+v), now).Exhausted(now)
		require.True(t, ok, "a t of %d characters", len(v))
		require.Equal(t, now.Add(5*time.Second), until)
	}
}

func TestParseReadsCanonicalNamesOnly(t *testing.T) {
	t.Parallel()
	h := http.Header{"x-ratelimit-remaining-requests": {"0"}} // set by hand, not by Set or the client
	require.Empty(t, h.Get("x-ratelimit-remaining-requests"), "http.Header.Get does not see it either")
	require.True(t, Parse(h, now).IsZero())
}

func TestTripleNamesAreCanonical(t *testing.T) {
	t.Parallel()
	for _, f := range triples {
		for _, k := range []string{f.limit, f.remaining, f.rset} {
			require.Equal(t, textproto.CanonicalMIMEHeaderKey(k), k)
		}
	}
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		header    http.Header
		until     time.Time
		exhausted bool
	}{
		{"nothing", header(), time.Time{}, false},
		{"remaining", header("x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "1s"), time.Time{}, false},
		{"nothing left", header("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "300ms"), in(300 * time.Millisecond), true},
		{"nothing left, no reset", header("x-ratelimit-remaining-requests", "0"), time.Time{}, false},
		{"nothing left, reset passed", header("anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2026-11-22T11:00:00Z"), time.Time{}, false},
		{"latest of several", header(
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2s",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "5s",
			"RateLimit", `"a";r=0;t=3, "b";r=1;t=60`), in(5 * time.Second), true},
		{"remaining above limit", header("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "20", "X-RateLimit-Reset", "5"), time.Time{}, false},
		{"concurrent requests", header("RateLimit", `"c";r=0;t=30`, "RateLimit-Policy", `"c";q=8;qu="concurrent-requests"`), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			until, ok := Parse(tt.header, now).Exhausted(now)
			require.Equal(t, tt.exhausted, ok)
			require.Equal(t, tt.until, until)
		})
	}
}

func TestSourceString(t *testing.T) {
	t.Parallel()
	for s, want := range map[Source]string{IETF: "ietf", IETFLegacy: "ietf-legacy", XRateLimit: "x-ratelimit",
		OpenAI: "openai", Anthropic: "anthropic", 0: "unknown"} {
		require.Equal(t, want, s.String())
	}
}

// TestParseReadsAtMostMaxMembers checks that thousands of IETF policies,
// which the join by name would make quadratic, are read only up to
// maxMembers of each field.
func TestParseReadsAtMostMaxMembers(t *testing.T) {
	t.Parallel()
	var limits, policies []string
	for i := range 4000 {
		limits = append(limits, fmt.Sprintf("l%d;r=1", i))
		policies = append(policies, fmt.Sprintf("p%d;q=1", i))
	}
	info := Parse(header("RateLimit", strings.Join(limits, ", "), "RateLimit-Policy", strings.Join(policies, ", ")), now)
	require.Len(t, info.Policies, 2*maxMembers, "the first %d of each field", maxMembers)
	require.Equal(t, "l0", info.Policies[0].Name)
	require.Equal(t, "p0", info.Policies[maxMembers].Name)
}

// TestParseCostOfAHugeFieldIsThatOfMaxMembers: the members past
// maxMembers were parsed, allocating, and then dropped: a 1 MB RateLimit
// field cost 200,000 allocations and 45 MB on every response. They are
// not read now: the field costs what its first maxMembers cost.
func TestParseCostOfAHugeFieldIsThatOfMaxMembers(t *testing.T) {
	field := func(members int) http.Header {
		return header("RateLimit", strings.TrimSuffix(strings.Repeat(`a;r=1;t=1, `, members), ", "),
			"RateLimit-Policy", strings.TrimSuffix(strings.Repeat(`a;q=10;w=60, `, members), ", "))
	}
	small, huge := field(maxMembers), field(100_000)
	want := testing.AllocsPerRun(10, func() { Parse(small, now) })
	got := testing.AllocsPerRun(10, func() { Parse(huge, now) })
	require.Equal(t, want, got, "allocations for %d members and for 100,000", maxMembers)
	require.Equal(t, Parse(small, now), Parse(huge, now))
}
