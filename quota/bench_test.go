package quota

import (
	"net/http"
	"testing"
)

// plainHeader is a typical JSON API response's header without quota
// headers.
func plainHeader() http.Header {
	return header(
		"Content-Type", "application/json",
		"Date", "Sun, 22 Nov 2026 12:00:00 GMT",
		"Server", "cloudflare",
		"Cf-Ray", "8f1d2c3b4a5e6f70-AMS",
		"Openai-Processing-Ms", "412",
		"Openai-Version", "2020-10-01",
		"X-Request-Id", "req_0123456789abcdef",
		"Strict-Transport-Security", "max-age=31536000; includeSubDomains; preload",
		"Alt-Svc", `h3=":443"; ma=86400`,
		"Vary", "Origin",
	)
}

func BenchmarkParse(b *testing.B) {
	with := func(kv ...string) http.Header {
		h := plainHeader()
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"none", plainHeader()},
		{"openai", with(
			"x-ratelimit-limit-requests", "10000", "x-ratelimit-remaining-requests", "9999", "x-ratelimit-reset-requests", "6ms",
			"x-ratelimit-limit-tokens", "2000000", "x-ratelimit-remaining-tokens", "1999750", "x-ratelimit-reset-tokens", "7ms")},
		{"anthropic", with(
			"anthropic-ratelimit-requests-limit", "4000", "anthropic-ratelimit-requests-remaining", "3999",
			"anthropic-ratelimit-requests-reset", "2026-11-22T12:00:01Z",
			"anthropic-ratelimit-input-tokens-limit", "400000", "anthropic-ratelimit-input-tokens-remaining", "399000",
			"anthropic-ratelimit-input-tokens-reset", "2026-11-22T12:00:01Z",
			"anthropic-ratelimit-output-tokens-limit", "80000", "anthropic-ratelimit-output-tokens-remaining", "80000",
			"anthropic-ratelimit-output-tokens-reset", "2026-11-22T12:00:00Z",
			"anthropic-ratelimit-tokens-limit", "480000", "anthropic-ratelimit-tokens-remaining", "479000",
			"anthropic-ratelimit-tokens-reset", "2026-11-22T12:00:01Z")},
		{"ietf", with("RateLimit-Policy", `"permin";q=50;w=60, "perhr";q=1000;w=3600`, "RateLimit", `"permin";r=49;t=59`)},
		{"retry-after", with("Retry-After", "2")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Parse(bc.h, now)
			}
		})
	}
}

func TestParseWithoutQuotaHeadersDoesNotAllocate(t *testing.T) {
	h := plainHeader()
	if n := testing.AllocsPerRun(100, func() { _ = Parse(h, now) }); n != 0 {
		t.Fatalf("Parse allocated %v times for a response without quota headers", n)
	}
}
