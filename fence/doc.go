// Package fence is a node's lease clock: it decides, on the node's own
// monotonic clock, when the node must stop admitting work because the
// coordinator may be about to hand its capacity to other nodes.
//
// The coordinator sets lease expiry with the database's clock and replies with
// the lease *remaining*, never a timestamp. A node that sent its heartbeat at
// sendTime (its own clock) knows the database renewed the lease no earlier than
// sendTime, so the lease cannot end before sendTime + remaining. The fence
// deadline is
//
//	fenceDeadline = sendTime + leaseRemaining − SafetyMargin
//
// measured on the node's monotonic clock, so any offset between the node's and
// the database's wall clocks does not matter. Past the deadline the node is
// fenced: its ceiling is 0 until a grant renews the lease.
//
// # Choosing the safety margin
//
// Fencing stops admission; it does not cancel what is already in flight.
// The coordinator keeps a node's reserve until its lease end plus the
// node's request bound, by which every request admitted before the fence
// has ended. The margin must cover the drift between the node's and the
// database's clock *rates* over one lease (at 100 parts per million,
// 0.2 ms for a 2 s lease); a fleet node pads the bound it asks the database
// to hold by 0.1 %, which covers the drift over the bound. The margin
// must stay below the lease TTL, or the node fences as soon as it renews. A lease
// whose remaining time does not exceed the margin leaves the node fenced.
//
// The deadline only helps if admission checks it: a node passes it to its
// limiter with the share (adaptive.Limiter.SetCeilingUntil), which compares
// it with the clock at every admission, so a process whose timers run late
// — frozen, stalled — admits nothing on an expired lease.
//
// # Evictions
//
// An operator can evict a node. The coordinator then reports the node as
// evicted; the node calls [Fence.Evict], which fences it for good: no later
// renewal un-fences an evicted node.
package fence
