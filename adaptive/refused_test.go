package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cleanRounds completes n round trips of one request each, 1 ms apart.
func cleanRounds(t *testing.T, l *Limiter, clk *fakeClock, n int) {
	t.Helper()
	for range n {
		sampleOne(t, l, clk, time.Millisecond)
	}
}

// refusedAtTen returns a limiter under a ceiling of 10 that was refused
// with 10 in flight: its limit is 9.
func refusedAtTen(t *testing.T, cfg Config) (*Limiter, *fakeClock) {
	t.Helper()
	l, clk := newTestLimiter(t, cfg)
	for _, le := range refuseAtTen(t, l, clk) {
		le.Ignore() // no round trip
	}
	return l, clk
}

// refuseAtTen sets l's ceiling to 10, fills it and drops one lease a
// millisecond later, leaving the limit at 9; it returns the 9 leases
// still held.
func refuseAtTen(t *testing.T, l *Limiter, clk *fakeClock) []Lease {
	t.Helper()
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	require.Equal(t, 9, l.Limit())
	return leases[1:]
}

// TestAHigherShareStopsUnderTheLevelLastRefused: a fleet node's share
// rises because L_global rose, whatever the upstream did; a node refused
// with 10 in flight that took a share of 14 at once sent 4 more requests
// into an upstream that had just refused the 10th, and four nodes doing
// so at their grants put 1.2·C on it (section 3 of the benchmarks). The
// room now rises no further than one slot under the level refused; the
// rest comes back by give-backs, one slot past that level at a time,
// then doubling once a give-back there holds.
func TestAHigherShareStopsUnderTheLevelLastRefused(t *testing.T) {
	t.Parallel()
	l, clk := refusedAtTen(t, Config{InitialLimit: 100})
	l.SetCeiling(14)
	require.Equal(t, 9, l.Limit(), "the room stays one slot under the 10 refused")
	cleanRounds(t, l, clk, cutRecovery)
	require.Equal(t, 10, l.Limit(), "a give-back to the level refused: one slot")
	cleanRounds(t, l, clk, cutRecovery)
	require.Equal(t, 12, l.Limit(), "it held: the level is forgotten and the next give-back returns two")
	cleanRounds(t, l, clk, cutRecovery)
	require.Equal(t, 14, l.Limit())
}

// TestAHigherShareBelowTheLevelRefusedIsTakenAtOnce: a share lowered
// after the refusal and raised again comes back at once up to one slot
// under the level refused.
func TestAHigherShareBelowTheLevelRefusedIsTakenAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := refusedAtTen(t, Config{InitialLimit: 100})
	l.SetCeiling(5)
	require.Equal(t, 5, l.Limit())
	l.SetCeiling(20)
	require.Equal(t, 9, l.Limit())
	l.ClearCeiling()
	l.SetCeiling(10)
	l.SetCeiling(20)
	require.Equal(t, 20, l.Limit(), "ClearCeiling forgets the level refused")
}

