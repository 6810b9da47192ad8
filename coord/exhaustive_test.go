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
// to the real core (State.heartbeat) over a network that delays, reorders
// and loses messages, and checks the protocol's invariants in every
// reachable state:
//
//   - Σ share ≤ L and Σ in-flight ≤ L while L is fixed or only rises;
//   - every node's actual in-flight ≤ the reserve the coordinator holds for
//     it, the lemma behind the bound (see doc.go).
//
// Actions: a node sends a report (its seq, in-flight, demand and newest
// applied generation, sampled at once; demand is its in-flight plus 0 to
// demandSlack queued requests, any of them); the coordinator handles any
// pending report of any node (so reports are reordered, and an older one
// arriving after a newer one is stale) or loses it; a reply is delivered in
// any order or lost; a node applies a reply only when its generation is
// newer than the one it enforces; it admits a request whenever its
// in-flight is below its enforced share and finishes one whenever it has
// any (arrivals are not modelled: a request is always waiting, which only
// adds behaviours); the operator changes L, drains, undrains and evicts.
//
// Canonical form (sound and complete for these checks): seqs and
// generations are only ever compared, so they are replaced by their ranks;
// a stale report's content is never read, so it is zeroed; a reply whose
// generation is not newer than the node's is a no-op to deliver, which
// losing it already covers, so it is dropped; the row's applied_gen is
// stored but never read by the core, so it is left out; and the core treats
// node ids symmetrically, so states that differ only by a renaming of the
// nodes are one state (the nodes' encodings are sorted).

// violation describes the first broken invariant in x, or returns "".
func (m model) violation(x *xState) string {
	inflight := 0
	for i := range m.nodes {
		inflight += x.nodes[i].inflight
	}
	if len(m.lowers) > 0 {
		// L may fall below what nodes still hold: only the largest L ever
		// set bounds them.
		highest := slices.Max(slices.Concat([]int{m.l}, m.raises))
		if inflight > highest {
			return fmt.Sprintf("Σ in-flight = %d > %d", inflight, highest)
		}
		return ""
	}
	l := x.limit() // fixed or risen: the current L bounds everything
	if sum := sumShare(x.coord); sum > l {
		return fmt.Sprintf("Σ share = %d > L = %d", sum, l)
	}
	if inflight > l {
		return fmt.Sprintf("Σ in-flight = %d > L = %d", inflight, l)
	}
	if m.lemma {
		for i := range m.nodes {
			row, _ := x.row(i)
			if x.nodes[i].inflight > row.Reserve(modelNow) {
				return fmt.Sprintf("%s has %d in flight, above its reserve %d", modelIDs[i], x.nodes[i].inflight, row.Reserve(modelNow))
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
// largest only with FLEET_EXHAUSTIVE=full (each takes about a minute and a
// few GB).
const (
	sizeSmall = iota
	sizeMedium
	sizeFull
)

func TestExhaustive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
		m    model
	}{
		{"2 nodes, L=2, 1 report and 1 reply in flight", sizeSmall,
			model{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1}},
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
			tt.m.reserve, tt.m.lemma = NodeState.Reserve, true
			start := time.Now()
			states, trace := tt.m.search(t, 60_000_000)
			require.Empty(t, trace, "invariant broken:\n  %s", strings.Join(trace, "\n  "))
			t.Logf("%d states, no violation (%s)", states, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestExhaustiveFindsWeakReserves shows that the search can fail: a
// coordinator that reserves for a peer only its acknowledged (current)
// share, forgetting larger grants the peer has not acknowledged replacing,
// or that forgets the peer's in-flight, lets the fleet exceed L.
func TestExhaustiveFindsWeakReserves(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reserve func(NodeState, time.Time) int
	}{
		{"acknowledged share only", func(n NodeState, _ time.Time) int { return max(n.Share, n.Inflight) }},
		{"no in-flight", func(n NodeState, _ time.Time) int { return max(n.UnackedHigh, n.Share) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := model{nodes: 2, l: 2, maxReports: 1, maxReplies: 2, demandSlack: 1, reserve: tt.reserve}
			states, trace := m.search(t, 30_000_000)
			require.NotEmpty(t, trace, "the search must find a violation")
			t.Logf("violation found after %d states (node names up to symmetry):\n  %s", states, strings.Join(trace, "\n  "))
		})
	}
}
