package fleet

import (
	"context"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

type contextKey int

const (
	priorityKey contextKey = iota
	weightKey
	tokensKey
	ticketKey // *debit: a request's debit from the rate shares (Transport)
)

// WithPriority returns a copy of ctx that carries priority p, from 0 (the
// lowest) to 255 (the highest), for Node.Acquire and Transport. Without it
// a request has adaptive.DefaultPriority (128). Node.AcquireRequest and
// Node.TryAcquireRequest take the priority in their adaptive.Request
// instead.
func WithPriority(ctx context.Context, p uint8) context.Context {
	return context.WithValue(ctx, priorityKey, p)
}

// WithWeight returns a copy of ctx that carries weight w for Node.Acquire
// and Transport: the units of the node's limit the request holds while it
// is in flight. Without it a request weighs 1. A w below 1 makes the
// admission fail with an error wrapping adaptive.ErrInvalidRequest, and a
// w above the node's Config.Limiter.MaxLimit or the key's L_global with
// one wrapping adaptive.ErrTooHeavy, at once.
//
// Within those bounds a request is admitted however low the node's
// inferred limit has fallen: one heavier than it runs alone once nothing
// else is in flight on the node, within the node's share (see
// adaptive.Limiter.AcquireRequest), and one heavier than the node's share
// waits, counted in the node's demand, for the share to grow, without
// holding back the lighter requests the share holds. L_global itself
// grows only with the load the fleet admits, so a weight above it is
// refused rather than queued: a fleet whose requests all weighed that much
// would never bring the load. The error names the fix: keep L_global at
// least the heaviest weight N with 'fleetctl limits set KEY --min N', or,
// on a new key, start it there with a Config.Limiter.InitialLimit of at
// least N on every node. On a new key L_global starts at the nodes'
// initial limits (their lower median); a node that joins a key whose
// L_global has grown starts at that L_global, before Start returns, so it
// never admits with only its own InitialLimit. With the default
// InitialLimit of 20 and no minimum on the key, a weight of 50 fails with
// ErrTooHeavy on a new key until lighter requests have raised L_global
// past 50 — for good if there are none. An operator's maximum on the key
// below the heaviest weight has the same effect.
//
// The fleet counts everything in weight units: a node's in-flight and
// demand, its peers' in-flight, L_global and the shares. So shares follow
// weighted demand, and Σ weight in flight ≤ L_global is the promise.
//
// Estimating an LLM request's weight: a weight is the part of the
// upstream's concurrency the request occupies. A provider whose quota is
// a number of concurrent requests wants weight 1 for all. One whose
// capacity goes by tokens in flight wants a weight that grows with the
// request's tokens, in a unit chosen so that an ordinary request weighs
// about 1:
//
//	weight = max(1, ceil((promptTokens + maxTokens) / unit))
//
// where promptTokens is counted with the model's tokenizer before sending
// (about len(prompt)/4 for English text), maxTokens is the completion cap
// (the request's max_tokens, or the model's default), and unit is the
// tokens of a typical request, say 2,000: a streamed 100k-token completion
// then holds 50 units for its whole length, as it does at the provider,
// and a 500-token one holds 1. The limit is inferred in the same units, so
// the unit only has to stay the same for every node of a key; too small a
// unit makes weights large against the limit, too large a one hides the
// difference between requests.
func WithWeight(ctx context.Context, w int) context.Context {
	return context.WithValue(ctx, weightKey, w)
}

// RequestFrom returns the adaptive.Request that ctx describes: the priority
// and weight given to WithPriority and WithWeight, or
// adaptive.DefaultPriority and 1.
func RequestFrom(ctx context.Context) adaptive.Request {
	r := adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1}
	if p, ok := ctx.Value(priorityKey).(uint8); ok {
		r.Priority = p
	}
	if w, ok := ctx.Value(weightKey).(int); ok {
		r.Weight = w
	}
	return r
}

// PriorityStats returns, for every priority that has seen a request, the
// local limiter's counters (adaptive.Limiter.PriorityStats) as the node's
// callers saw them: Admitted and AdmittedWeight count the leases the node
// handed out, past its limiter and the key's rate; Refused adds the
// node's own refusals — before the limiter (not started, stopped,
// evicted, fenced, or heavier than L_global) and at the key's rate after
// the limiter took a slot (the rate share spent for TryAcquireRequest,
// the wait for it past MaxRequestDuration, or the node stopped or
// evicted meanwhile) — and Cancelled the calls whose context ended while
// they waited for the rate. Each call counts once. In increasing
// priority; it allocates the returned slice. Safe for concurrent use.
func (n *Node) PriorityStats() []adaptive.PriorityStats {
	local := n.lim.PriorityStats()
	out := make([]adaptive.PriorityStats, 0, len(local))
	next := 0
	m := n.metrics
	for p := range m.refused {
		s := adaptive.PriorityStats{Priority: uint8(p)}
		seen := false
		if next < len(local) && int(local[next].Priority) == p {
			s, seen = local[next], true
			next++
		}
		s.Admitted, s.AdmittedWeight = m.admitted[p].Load(), m.admittedWeight[p].Load()
		s.Refused += m.refused[p].Load()
		s.Cancelled += m.rateCancelled[p].Load()
		if seen || s.Admitted > 0 || s.Refused > 0 || s.Cancelled > 0 {
			out = append(out, s)
		}
	}
	return out
}
