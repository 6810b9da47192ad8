package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fence"
)

// loop sends a heartbeat every HeartbeatInterval, and earlier when the
// node's state calls for one (see eagerDue), until Stop; ctx is cancelled
// only by Stop. An evicted node leaves on its own once nothing is in
// flight, and the loop ends there.
func (n *Node) loop(ctx context.Context) {
	defer close(n.done)
	// The period is a fresh timer after every heartbeat rather than one
	// ticker reset each time: Reset on a timer inside a testing/synctest
	// bubble has crashed the Go 1.26 runtime (golang/go#76052 is a
	// relative), and a new timer per heartbeat costs one allocation.
	// The first is timed from Start's heartbeat, which just ended.
	n.mu.Lock()
	joinedAt := n.lastBeat
	n.mu.Unlock()
	period := time.NewTimer(n.nextBeat(joinedAt, time.Now(), true))
	defer func() { period.Stop() }()
	poll := time.NewTicker(n.pollInterval())
	defer poll.Stop()
	var lastEnded time.Time // when the loop's last attempt ended
	for {
		if n.evictedAndDrained() {
			if err := n.leave(ctx, 0); err != nil {
				n.log.Debug("evicted node could not leave yet", "err", err)
			} else {
				n.mu.Lock()
				n.left = true
				n.mu.Unlock()
				n.log.Info("evicted node drained and left: restart the process to rejoin as a new instance")
				return
			}
		}
		resend := false
		select {
		case <-n.stop:
			return
		case <-period.C:
			n.mu.Lock()
			n.claimed = false
			n.mu.Unlock()
		case <-poll.C:
			resend = n.resendDue(time.Now(), lastEnded)
			if !resend && !n.eagerDue(time.Now()) {
				continue
			}
		case <-n.kick:
			if !n.eagerDue(time.Now()) {
				continue
			}
		}
		var err error
		sent := time.Now()
		if resend {
			var stale bool
			stale, err = n.resend(ctx, n.cfg.HeartbeatTimeout)
			if stale {
				// The first reached the coordinator after all and only its
				// answer was lost: report afresh at once, for the fence.
				sent = time.Now()
				err = n.beat(ctx, n.cfg.HeartbeatTimeout)
			}
		} else {
			err = n.beat(ctx, n.cfg.HeartbeatTimeout)
		}
		if err != nil && ctx.Err() == nil {
			n.log.Debug("heartbeat failed", "err", err, "resent", resend)
		}
		lastEnded = time.Now()
		period.Stop()
		period = time.NewTimer(n.nextBeat(sent, lastEnded, err == nil))
	}
}

// nextBeat returns how long after ended, when the loop's last heartbeat,
// sent at sent, ended (ok: answered), the next periodic one is due. Every
// heartbeat renews the lease from its send, so the next is due an
// interval after that send, not after the answer: counted from the
// answer, a heartbeat slower than the lease's slack (LeaseTTL −
// FenceMargin − HeartbeatInterval, 0.5 s with the defaults) let the fence
// fall before the next answer, every interval. And when the last one took
// so long that the next, as slow, would be answered after the fence
// deadline, the next goes early enough for its answer to come a quarter
// of that time before it, at once at the latest: a node whose heartbeats
// take under half of LeaseTTL − FenceMargin (0.75 s with the defaults)
// is never fenced by their slowness, at the cost of up to one heartbeat
// per heartbeat's time. An early heartbeat moves the period instead of
// adding to it. Called from the loop only.
func (n *Node) nextBeat(sent, ended time.Time, ok bool) time.Duration {
	next := n.cfg.HeartbeatInterval - ended.Sub(sent)
	if fs := n.fence.State(); ok && !fs.Fenced && !fs.Deadline.IsZero() {
		took := ended.Sub(sent)
		next = min(next, fs.Deadline.Sub(ended)-took-took/4)
	}
	return max(next, 0)
}

// resendDue reports whether the report of the heartbeat that failed last
// should be sent again now: the node is running and joined, not fenced,
// its fence deadline comes within a heartbeat interval (the next periodic
// heartbeat, an interval after the last attempt was sent, would come too
// late), and half a poll interval has passed since the loop's last
// attempt ended at lastEnded (the poll ticks run on their own: a failure
// that took a few milliseconds must not skip the next tick). So an outage
// shorter than the time left to the fence (a database's fast restart)
// does not fence the node, whose requests would then end and, after a
// restart, leave it no share for the rest of learning mode; and a node
// adds at most one attempt per poll interval for the last interval
// before its fence (with the defaults, up to 10 per outage), fewer
// against a coordinator that is slow to fail. Called from the loop only.
func (n *Node) resendDue(now, lastEnded time.Time) bool {
	fs := n.fence.State()
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.phase == phaseRunning && n.joined && n.outage && n.failed != nil &&
		!fs.Fenced && fs.Deadline.Sub(now) <= n.cfg.HeartbeatInterval &&
		now.Sub(lastEnded) >= n.pollInterval()/2
}

