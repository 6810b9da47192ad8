package coord

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The exhaustive test explores every interleaving of a small fleet talking
// to the real core (State.heartbeat, Leave, Drain, Undrain, Evict) over a
// network that delays, reorders and loses messages, and checks in every
// reachable state:
//
//   - Σ in-flight ≤ the largest L_global the key held during the last
//     lease + request bound (docs/design.md §12, §16); without time, the
//     largest L_global so far. In-flight counts every request still running
//     at the upstream: the live instance's and a dead instance's;
//   - while L_global has never fallen: Σ share ≤ L_global, Σ reserve ≤
//     L_global and Σ in-flight ≤ L_global, over the rows still holding;
//   - every instance's in-flight ≤ its row's reserve (0 once the row has
//     gone), the lemma behind the bound (see doc.go), for the live
//     instance and its dead predecessor alike;
//   - no evicted instance is granted a share, and no drained node id is,
//     by a heartbeat or in its rows.
//
// Actions: a node sends a report (its seq, in-flight, demand, l_local and
// newest applied generation, sampled at once; demand is its in-flight plus
// 0 to demandSlack queued requests; l_local any of model.lLocals); the
// coordinator handles any pending report of any node (so reports are
// reordered, and an older one arriving after a newer one is stale) or
// loses it; a reply is delivered in any order or lost (with syncReplies:
// delivered the moment it is made, or lost); a node applies a reply's grant
// only when its generation is not older than the one it enforces, and its
// lease to its fence deadline, which only moves forward; it admits a
// request whenever its in-flight is below its enforced share and (with
// time) its fence deadline has not passed, and finishes one whenever it
// has any (arrivals are not modelled: a request is always waiting, which
// only adds behaviours); the operator changes L, drains, undrains and
// evicts.
//
// Time (model.time): the coordinator's clock advances in ticks; a row's
// lease end and hold, a node's fence deadline and a request's bound are
// kept relative to now, so a tick moves them all one tick closer and the
// state space stays finite. Every event between two ticks happens at the
// coordinator's now. A reply renews the fence to the lease end it names,
// counted from the heartbeat's handling: later than a node's real deadline
// (its send time plus the lease remaining minus a margin), so the model's
// nodes admit for longer than real ones. A tick may pass only when every
// request has ended before its bound: requests of one instance end within
// the bound of its newest admission. A node may leave (fleet.Node.Stop):
// with nothing in flight, or (leaveBusy) with its requests, reserved for
// the request bound; it then admits and sends nothing more. A process may
// be replaced by a new instance of its node id (restart): the old one's
// pending messages are lost, its requests (orphans) run on until their
// bound, and while its lease runs the new one's reports are refused
// (ErrNodeIDInUse); a lapsed row is taken over, and a row whose lease
// lapsed is renewed by its own instance's next report.
//
// Abstracted: learning mode (§10) is never entered. A report so late that
// its row's hold has ended and the row was deleted, claiming requests in
// flight, would be taken as evidence of a lost database; the model loses
// it instead. One report per node is pending with time, and a process is
// replaced only once its predecessor's requests have ended (one dead
// instance per node id at a time). Clock drift and the fence margin are
// not modelled (time is exact and shared).
//
// Canonical form (exhaustive_encode_test.go has the details): seqs and
// generations are only ever compared, so they are replaced by their ranks
// (generations per node: the core never compares two nodes'); a stale
// report's content is never read, so it is zeroed; a reply that can
// change nothing (its generation older than the node's, its lease no
// longer) is dropped; a fence deadline is dropped while the node enforces
// no share (the next grant it applies renews it to a later lease end); a
// row's in-flight at or below its unacknowledged high is never read by
// the protocol's reserve; a demand is read only as positive or not while
// L_global ≤ 2; an l_local is read only while it votes, and only clamped;
// the core treats node ids symmetrically, so states that differ only by a
// renaming of the nodes are one state (the nodes' encodings are sorted),
// and each node's instance tokens likewise; a dead instance sends nothing
// more, so its recorded eviction is forgotten.

