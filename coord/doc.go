// Package coord is fleetlimit's coordinator: it folds every node's report
// into one ceiling for the key, L_global, and hands each node a share of it
// such that the fleet never has more than L_global requests in flight.
//
// # Pieces
//
// The protocol (DESIGN.md §4) is a pure function, [State.Heartbeat]: the
// key's rows, one report and the time in, the new rows and the node's
// [Grant] out. It reads no clock and does no I/O. Two coordinators run it:
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
// A row is live while now < lease_expires_at; an expired row is treated as
// absent. A report whose Seq is not newer than its live row's is answered
// from the stored row (Grant.Stale) and changes nothing. A live row of
// another instance refuses the report (ErrNodeIDInUse). Otherwise the row
// takes the report, its lease becomes now + LeaseTTL, and its grant is
// acknowledged when AppliedGen ≥ GrantedGen. Expired peers are deleted.
// L_global is the lower median (or the minimum) of live, non-evicted
// l_local values, clamped by the operator's override. The node's target is
// its demand-proportional part of L_global with a floor of 1 (0 when
// draining), and its share is that target capped by what the peers'
// reserves leave: share = max(0, min(target, L_global − Σ reserve)). A
// changed share is issued under a new generation. All arithmetic is integer
// with floor division, so SQL and Go agree bit for bit.
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
//     never applies an older one, so after the acknowledgement only Share
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
// Invariant: Σ reserve over the live rows ≤ L_global (for a fixed
// L_global). A heartbeat changes only its own row: the new Inflight is at
// most the old reserve (by the lemma, applied to the sample), an
// acknowledgement only lowers UnackedHigh, and the new share is at most
// L_global − Σ other reserves. So the new reserve is at most
// max(old reserve, L_global − Σ other reserves), which is L_global − Σ
// other reserves by the invariant. Deleting rows only lowers the sum.
// Together: Σ in-flight ≤ Σ reserve ≤ L_global, at every instant, however
// replies lag. Reserving only the acknowledged share, or forgetting
// Inflight, breaks this; the exhaustive test finds the counterexamples.
//
// When L_global falls, the invariant is restored as nodes heartbeat:
// shares shrink, acknowledgements release the larger grants, and in-flight
// above the new shares drains.
//
// # Leases, eviction and time
//
// An expired row's reserve is freed. That is safe only because the node
// fences itself first: its deadline is its send time plus the returned
// LeaseRemaining minus a safety margin, on its own monotonic clock, and
// every expiry decision uses a time no later than the real time of the
// decision. In Postgres that time is now(), the start of the heartbeat's
// transaction; tests may pass their own (WithClock). Memory uses its
// injected clock. Both keep microseconds.
//
// An evicted row is frozen: its heartbeats are answered with StatusEvicted
// and share 0 but neither renew its lease nor change it, so its reserve is
// held until the lease runs out, never freed earlier; then it is deleted
// like any expired row, and the same process may join again afresh. A
// draining row keeps heartbeating normally with a share of 0. A fresh row
// (a join, or a takeover of an expired row) always gets a new generation,
// so its first grant is newer than any grant the node still holds.
//
// # Cost
//
// Heartbeats on one key serialize on the key's row lock, which Postgres
// holds until the commit's WAL flush: a key's throughput is bounded by the
// function's work (one scan of the key's rows, one HOT update of the
// node's row) plus the commit latency. Running the heartbeat with
// synchronous_commit off would shorten that, but a crash could then forget
// grants that nodes already enforce, which breaks the bound; it is not
// done. Different keys proceed in parallel. BenchmarkHeartbeat (in
// test/coordtest) measures it.
package coord