// resend sends the report of the heartbeat that failed last again, as it
// was: its seq and counts, so that the node's demand, rate demand and
// other per-report state count it once — to the coordinator a report
// delayed in the network, or, if the first reached it after all, a
// duplicate it answers as stale, which resend reports (any answer ends
// the resends). It applies the grant. As in report, a node under
// FailClosed whose lease has run out meanwhile reports no rate share
// applied.
func (n *Node) resend(ctx context.Context, timeout time.Duration) (stale bool, err error) {
	sent := time.Now()
	n.mu.Lock()
	r := *n.failed
	n.mu.Unlock()
	if n.sendsNothing(sent) {
		r.RateApplied = coord.Rates{}
	}
	g, err := n.send(ctx, timeout, sent, r)
	return err == nil && g.Stale, err
}

// sendsNothing reports whether the node sends nothing at now because its
// lease has run out under FailClosed: a report then says it paces to no
// rate share (see report and resend).
func (n *Node) sendsNothing(now time.Time) bool {
	fs := n.fence.State()
	return n.cfg.Outage == FailClosed && (fs.Fenced || !now.Before(fs.Deadline))
}

// holdFor is how long the coordinator must keep reserving the node's
// capacity after its lease ends: MaxRequestDuration, measured on the node's
// clock, padded by 0.1% for the drift of the database's clock rate over it.
func (n *Node) holdFor() time.Duration {
	return n.cfg.MaxRequestDuration + n.cfg.MaxRequestDuration/1000
}

// evictedAndDrained reports whether the node was evicted and has nothing in
// flight any more — or MaxRequestDuration has passed since it learned of
// its eviction, by which every request it admitted has reached its bound.
func (n *Node) evictedAndDrained() bool {
	if !n.fence.State().Evicted {
		return false
	}
	n.mu.Lock()
	since := time.Since(n.evictedAt)
	n.mu.Unlock()
	return n.lim.Inflight() == 0 || since >= n.cfg.MaxRequestDuration
}

// pollInterval is how often the loop checks whether an early heartbeat is
// due: a tenth of the heartbeat interval, at least 5 ms.
func (n *Node) pollInterval() time.Duration {
	return max(n.cfg.HeartbeatInterval/10, 5*time.Millisecond)
}

// minEagerGap is the least time between an early heartbeat and the one
// before it, so that early heartbeats cost at most a few per period.
func (n *Node) minEagerGap() time.Duration {
	return n.cfg.HeartbeatInterval / 4
}

// eagerDue reports whether an early heartbeat should go now, at least
// minEagerGap after the last one: after a share was lowered while the key
// was near its ceiling (to acknowledge it, and again once in-flight has
// drained under it, so the coordinator frees the difference for others);
// and, once per period, to claim capacity — when requests wait for a rate
// share of 0 (the node had no rate demand at its last report), or when the
// share caps the node below both its demand and a fair split. An early
// heartbeat moves the next periodic one an interval after it (see
// nextBeat), so a node sends one heartbeat per interval unless one of these
// calls for another.
func (n *Node) eagerDue(now time.Time) bool {
	snap := n.lim.Snapshot()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.phase != phaseRunning || !n.joined || now.Sub(n.lastSend) < n.minEagerGap() {
		return false
	}
	if n.ackDue || (n.lowered && snap.Inflight <= n.share) {
		return true
	}
	if n.claimed || now.Before(n.yieldUntil) || now.Before(n.turnUntil) {
		return false // claimed this period, or stepping aside for it or giving its turn
	}
	demand := min(snap.Inflight, coord.MaxCount) + min(snap.QueuedWeight, coord.MaxCount) + n.unmet
	fair := (n.lGlobal + max(n.liveNodes, 1) - 1) / max(n.liveNodes, 1)
	return n.rateStarved() || n.share < min(demand, fair)
}

// waitsForHeavier reports whether the node, with nothing in flight, not
// paused, not fenced, its limiter under the share of L_global it was
// granted, unexpired, which leaves room to others, has requests queued —
// the head of its queue weighs more than its share — or holds a demand
// floor (see holdWanted) heavier than its share: its callers are refused
// a weight the share cannot hold. Nodes that each wait for such a weight
// can be split so that no share holds any of them — two waiting with a
// weight of 6 under an L_global of 10 are given 5 each — and stay so while
// their demand stays. Such a node steps aside (see stepAside): for two
// intervals, while it still waits with nothing in flight, its reports ask
// for nothing, so the split gives it no share, not even the floor of 1,
// and the share they lower is acknowledged at once: every peer's next
// share may then hold its own request. Not in learning mode: there the
// coordinator caps every share at what its node proves it holds, so a
// peer's share cannot grow into the slots freed, and a node granted 0
// with nothing in flight proves nothing and stays at 0 — its lighter
// callers too — until learning ends (LeaseTTL + MaxRequestDuration). The
// caller holds n.mu.
func (n *Node) waitsForHeavier(snap adaptive.Snapshot, now time.Time) bool {
	waiting := snap.QueuedWeight > 0 || n.wanted > n.share && n.floorHeld(now)
	return waiting && snap.Inflight == 0 && n.underShare(snap, now)
}

