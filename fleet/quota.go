package fleet

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/fleetlimit/fleetlimit/quota"
)

// Quota returns what the quota headers of the latest response through the
// node's Transport that carried any said (see package quota), or the zero
// Info if none has yet: the provider's limits and what is left of them, for
// reading. The node acts on them only by pausing (see Transport). It
// returns a copy and is safe for concurrent use.
func (n *Node) Quota() quota.Info {
	info := n.metrics.quota.Load()
	if info == nil {
		return quota.Info{}
	}
	out := *info
	out.Policies = slices.Clone(info.Policies)
	return out
}

// readQuota reads the quota headers of a response with the given status,
// received at now, keeps them for Quota, and pauses admission as they ask:
//
//   - A 429, 503 or 529 with a Retry-After (or retry-after-ms) that asks for a
//     wait pauses for that long; RFC 9110 and the IETF RateLimit draft give
//     it precedence over the quota fields.
//   - Otherwise, on any response — a Retry-After of 0 or a date already
//     past included, which says nothing of how long the quota stays empty —
//     a quota policy with nothing left and a reset to come pauses until
//     that reset, at most quota.MaxRetryAfter.
//
// A response without quota headers costs one pass over its header names.
func (n *Node) readQuota(h http.Header, status int, now time.Time) {
	info := quota.Parse(h, now)
	if info.IsZero() {
		return
	}
	n.metrics.quota.Store(&info)
	n.readRateQuota(info, now)
	if refusedStatus(status) && info.HasRetryAfter && info.RetryAfter > 0 {
		n.quotaPause(now, info.RetryAfter)
		return
	}
	if until, ok := info.Exhausted(now); ok {
		n.quotaPause(now, min(until.Sub(now), quota.MaxRetryAfter))
	}
}

// quotaPause pauses admission for d from now, as a response's headers
// asked (through Transport, or a Lease's Refuse or Unavailable), and
// counts a pause in the metrics when none they asked for is in effect at
// now: responses that arrive together, each asking for the same pause or
// a little more, are one pause.
func (n *Node) quotaPause(now time.Time, d time.Duration) {
	m := n.metrics
	m.quotaMu.Lock()
	if !now.Before(m.quotaPauseEnd) {
		m.quotaPaused.Add(1)
	}
	if end := now.Add(d); end.After(m.quotaPauseEnd) {
		m.quotaPauseEnd = end
	}
	m.quotaMu.Unlock()
	n.lim.RetryAfter(d)
	if d > 0 {
		// Requests waiting for the rate hold slots admitted before the
		// pause: they fail with it too (see waitRate), and send nothing.
		n.mu.Lock()
		end := n.endPausing
		n.pausing, n.endPausing = context.WithCancel(context.Background())
		n.mu.Unlock()
		end()
	}
}

// statusOverloaded is the status Anthropic's API answers when it is
// overloaded as a whole (overloaded_error), as another would answer 503.
const statusOverloaded = 529

// statusOriginTimeout is Cloudflare's "a timeout occurred": it waited for
// the origin, an LLM API behind it say, as long as it would.
const statusOriginTimeout = 524

// gatewayTimeout reports whether a response's status says that a gateway
// gave up waiting for the upstream behind it (504, or
// statusOriginTimeout), which may still be serving the request.
func gatewayTimeout(status int) bool {
	return status == http.StatusGatewayTimeout || status == statusOriginTimeout
}

// refusedStatus reports whether a response's status refuses the request for
// the upstream's load: 429, 503, or 529 (statusOverloaded).
func refusedStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == statusOverloaded
}
