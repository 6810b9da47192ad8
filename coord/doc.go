// Package coord is fleetlimit's coordinator: it folds every node's report
// into one ceiling for the key, L_global, and hands each node a share of it
// such that the fleet never has more than L_global requests in flight.
//
// # Pieces
//
// The protocol (docs/design.md in the repository) is a pure function,
// [State.Heartbeat]: the key's rows, one report and the time in, the new
// rows and the node's [Grant] out. It reads no clock and does no I/O. Two coordinators run it:
//
//   - [Postgres] calls fleetlimit.heartbeat, a plpgsql function (package
//     migrations) that is the same rules in SQL: one round trip, one
//     transaction, serialized per key by a FOR UPDATE lock on the key's row,
//     set-based over the node rows (one pass computes the peers' totals and
//     the median).
//   - [Memory] keeps each key's State in a map under a mutex.
//
// A conformance test drives both with the same random operations and
// requires identical grants, errors and tables at every step; an exhaustive
// test explores every interleaving of small fleets over a reordering, lossy
// network against the core.
//
// # The rules
//
// Rows are per instance of a node id. A member row is one whose lease runs
// (now < lease_expires_at) and whose instance was neither evicted nor
// departed; every row, member or not, reserves capacity until its
// hold_until: its lease end plus the request bound its reports carry, the
// time by which every request its instance may have admitted has ended. A
// report whose Seq is not newer than its row's, or of a departed row, is
// answered from the stored row (Grant.Stale) and changes nothing; an
// evicted row takes the report's counts but is never renewed or granted
// again; another instance's member row refuses the report
// (ErrNodeIDInUse). Otherwise the row takes the report, its lease becomes
// now + LeaseTTL and its hold the lease end + MaxRequestDuration, and its
// grant is acknowledged when the report applied it (same Epoch, AppliedGen
// ≥ GrantedGen). Rows whose hold has ended are deleted. L_global is the
// lower median (or the minimum) of the voting members' l_local values —
// members that, at their last report, held a share from before it or had
// requests in flight, the only ones measuring the upstream, or that voted
// before and still want capacity (not draining), waiting for a share they
// lost; L_global stays when none does — clamped by the operator's
// override. The node's target is a floor of 1 plus its
// demand-proportional part of the rest, split among the members with
// demand by largest remainder so that the targets add up to exactly
// max(n, L_global) (0 when draining or without demand), and its share is
// that target capped by what every other holding row's reserve leaves: share = max(0, min(target, L_global −
// Σ reserve)). A changed share is issued under a new generation. Every
// grant also counts the key's other members that want capacity (demand > 0
// at their last report, not draining) and hold a share of 0, while
// more members want capacity than L_global holds (Grant.Waiting). All
// arithmetic is integer, so SQL and Go agree bit for
// bit.
//
// # Why Σ in-flight ≤ L_global
//
// A node enforces the newest-generation grant it has received, admits only
// while its in-flight is below that share, and samples each report at one
// instant. Replies can be late, lost or reordered, so at any moment a node
// may be enforcing any grant issued to it that it has not yet reported
// replacing. The coordinator tracks, per node:
//
//   - Share: the newest grant;
//   - UnackedHigh: the largest share granted since the last heartbeat that
//     acknowledged the newest grant (AppliedGen ≥ GrantedGen), that
//     acknowledged share included. Once a node has applied generation g it
//     never applies an older one (fleet.Node ignores a grant of an earlier
//     generation of the epoch it applied last, should a Coordinator that
//     wraps this one replay or reorder replies), so after the
//     acknowledgement only Share
//     and later grants can ever be enforced; before it, any grant since the
//     previous acknowledgement can;
//   - Inflight: the in-flight count of its newest report.
//
// Lemma: a node's actual in-flight never exceeds its reserve,
// max(UnackedHigh, Share, Inflight). At the instant its newest report was
// sampled it had Inflight in flight; after that it admits only below a share
// it enforces, and every share it can enforce is ≤ UnackedHigh. So its
// in-flight stays ≤ max(Inflight, UnackedHigh), and requests above the
// share only drain.
//
// Invariant: Σ reserve over the holding rows ≤ L_global (for a fixed
// L_global). A heartbeat changes only its own row: the new Inflight is at
// most the old reserve (by the lemma, applied to the sample), an
// acknowledgement only lowers UnackedHigh, and the new share is at most
// L_global − Σ other reserves. So the new reserve is at most
// max(old reserve, L_global − Σ other reserves), which is L_global − Σ
// other reserves by the invariant. Deleting rows only lowers the sum, and
// a row is deleted only once its instance can have nothing in flight.
// Together: Σ in-flight ≤ Σ reserve ≤ L_global, at every instant, however
// replies lag. Reserving only the acknowledged share, or forgetting
// Inflight, breaks this; the exhaustive test finds the counterexamples.
//
// When L_global falls, the invariant is restored as nodes heartbeat:
// shares shrink, acknowledgements release the larger grants, and in-flight
// above the new shares drains.
//
// # Leases, holds, eviction and time
//
// A lease ending does not end the requests admitted under it, so an
// expired row's reserve is not freed at its lease end but at its
// hold_until. That is safe because a node fences itself first — its
// deadline is its send time plus the returned LeaseRemaining minus a
// margin, on its own monotonic clock, checked at every admission — and
// ends every request within its MaxRequestDuration. Every expiry decision
// uses a time no later than the real time of the decision: in Postgres
// now(), the start of the heartbeat's transaction (tests may pass their
// own, WithClock); in Memory its injected clock. Both keep microseconds.
//
// An evicted instance is fenced for good: its row reports its in-flight,
// keeps reserving until it acknowledges share 0 with nothing in flight or
// its hold ends, and then goes, the instance recorded in State.Evictions so
// that any later report of it is answered StatusEvicted. A new instance of
// the node id joins at once. A drain is a mark on the node id
// (State.Drains) and survives lapses and restarts until Undrain. A
// departure (Leave) with requests in flight keeps reserving them for the
// hold it names; a departed row stays until its old hold would have ended,
// so a late report of its instance is answered as stale.
//
// # Lost state
//
// Grants carry the key's Epoch. A change of the database's incarnation
// (State.Incarnate), or a report that proves the database forgot grants
// it issued, moves the epoch past every earlier one and starts learning
// mode: until the key's longest lease plus request bound (the reporting
// heartbeat's included) have passed, no node is granted more than the
// in-flight it reports or the share this epoch already granted it. The
// database keeps a record of its own (Database) that a loss restores with the key's rows: a key the loss took whole, or
// whose first heartbeats it took, takes the database's learning mode, and
// at a heartbeat for at least that report's lease plus request bound from
// the moment the database saw the change. docs/design.md §10 has the
// argument.
//
// # Cost
//
// Heartbeats on one key serialize on the key's row lock, which Postgres
// holds until the commit's WAL flush: a key's throughput is bounded by the
// function's work (one scan of the key's rows, one HOT update of the
// node's row) plus the commit latency. Running the heartbeat with
// synchronous_commit off would shorten that, but a crash could then forget
// grants that nodes already enforce, which breaks the bound: the function
// raises a session's off to local for its own transaction. Different keys proceed in parallel. BenchmarkHeartbeat (in
// test/coordtest) measures it.
package coord