// underShare reports whether the node is not in learning mode, paused or
// fenced, and its limiter is under the share of L_global it was granted,
// unexpired, which leaves room to others. The caller holds n.mu.
func (n *Node) underShare(snap adaptive.Snapshot, now time.Time) bool {
	return !n.learning && n.share > 0 && n.share < n.lGlobal &&
		snap.HasCeiling && snap.Ceiling == n.share && !n.fence.State().Fenced &&
		!now.Before(snap.PausedUntil) && (snap.CeilingUntil.IsZero() || now.Before(snap.CeilingUntil))
}

// stepAside decides, at a report where the node waitsForHeavier and is
// not stepping aside already, whether it does: always after a turn — a
// request admitted since its last such report — so that two such nodes
// alternate, and otherwise at random half the time, so that three or more
// (or two that both just had a turn) do not step aside together for
// good. The caller holds n.mu.
func (n *Node) stepAside(admitted uint64) bool {
	served := admitted != n.admittedAtWait
	n.admittedAtWait = admitted
	return served || rand.IntN(2) == 0
}

// turnLength is how many heartbeat intervals a node holds a share of 1
// before it may give its turn (see giveTurn): the longer, the less a
// turn's hand-over (about an interval with the slot idle) costs. Each
// turn that no one took doubles it for the next, up to maxTurnHold; a
// turn taken sets it back.
const (
	turnLength  = 4
	maxTurnHold = 64
)

// noteTurnTaken sets the hold before the node's next turn from the
// grants that follow its last turn (see nextTurnHold): a share in the
// first means no one took the slot; otherwise the grant a heartbeat
// interval after the turn ended, once the taker has reported what it has
// in flight, says whether the peers use every slot, and a share by then
// is a turn given back. The caller holds n.mu.
func (n *Node) noteTurnTaken(sent time.Time, g coord.Grant) {
	if n.turnEnded.IsZero() || g.Stale {
		return
	}
	first := !n.turnAsked
	n.turnAsked = true
	switch {
	case first && g.Share > 0:
		n.turnHold = nextTurnHold(n.turnHold, true)
	case sent.Sub(n.turnEnded) < n.cfg.HeartbeatInterval:
		return
	default:
		n.turnHold = nextTurnHold(n.turnHold, g.Share == 0 && g.PeerInflight < g.LGlobal)
	}
	n.turnEnded = time.Time{}
}

// nextTurnHold is the hold before the next turn after one that was
// wasted — the node was granted a share at once when it asked again (no
// one took the slot), or its peers had less in flight than L_global (one
// holds the slot unused, as a node does whose demand is only the floor
// held for a caller that comes back now and then, see holdWanted) — or
// not.
func nextTurnHold(hold int, wasted bool) int {
	if !wasted {
		return turnLength
	}
	return min(2*max(hold, turnLength), maxTurnHold)
}

// giveTurn decides, at a report, whether the node gives up its share for
// a turn. With more nodes that want capacity than L_global, the split
// gives each a floor of 1 that the key cannot hold: the nodes that hold
// a slot keep it for as long as their callers stay busy, and the others
// (Grant.Waiting) are never admitted — 2 of 12 busy nodes under an
// L_global of 10 served nothing. A node whose share is that floor of 1,
// held for its hold (turnLength intervals, more after wasted turns, see
// nextTurnHold), not in learning mode nor fenced, that was admitted a
// request since the last report at which it could give its turn, and
// that sees others waiting, gives it with probability waiting ÷ L_global
// (at most 1): about as many holders give a turn as nodes wait, so a
// waiting node is admitted within a few turns. Nodes that want nothing
// are not waiting, and while every floor fits no node is (see
// coord.Grant.Waiting), so idle live nodes and fleets with room cost
// nothing. Giving its turn, its reports ask for nothing (the split gives
// it no share) until two intervals have passed with nothing of its own in
// flight: its requests run to their end, the lowered share is
// acknowledged once they have (see apply), and a waiting node takes the
// slot at its next heartbeat. The node then asks again and waits its own
// turn. The caller holds n.mu.
func (n *Node) giveTurn(now time.Time) bool {
	hold := time.Duration(max(n.turnHold, turnLength)) * n.cfg.HeartbeatInterval
	if n.waiting == 0 || n.share != 1 || n.learning || n.fence.State().Fenced || now.Sub(n.heldSince) < hold {
		return false
	}
	admitted := n.admitted()
	served := admitted != n.admittedAtTurn
	n.admittedAtTurn = admitted
	return served && rand.IntN(max(n.lGlobal, 1)) < n.waiting
}

// admitted returns how many requests the node's limiter has admitted.
func (n *Node) admitted() uint64 {
	var sum uint64
	for _, s := range n.lim.PriorityStats() {
		sum += s.Admitted
	}
	return sum
}