// TestAFleetNodeGivesBackAtItsGrant: the upstream answers the fleet's
// requests together, so the nodes' round trips end together, and
// give-backs made there were all refused at once. A node under a fleet
// limit gives back at its next grant (ProbeTick) instead, at its own
// heartbeat's phase — or, with no grant for giveDueRounds round trips,
// at a round trip anyway.
func TestAFleetNodeGivesBackAtItsGrant(t *testing.T) {
	t.Parallel()
	for _, tick := range []bool{true, false} {
		l, clk := refusedAtTen(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
		l.SetFleetLimit(40)
		cleanRounds(t, l, clk, cutRecovery)
		require.Equal(t, 9, l.Limit(), "due, not given back at the round trip")
		if tick {
			l.ProbeTick()
			require.Equal(t, 10, l.Limit(), "given back at the grant")
			continue
		}
		cleanRounds(t, l, clk, giveDueRounds-1)
		require.Equal(t, 9, l.Limit())
		cleanRounds(t, l, clk, 1)
		require.Equal(t, 10, l.Limit(), "no grant came: given back at a round trip")
	}
}

// TestTheLevelRefusedIsForgottenAfterCalmGrants: cutRecovery grants with
// no drop since the previous one forget the level refused — the fleet's
// shares may have moved since — and a higher share is then the node's at
// once.
func TestTheLevelRefusedIsForgottenAfterCalmGrants(t *testing.T) {
	t.Parallel()
	l, _ := refusedAtTen(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
	l.SetFleetLimit(40)
	l.ProbeTick() // the drop came since the last tick: not calm
	for range cutRecovery - 1 {
		l.ProbeTick()
	}
	l.SetCeiling(14)
	require.Equal(t, 9, l.Limit(), "four calm grants: the level holds")
	l.SetCeiling(10)
	l.ProbeTick()
	l.SetCeiling(14)
	require.Equal(t, 13, l.Limit(), "five: forgotten, the raise passes (the cut of 1 stays)")
}

// TestEveryGiveBackOfAFleetNodeWaitsForItsGrant: not only the first
// give-back after a drop, each one after a give-back held (the second
// returns two slots: the node's part of the load of 21 it was refused at,
// (21 − 1) × 10 ÷ 20 = 10 for half the fleet's limit, leaves room for
// them).
func TestEveryGiveBackOfAFleetNodeWaitsForItsGrant(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
	l.SetFleetLimit(20)
	l.SetCeiling(10)
	l.SetPeerInflight(20)
	refuseEach(t, l, clk, 4, 0)
	l.SetPeerInflight(10)
	require.Equal(t, 6, l.Limit())
	for _, want := range []int{7, 9} {
		before := l.Limit()
		cleanRounds(t, l, clk, cutRecovery)
		require.Equal(t, before, l.Limit(), "due at the round trip, not given back there")
		l.ProbeTick()
		require.Equal(t, want, l.Limit(), "given back at the grant")
	}
}

// TestCalmGrantsReturnWhatHigherSharesWereHeldBackBy: with requests
// longer than the heartbeat no round trip gives a cut back, so slots a
// higher share was held back by would stay held back for good; the calm
// grants that forget the level refused give them back at once, and leave
// the drop's own cut to give-backs.
func TestCalmGrantsReturnWhatHigherSharesWereHeldBackBy(t *testing.T) {
	t.Parallel()
	l, _ := refusedAtTen(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
	l.SetFleetLimit(40)
	l.SetCeiling(14)
	require.Equal(t, 9, l.Limit())
	for range cutRecovery {
		l.ProbeTick()
	}
	require.Equal(t, 9, l.Limit(), "the first tick came after the drop")
	l.ProbeTick()
	require.Equal(t, 13, l.Limit(), "the 4 slots held back come back; the drop's cut of 1 stays")
}

// TestAHigherShareKeepsThePacedRoom: the raise is held back under the
// level refused, and the paced room already earned stays: a node refused
// at 10 with 9 in flight keeps 9 in flight through a share raised to 20.
// Held back before the pacing bound was taken, the raise pinned that
// bound at 0 for a moment, the node could refill only half its room, and
// the next refusal ended a "climb" there, halving it.
func TestAHigherShareKeepsThePacedRoom(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 100})
	leases := refuseAtTen(t, l, clk)
	l.SetCeiling(20)
	require.Equal(t, 9, l.Limit())
	for range 5 {
		clk.Advance(time.Millisecond)
		leases[0].Release()
		leases = append(leases[1:], acquireN(t, l, 1)...)
	}
	_, ok := l.TryAcquire()
	require.False(t, ok)
	require.Equal(t, 9, l.Snapshot().Inflight, "the room of 9 stays in use")
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	require.Equal(t, 8, l.Limit(), "a refusal there takes one slot")
	releaseAll(leases[1:])
}

// TestARefusalTurnsTheHeldBackSlotsIntoItsCut: slots a higher share was
// held back by, then partly given back, belong to the cut of the next
// refusal: calm grants after it do not hand them all back at once, past
// the level just refused.
func TestARefusalTurnsTheHeldBackSlotsIntoItsCut(t *testing.T) {
	t.Parallel()
	l, clk := refusedAtTen(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
	l.SetCeiling(20)
	require.Equal(t, 9, l.Limit())
	for l.Limit() < 12 {
		cleanRounds(t, l, clk, 1) // the give-backs: 1, then 2 once it held
	}
	leases := acquireN(t, l, l.Limit())
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	refusedAt := len(leases)
	for range cutRecovery + 1 {
		l.ProbeTick()
	}
	require.Less(t, l.Limit(), refusedAt, "no room past the level just refused without a give-back")
	for _, le := range leases[1:] {
		le.Ignore()
	}
}

// TestADropUnderACeilingOfZeroSetsNoLevel: a refusal of a request sent
// before the ceiling fell to 0 (a fenced node) says nothing of the share
// that follows, and a ceiling set after the last expired starts afresh.
func TestADropUnderACeilingOfZeroSetsNoLevel(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	l.SetCeiling(0)
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	for _, le := range leases[1:] {
		le.Ignore()
	}
	l.SetCeiling(14)
	require.Equal(t, 14, l.Limit())

	l, clk = refusedAtTen(t, Config{InitialLimit: 100})
	l.SetCeilingUntil(10, clk.Now().Add(time.Second))
	clk.Advance(2 * time.Second)
	l.SetCeilingUntil(14, clk.Now().Add(time.Second))
	require.Equal(t, 13, l.Limit(), "the ceiling had expired: the level refused before it is forgotten, and the drop's own cut of 1 stays")
}

// TestAFleetNodeGivesBackItsPartOfTheFleetsRefusedLoad: give-backs
// double as they hold, and several nodes give back near the same grant,
// each judging the fleet's load by its peers' in-flight as last
// reported, which the peers' own give-backs have since passed: each
// node's slot was an excess of its own, and four nodes at C = 20 put
// 1.15·C in flight (benchmarks §3). A node takes back no more than its
// share's part of the load refused less one, whatever the peers report:
// here a share of 10 of a fleet limit of 40, refused at a fleet load of
// 21, stops at 5 ((21 − 1) × 10 ÷ 40) though its peers report only 6 in
// flight; past its part it gives back one slot only every fourth due
// give-back (see giveTurns), and once cutRecovery calm grants forget the
// load its give-backs start again from one slot, not from the step its
// last give-backs had doubled to.
func TestAFleetNodeGivesBackItsPartOfTheFleetsRefusedLoad(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
	l.SetFleetLimit(40)
	l.SetCeiling(10)
	l.SetPeerInflight(20)
	refuseEach(t, l, clk, 8, 0) // refused at a fleet load of 21
	l.ProbeTick()               // the drops came since the last tick: not calm
	require.Equal(t, 2, l.Limit())
	l.SetPeerInflight(6) // the peers' reports from before their own give-backs
	giveBack := func() int {
		cleanRounds(t, l, clk, cutRecovery)
		l.ProbeTick()
		return l.Limit()
	}
	require.Equal(t, 3, giveBack())
	require.Equal(t, 5, giveBack(), "the step of two, up to its part: (21 − 1) × 10 / 40")
	require.Equal(t, 5, giveBack(), "9 + 6 would be under 20, but it is past its part")
	require.Equal(t, 5, giveBack(), "not its turn yet: one in ⌈40/10⌉ = 4")
	require.Equal(t, 6, giveBack(), "the fifth calm grant forgets the load; the step starts again from one slot")
}

// TestAFleetNodeGivesBackOneSlotAtItsTurnPastItsPart: past its part of
// the load refused, a node gives back one slot at every ⌈L/share⌉-th due
// give-back, so that the fleet passes the load by about one slot a round
// of grants; the doubling starts again from what such a give-back gave,
// and after cutRecovery calm grants the load is forgotten.
func TestAFleetNodeGivesBackOneSlotAtItsTurnPastItsPart(t *testing.T) {
	t.Parallel()
	var clk *fakeClock
	refused := func() (*Limiter, func() int) {
		var l *Limiter
		l, clk = newTestLimiter(t, Config{InitialLimit: 100, Law: AIMD, AIMDProbe: 5})
		l.SetFleetLimit(60)
		l.SetCeiling(40)
		l.SetPeerInflight(30)
		refuseEach(t, l, clk, 16, 0) // refused at a fleet load of 31: its part is 20
		l.ProbeTick()                // the drops came since the last tick: not calm
		require.Equal(t, 24, l.Limit())
		return l, func() int {
			cleanRounds(t, l, clk, cutRecovery)
			l.ProbeTick()
			return l.Limit()
		}
	}

	l, giveBack := refused()
	require.Equal(t, 24, giveBack(), "past its part: not its turn")
	refuseEach(t, l, clk, 1, 0) // a new drop: the turns count afresh
	l.ProbeTick()
	require.Equal(t, 23, l.Limit())
	require.Equal(t, 23, giveBack(), "not its turn: the skip before the drop does not count")
	require.Equal(t, 24, giveBack())

	l, giveBack = refused()
	require.Equal(t, 24, giveBack(), "past its part: not its turn (one in ⌈60/40⌉ = 2)")
	require.Equal(t, 25, giveBack(), "its turn: one slot")
	l.SetPeerInflight(0)
	require.Equal(t, 25, giveBack(), "the peers' reports do not widen its part")
	require.Equal(t, 26, giveBack())
	require.Equal(t, 28, giveBack(), "the fifth calm grant forgets it; the step doubles from the one given")

	l, giveBack = refused()
	l.SetFleetLimit(0)
	l.SetFleetLimit(60)
	require.Equal(t, 25, giveBack())
	require.Equal(t, 27, giveBack(), "a fleet limit that went to 0 forgets the load refused before")
}
