package coord

import (
	"context"
	"time"
)

// Report is what a node sends with each heartbeat. A node samples it
// atomically, so its fields describe one instant.
type Report struct {
	// Key names the shared quota, e.g. "openai:gpt-4o".
	Key string
	// NodeID names the node within the key; it is stable across restarts
	// (a pod name, a hostname).
	NodeID string
	// Instance is a token unique to one run of the node process. A live
	// node_id held by another instance is refused with ErrNodeIDInUse.
	Instance string
	// Seq increases with every report of one instance. A report whose Seq is
	// not newer than the stored one, or one of an instance that has left
	// (Leave), is ignored (Grant.Stale).
	Seq int64
	// LLocal is the node's own inference of the whole backend's capacity.
	LLocal int
	// Inflight is the number of requests the node has in flight now.
	Inflight int
	// Demand is in-flight plus queued: what the node would use if allowed.
	Demand int
	// Epoch and AppliedGen identify the newest grant the node has applied
	// (Grant.Epoch and Grant.Generation); both are 0 before its first grant.
	Epoch      int64
	AppliedGen int64
	// LeaseTTL is how long the coordinator keeps the node alive without a
	// heartbeat. The lease is measured on the database's clock. It must lie
	// in [MinLeaseTTL, MaxLeaseTTL] and is kept in whole microseconds. Each
	// report sets the lease anew from its own LeaseTTL (and the hold from
	// MaxRequestDuration), so an instance keeps both the same from report to
	// report, as a fleet node does: a shorter one would end the row's lease
	// or hold before a deadline an earlier grant gave the node, under which
	// it may still admit.
	LeaseTTL time.Duration
	// MaxRequestDuration is the longest any request the node admits may
	// run, from its admission until it has really ended at the upstream.
	// The coordinator keeps reserving the node's capacity for this long
	// after its lease ends, so requests that outlive a lapsed lease stay
	// counted. It must lie in [0, MaxRequestBound] and is kept in whole
	// microseconds.
	MaxRequestDuration time.Duration
	// Labels are free-form key/value pairs shown to operators: at most
	// MaxLabels, names of 1..MaxNameBytes bytes, values of at most
	// MaxNameBytes bytes.
	Labels map[string]string
	// RateLocal is the node's own inference of the key's whole rate per
	// minute, on each dimension: what it learned from the 429s it saw (0:
	// it learns none). It plays the part l_local plays for concurrency.
	RateLocal Rates
	// RateDemand is what the node would send per minute if allowed, on
	// each dimension: the rate share it asks for.
	RateDemand Rates
	// RateApplied is the rate share the node's pacer enforces now (0
	// before its first rate share). Only learning mode reads it, for a
	// lease (see docs/design.md §10).
	RateApplied Rates
	// RateUsed is what the node sent in the minute before the report, on
	// each dimension: requests, and tokens as debited, corrected when
	// settled. The coordinator stores it for operators and grants nothing
	// by it.
	RateUsed Rates
}

// Status is a node's operator state as the coordinator sees it.
type Status string

// The node statuses.
const (
	StatusActive   Status = "active"
	StatusDraining Status = "draining"
	StatusEvicted  Status = "evicted"
	// StatusExpired is a row whose lease ran out: it is no member, and its
	// reserve is held until its request bound has passed. Its instance
	// becomes a member again by heartbeating.
	StatusExpired Status = "expired"
	// StatusDeparted is a row whose instance left with requests in flight: it
	// is no member, and its reserve is held until they must have ended.
	StatusDeparted Status = "departed"
)

// Grant is the coordinator's reply to a heartbeat.
type Grant struct {
	// Share is how many requests the node may have in flight.
	Share int
	// LGlobal is the fleet's ceiling for the key.
	LGlobal int
	// Epoch and Generation identify this grant; the node reports them back
	// as Report.Epoch and Report.AppliedGen once its limiter enforces
	// Share. The epoch changes when the coordinator finds that its database
	// lost state (see the package documentation); a grant of a newer epoch
	// replaces any grant of an older one, whatever their generations.
	Epoch      int64
	Generation int64
	// LeaseRemaining is how long the node's lease runs from when the
	// coordinator handled the report.
	LeaseRemaining time.Duration
	// Status is the node's operator state.
	Status Status
	// Learning is true while the key is in learning mode: its database lost
	// state, and until every lease and request of before the loss has run
	// out no node is granted more than it proves it holds.
	Learning bool
	// PeerInflight is the sum of the in-flight last reported by the key's
	// other rows whose capacity is still reserved (live or held).
	PeerInflight int
	// LiveNodes counts the key's live members, this one included: rows
	// whose lease runs, neither evicted nor departed.
	LiveNodes int
	// Waiting counts the key's other live members that want capacity
	// (demand > 0 at their last report, not draining) and hold a share of
	// 0, when more members want capacity than L_global holds (0
	// otherwise): the floors of 1 then add up to more than L_global, and
	// a node whose share is 0 stays so until a holder's demand ends. A
	// holder that sees members waiting can take turns with them (the
	// fleet node does, see fleet.Node). While every floor fits, a member
	// granted 0 gets its floor once the reserves it waits for drain, and
	// is not counted.
	Waiting int
	// Stale is true when the report was ignored because its Seq was not newer
	// than the stored one, or because its instance has left (Status
	// StatusDeparted); the other fields then describe the stored state.
	Stale bool
	// Rate is the key's rate per minute on each dimension; 0 means the key
	// has none there, and the node does not pace that dimension.
	Rate Rates
	// RateShare is the node's share of Rate, per minute, on each dimension
	// where Rate is not 0. Like Share, it is part of the grant the node
	// acknowledges with Generation.
	RateShare Rates
}

// Coordinator folds the fleet's reports into grants. Implementations are
// safe for concurrent use, and their calls return soon after ctx ends: a
// fleet node's Start and Stop are bounded by their contexts only as far
// as the calls they wait for are (Postgres's return within a second of
// ctx's end; Memory's never block). Calls on one node come one at a time,
// and an implementation answers each with the grant its report earned
// (a node ignores a grant of an earlier generation of the epoch it
// applied last).
type Coordinator interface {
	// Heartbeat records r, renews the node's lease and returns its grant.
	// It returns an error wrapping ErrInvalidReport for a report out of
	// bounds (see Report.Validate) and ErrNodeIDInUse when a live row of
	// another instance holds the node id; nothing is written then.
	Heartbeat(ctx context.Context, r Report) (Grant, error)
	// Leave ends the instance's membership: it is what a graceful
	// shutdown calls once the node admits nothing more. The row reserves
	// d.Inflight until d.Hold has passed — nothing, with nothing in flight,
	// so its capacity is free at once — and answers later reports of the
	// instance as stale (see State.Leave). It returns ErrInvalidReport,
	// ErrUnknownKey, or ErrUnknownNode when the key has no row of that
	// instance.
	Leave(ctx context.Context, d Departure) error
}

// Departure is a node's last word, sent by Leave.
type Departure struct {
	Key, NodeID, Instance string
	// Inflight is how many requests the node still has in flight; it
	// admits no more. Must lie in [0, MaxCount].
	Inflight int
	// Hold is how long those requests may still run; the coordinator
	// reserves Inflight until then. Must lie in [0, MaxRequestBound];
	// ignored when Inflight is 0.
	Hold time.Duration
}
