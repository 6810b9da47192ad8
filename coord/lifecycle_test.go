package coord

// Lifecycle regressions found by an adversarial review: an evicted
// instance never rejoining, learning mode not ratcheting, late reports
// after a departure. Nodes behave as fleet.Node does: they apply every
// non-stale grant and report the newest one they applied.

import (
	"errors"
	"testing"
	"time"
)

var zzT0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

const (
	zzLease = 2 * time.Second
	zzBound = time.Second
)

// zzNode is a node as fleet.Node behaves.
type zzNode struct {
	id, instance string
	seq          int64
	epoch, gen   int64
	share        int
	evicted      bool
}

func (n *zzNode) report(inflight, demand int) Report {
	n.seq++
	return Report{Key: "k", NodeID: n.id, Instance: n.instance, Seq: n.seq, LLocal: 100, Inflight: inflight,
		Demand: demand, Epoch: n.epoch, AppliedGen: n.gen, LeaseTTL: zzLease, MaxRequestDuration: zzBound}
}

func (n *zzNode) apply(g Grant) {
	if g.Stale {
		return
	}
	n.epoch, n.gen, n.share = g.Epoch, g.Generation, g.Share
	if g.Status == StatusEvicted {
		n.evicted = true
	}
}

// zzBeat is Memory.Heartbeat on a state: Incarnate, then Heartbeat; the node
// applies the grant.
func zzBeat(t *testing.T, s State, n *zzNode, inflight, demand int, now time.Time) (State, Grant) {
	t.Helper()
	r := n.report(inflight, demand)
	next, g, err := s.Incarnate(Database{Incarnation: "db"}, now, r).Heartbeat(r, now)
	if err != nil {
		t.Fatalf("heartbeat of %s at %v: %v", n.id, now.Sub(zzT0), err)
	}
	n.apply(g)
	return next, g
}

func zzAt(d time.Duration) time.Time { return zzT0.Add(d) }

// An evicted instance that never got its "evicted" reply (partitioned) and
// comes back long after its row has gone is still answered evicted.
func TestEvictedInstanceNeverRejoinsAfterItsRowIsGone(t *testing.T) {
	s := NewState("k", zzT0)
	a := &zzNode{id: "a", instance: "a-1"}
	b := &zzNode{id: "b", instance: "b-1"}
	s, _ = zzBeat(t, s, a, 0, 5, zzAt(0))
	s, _ = zzBeat(t, s, b, 0, 5, zzAt(0))
	s, err := s.Evict("a")
	if err != nil {
		t.Fatal(err)
	}
	// a is partitioned from here on; b keeps beating, which deletes a's
	// tombstone an hour after a's hold.
	later := zzAt(zzLease + zzBound + 48*time.Hour + time.Second)
	s, _ = zzBeat(t, s, b, 0, 0, later) // b idle now
	_, g := zzBeat(t, s, a, 0, 5, later.Add(time.Millisecond))
	t.Logf("evicted instance a-1 reports again: status %s, share %d", g.Status, g.Share)
	if g.Status != StatusEvicted || g.Share != 0 {
		t.Errorf("evicted instance a-1 got status %s, share %d: it joined afresh", g.Status, g.Share)
	}
}

// An evicted instance that cannot drain (one lease never settled) keeps
// heartbeating past its hold, when its row goes: its reports stay answered
// evicted, prove no loss, and a new process with the same node id joins.
func TestEvictedInstanceThatCannotDrainStaysEvicted(t *testing.T) {
	s := NewState("k", zzT0)
	a := &zzNode{id: "a", instance: "a-1"}
	b := &zzNode{id: "b", instance: "b-1"}
	s, _ = zzBeat(t, s, a, 1, 5, zzAt(0))
	s, _ = zzBeat(t, s, b, 0, 5, zzAt(0))
	s, _ = s.Evict("a")
	s, g := zzBeat(t, s, a, 1, 1, zzAt(time.Second))
	if !a.evicted || g.Status != StatusEvicted {
		t.Fatalf("setup: a not evicted: %+v", g)
	}
	// a keeps heartbeating with its one leaked request; b beats too.
	var (
		now             time.Time
		active, learned bool
	)
	for d := 2 * time.Second; d <= zzLease+zzBound+48*time.Hour+3*time.Second; d += time.Second {
		now = zzAt(d)
		s, _ = zzBeat(t, s, b, 0, 5, now)
		s, g = zzBeat(t, s, a, 1, 1, now.Add(time.Millisecond))
		if g.Status != StatusEvicted && !active {
			t.Logf("at +%v the evicted instance's report is answered %s, share %d, learning %v",
				d, g.Status, g.Share, g.Learning)
		}
		active, learned = active || g.Status != StatusEvicted, learned || g.Learning
	}
	row, _ := s.Row("a", "a-1")
	t.Logf("evicted a-1 now: status %s, share %d, learning %v, row evicted=%v member=%v",
		g.Status, g.Share, g.Learning, row.Evicted, row.Member(now))
	_, _, err := s.Heartbeat((&zzNode{id: "a", instance: "a-2"}).report(0, 1), now.Add(2*time.Millisecond))
	t.Logf("a new process a-2 with the same node id: err = %v", err)
	if active || learned || errors.Is(err, ErrNodeIDInUse) {
		t.Errorf("an evicted, fenced-for-good instance became a member again (learning mode entered: %v), "+
			"and a new process with its node id is refused: %v", learned, err)
	}
}