// violation describes the first broken invariant in x, or returns "".
func (m model) violation(x *xState) string {
	switch x.broken {
	case brokenEvicted:
		return "an evicted instance was granted a share"
	case brokenDrained:
		return "a drained node id was granted a share"
	}
	inflight := 0
	for i := range m.nodes {
		inflight += x.nodes[i].inflight + x.nodes[i].orphans
	}
	if b := x.bound(); inflight > b {
		return fmt.Sprintf("Σ in-flight = %d > %d, the largest L_global of the last lease + bound", inflight, b)
	}
	for _, n := range x.coord.Nodes {
		if n.Share > 0 && (n.Evicted || x.coord.drained(n.NodeID)) {
			return fmt.Sprintf("%s's row (evicted %t, drained %t) has share %d", n.Instance, n.Evicted, x.coord.drained(n.NodeID), n.Share)
		}
	}
	if !x.fell {
		// Fixed or risen: the current L_global bounds everything.
		l := x.coord.Key.LGlobal
		share, reserve := 0, 0
		for _, n := range x.coord.Nodes {
			if n.Holding(modelNow) {
				share += n.Share
				reserve += n.Reserve(modelNow)
			}
		}
		switch {
		case !m.totalsOnly && share > l:
			return fmt.Sprintf("Σ share = %d > L_global = %d", share, l)
		case !m.totalsOnly && reserve > l:
			return fmt.Sprintf("Σ reserve = %d > L_global = %d", reserve, l)
		case inflight > l:
			return fmt.Sprintf("Σ in-flight = %d > L_global = %d", inflight, l)
		}
	}
	if !m.totalsOnly {
		for i := range m.nodes {
			n := &x.nodes[i]
			row, _ := x.row(i)
			dead, _ := x.deadRow(i)
			if r := row.Reserve(modelNow); n.inflight > r {
				return fmt.Sprintf("%s has %d in flight, above its reserve %d", modelIDs[i], n.inflight, r)
			}
			if r := dead.Reserve(modelNow); n.orphans > r {
				return fmt.Sprintf("%s's dead instance has %d in flight, above its row's reserve %d", modelIDs[i], n.orphans, r)
			}
		}
	}
	return ""
}