// press returns the demand a report asks for when the node waits for a
// heavier weight (see waitsForHeavier) while its peers hold what that
// weight needs (see peersCrowdOut), and whether it presses: twice its
// demand at the first such report since the node last did not wait so
// (it was admitted, or its wait ended), then twice the demand of the
// last such report each time the share granted since did not grow. The
// demand-proportional split gives a node whose few callers wait for a
// heavy weight less than that weight beside a peer busy with many light
// requests, for as long as the peer stays busy (a weight of 6 beside 12
// callers of weight 1, under an L_global of 10, is given 4), and stepping
// aside frees nothing the peer does not take. Pressing, the node's share
// grows toward its weight within a few heartbeats however many light
// callers the peers have; theirs shrink as much, and its own grows as
// their in-flight drains to their new shares.
//
// The most a split gives the node is L_global less one slot for each
// other node with demand, which the node does not know: live nodes that
// want nothing take no slot. Once its share reached L_global − (live
// nodes − 1) and still does not hold the head, the node presses with the
// most demand a report carries (coord.MaxCount), which takes the split's
// most whatever the peers' demands; if the share then stays where it is
// for three reports (a peer acknowledges a lowered share at its next
// periodic heartbeat, and the split counts it until then), the weight is
// one no split holds while its peers want slots, and the node stops
// pressing until a request of its own is admitted (it steps aside as
// before, see stepAside), rather than hold part of the key for nothing,
// or until L_global − (live nodes − 1) grows: a peer left, or L_global
// grew, and a split may hold the weight now. heavy is the heaviest weight
// a caller waits for in AcquireRequest (0: none known); once the share
// holds it, the node waits for its own in-flight to make room, and holds
// the pressed demand meanwhile. The caller holds n.mu.
func (n *Node) press(demand int, admitted uint64, heavy int) (int, bool) {
	if admitted != n.pressAdmitted {
		n.pressAdmitted, n.pressed, n.pressStuck, n.pressFlat = admitted, 0, false, 0
	}
	if heavy > 0 && n.share >= heavy {
		// The share holds the weight a caller waits for: the node
		// waits for its own in-flight to make room. Hold the demand
		// pressed, if any.
		return max(demand, n.pressed), true
	}
	top := n.lGlobal - max(n.liveNodes, 1) + 1
	if n.pressStuck && top > n.pressTop {
		// A peer left, or L_global grew: a split may hold the weight now.
		n.pressed, n.pressStuck, n.pressFlat = 0, false, 0
	}
	if n.pressStuck {
		return demand, false
	}
	switch {
	case n.share >= top && n.pressed >= coord.MaxCount:
		if n.share > n.pressShare {
			n.pressFlat = 0
		} else if n.pressFlat++; n.pressFlat >= 3 {
			n.pressed, n.pressStuck, n.pressTop = 0, true, top
			return demand, false
		}
	case n.share >= top:
		n.pressed = coord.MaxCount
	case n.pressed == 0:
		n.pressed = 2 * demand
	case n.share <= n.pressShare:
		n.pressed *= 2
	}
	n.pressed = min(max(n.pressed, demand), coord.MaxCount)
	n.pressShare = n.share
	return n.pressed, true
}

// peersCrowdOut reports whether the peers, at their last reports, had
// more in flight than L_global leaves beside the weight the node waits
// for: heavy, the heaviest a caller waits for in AcquireRequest, or the
// demand floor a refusal left (see holdWanted), and at least one slot
// more than the share. Stepping aside then frees nothing for that weight
// the peers do not take, and the node presses for it (see press). Nodes
// that wait for weights no share holds, with little in flight, step
// aside instead. The weight's room, not the share's, is the measure: a
// peer's in-flight is sampled at its report, and a busy one's sample
// lands now and then between two of its requests, one below its share.
// A weight above L_global (a floor left from before L_global fell) is
// not pressed for: no split holds it. The caller holds n.mu.
func (n *Node) peersCrowdOut(heavy int, now time.Time) bool {
	need := max(heavy, n.share+1)
	if n.floorHeld(now) {
		need = max(need, n.wanted)
	}
	return need <= n.lGlobal && n.peerInflight > n.lGlobal-need
}

// pressFor sets *demand to what a pressing report asks for (see press)
// and reports whether the node presses; when it does not, the node may
// step aside. heavy is the heaviest weight a caller waits for in
// AcquireRequest (0: none); while there is one, blocked (requests in
// flight, see report) or not, only the admissions of that weight
// (heavyAdmits) start the pressing again. The caller holds n.mu.
func (n *Node) pressFor(demand *int, blocked bool, heavy int) bool {
	var admitted uint64 // all admissions, for stepAside: read only when it may step aside
	if !blocked {
		admitted = n.admitted()
	}
	turns := admitted
	if heavy > 0 {
		// Whether or not requests are in flight: a node whose light
		// requests come and go switches between the two at every report,
		// and comparing one count with the other restarted the pressing
		// at each switch.
		turns = n.heavyAdmits
	}
	d, ok := n.press(*demand, turns, heavy)
	if ok {
		if !blocked {
			n.admittedAtWait = admitted
		}
		*demand = d
	}
	return ok
}

