package quota

import "time"

// Caps on what Parse returns; see the package documentation.
const (
	// MaxRetryAfter is the longest Info.RetryAfter: 10 minutes, so that a
	// garbled header cannot stop a client for days.
	MaxRetryAfter = 10 * time.Minute
	// MaxReset is how far off a Policy's Reset, and how long its Window,
	// may be: 31 days, which covers monthly quotas.
	MaxReset = 31 * 24 * time.Hour
	// MaxCount is the largest Limit or Remaining: 999,999,999,999,999, the
	// largest Structured Field Integer.
	MaxCount = 999_999_999_999_999
)

// Source names the header form a Policy was read from.
type Source uint8

// The header forms Parse reads; see the package documentation.
const (
	IETF       Source = iota + 1 // RateLimit and RateLimit-Policy
	IETFLegacy                   // RateLimit-Limit, -Remaining, -Reset
	XRateLimit                   // X-RateLimit-* or X-Rate-Limit-*
	OpenAI                       // x-ratelimit-*-requests, x-ratelimit-*-tokens
	Anthropic                    // anthropic-ratelimit-*
)

// String returns the source's name: "ietf", "ietf-legacy", "x-ratelimit",
// "openai" or "anthropic".
func (s Source) String() string {
	switch s {
	case IETF:
		return "ietf"
	case IETFLegacy:
		return "ietf-legacy"
	case XRateLimit:
		return "x-ratelimit"
	case OpenAI:
		return "openai"
	case Anthropic:
		return "anthropic"
	}
	return "unknown"
}

// Unit is what a policy counts. The IETF fields may name other units (the
// draft's "content-bytes" and "concurrent-requests"); Parse keeps them as
// given.
type Unit string

// The units of the providers' own headers, and the IETF default.
const (
	Requests     Unit = "requests"
	Tokens       Unit = "tokens"
	InputTokens  Unit = "input-tokens"
	OutputTokens Unit = "output-tokens"
	// ConcurrentRequests is the IETF unit of a limit on requests in
	// flight rather than per window.
	ConcurrentRequests Unit = "concurrent-requests"
)

// Policy is one limit a response reports: for instance OpenAI's requests
// per minute, Anthropic's input tokens per minute, or one IETF quota
// policy. Fields the response leaves out, or garbles, are -1 (counts) or
// zero (times).
type Policy struct {
	Source Source
	// Unit is what the policy counts. It is empty when the header does not
	// say (RateLimit-Limit, X-RateLimit-*), and Requests for an IETF
	// policy that names no unit, the draft's default.
	Unit Unit
	// Name is the IETF policy's name ("default", "burst", ...); empty for
	// the other sources.
	Name string
	// Limit is the quota per window, at most MaxCount; -1 when not given.
	Limit int64
	// Remaining is what is left of the quota now, at most MaxCount; -1 when
	// not given. It may exceed Limit.
	Remaining int64
	// Reset is when the provider says the quota comes back (OpenAI and
	// Anthropic: in full; IETF: the end of the effective window), no
	// earlier than the time given to Parse and at most MaxReset after it;
	// zero when not given.
	Reset time.Time
	// Window is the policy's time window (IETF "w", or the window of a
	// RateLimit-Limit policy), at most MaxReset; 0 when not given.
	Window time.Duration
}

// Info is what one response's quota headers say. The zero Info says
// nothing: the response had none of the headers, or only garbled ones.
type Info struct {
	// At is the time given to Parse: the moment the values describe. Zero
	// for the zero Info.
	At time.Time
	// RetryAfter is how long the response asks clients to wait, from
	// retry-after-ms or Retry-After, between 0 and MaxRetryAfter. It is
	// meaningful only when HasRetryAfter is true.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Policies are the limits the response reports, in a fixed order: IETF,
	// IETFLegacy, XRateLimit, OpenAI (requests, tokens), Anthropic
	// (requests, tokens, input tokens, output tokens); IETF policies in the
	// order of the RateLimit field, then those only RateLimit-Policy names.
	Policies []Policy
}

// IsZero reports whether i says nothing.
func (i Info) IsZero() bool { return !i.HasRetryAfter && len(i.Policies) == 0 }

// Exhausted reports whether a policy says nothing is left until a reset
// after now (Remaining 0, Reset after now), and returns the latest such
// reset: the time until which the provider says no further request fits.
// A policy with nothing left and no reset, or a reset already passed, does
// not count, nor does a policy of concurrent requests (the IETF unit
// "concurrent-requests"), which frees up as requests end, not at a reset.
func (i Info) Exhausted(now time.Time) (until time.Time, ok bool) {
	for _, p := range i.Policies {
		if p.Unit == ConcurrentRequests {
			continue
		}
		if p.Remaining == 0 && p.Reset.After(now) && p.Reset.After(until) {
			until, ok = p.Reset, true
		}
	}
	return until, ok
}