// search explores every state reachable from the initial one, breadth
// first, and returns the number of distinct states and, when an invariant
// breaks, the shortest trace to it. It fails t past limit states.
//
// Visited states are kept as 128-bit hashes of their encodings (hash
// compaction, as in SPIN): the chance that two of 10^8 states collide, and
// one is wrongly taken as visited, is below 10^-20. The frontier is kept
// encoded, so the heap holds no pointers per state.
func (m model) search(t *testing.T, limit int) (states int, trace []string) {
	type visit struct {
		parent int32
		action xAction
	}
	seeds := [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	hash := func(b []byte) [2]uint64 { return [2]uint64{maphash.Bytes(seeds[0], b), maphash.Bytes(seeds[1], b)} }

	init := m.initial()
	enc := m.encode(&init, nil)
	index := map[[2]uint64]int32{hash(enc): 0}
	visits := []visit{{parent: -1}}
	// Frontier entries: a 4-byte state id, then the encoding.
	frontier := binary.LittleEndian.AppendUint32(nil, 0)
	frontier = append(frontier, enc...)
	var buf []byte
	for len(frontier) > 0 {
		var next []byte
		for rest := frontier; len(rest) > 0; {
			self := int32(binary.LittleEndian.Uint32(rest))
			var x xState
			x, rest = m.decode(rest[4:])
			bad := int32(-1)
			var why string
			m.successors(&x, func(a xAction, y *xState) {
				if bad >= 0 {
					return
				}
				buf = m.encode(y, buf[:0])
				h := hash(buf)
				if _, ok := index[h]; ok {
					return
				}
				id := int32(len(visits))
				index[h] = id
				visits = append(visits, visit{parent: self, action: a})
				if v := m.violation(y); v != "" {
					bad, why = id, v
					return
				}
				next = binary.LittleEndian.AppendUint32(next, uint32(id))
				next = append(next, buf...)
			})
			if bad >= 0 {
				for v := bad; visits[v].parent >= 0; v = visits[v].parent {
					trace = append(trace, visits[v].action.String())
				}
				slices.Reverse(trace)
				return len(visits), append(trace, "violation: "+why)
			}
			if len(visits) > limit {
				t.Fatalf("state space exceeds %d states", limit)
			}
		}
		frontier = next
	}
	return len(visits), nil
}

// The searches come in three sizes: small ones run always (also under
// -race and -short), medium ones only without -race and -short, and the
// largest only with FLEET_EXHAUSTIVE=full (each takes up to a few minutes
// and a few GB):
//
//	FLEET_EXHAUSTIVE=full go test -run Exhaustive -v ./coord
const (
	sizeSmall = iota
	sizeMedium
	sizeFull
)

func TestExhaustive(t *testing.T) {
	t.Parallel()
	// The time configurations: lease 1 tick, request bound 2 ticks, so a
	// request admitted in the last tick of a lease outlives it.
	timed := func(m model) model {
		m.nodes, m.maxReports, m.demandSlack = 2, 1, 1
		m.time, m.lease, m.bound = true, 1, 2
		return m
	}
	median := []int{1, 2}
	tests := []struct {
		name string
		size int
		m    model
	}{
		{"2 nodes, L=2, 1 report and 1 reply in flight", sizeSmall,
			model{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1}},
		{"3 nodes, L=2, replies at once", sizeSmall,
			model{nodes: 3, l: 2, maxReports: 1, syncReplies: true, demandSlack: 1}},
		{"2 nodes, l_local 1 or 2 at every report, replies at once", sizeSmall,
			model{nodes: 2, l: 2, lLocals: median, minLimit: 1, maxLimit: 2, maxReports: 1, syncReplies: true, demandSlack: 1}},
		{"time, L=1: lapses, requests outliving the lease, leaves with requests in flight", sizeSmall,
			timed(model{l: 1, syncReplies: true, leave: true, leaveBusy: true})},
		{"time, L=1: takeover of a lapsed node id by an idle node's new instance", sizeSmall,
			timed(model{l: 1, syncReplies: true, restart: true, idleRestart: true})},
		{"time, L=1: drains across lapses", sizeSmall,
			timed(model{l: 1, syncReplies: true, drain: true})},
		{"time, L=1: evictions", sizeSmall,
			timed(model{l: 1, syncReplies: true, evict: true})},
		{"time, L=1: takeover by a new instance while the old one's requests run", sizeMedium,
			timed(model{l: 1, syncReplies: true, restart: true})},
		{"2 nodes, L=2, 1 report and 2 replies in flight", sizeFull,
			model{nodes: 2, l: 2, maxReports: 1, maxReplies: 2, demandSlack: 1}},
		{"2 nodes, L=2, 2 reports and 2 replies in flight", sizeFull,
			model{nodes: 2, l: 2, maxReports: 2, maxReplies: 2, demandSlack: 1}},
		{"2 nodes, L=2, evictions", sizeFull,
			model{nodes: 2, l: 2, maxReports: 1, maxReplies: 2, demandSlack: 1, evict: true}},
		{"2 nodes, L rises 2→3", sizeFull,
			model{nodes: 2, l: 2, raises: []int{3}, maxReports: 1, maxReplies: 1, demandSlack: 1}},
		{"2 nodes, L=2, drains", sizeFull,
			model{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1, drain: true}},
		{"2 nodes, L falls 2→1 and rises back", sizeFull,
			model{nodes: 2, l: 2, lowers: []int{1}, raises: []int{2}, maxReports: 1, maxReplies: 1, demandSlack: 1}},
		{"2 nodes, L=3", sizeFull,
			model{nodes: 2, l: 3, maxReports: 1, maxReplies: 1, demandSlack: 1}},
		{"2 nodes, L=3, 1 report and 2 replies in flight", sizeFull,
			model{nodes: 2, l: 3, maxReports: 1, maxReplies: 2, demandSlack: 1}},
		{"3 nodes, L=2", sizeFull,
			model{nodes: 3, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1}},
		{"2 nodes, l_local 1 or 2 at every report", sizeFull,
			model{nodes: 2, l: 2, lLocals: median, minLimit: 1, maxLimit: 2, maxReports: 1, maxReplies: 1, demandSlack: 1}},
		{"time, L=1: takeover, leave and rejoin, requests in flight at either", sizeFull,
			timed(model{l: 1, syncReplies: true, restart: true, leave: true, leaveBusy: true})},
		{"time, L=2: lapses, 1 reply in flight", sizeFull,
			timed(model{l: 2, maxReplies: 1})},
		{"time, l_local 1 or 2 at every report", sizeFull,
			timed(model{l: 2, lLocals: median, minLimit: 1, maxLimit: 2, syncReplies: true})},
	}
	full := os.Getenv("FLEET_EXHAUSTIVE") == "full"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			switch {
			case tt.size == sizeFull && !full:
				t.Skip("large search: set FLEET_EXHAUSTIVE=full")
			case tt.size == sizeMedium && (raceEnabled || testing.Short()):
				t.Skip("medium search: runs without -race and -short")
			}
			if tt.size == sizeSmall {
				t.Parallel()
			}
			start := time.Now()
			states, trace := tt.m.search(t, 60_000_000)
			require.Empty(t, trace, "invariant broken:\n  %s", strings.Join(trace, "\n  "))
			t.Logf("%d states, no violation (%s)", states, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestExhaustiveFindsWeakRules shows that the search can fail: with a
// rule weaker than the protocol's, it finds a state where the fleet holds
// more than L_global. The weaker coordinators reserve for a peer only its
// acknowledged (current) share, forgetting larger grants the peer has not
// acknowledged replacing; or forget the peer's in-flight; or hold a row's
// reserve only until its lease ends, not until its requests must have ended.
// The weaker nodes admit past their fence deadline, or leave with requests
// in flight reporting none.
func TestExhaustiveFindsWeakRules(t *testing.T) {
	t.Parallel()
	timed := model{nodes: 2, l: 1, maxReports: 1, syncReplies: true, demandSlack: 1, time: true, lease: 1, bound: 2}
	tests := []struct {
		name string
		m    model
	}{
		{"reserve: acknowledged share only", model{nodes: 2, l: 2, maxReports: 1, maxReplies: 2, demandSlack: 1,
			reserve: func(n NodeState, _ time.Time) int { return max(n.Share, n.Inflight) }}},
		{"reserve: no in-flight", model{nodes: 2, l: 2, maxReports: 1, maxReplies: 2, demandSlack: 1,
			reserve: func(n NodeState, _ time.Time) int { return max(n.UnackedHigh, n.Share) }}},
		{"reserve ends with the lease", with(timed, func(m *model) {
			m.reserve = func(n NodeState, now time.Time) int {
				if !n.LeaseExpiresAt.After(now) {
					return 0
				}
				return n.Reserve(now)
			}
		})},
		{"node admits past its fence deadline", with(timed, func(m *model) { m.unfenced = true })},
		{"node leaves with requests in flight reporting none", with(timed, func(m *model) {
			m.leave, m.leaveBusy, m.leaveForgets = true, true, true
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.m.totalsOnly = true
			states, trace := tt.m.search(t, 30_000_000)
			require.NotEmpty(t, trace, "the search must find a violation")
			t.Logf("violation found after %d states (node names up to symmetry):\n  %s", states, strings.Join(trace, "\n  "))
		})
	}
}

// with returns m changed by fn.
func with(m model, fn func(*model)) model {
	fn(&m)
	return m
}
