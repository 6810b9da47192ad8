package quota

import (
	"net/http"
	"strings"
	"time"
)

// Parse reads the quota headers of a response received at now; see the
// package documentation for the forms it knows and how it treats bad
// values. Header names are looked up in canonical form, as net/http stores
// them (http.Header.Get does the same). It returns the zero Info when h
// carries none of them, without allocating.
func Parse(h http.Header, now time.Time) Info {
	forms := scan(h)
	if forms == 0 {
		return Info{}
	}
	var info Info
	if forms&formRetryAfter != 0 {
		info.RetryAfter, info.HasRetryAfter = retryAfter(h, now)
	}
	if forms&formIETF != 0 {
		info.Policies = appendIETF(info.Policies, h, now)
	}
	for _, f := range triples {
		if forms&f.form != 0 {
			info.Policies = appendTriple(info.Policies, h, f, now)
		}
	}
	if info.IsZero() {
		return Info{}
	}
	info.At = now
	return info
}

// form is a bit set of the header forms a response carries.
type form uint8

const (
	formRetryAfter form = 1 << iota
	formIETF
	formIETFLegacy
	formXRateLimit
	formOpenAI
	formAnthropic
)

// scan returns the forms whose header names h holds: one pass over the
// names, which for a response without quota headers is all Parse does.
func scan(h http.Header) form {
	var forms form
	for k := range h {
		if len(k) < len("Ratelimit") {
			continue
		}
		switch k[0] {
		case 'R':
			switch {
			case k == "Retry-After" || k == "Retry-After-Ms":
				forms |= formRetryAfter
			case k == "Ratelimit" || k == "Ratelimit-Policy":
				forms |= formIETF
			case strings.HasPrefix(k, "Ratelimit-"):
				forms |= formIETFLegacy
			}
		case 'X':
			switch {
			case strings.HasPrefix(k, "X-Ratelimit-") && (strings.HasSuffix(k, "-Requests") || strings.HasSuffix(k, "-Tokens")):
				forms |= formOpenAI
			case strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "X-Rate-Limit-"):
				forms |= formXRateLimit
			}
		case 'A':
			if strings.HasPrefix(k, "Anthropic-Ratelimit-") {
				forms |= formAnthropic
			}
		}
	}
	return forms
}

// triple is one policy reported in three headers of their own: its limit,
// what remains, and when it resets.
type triple struct {
	form                   form
	source                 Source
	unit                   Unit
	limit, remaining, rset string
	reset                  func(v string, now time.Time) (time.Time, bool)
	window                 bool // limit is a Structured Field list that may carry ;w= (RateLimit-Limit)
}

// triples are the three-header forms, in the order Parse reports them. An
// X-RateLimit-* policy and an X-Rate-Limit-* one are the same policy: only
// the first present is read.
var triples = [...]triple{
	{formIETFLegacy, IETFLegacy, "", "Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", parseResetSeconds, true},
	{formXRateLimit, XRateLimit, "", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", parseResetSeconds, false},
	{formXRateLimit, XRateLimit, "", "X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset", parseResetSeconds, false},
	{formOpenAI, OpenAI, Requests, "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", parseResetSpan, false},
	{formOpenAI, OpenAI, Tokens, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", parseResetSpan, false},
	{formAnthropic, Anthropic, Requests, "Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset", parseResetTime, false},
	{formAnthropic, Anthropic, Tokens, "Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", parseResetTime, false},
	{formAnthropic, Anthropic, InputTokens, "Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", parseResetTime, false},
	{formAnthropic, Anthropic, OutputTokens, "Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", parseResetTime, false},
}

// appendTriple appends the policy the headers of f report, if any of its
// values is valid.
func appendTriple(dst []Policy, h http.Header, f triple, now time.Time) []Policy {
	if f.source == XRateLimit && len(dst) > 0 && dst[len(dst)-1].Source == XRateLimit {
		return dst // read under the other spelling
	}
	p := Policy{Source: f.source, Unit: f.unit, Limit: -1, Remaining: -1}
	if f.window {
		p.Limit, p.Window = parseLegacyLimit(first(h, f.limit))
	} else if n, ok := parseCount(first(h, f.limit)); ok {
		p.Limit = n
	}
	if n, ok := parseCount(first(h, f.remaining)); ok {
		p.Remaining = n
	}
	if v := first(h, f.rset); v != "" {
		p.Reset, _ = f.reset(v, now)
	}
	if p.Limit < 0 && p.Remaining < 0 && p.Reset.IsZero() {
		return dst
	}
	return append(dst, p)
}

// parseLegacyLimit reads RateLimit-Limit as its drafts wrote it: a plain
// Integer, or a List whose first member is the limit and whose other
// members are policies with a window ("10, 10;w=1, 1000;w=3600"). The
// window is that of the first member equal to the limit that has one. It
// returns -1 for a limit it cannot read.
func parseLegacyLimit(v string) (limit int64, window time.Duration) {
	members, ok := parseSFList(nil, v, maxMembers)
	if !ok || len(members) == 0 {
		return -1, 0
	}
	first, ok := count(members[0].val)
	if !ok {
		return -1, 0
	}
	for _, m := range members {
		if n, ok := count(m.val); ok && n == first {
			if w, ok := m.param("w"); ok {
				if d, ok := seconds(w, MaxReset); ok && d > 0 {
					return first, d
				}
			}
		}
	}
	return first, 0
}