// report samples the node's state for one heartbeat and records the send.
func (n *Node) report(now time.Time) coord.Report {
	// During the slow start the probe's tick comes here rather than after
	// the grant (see adaptive.Limiter.SlowStarting).
	slow := n.lim.SlowStarting()
	if slow {
		n.lim.ProbeTick()
	}
	snap := n.lim.Snapshot()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tickedAtReport = slow
	n.seq++
	elapsed := n.cfg.HeartbeatInterval
	if !n.lastSend.IsZero() {
		elapsed = now.Sub(n.lastSend)
	}
	rateLocal, rateDemand, rateApplied, rateUsed := n.rateReport(now, elapsed)
	if n.sendsNothing(now) {
		// In learning mode the coordinator must not take its old shares
		// as held.
		rateApplied = coord.Rates{}
	}
	n.lastSend = now
	// Demand is the most the node had in flight and queued at any moment
	// since its last report, plus what it refused: a node that served
	// anything during the interval keeps a share (unless it steps aside
	// or gives its turn, below). Refusals add at most the
	// peak again (at least one), since a caller that retries a refused
	// admission in a loop is refused many times for one slot it wants: a
	// starved node's demand doubles per heartbeat instead of counting
	// retries. The demand is also at least the heaviest weight refused
	// for want of room (not for a pause, nor for a weight above
	// L_global), until LeaseTTL passes with no refusal and no admission
	// that heavy (noteUnmet, holdWanted), not for one report only: a
	// caller that polls with TryAcquire less often than the node
	// heartbeats would otherwise find the share its refusal won taken
	// back by the next report, and never be admitted; and a heavy one
	// would ask for one slot more at a time (it has no peak to double).
	// A joining node asks for at least one slot; a stopping one wants
	// nothing more.
	peak := min(n.lim.TakePeak(), coord.MaxCount)
	demand := min(peak+min(n.unmet, max(peak, 1)), coord.MaxCount)
	if n.floorHeld(now) {
		demand = max(demand, n.wanted)
	}
	// Reports that never arrived (an outage) still count.
	demand = max(demand, n.unsentDemand)
	// A caller that waits in AcquireRequest for a weight above 1 while
	// requests are in flight blocks the node: above the share, as one
	// that waits with nothing in flight does (see waitsForHeavier), but
	// the node never steps aside, it presses; within the share, it holds
	// what it pressed (see press). The admissions of the heaviest weight
	// waiting, not of lighter ones, start the pressing again (see
	// endHeavyWait).
	heavy := n.heaviestWait()
	blocked := heavy > 0 && snap.Inflight > 0 && n.underShare(snap, now)
	if !n.turnUntil.IsZero() && !now.Before(n.turnUntil) {
		n.turnUntil, n.turnEnded, n.turnAsked = time.Time{}, now, false // this report asks again
	}
	switch {
	case n.phase == phaseNew:
		demand = max(demand, 1)
	case n.phase != phaseRunning:
		demand = 0
	case now.Before(n.turnUntil) && !n.learning:
		// Still giving its turn (see giveTurn): the slot comes free
		// when the node's requests end, and a waiting node takes it at
		// its next heartbeat after that.
		demand = 0
		if snap.Inflight > 0 {
			n.turnUntil = now.Add(2 * n.cfg.HeartbeatInterval)
		}
	case n.giveTurn(now):
		n.turnUntil = now.Add(2 * n.cfg.HeartbeatInterval)
		demand = 0
	case now.Before(n.yieldUntil.Add(-n.minEagerGap())) && !n.learning && snap.Inflight == 0 &&
		(snap.QueuedWeight > 0 || n.floorHeld(now)):
		demand = 0 // still stepping aside, with nothing admitted meanwhile
	case n.ramping():
		// The limiter's ceiling is still on its way to the share: what
		// waits says nothing yet of whether the share holds it, so the
		// pressing and the stepping aside stay as they were.
	case !blocked && !n.waitsForHeavier(snap, now):
		n.yieldUntil = time.Time{}
		n.pressed = 0
	case n.peersCrowdOut(heavy, now) && (snap.QueuedWeight > 0 || n.unmet > 0) && n.pressFor(&demand, blocked, heavy):
		// The peers hold what the heavier weight needs: stepping aside
		// would free nothing for it. Press for it instead — while a
		// request waits, or a caller was refused since the last report:
		// a floor that outlives its caller (one that gave up waiting,
		// see holdWanted) is not pressed for.
		n.yieldUntil = time.Time{}
	case blocked:
		n.yieldUntil = time.Time{} // requests in flight: stepping aside would cut them off
	case n.stepAside(n.admitted()):
		// Step aside (see waitsForHeavier) so that one of the nodes
		// split this way can take a share that holds its request: the
		// lowered share is acknowledged at once, and the step lasts two
		// intervals, so every peer heartbeats after the acknowledgement
		// and before the step ends. The queued weight is in the peak of
		// the report that ends it.
		n.yieldUntil = now.Add(2 * n.cfg.HeartbeatInterval)
		demand = 0
	default:
		n.yieldUntil = time.Time{}
	}
	n.unmet = 0
	n.ackDue = false
	if n.lowered && snap.Inflight <= n.share {
		n.lowered = false
	}
	if n.joined && (n.share < demand || n.rateStarved()) {
		n.claimed = true
	}
	return coord.Report{
		Key:        n.cfg.Key,
		NodeID:     n.cfg.NodeID,
		Instance:   n.instance,
		Seq:        n.seq,
		LLocal:     min(max(int(snap.Estimate), 1), coord.MaxCount),
		Inflight:   min(snap.Inflight, coord.MaxCount),
		Demand:     demand,
		Epoch:      n.epoch,
		AppliedGen: n.appliedGen,
		LeaseTTL:   n.cfg.LeaseTTL,

		MaxRequestDuration: n.holdFor(),
		Labels:             n.cfg.Labels,
		RateLocal:          rateLocal,
		RateDemand:         rateDemand,
		RateApplied:        rateApplied,
		RateUsed:           rateUsed,
	}
}

