package fleet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// refuse settles le, admitted at admitted, as the upstream's refusal of
// its request (a 429, 503 or 529), which came back at now, rtt after the
// request was sent: a drop at once, whose slot stays held for
// refusalHold, no later than bound.
func (n *Node) refuse(le adaptive.Lease, admitted time.Time, rtt time.Duration, bound, now time.Time) {
	abandon(le, true, bound, n.refusalHold(admitted, rtt, now))
}

// refusalHold is how long the slot of a refused request, admitted at
// admitted and come back at now, rtt after it was sent, stays held, by
// the node's limit before the refusal's drop: until a served request's
// headers would have come — the limiter's RTTNoload after sending — so
// that a node cut to its last slots does not send its queue to be
// refused at loopback speed. While the node's limit is 1 and
// its last grant counted other live nodes, each refusal in a row holds
// its slot twice as long as the one before (see floorBackoff); a refusal
// at a higher limit ends the streak. It may be 0 or less: no hold.
func (n *Node) refusalHold(admitted time.Time, rtt time.Duration, now time.Time) time.Duration {
	noload := n.lim.RTTNoload()
	switch lim := n.lim.Limit(); {
	case lim == 1 && n.floor.peers.Load():
		return noload<<(n.floor.refused(admitted, now, noload)-1) - rtt
	case lim > 1:
		n.floor.reset()
	}
	return noload - rtt
}

// maxFloorBackoff caps the refusals in a row that double the hold of a
// refused request at a limit of 1: at most 2^(maxFloorBackoff−1) × RTTNoload.
const maxFloorBackoff = 4

// floorBackoff is a node's streak of refusals at its last slot: while its
// limit is 1 and the key has other live nodes, each refusal in a row
// holds its slot twice as long as the last (see Lease.Refuse). Safe for
// concurrent use.
type floorBackoff struct {
	peers atomic.Bool // the last grant counted other live nodes on the key

	mu   sync.Mutex
	k    int       // the streak, 0 to maxFloorBackoff
	last time.Time // when its last refusal came back
}

// refused counts a refusal at the last slot, of a request admitted at
// admitted and come back at now, and returns its place in the streak, 1
// to maxFloorBackoff. A request admitted before the streak's last refusal
// came back was sent in the same round trip: it takes that refusal's
// place without adding to it. A streak whose last refusal came back more
// than twice the longest hold (by noload) ago is over: this refusal is
// the first.
func (f *floorBackoff) refused(admitted, now time.Time, noload time.Duration) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.k > 0 && admitted.Before(f.last):
	case f.k > 0 && now.Sub(f.last) > 2*noload<<(maxFloorBackoff-1):
		f.k = 1
	default:
		f.k = min(f.k+1, maxFloorBackoff)
	}
	f.last = now
	return f.k
}

// reset ends the streak: a request was refused above the last slot.
func (f *floorBackoff) reset() {
	f.mu.Lock()
	f.k = 0
	f.mu.Unlock()
}

// served ends the streak for a request admitted at admitted and served,
// unless it was admitted before the streak's last refusal came back: a
// request sent before that round trip (a long stream, say) says nothing
// of the room since.
func (f *floorBackoff) served(admitted time.Time) {
	f.mu.Lock()
	if !admitted.Before(f.last) {
		f.k = 0
	}
	f.mu.Unlock()
}
