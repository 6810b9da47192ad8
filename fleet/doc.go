// Package fleet is a fleetlimit node: one process's member of a fleet that
// shares an upstream's capacity (an LLM provider's quota, a partner API)
// through Postgres.
//
// A Node is a local adaptive limiter (package adaptive) whose ceiling is the
// share of the key's global limit that the coordinator (package coord)
// grants it, renewed by heartbeats and fenced (package fence) before its
// lease could run out; a share that rises is taken up over a round trip,
// one that falls at once (docs/design.md §4). Wrap outgoing calls with
// Node.Acquire, or use Node.Transport as an http.RoundTripper.
//
// The promise: the nodes on a key never have more requests in flight at the
// upstream than the key's global limit, counted from admission until each
// request has really ended — through shutdowns, streams, frozen processes,
// partitions, evictions and database failovers. It rests on every request
// ending within Config.MaxRequestDuration of its admission: run requests
// with Lease.Context (Transport does), which carries that deadline.
//
// Life of a node:
//
//	node, err := fleet.New(pool, fleet.Config{Key: "openai:gpt-4o"})
//	...
//	if err := node.Start(appCtx); err != nil { ... } // appCtx bounds the start only
//	defer node.Stop(shutdownCtx)                      // drains, then leaves
//
// Stop keeps heartbeating while the requests in flight finish, then leaves
// so the node's capacity is free at once; when shutdownCtx ends first, or
// MaxRequestDuration passes (a slot never freed), the node leaves with
// those requests reserved for MaxRequestDuration and Stop says so. An operator may drain a node id (its share drops to 0 until
// undrained, across restarts) or evict it (every instance of the node id
// then fences for good, drains and leaves; a new process with the same
// node id joins at once).
//
// Requests may carry a priority and a weight (WithPriority, WithWeight),
// which Node.Acquire and Transport read from the request's context;
// Node.AcquireRequest and Node.TryAcquireRequest take them as an
// adaptive.Request. The node's limiter admits waiters by weighted fair
// queueing and bounds the sum of the weights in flight, and the fleet
// counts in-flight, demand, L_global and shares in weight units (WithWeight
// says how to weigh an LLM request, and how to keep L_global at least the
// heaviest weight). Without them a request weighs 1
// at adaptive.DefaultPriority. Node.PriorityStats counts, per priority,
// what became of the requests, the node's own refusals included.
//
// The protocol, and the argument for each of its rules, is in the
// repository's design document, docs/design.md. All Node methods are safe
// for concurrent use.
package fleet