// Learning mode must not ratchet: a report taken in a lull (in flight 0)
// must not pin the node at share 0 for the rest of learning mode; it keeps
// the share this epoch already granted it.
func TestLearningDoesNotRatchetShares(t *testing.T) {
	s := NewState("k", zzT0)
	s.Key.MaxLimit = 10
	a := &zzNode{id: "a", instance: "a-1"}
	s, _ = zzBeat(t, s, a, 0, 10, zzAt(0))
	s, _ = zzBeat(t, s, a, 10, 10, zzAt(time.Second))
	// A failover: the next heartbeat sees another incarnation.
	r := a.report(10, 10)
	next, g, err := s.Incarnate(Database{Incarnation: "replica"}, zzAt(2*time.Second), r).Heartbeat(r, zzAt(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a.apply(g)
	s = next
	s.Key.Incarnation = "db" // later beats go through zzBeat's incarnation
	t.Logf("learning until +%v, share %d", s.Key.LearningUntil.Sub(zzT0), g.Share)
	// One report taken between two requests (in flight 0) ...
	s, g = zzBeat(t, s, a, 0, 10, zzAt(3*time.Second))
	// ... and a is stuck at that share for the rest of learning mode.
	end := s.Key.LearningUntil
	for now := zzAt(4 * time.Second); now.Before(end); now = now.Add(time.Second) {
		s, g = zzBeat(t, s, a, min(a.share, 10), 10, now)
	}
	t.Logf("one second before learning ends: share %d of L_global %d, demand 10, no other node", g.Share, g.LGlobal)
	if g.Share == 0 {
		t.Errorf("share stayed 0 through learning mode (%v) with the whole key free",
			end.Sub(zzAt(3*time.Second)))
	}
}

// A heartbeat that reaches the database after the instance's Leave (sent
// before it, delayed) is answered as stale by the departed row: it neither
// recreates a member nor, claiming requests in flight, starts learning
// mode; a restarted process with the same node id joins.
func TestLateHeartbeatAfterLeaveIsStale(t *testing.T) {
	s := NewState("k", zzT0)
	a := &zzNode{id: "a", instance: "a-1"}
	b := &zzNode{id: "b", instance: "b-1"}
	s, _ = zzBeat(t, s, a, 0, 5, zzAt(0))
	s, _ = zzBeat(t, s, b, 0, 5, zzAt(0))
	s, _ = zzBeat(t, s, a, 2, 0, zzAt(time.Second)) // Stop: reporting demand 0
	late := a.report(1, 0)                          // the last beat of Stop's drain, delayed
	s, err := s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1"}, zzAt(1100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s, g, err := s.Incarnate(Database{Incarnation: "db"}, zzAt(1200*time.Millisecond), late).Heartbeat(late, zzAt(1200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Heartbeat((&zzNode{id: "a", instance: "a-2"}).report(0, 1), zzAt(1300*time.Millisecond))
	t.Logf("late beat after leave: status %s, learning %v; restarted a-2: err = %v", g.Status, g.Learning, err)
	if g.Learning || err != nil {
		t.Errorf("a late heartbeat of a departed instance put the key in learning mode (%v) and refuses its "+
			"restart: %v", g.Learning, err)
	}
}
