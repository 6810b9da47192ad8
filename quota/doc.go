// Package quota reads the quota headers an HTTP API sends with its
// responses: how much of a rate limit is left, when it comes back, and how
// long to wait before asking again. Parse reads them all into one shape,
// Info, whatever form the provider uses:
//
//   - The IETF fields of draft-ietf-httpapi-ratelimit-headers (draft 11):
//     RateLimit, a Structured Field list of service limits
//     ("default";r=REMAINING;t=SECONDS), and RateLimit-Policy, a list of quota
//     policies ("default";q=QUOTA;w=SECONDS;qu="requests"), joined by policy
//     name; the first 16 members of each field are read. Source IETF.
//   - The three fields of the draft's earlier versions (00 to 06),
//     RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset. Source
//     IETFLegacy.
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, or
//     their X-Rate-Limit-* spelling. Source XRateLimit.
//   - OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}, whose
//     reset is a duration such as "1s", "6m0s", "20ms" or "1h2m3.5s".
//     Source OpenAI.
//   - Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-{limit,remaining,reset}, whose reset is an RFC 3339
//     time. Source Anthropic.
//   - Retry-After (delay-seconds, as a decimal number that may carry a
//     fraction or an exponent, or an HTTP date) and retry-after-ms (milliseconds, as some LLM providers send);
//     retry-after-ms wins when both are valid.
//
// A reset given in seconds (RateLimit-Reset, X-RateLimit-Reset) of 10⁹ or
// more is read as a Unix time, as GitHub and others send it, rather than as
// a delay of more than 31 years; one of 10¹² or more as a Unix time in
// milliseconds, as some providers send it, rather than a time in the year
// 33658 or later.
//
// The Dictionary form of the draft's version 07 (RateLimit: limit=10,
// remaining=1, reset=7) is not read, nor are headers that put the window
// in their name (X-RateLimit-Limit-Minute).
//
// # Bad values
//
// Providers make mistakes, and headers pass through proxies. Every value is
// read on its own, and a value that is missing, negative, not a number, or
// otherwise garbled is left out without affecting the others: a count is
// then -1, a time zero. An IETF field that is not a valid Structured Field
// list is ignored whole, as the draft requires, and so is one member of
// it without a valid required parameter (RateLimit's r, RateLimit-Policy's
// q) or name: a "burst";r=-1;t=12 member gives no policy, not one with a
// reset but no remaining count. Only a field's first 16 members are read
// (and checked), so that a field of thousands costs no more. A value too
// large is capped
// rather than refused: a count larger than MaxCount is MaxCount, a
// Retry-After longer than MaxRetryAfter is MaxRetryAfter, and a reset or a
// window further off than MaxReset is MaxReset away; a reset already passed
// is now. Parse never panics and never returns a negative duration or a
// reset before now.
//
// Providers do not promise that Remaining ≤ Limit (a limit can be lowered
// mid-window, and a token count can be debited after the fact), and
// neither does Parse.
//
// # Time
//
// Parse reads no clock: the caller passes the time the response arrived,
// and every delay is turned into a time from it. A time the provider sends
// (an HTTP date, an RFC 3339 reset, a Unix time) is compared with it by the
// wall clock.
//
// # Cost
//
// A response with none of these headers costs Parse one pass over its
// header names and no allocation: 0.2–0.55 µs for a response with ten
// other headers, and 1.5–3.5 µs with 2 allocations for one that adds
// OpenAI's six (go test -run '^$' -bench Parse -benchmem -count 6 ./quota,
// on a 2-core AMD EPYC shared with other work).
//
// Parse and the methods of Info are safe for concurrent use; Parse keeps
// nothing between calls.
//
// How a fleet node acts on them is in the repository's design document,
// docs/design.md §3.
package quota