// olderGrant reports whether g comes before the grant the node applied
// last, and that grant's epoch and generation: an earlier generation of
// the same epoch. The coordinator never answers so (generations only move
// forward within an epoch), and the safety argument takes it that a node
// never goes back to an older grant: its share may already be a peer's
// (coord's package documentation). A Coordinator that replays or reorders
// replies (a wrapper's cache) would take the node back to it. A grant of
// another epoch is taken: the epoch moves when the database may have lost
// state (design §10), to its clock's now, which on a server whose clock
// runs behind the lost one's may be numerically below the last.
func (n *Node) olderGrant(g coord.Grant) (epoch, gen int64, older bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch, n.appliedGen, g.Epoch == n.epoch && g.Generation < n.appliedGen
}

// beat sends one heartbeat, bounded by timeout, and applies its grant. A
// heartbeat that Stop cut short (it cancels the loop's ctx) is no outage:
// it is not counted as a heartbeat error and leaves the node's state as
// it is. Any other failure, Start's included, is one.
func (n *Node) beat(ctx context.Context, timeout time.Duration) error {
	sent := time.Now()
	_, err := n.send(ctx, timeout, sent, n.report(sent))
	return err
}

// send sends r, sent at sent, bounded by timeout, and applies its grant;
// a failed report is kept for resend, and a grant ends the resends.
func (n *Node) send(ctx context.Context, timeout time.Duration, sent time.Time, r coord.Report) (coord.Grant, error) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	g, err := n.coord.Heartbeat(callCtx, r)
	cancel()
	took := time.Since(sent)
	n.metrics.heartbeat.Observe(took.Seconds())
	if err != nil {
		if n.stopped() && ctx.Err() != nil {
			// Stop cancelled the loop: the node is leaving, and the
			// coordinator is not in trouble.
			return g, fmt.Errorf("heartbeat: %w", err)
		}
		n.metrics.heartbeatErrors.Add(1)
		n.mu.Lock()
		n.unsentDemand = max(n.unsentDemand, r.Demand)
		n.failed = &r
		n.mu.Unlock()
		n.setOutage(err)
		return g, fmt.Errorf("heartbeat: %w", err)
	}
	n.mu.Lock()
	n.unsentDemand = 0
	n.failed = nil
	n.mu.Unlock()
	if g.Learning && !r.RateApplied.IsZero() && n.sendsNothing(time.Now()) {
		// Learning mode capped the rate shares at what r said the node
		// paces to, true until its fence deadline; answered after it,
		// the report may have been taken after the node's lease had run
		// out on a database whose state the loss took, and the node's
		// share granted to a peer there. The node takes no rate share
		// from this grant: its next report says it paces to none.
		g.RateShare = coord.Rates{}
	}
	g.Share = n.learningShare(time.Now(), r, g)
	n.apply(sent, g)
	return g, nil
}

// learningShare is the share the node takes from g, which answered r at
// now. In learning mode the coordinator grants a node at most what its
// report proves it holds — its in-flight, or the share the epoch already
// granted it — which bounds the node by its reserve in the state the loss
// took only if the report was taken while that reserve still held: until
// the node's lease end plus its request bound. A report answered after the
// node's fence deadline (a slow answer, a resend of a report sampled
// before the fence) may have been taken after that hold ended, its
// in-flight long ended and the capacity granted to a peer there, a grant
// the loss took while the peer still enforces it. The node then takes at
// most what it still holds: it has admitted nothing since the deadline,
// so that is no more than its reserve in the lost state. The coordinator
// keeps the share it granted as proven for the rest of the epoch, so the
// node caps every later learning-mode grant of the epoch at the larger of
// its report's in-flight (answered before the fence deadline, taken while
// the node's reserve held) and the share the last capped grant left it.
func (n *Node) learningShare(now time.Time, r coord.Report, g coord.Grant) int {
	if g.Stale {
		return g.Share // not applied
	}
	fs := n.fence.State()
	late := !fs.Deadline.IsZero() && (fs.Fenced || !now.Before(fs.Deadline))
	n.mu.Lock()
	defer n.mu.Unlock()
	capped := g.Learning && n.learnCapped && n.learnEpoch == g.Epoch
	if !g.Learning || !late && !capped {
		n.learnCapped = n.learnCapped && g.Learning
		return g.Share
	}
	held := r.Inflight
	if late {
		held = n.lim.Inflight()
	}
	if capped {
		held = max(held, n.learnHeld)
	}
	share := min(g.Share, held)
	n.learnCapped, n.learnEpoch, n.learnHeld = true, g.Epoch, share
	return share
}

