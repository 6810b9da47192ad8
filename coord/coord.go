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
	// not newer than the stored one is ignored (Grant.Stale).
	Seq int64
	// LLocal is the node's own inference of the whole backend's capacity.
	LLocal int
	// Inflight is the number of requests the node has in flight now.
	Inflight int
	// Demand is in-flight plus queued: what the node would use if allowed.
	Demand int
	// AppliedGen is the newest grant generation the node has applied.
	AppliedGen int64
	// LeaseTTL is how long the coordinator keeps the node alive without a
	// heartbeat. The lease is measured on the database's clock. It must lie
	// in [MinLeaseTTL, MaxLeaseTTL] and is kept in whole microseconds.
	LeaseTTL time.Duration
	// Labels are free-form key/value pairs shown to operators: at most
	// MaxLabels, names of 1..MaxNameBytes bytes, values of at most
	// MaxNameBytes bytes.
	Labels map[string]string
}

// Status is a node's operator state as the coordinator sees it.
type Status string

// The node statuses.
const (
	StatusActive   Status = "active"
	StatusDraining Status = "draining"
	StatusEvicted  Status = "evicted"
)

// Grant is the coordinator's reply to a heartbeat.
type Grant struct {
	// Share is how many requests the node may have in flight.
	Share int
	// LGlobal is the fleet's ceiling for the key.
	LGlobal int
	// Generation identifies this grant; the node reports it back as
	// Report.AppliedGen once its limiter enforces Share.
	Generation int64
	// LeaseRemaining is how long the node's lease runs from when the
	// coordinator handled the report.
	LeaseRemaining time.Duration
	// Status is the node's operator state.
	Status Status
	// PeerInflight is the sum of the other live nodes' last reported in-flight.
	PeerInflight int
	// LiveNodes counts the live nodes on the key, this one included.
	LiveNodes int
	// Stale is true when the report was ignored because its Seq was not newer
	// than the stored one; the other fields then describe the stored state.
	Stale bool
}

// Coordinator folds the fleet's reports into grants. Implementations are
// safe for concurrent use.
type Coordinator interface {
	// Heartbeat records r, renews the node's lease and returns its grant.
	// It returns an error wrapping ErrInvalidReport for a report out of
	// bounds (see Report.Validate) and ErrNodeIDInUse when a live row of
	// another instance holds the node id; nothing is written then.
	Heartbeat(ctx context.Context, r Report) (Grant, error)
	// Leave deletes the node's row at once, freeing its reserve; it is what a
	// graceful shutdown calls after its in-flight requests have finished.
	// It returns ErrUnknownKey, ErrUnknownNode, or ErrNodeIDInUse when the
	// row belongs to another instance.
	Leave(ctx context.Context, key, nodeID, instance string) error
}