// setOutage records a failed heartbeat.
func (n *Node) setOutage(err error) {
	n.mu.Lock()
	was, joined := n.outage, n.joined
	n.outage = true
	n.lastErr = err
	n.mu.Unlock()
	if was {
		return
	}
	level := "fail-closed: admitting until the fence deadline"
	switch {
	case !joined:
		level = "not joined: admitting nothing"
	case n.cfg.Outage == HoldLastShare:
		level = "holding the last share"
	}
	switch {
	case errors.Is(err, coord.ErrNodeIDInUse):
		n.log.Error("heartbeat refused: the node id is held by another live process; give every process its "+
			"own NodeID ("+level+")", "err", err)
	case errors.Is(err, coord.ErrPermission):
		n.log.Error("heartbeat refused: this node's database role lacks a node's rights; the schema owner grants them "+
			"with 'fleetctl grant node ROLE' ("+level+")", "err", err)
	case errors.Is(err, coord.ErrSchema):
		n.log.Error("heartbeat failed: the fleetlimit schema is missing or out of date; run 'fleetctl migrate up' "+
			"as the schema owner ("+level+")", "err", err)
	case errors.Is(err, coord.ErrInvalidReport):
		n.log.Error("heartbeat refused: the coordinator rejected this node's report ("+level+")", "err", err)
	default:
		n.log.Warn("coordinator unreachable, "+level, "err", err)
	}
}

// apply takes a grant that answered the heartbeat sent at sent. A stale
// grant, or one older than the grant applied last, is ignored: it renews
// nothing.
func (n *Node) apply(sent time.Time, g coord.Grant) {
	now := time.Now()
	if g.Stale {
		return
	}
	if epoch, gen, older := n.olderGrant(g); older {
		n.log.Warn("fleet: ignored a grant older than the one the node applied last (a Coordinator that replays or reorders its replies?)",
			"epoch", g.Epoch, "generation", g.Generation, "applied_epoch", epoch, "applied_generation", gen)
		return
	}
	_, deadline := n.fence.Renew(now, sent, g.LeaseRemaining)
	if g.Status == coord.StatusEvicted {
		n.mu.Lock()
		if n.evictedAt.IsZero() {
			n.evictedAt = now
		}
		n.mu.Unlock()
		n.fence.Evict()
	}

	n.mu.Lock()
	first := !n.joined
	wasOutage, oldShare, oldStatus, wasLearning := n.outage, n.share, n.status, n.learning
	lifted := n.leaseFenced && !n.fence.State().Fenced // after Evict: an evicted node stays fenced
	if lifted {
		n.leaseFenced = false
	}
	n.joined = true
	n.outage = false
	n.lastErr = nil
	n.lastBeat = sent
	n.share, n.lGlobal, n.status, n.learning = g.Share, g.LGlobal, g.Status, g.Learning
	switch {
	case g.Status == coord.StatusDraining && oldStatus != coord.StatusDraining:
		n.endDrained() // the requests waiting for the rate give their slots back
	case g.Status != coord.StatusDraining && oldStatus == coord.StatusDraining:
		n.drained, n.endDrained = context.WithCancel(context.Background())
	}
	n.peerInflight, n.liveNodes, n.waiting = g.PeerInflight, g.LiveNodes, g.Waiting
	n.floor.peers.Store(g.LiveNodes > 1)
	if g.Share > 0 && (oldShare == 0 || first) {
		n.heldSince = now
	}
	n.noteTurnTaken(sent, g)
	if g.Generation != n.generation || g.Epoch != n.epoch {
		n.generation = g.Generation
		// A lowered share is acknowledged early only when a peer may be
		// waiting for what it frees: the peers' in-flight and the node's
		// former share reach the key's ceiling, or the node steps aside
		// for a peer (see waitsForHeavier). Otherwise the next periodic
		// heartbeat carries the acknowledgement.
		if g.Share < oldShare && !first && (g.PeerInflight+oldShare >= g.LGlobal || sent.Before(n.yieldUntil) || sent.Before(n.turnUntil)) {
			n.ackDue = true
		}
	}
	inflight := n.lim.Inflight()
	if g.Share < inflight {
		n.lowered = true
	}
	n.lim.SetPeerInflight(g.PeerInflight)
	warm := first
	if !n.measured {
		snap := n.lim.Snapshot()
		n.measured = snap.Rounds > 0 || snap.Drops > 0 || snap.RTTNoload > 0
		warm = warm || !n.measured && !snap.Recalibrating
	}
	if warm && g.LGlobal > 0 {
		// A warm start at the fleet's limit, at every grant until the
		// node's own samples back its estimate: an estimate still at
		// InitialLimit would vote L_global down once the node votes. A
		// drop that settles between the snapshot and this call is
		// overwritten, once: the next grant sees it.
		n.lim.SetEstimate(float64(g.LGlobal))
	}
	n.lim.SetFleetLimit(g.LGlobal) // before the share, so a drop never pairs the new cut with the old limit
	// The probe's clock, one tick a heartbeat from the first grant: an
	// interval that admitted requests and met no refusal says the fleet's
	// limit had room, with or without a round trip of this node's own to
	// back its estimate. During AIMD's slow start the report took the
	// tick, just before it was sent.
	if !n.tickedAtReport {
		n.lim.ProbeTick()
	}
	n.applyCeilingLocked()
	n.applyRates(now, g)
	if g.Status == coord.StatusEvicted {
		// Nothing more is admitted, and no grant will renew the lease:
		// the requests waiting for the rate are woken and the queued
		// Acquire calls fail now (with ErrEvicted), rather than wait for
		// good. Once lifted, here or by Stop, the pacing stays lifted.
		n.stopPacing(now)
		n.lim.PauseUntil(now.Add(forever))
	}
	n.epoch, n.appliedGen = g.Epoch, g.Generation
	if n.phase != phaseStopped {
		n.armFenceLocked(deadline.Sub(now))
	}
	kick := n.ackDue
	n.mu.Unlock()

	if wasOutage {
		n.log.Info("coordinator reachable again", "share", g.Share)
	}
	if lifted {
		n.log.Info("lease renewed: fence lifted", "share", g.Share)
	}
	if g.Status != oldStatus && !first {
		n.log.Info("node status changed", "status", g.Status, "was", oldStatus)
	}
	switch {
	case g.Learning && !wasLearning:
		n.log.Warn("key in learning mode: the database may have lost state (a failover, a restore or any server restart) or an operator ran fleetctl relearn, and until "+
			"the leases and requests of before must have ended (the key's longest lease plus the longest "+
			"MaxRequestDuration its nodes reported) no node is granted more than it holds",
			"share", g.Share, "inflight", inflight)
	case !g.Learning && wasLearning:
		n.log.Info("key out of learning mode", "share", g.Share)
	}
	if g.Share != oldShare && !first {
		n.log.Debug("share changed", "share", g.Share, "was", oldShare, "l_global", g.LGlobal, "generation", g.Generation)
	}
	if kick {
		select {
		case n.kick <- struct{}{}:
		default:
		}
	}
}

// armFenceLocked makes the fence timer fire after d. The caller holds n.mu.
func (n *Node) armFenceLocked(d time.Duration) {
	if n.fenceTimer == nil {
		n.fenceTimer = time.AfterFunc(d, n.checkFence)
		return
	}
	n.fenceTimer.Reset(d)
}

// checkFence runs when the fence deadline may have passed.
func (n *Node) checkFence() {
	if !n.fence.Check(time.Now()) {
		return
	}
	n.mu.Lock()
	n.applyCeilingLocked()
	n.mu.Unlock()
}

// onFenced is the fence's callback.
func (n *Node) onFenced(r fence.Reason) {
	n.metrics.fencings.Add(1)
	switch {
	case r == fence.ReasonEvicted:
		n.log.Error("node evicted by an operator: fenced for good; restart the process to rejoin")
	case n.cfg.Outage == HoldLastShare:
		n.log.Warn("lease expiring; holding the last share (HoldLastShare)")
	default:
		n.log.Warn("lease expiring: fenced, admitting nothing until a heartbeat succeeds")
	}
	n.mu.Lock()
	if r == fence.ReasonLeaseExpiring && n.cfg.Outage != HoldLastShare {
		n.leaseFenced = true
	}
	n.applyCeilingLocked()
	n.mu.Unlock()
}

// ceilingLocked is the limiter ceiling the node's state allows and until
// when: the share until the fence deadline under FailClosed (the limiter
// checks that deadline at every admission, so no admission can happen on
// an expired lease however late the fence timer runs), the share for good
// under HoldLastShare, and 0 before the first grant, after Stop, once
// evicted and while fenced under FailClosed. The caller holds n.mu.
func (n *Node) ceilingLocked() (int, time.Time) {
	fs := n.fence.State()
	switch {
	case n.phase != phaseRunning, !n.joined, fs.Evicted:
		return 0, time.Time{}
	case n.cfg.Outage == HoldLastShare:
		return n.share, time.Time{}
	case fs.Fenced:
		return 0, time.Time{}
	}
	return n.share, fs.Deadline
}

// stopped reports whether Stop was called.
func (n *Node) stopped() bool {
	select {
	case <-n.stop:
		return true
	default:
		return false
	}
}
