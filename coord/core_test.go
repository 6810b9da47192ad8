package coord

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const ttl = 2 * time.Second

// rep is a valid report of node id on key "k".
func rep(id string, seq int64, lLocal, inflight, demand int, applied int64) Report {
	return Report{Key: "k", NodeID: id, Instance: id + "-1", Seq: seq, LLocal: lLocal,
		Inflight: inflight, Demand: demand, AppliedGen: applied, LeaseTTL: ttl}
}

// row is a live node row of id as seen at t0.
func row(id string, lLocal, inflight, demand, share, unacked int) NodeState {
	return NodeState{NodeID: id, Instance: id + "-1", Seq: 1, LLocal: lLocal, Inflight: inflight,
		Demand: demand, Share: share, Measuring: share > 0 || inflight > 0, UnackedHigh: unacked, LeaseExpiresAt: t0.Add(time.Second),
		HoldUntil: t0.Add(time.Second), JoinedAt: t0.Add(-time.Minute), HeartbeatAt: t0.Add(-time.Second),
		Labels: map[string]string{}}
}

// node returns id's row in s at t0.
func node(s State, id string) NodeState {
	n, _ := s.Node(id, t0)
	return n
}

func evictedRow(id string, lLocal int) NodeState {
	n := row(id, lLocal, 0, 0, 0, 0)
	n.Evicted = true
	return n
}

func state(lGlobal int, gen int64, nodes ...NodeState) State {
	s := NewState("k", t0.Add(-time.Hour))
	s.Key.LGlobal, s.Key.Generation = lGlobal, gen
	for i := range nodes {
		nodes[i].Epoch = s.Key.Epoch
	}
	s.Nodes = nodes
	return s
}

func mustHeartbeat(t *testing.T, s State, r Report, now time.Time) (State, Grant) {
	t.Helper()
	next, g, err := s.Heartbeat(r, now)
	require.NoError(t, err)
	return next, g
}

func TestHeartbeatRules(t *testing.T) {
	t.Parallel()
	draining := row("b", 10, 0, 5, 0, 0)
	draining.Draining = true
	evicted := row("b", 10, 2, 5, 0, 3)
	evicted.Evicted = true
	expired := row("b", 10, 2, 5, 4, 4)
	expired.LeaseExpiresAt = t0
	expired.HoldUntil = t0.Add(time.Second)
	done := expired
	done.HoldUntil = t0
	departed := row("b", 10, 3, 0, 0, 0)
	departed.Departed = true

	tests := []struct {
		name  string
		s     State
		r     Report
		grant Grant // Epoch is the key's
		check func(t *testing.T, s State)
	}{{
		name:  "first node with demand takes the whole ceiling",
		s:     NewState("k", t0),
		r:     rep("a", 1, 8, 0, 1, 0),
		grant: Grant{Share: 8, LGlobal: 8, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
		check: func(t *testing.T, s State) {
			a := node(s, "a")
			require.Equal(t, 8, a.UnackedHigh)
			require.Equal(t, int64(1), a.GrantedGen)
			require.Equal(t, t0.Add(ttl), a.LeaseExpiresAt)
			require.Equal(t, t0.Add(ttl), a.HoldUntil, "no request bound: the hold ends with the lease")
			require.Equal(t, t0, a.JoinedAt)
		},
	}, {
		name:  "a node without demand gets nothing",
		s:     NewState("k", t0),
		r:     rep("a", 1, 8, 0, 0, 0),
		grant: Grant{Share: 0, LGlobal: 8, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
	}, {
		name: "the hold is the lease end plus the request bound",
		s:    NewState("k", t0),
		r: func() Report {
			r := rep("a", 1, 8, 0, 1, 0)
			r.MaxRequestDuration = time.Minute
			return r
		}(),
		grant: Grant{Share: 8, LGlobal: 8, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
		check: func(t *testing.T, s State) {
			require.Equal(t, t0.Add(ttl+time.Minute), node(s, "a").HoldUntil)
			require.Equal(t, time.Minute, s.Key.MaxRequestDuration)
			require.Equal(t, ttl, s.Key.MaxLeaseTTL)
		},
	}, {
		name:  "lower median of an even count",
		s:     state(0, 0, row("b", 10, 0, 1, 0, 0), row("c", 30, 0, 1, 0, 0), row("d", 40, 0, 1, 0, 0)),
		r:     rep("a", 1, 20, 0, 1, 0),
		grant: Grant{Share: 5, LGlobal: 20, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 4},
	}, {
		name: "lower median ignores evicted rows",
		// Counting them, the lower median of 1, 1, 9, 9 would be 1.
		s:     state(0, 0, row("b", 9, 0, 1, 0, 0), evictedRow("c", 1), evictedRow("d", 1)),
		r:     rep("a", 1, 9, 0, 1, 0),
		grant: Grant{Share: 5, LGlobal: 9, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 2},
	}, {
		name:  "lower median ignores expired rows",
		s:     state(0, 0, row("c", 30, 0, 1, 0, 0), done, expired),
		r:     rep("a", 1, 20, 0, 1, 0),
		grant: Grant{Share: 10, LGlobal: 20, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 2, LiveNodes: 2},
	}, {
		name: "min aggregate",
		s: func() State {
			s := state(0, 0, row("b", 7, 0, 1, 0, 0), row("c", 30, 0, 1, 0, 0))
			s.Key.Aggregate = AggregateMin
			return s
		}(),
		r:     rep("a", 1, 20, 0, 1, 0),
		grant: Grant{Share: 3, LGlobal: 7, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "max override clamps",
		s: func() State {
			s := NewState("k", t0)
			s.Key.MaxLimit = 5
			return s
		}(),
		r:     rep("a", 1, 20, 0, 1, 0),
		grant: Grant{Share: 5, LGlobal: 5, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
	}, {
		name: "min override clamps",
		s: func() State {
			s := NewState("k", t0)
			s.Key.MinLimit = 50
			return s
		}(),
		r:     rep("a", 1, 20, 0, 1, 0),
		grant: Grant{Share: 50, LGlobal: 50, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
	}, {
		name: "demand split with floor division",
		// L=10, n=2, R=8, D=3+1: self 1+8*3/4 = 7.
		s:     state(10, 4, row("b", 10, 0, 1, 0, 0)),
		r:     rep("a", 1, 10, 0, 3, 0),
		grant: Grant{Share: 7, LGlobal: 10, Generation: 5, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 2},
	}, {
		name: "demand split rounds up, so the shares can add up to L_global",
		// L=10, n=3, R=7, D=1+1+1: self 1+⌈7/3⌉ = 4; the occupancy cap
		// keeps the sum within L_global.
		s:     state(10, 0, row("b", 10, 0, 1, 0, 0), row("c", 10, 0, 1, 0, 0)),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 4, LGlobal: 10, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "the last of three rounded-up shares is capped by the others' reserve",
		// b and c hold 4 each: self gets 10−8 = 2, and Σ share = L_global.
		s:     state(10, 2, row("b", 10, 0, 1, 4, 4), row("c", 10, 0, 1, 4, 4)),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 2, LGlobal: 10, Generation: 3, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "only members holding a share or requests vote",
		// b and c are starved (no share, nothing in flight): their l_local
		// rests on no recent sample. a holds the only slot; its l_local 5
		// alone sets L_global, where counting b and c would keep it at 1.
		// Self: 1+⌈(5−3)·5/15⌉ = 2.
		s: state(1, 1, func() NodeState { a := row("a", 1, 1, 5, 1, 1); a.GrantedGen = 1; return a }(),
			row("b", 1, 0, 5, 0, 0), row("c", 1, 0, 5, 0, 0)),
		r:     rep("a", 2, 5, 1, 5, 1),
		grant: Grant{Share: 2, LGlobal: 5, Generation: 2, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "a joiner's first report does not vote",
		// b holds 60 of a measured 60; c joins with its initial 20. The
		// lower median of two would be 20.
		s:     state(60, 1, row("b", 60, 30, 40, 60, 60)),
		r:     rep("c", 1, 20, 0, 1, 0),
		grant: Grant{Share: 0, LGlobal: 60, Generation: 2, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 30, LiveNodes: 2},
	}, {
		name: "with no voter, L_global stays",
		// Nobody holds a share or requests: nothing new to go by.
		s:     state(30, 0, row("b", 10, 0, 1, 0, 0), row("c", 40, 0, 1, 0, 0)),
		r:     rep("a", 1, 5, 0, 1, 0),
		grant: Grant{Share: 10, LGlobal: 30, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name:  "with no voter and no L_global yet, every member votes",
		s:     state(0, 0, row("b", 10, 0, 1, 0, 0), row("c", 30, 0, 1, 0, 0)),
		r:     rep("a", 1, 20, 0, 1, 0),
		grant: Grant{Share: 7, LGlobal: 20, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "idle peers get no floor",
		// L=10, n=2 (c is idle), R=8, D=2: self 1+8*1/2 = 5.
		s:     state(10, 0, row("b", 10, 0, 1, 0, 0), row("c", 10, 0, 0, 0, 0)),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 5, LGlobal: 10, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name:  "draining peers get no target and hold only their reserve",
		s:     state(10, 0, draining),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 10, LGlobal: 10, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 2},
	}, {
		name:  "occupancy cap reserves a peer's unacknowledged high share",
		s:     state(10, 3, row("b", 10, 1, 0, 2, 9)),
		r:     rep("a", 1, 10, 0, 9, 0),
		grant: Grant{Share: 1, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 1, LiveNodes: 2},
	}, {
		name:  "occupancy cap reserves a peer's in-flight",
		s:     state(10, 3, row("b", 10, 6, 0, 2, 2)),
		r:     rep("a", 1, 10, 0, 9, 0),
		grant: Grant{Share: 4, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 6, LiveNodes: 2},
	}, {
		name:  "no room gives share 0",
		s:     state(2, 3, row("b", 2, 0, 5, 2, 2)),
		r:     rep("a", 1, 2, 0, 5, 0),
		grant: Grant{Share: 0, LGlobal: 2, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 2},
	}, {
		name:  "evicted peer keeps its reserve and is no member",
		s:     state(10, 3, evicted),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 7, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 2, LiveNodes: 1},
	}, {
		name:  "expired peer keeps its reserve until its hold ends",
		s:     state(10, 3, expired),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 6, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 2, LiveNodes: 1},
		check: func(t *testing.T, s State) {
			b, ok := s.Row("b", "b-1")
			require.True(t, ok, "the row stays while it holds")
			require.Equal(t, StatusExpired, b.Status(t0))
		},
	}, {
		name:  "departed peer keeps its in-flight until its hold ends",
		s:     state(10, 3, departed),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 7, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 3, LiveNodes: 1},
	}, {
		name:  "a row whose hold has ended is deleted and frees its reserve",
		s:     state(10, 3, done),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 10, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
		check: func(t *testing.T, s State) {
			_, ok := s.Row("b", "b-1")
			require.False(t, ok)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.s.Clone()
			next, g := mustHeartbeat(t, tt.s, tt.r, t0)
			tt.grant.Epoch = next.Key.Epoch
			require.Equal(t, tt.grant, g)
			require.Equal(t, before, tt.s, "the receiver must not change")
			require.LessOrEqual(t, sumShare(next), next.Key.LGlobal)
			if tt.check != nil {
				tt.check(t, next)
			}
		})
	}
}

func sumShare(s State) int {
	total := 0
	for _, n := range s.Nodes {
		total += n.Share
	}
	return total
}

// applied is the report fields of a node that applied g.
func applied(r Report, g Grant) Report {
	r.Epoch, r.AppliedGen = g.Epoch, g.Generation
	return r
}

func TestHeartbeatAcknowledgement(t *testing.T) {
	t.Parallel()
	s, g := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 0, 1, 0), t0)
	require.Equal(t, 4, g.Share)
	// b joins; a holds 4 granted, not yet acknowledged: b gets nothing.
	s, g = mustHeartbeat(t, s, rep("b", 1, 4, 0, 4, 0), t0)
	require.Equal(t, 0, g.Share)
	// a reports without having applied gen 1: its target is now
	// 1+⌊2·1/5⌋ = 1 (R = 2 splits as 0 rem 2 for a, 1 rem 3 for b, and
	// the unit left goes to b's larger remainder), but it may still
	// enforce 4.
	s, g = mustHeartbeat(t, s, rep("a", 2, 4, 0, 1, 0), t0)
	require.Equal(t, 1, g.Share)
	require.Equal(t, 4, node(s, "a").UnackedHigh, "unacknowledged grants stay reserved")
	s, g = mustHeartbeat(t, s, rep("b", 2, 4, 0, 4, 0), t0)
	require.Equal(t, 0, g.Share, "a may still enforce 4")
	// A generation of another epoch acknowledges nothing.
	a := node(s, "a")
	wrongEpoch := rep("a", 3, 4, 0, 1, a.GrantedGen)
	wrongEpoch.Epoch = a.Epoch - 1
	s, _ = mustHeartbeat(t, s, wrongEpoch, t0)
	require.Equal(t, 4, node(s, "a").UnackedHigh)
	// a applies its newest grant and says so: the reserve drops to 1.
	ack := rep("a", 4, 4, 0, 1, a.GrantedGen)
	ack.Epoch = a.Epoch
	s, g = mustHeartbeat(t, s, ack, t0)
	require.Equal(t, 1, node(s, "a").UnackedHigh)
	require.Equal(t, 1, g.Share)
	// b's target: L=4, n=2, R=2, D=1+4: 1+⌊2·4/5⌋+1 = 3, within 4−1
	// after a's reserve: the targets add up to L.
	_, g = mustHeartbeat(t, s, rep("b", 3, 4, 0, 4, 0), t0)
	require.Equal(t, 3, g.Share)
}

func TestHeartbeatStaleSeq(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 5, 4, 0, 1, 0), t0)
	for _, seq := range []int64{5, 4, 0} {
		next, g := mustHeartbeat(t, s, rep("a", seq, 9, 3, 3, 0), t0.Add(time.Second))
		require.True(t, g.Stale)
		require.Equal(t, Grant{Share: 4, LGlobal: 4, Epoch: s.Key.Epoch, Generation: 1, LeaseRemaining: time.Second,
			Status: StatusActive, LiveNodes: 1, Stale: true}, g)
		require.Equal(t, s, next, "a stale report writes nothing")
	}
}

func TestHeartbeatInstances(t *testing.T) {
	t.Parallel()
	first := rep("a", 5, 4, 0, 1, 0)
	first.MaxRequestDuration = time.Second
	s, g1 := mustHeartbeat(t, NewState("k", t0), first, t0)
	other := rep("a", 9, 4, 0, 1, 0)
	other.Instance = "a-2"

	_, _, err := s.Heartbeat(other, t0.Add(ttl-time.Microsecond))
	require.ErrorIs(t, err, ErrNodeIDInUse)
	require.NotContains(t, err.Error(), "a-1", "the error does not reveal the holder's instance")

	// Once the lease has run out a new instance joins beside the old row,
	// which keeps its reserve until its hold ends.
	now := t0.Add(ttl)
	next, g := mustHeartbeat(t, s, other, now)
	require.Equal(t, int64(2), g.Generation, "a fresh row gets a new generation")
	require.Equal(t, 0, g.Share, "the expired instance may still have 4 in flight")
	old, ok := next.Row("a", "a-1")
	require.True(t, ok)
	require.Equal(t, StatusExpired, old.Status(now))
	require.Equal(t, 4, old.Reserve(now))
	fresh, _ := next.Row("a", "a-2")
	require.Equal(t, now, fresh.JoinedAt)
	require.Equal(t, fresh, node(next, "a"), "the member is the node's row")

	// Past the old hold, the old row is gone and its capacity free.
	later := t0.Add(ttl + time.Second)
	again := applied(other, g)
	again.Seq++
	next, g = mustHeartbeat(t, next, again, later)
	_, ok = next.Row("a", "a-1")
	require.False(t, ok)
	require.Equal(t, 4, g.Share)

	// The same instance coming back late revives its own row with any newer
	// seq: its grant and reserve are the ones it may still enforce.
	late := applied(rep("a", 6, 4, 0, 1, 0), g1)
	next, g = mustHeartbeat(t, s, late, now)
	require.False(t, g.Stale)
	require.Equal(t, int64(1), g.Generation, "an unchanged grant keeps its generation")
	a, _ := next.Row("a", "a-1")
	require.Equal(t, int64(6), a.Seq)
	require.Equal(t, t0, a.JoinedAt)
}

func TestHeartbeatEvictedInstance(t *testing.T) {
	t.Parallel()
	withBound := func(r Report) Report { r.MaxRequestDuration = 3 * time.Second; return r }
	s, ga := mustHeartbeat(t, NewState("k", t0), withBound(rep("a", 1, 4, 0, 1, 0)), t0)
	s, _ = mustHeartbeat(t, s, withBound(rep("b", 1, 4, 0, 1, 0)), t0)
	s, err := s.Evict("a")
	require.NoError(t, err)
	a := node(s, "a")
	require.Equal(t, 0, a.Share)
	require.Equal(t, 4, a.UnackedHigh)

	// Its heartbeats are answered "evicted" and never renew it, but they
	// report its in-flight.
	later := t0.Add(time.Second)
	next, g := mustHeartbeat(t, s, rep("a", 2, 4, 3, 9, ga.Generation), later)
	require.Equal(t, StatusEvicted, g.Status)
	require.Equal(t, 0, g.Share)
	require.Equal(t, ttl-time.Second, g.LeaseRemaining, "an evicted node's lease is not renewed")
	a, _ = next.Row("a", "a-1")
	require.Equal(t, t0.Add(ttl), a.LeaseExpiresAt)
	require.Equal(t, 3, a.Inflight)
	require.Equal(t, 4, a.Reserve(later), "share 0 is not acknowledged: it may still enforce 4")

	// b cannot use a's reserve until a acknowledges share 0 with nothing in
	// flight, or its hold ends.
	_, g = mustHeartbeat(t, next, rep("b", 2, 4, 0, 9, 0), later)
	require.Equal(t, 0, g.Share)
	ack := applied(rep("a", 3, 4, 1, 0, 0), Grant{Epoch: a.Epoch, Generation: a.GrantedGen})
	next, _ = mustHeartbeat(t, next, ack, later)
	_, g = mustHeartbeat(t, next, rep("b", 2, 4, 0, 9, 0), later)
	require.Equal(t, 3, g.Share, "acknowledged share 0 with 1 in flight: 1 stays reserved")

	// A new instance of the node id joins at once.
	repl := rep("a", 1, 4, 0, 1, 0)
	repl.Instance = "a-2"
	next, g = mustHeartbeat(t, next, repl, later)
	require.Equal(t, StatusActive, g.Status)

	// The evicted instance never becomes a member again: not after its
	// lease, not after its hold, not after its row has gone.
	for _, at := range []time.Duration{ttl, ttl + 3*time.Second, 48 * time.Hour} {
		next, g = mustHeartbeat(t, next, rep("a", 10+int64(at), 4, 0, 5, 0), t0.Add(at))
		require.Equal(t, StatusEvicted, g.Status, "at +%v", at)
		require.Equal(t, 0, g.Share)
		require.Zero(t, g.LeaseRemaining)
		require.False(t, g.Learning, "its in-flight proves no loss")
	}
	// b's heartbeat past the hold deletes the row and remembers the
	// instance.
	end := t0.Add(ttl + 3*time.Second)
	next, _ = mustHeartbeat(t, next, rep("b", 3, 4, 0, 9, 0), end)
	_, ok := next.Row("a", "a-1")
	require.False(t, ok)
	require.Equal(t, []Instance{{"a", "a-1"}}, next.Evictions)
	later2 := end.Add(100 * 24 * time.Hour)
	next2, g := mustHeartbeat(t, next, rep("a", 99, 4, 2, 5, ga.Generation), later2)
	require.Equal(t, StatusEvicted, g.Status, "days later, still evicted")
	require.Equal(t, next, next2, "and nothing is written")
	left, err := next.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1"}, later2)
	require.NoError(t, err, "an evicted instance may leave again")
	require.Equal(t, next, left)
}

func TestDrainUndrain(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 2, 2, 0), t0)
	s, err := s.Drain("a")
	require.NoError(t, err)
	a := node(s, "a")
	require.Equal(t, 0, a.Share)
	require.Equal(t, int64(2), a.GrantedGen)
	require.Equal(t, int64(2), s.Key.Generation)
	require.Equal(t, StatusDraining, a.Status(t0))
	require.Equal(t, []string{"a"}, s.Drains)

	again, err := s.Drain("a")
	require.NoError(t, err)
	require.Equal(t, s, again, "draining twice changes nothing")

	s, g := mustHeartbeat(t, s, rep("a", 2, 4, 1, 1, 2), t0)
	require.Equal(t, 0, g.Share)
	require.Equal(t, StatusDraining, g.Status)

	s, err = s.Undrain("a")
	require.NoError(t, err)
	require.Empty(t, s.Drains)
	_, g = mustHeartbeat(t, s, rep("a", 3, 4, 0, 1, 2), t0)
	require.Equal(t, 4, g.Share)
	require.Equal(t, StatusActive, g.Status)

	_, err = s.Drain("zz")
	require.ErrorIs(t, err, ErrUnknownNode)
	_, err = s.Undrain("zz")
	require.ErrorIs(t, err, ErrUnknownNode)
}

func TestDrainSurvivesLapseAndRestart(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 0, 3, 0), t0)
	s, err := s.Drain("a")
	require.NoError(t, err)

	// The lease lapses, the hold ends, another node's heartbeat deletes the
	// row: the mark stays.
	gone := t0.Add(time.Hour)
	s, _ = mustHeartbeat(t, s, rep("b", 1, 4, 0, 1, 0), gone)
	_, ok := s.Row("a", "a-1")
	require.False(t, ok)
	require.Equal(t, []string{"a"}, s.Drains)

	// The same instance, and then a new one, come back draining.
	s, g := mustHeartbeat(t, s, rep("a", 2, 4, 0, 3, 0), gone)
	require.Equal(t, StatusDraining, g.Status)
	require.Equal(t, 0, g.Share)
	restart := rep("a", 1, 4, 0, 3, 0)
	restart.Instance = "a-2"
	s, _ = s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1"}, gone)
	s, g = mustHeartbeat(t, s, restart, gone)
	require.Equal(t, StatusDraining, g.Status)
	require.Equal(t, 0, g.Share)

	// Undrain works on the node id, row or not.
	s, err = s.Undrain("a")
	require.NoError(t, err)
	require.Empty(t, s.Drains)
	restart.Seq++
	s, g = mustHeartbeat(t, s, restart, gone)
	require.Equal(t, StatusActive, g.Status)
	require.False(t, node(s, "a").Draining)
}

func TestLeave(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 2, 2, 0), t0)
	_, err := s.Leave(Departure{Key: "k", NodeID: "a", Instance: "someone-else"}, t0)
	require.ErrorIs(t, err, ErrUnknownNode)
	_, err = s.Leave(Departure{Key: "k", NodeID: "b", Instance: "b-1"}, t0)
	require.ErrorIs(t, err, ErrUnknownNode)
	_, err = s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1", Inflight: -1}, t0)
	require.ErrorIs(t, err, ErrInvalidReport)
	_, err = s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1", Hold: MaxRequestBound + time.Microsecond}, t0)
	require.ErrorIs(t, err, ErrInvalidReport)

	gone, err := s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1"}, t0)
	require.NoError(t, err)
	a, _ := gone.Row("a", "a-1")
	require.Equal(t, StatusDeparted, a.Status(t0))
	require.Zero(t, a.Reserve(t0), "nothing in flight: its capacity is free at once")
	require.Equal(t, t0.Add(ttl), a.HoldUntil, "kept until its old hold would have ended")
	late, g := mustHeartbeat(t, gone, rep("a", 2, 4, 3, 3, 0), t0)
	require.True(t, g.Stale, "a late heartbeat does not bring it back")
	require.Equal(t, gone, late)
	_, g = mustHeartbeat(t, gone, rep("b", 1, 4, 0, 9, 0), t0)
	require.Equal(t, 4, g.Share)
	swept, _ := mustHeartbeat(t, gone, rep("b", 1, 4, 0, 9, 0), t0.Add(ttl))
	_, ok := swept.Row("a", "a-1")
	require.False(t, ok, "gone with its old hold")

	// With requests in flight the row reserves them until the hold ends,
	// and is no member.
	now := t0.Add(time.Second)
	held, err := s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1", Inflight: 2, Hold: time.Minute}, now)
	require.NoError(t, err)
	a, _ = held.Row("a", "a-1")
	require.Equal(t, StatusDeparted, a.Status(now))
	require.Equal(t, 2, a.Reserve(now))
	require.Equal(t, now.Add(time.Minute), a.HoldUntil)
	require.False(t, a.Member(now))
	_, g = mustHeartbeat(t, held, rep("b", 1, 4, 0, 9, 0), now)
	require.Equal(t, 2, g.Share)
	_, g = mustHeartbeat(t, held, rep("b", 1, 4, 0, 9, 0), now.Add(time.Minute))
	require.Equal(t, 4, g.Share)
	// A late report of the departed instance changes nothing.
	next, g := mustHeartbeat(t, held, rep("a", 9, 4, 0, 9, 0), now)
	require.True(t, g.Stale)
	require.Equal(t, held, next)
}

func TestLearningAfterIncarnationChange(t *testing.T) {
	t.Parallel()
	r := func(id string, seq int64, inflight, demand int) Report {
		r := rep(id, seq, 10, inflight, demand, 0)
		r.MaxRequestDuration = 5 * time.Second
		return r
	}
	s := NewState("k", t0).Incarnate(Database{Incarnation: "db-1"}, t0, Report{})
	require.Equal(t, "db-1", s.Key.Incarnation)
	s, ga := mustHeartbeat(t, s, r("a", 1, 0, 5), t0)
	s, gb := mustHeartbeat(t, s, r("b", 1, 0, 5), t0)
	require.False(t, ga.Learning)
	require.Equal(t, s, s.Incarnate(Database{Incarnation: "db-1"}, t0, Report{}), "the same incarnation changes nothing")
	require.Equal(t, s, s.Incarnate(Database{Incarnation: ""}, t0, Report{}), "no incarnation changes nothing")

	// Failover: a new incarnation. The epoch moves to now; for the key's
	// lease plus request bound, no node is granted more than it proves.
	now := t0.Add(time.Second)
	l := s.Incarnate(Database{Incarnation: "db-2"}, now, Report{})
	require.Equal(t, now.UnixMicro(), l.Key.Epoch)
	require.Equal(t, now.Add(ttl+5*time.Second), l.Key.LearningUntil)
	l, g := mustHeartbeat(t, l, applied(r("a", 2, 3, 9), ga), now)
	require.True(t, g.Learning)
	require.Equal(t, 3, g.Share, "a keeps what it proves it holds")
	require.Equal(t, l.Key.Epoch, g.Epoch)
	require.Greater(t, g.Generation, ga.Generation)
	l, g = mustHeartbeat(t, l, applied(r("b", 2, 0, 9), gb), now)
	require.Equal(t, 0, g.Share, "b proves nothing")
	l, g = mustHeartbeat(t, l, r("c", 1, 0, 9), now)
	require.Equal(t, 0, g.Share, "a newcomer gets nothing while learning")

	// Learning ends: grants are normal again.
	end := l.Key.LearningUntil
	_, g = mustHeartbeat(t, l, applied(r("b", 3, 0, 9), gb), end)
	require.False(t, g.Learning)
	require.Positive(t, g.Share)
}

// TestDatabaseLearningReachesNewKeys: the database's own record outlives
// its keys. After a loss that took a key whole (or every heartbeat of it),
// the key's first check takes the database's learning mode with a new
// epoch, so a newcomer is not granted what a forgotten grant may still
// use. A history without a heartbeat has nothing to forget.
func TestDatabaseLearningReachesNewKeys(t *testing.T) {
	t.Parallel()
	r := func(id string, seq int64) Report {
		r := rep(id, seq, 10, 0, 5, 0)
		r.MaxRequestDuration = 5 * time.Second
		return r
	}
	d := Database{Incarnation: "db-1"}
	require.Equal(t, d, d.Check("db-1", t0), "the same incarnation changes nothing")
	require.Equal(t, d, d.Check("", t0), "no incarnation changes nothing")
	fresh := d.Check("db-2", t0)
	require.Equal(t, "db-2", fresh.Incarnation)
	require.False(t, fresh.LearningUntil.After(t0), "no heartbeat yet: no learning mode")
	require.True(t, fresh.LearningSince.IsZero(), "no heartbeat yet: nothing to learn from")

	s, ga := mustHeartbeat(t, NewState("k", t0).Incarnate(d, t0, r("a", 1)), r("a", 1), t0)
	require.Equal(t, 10, ga.Share)
	d = d.Record(s.Key)
	require.Equal(t, Database{Incarnation: "db-1", MaxLeaseTTL: ttl, MaxRequestDuration: 5 * time.Second}, d)

	// The loss takes the key whole; its database record comes back as it
	// was, with the old incarnation.
	now := t0.Add(time.Second)
	d2 := d.Check("db-2", now)
	require.Equal(t, now.Add(ttl+5*time.Second), d2.LearningUntil)
	require.Equal(t, now, d2.LearningSince)
	k := NewState("k", now).Incarnate(d2, now, Report{})
	require.Equal(t, "db-2", k.Key.Incarnation)
	require.Equal(t, d2.LearningUntil, k.Key.LearningUntil)
	require.Greater(t, k.Key.Epoch, ga.Epoch)
	require.Equal(t, k, k.Incarnate(d2, now, r("b", 1)), "a key checked since changes no more")
	k, g := mustHeartbeat(t, k, r("b", 1), now)
	require.True(t, g.Learning)
	require.Zero(t, g.Share, "a newcomer gets nothing while a's forgotten grant may run")

	_, g = mustHeartbeat(t, k, r("b", 2), d2.LearningUntil)
	require.False(t, g.Learning)
	require.Positive(t, g.Share)
}

func TestLearningFromReports(t *testing.T) {
	t.Parallel()
	s, g := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 10, 0, 5, 0), t0)
	s, _ = mustHeartbeat(t, s, applied(rep("a", 2, 10, 2, 5, 0), g), t0)
	now := t0.Add(time.Second)
	tests := []struct {
		name   string
		s      State
		r      Report
		learns bool
	}{
		{"a node that applied nothing proves nothing", s, rep("z", 1, 10, 0, 5, 0), false},
		{"a known generation", s, applied(rep("a", 3, 10, 2, 5, 0), g), false},
		{"a generation the key never reached", s, func() Report {
			r := applied(rep("a", 3, 10, 2, 5, 0), g)
			r.AppliedGen = s.Key.Generation + 1
			return r
		}(), true},
		{"an epoch the key never had", s, func() Report {
			r := applied(rep("a", 3, 10, 2, 5, 0), g)
			r.Epoch = s.Key.Epoch + 1
			return r
		}(), true},
		{"an older epoch", s, func() Report {
			r := applied(rep("a", 3, 10, 2, 5, 0), g)
			r.Epoch = s.Key.Epoch - 1
			return r
		}(), false},
		{"an unknown instance with requests in flight", s, applied(rep("z", 1, 10, 1, 5, 0), g), true},
		{"an unknown instance with nothing in flight", s, applied(rep("z", 1, 10, 0, 5, 0), g), false},
		{"any grant, on a key that issued none", NewState("k", now), applied(rep("z", 1, 10, 0, 5, 0), g), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next, g := mustHeartbeat(t, tt.s, tt.r, now)
			require.Equal(t, tt.learns, g.Learning)
			if tt.learns {
				require.Greater(t, next.Key.Epoch, tt.s.Key.Epoch)
				require.LessOrEqual(t, g.Share, tt.r.Inflight)
			} else {
				require.Equal(t, tt.s.Key.Epoch, next.Key.Epoch)
			}
		})
	}
}

func TestSetLimits(t *testing.T) {
	t.Parallel()
	one, five, zero, huge := 1, 5, 0, MaxCount+1
	s := NewState("k", t0)
	for _, tc := range []struct {
		min, max *int
		want     string
	}{
		{&zero, nil, "min = 0"},
		{nil, &zero, "max = 0"},
		{&huge, nil, "min = 1000001"},
		{&five, &one, "max = 1 is below min = 5"},
	} {
		_, err := s.SetLimits(tc.min, tc.max)
		require.ErrorIs(t, err, ErrInvalidOverride)
		require.ErrorContains(t, err, tc.want)
	}
	s, err := s.SetLimits(&one, &five)
	require.NoError(t, err)
	require.Equal(t, 1, s.Key.MinLimit)
	require.Equal(t, 5, s.Key.MaxLimit)
	s, err = s.SetLimits(nil, nil)
	require.NoError(t, err)
	require.Zero(t, s.Key.MinLimit)
	require.Zero(t, s.Key.MaxLimit)

	_, err = s.SetAggregate("sum")
	require.ErrorIs(t, err, ErrInvalidOverride)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxNameBytes+1)
	tests := []struct {
		name   string
		mutate func(r *Report)
		want   string
	}{
		{"empty key", func(r *Report) { r.Key = "" }, "key: 0 bytes"},
		{"long key", func(r *Report) { r.Key = long }, "key: 201 bytes"},
		{"NUL in key", func(r *Report) { r.Key = "a\x00b" }, "NUL"},
		{"bad UTF-8 key", func(r *Report) { r.Key = "a\xffb" }, "UTF-8"},
		{"empty node id", func(r *Report) { r.NodeID = "" }, "node_id: 0 bytes"},
		{"10 KB node id", func(r *Report) { r.NodeID = strings.Repeat("n", 10<<10) }, "node_id: 10240 bytes"},
		{"empty instance", func(r *Report) { r.Instance = "" }, "instance: 0 bytes"},
		{"negative seq", func(r *Report) { r.Seq = -1 }, "seq = -1"},
		{"zero l_local", func(r *Report) { r.LLocal = 0 }, "l_local = 0"},
		{"huge l_local", func(r *Report) { r.LLocal = 1<<63 - 1 }, "l_local = 9223372036854775807"},
		{"negative inflight", func(r *Report) { r.Inflight = -1 }, "inflight = -1"},
		{"huge inflight", func(r *Report) { r.Inflight = MaxCount + 1 }, "inflight = 1000001"},
		{"negative demand", func(r *Report) { r.Demand = -5 }, "demand = -5"},
		{"negative applied gen", func(r *Report) { r.AppliedGen = -1 }, "applied_gen = -1"},
		{"short ttl", func(r *Report) { r.LeaseTTL = 99 * time.Millisecond }, "lease_ttl = 99ms"},
		{"long ttl", func(r *Report) { r.LeaseTTL = time.Hour + time.Microsecond }, "lease_ttl = 1h0m0.000001s"},
		{"too many labels", func(r *Report) {
			r.Labels = map[string]string{}
			for i := range MaxLabels + 1 {
				r.Labels[strings.Repeat("l", i+1)] = "v"
			}
		}, "labels: 33 entries"},
		{"empty label name", func(r *Report) { r.Labels = map[string]string{"": "v"} }, "label name: 0 bytes"},
		{"long label value", func(r *Report) { r.Labels = map[string]string{"zone": long} }, `label "zone": 201 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rep("a", 1, 4, 0, 0, 0)
			tt.mutate(&r)
			err := r.Validate()
			require.ErrorIs(t, err, ErrInvalidReport)
			require.ErrorContains(t, err, tt.want)
			_, _, err = NewState("k", t0).Heartbeat(r, t0)
			require.True(t, errors.Is(err, ErrInvalidReport))
		})
	}
	ok := rep("a", 1, MaxCount, MaxCount, MaxCount, 1<<62)
	ok.LeaseTTL = time.Hour + 999*time.Nanosecond // truncated to 1h
	ok.Labels = map[string]string{"zone": "", "pod": "p-1"}
	require.NoError(t, ok.Validate())
}

// TestJoinersFirstReportNeverVotes: a joiner's first report carries its
// limiter's initial limit and asks for a slot, so it is granted a share.
// That share must not make the report's l_local a vote when a peer
// reports next: in a fleet of two, the lower median is the minimum, and
// L_global would fall from 40 to the joiner's 1 (every restart did).
func TestJoinersFirstReportNeverVotes(t *testing.T) {
	t.Parallel()
	s := state(40, 1, row("a", 40, 20, 60, 20, 20))
	s, g := mustHeartbeat(t, s, rep("b", 1, 1, 0, 1, 0), t0)
	require.Positive(t, g.Share, "the joiner is granted a slot")
	require.False(t, node(s, "b").Measuring)
	_, g = mustHeartbeat(t, s, rep("a", 2, 41, 20, 60, 1), t0)
	require.Equal(t, 41, g.LGlobal, "the joiner's first l_local does not vote")

	// Its next report, warm-started at L_global, holding its share: it votes.
	s, _ = mustHeartbeat(t, s, rep("b", 2, 30, 1, 5, 1), t0)
	require.True(t, node(s, "b").Measuring)
	_, g = mustHeartbeat(t, s, rep("a", 2, 41, 20, 60, 1), t0)
	require.Equal(t, 30, g.LGlobal)
}

// TestHeartbeatSplitLeavesNoNodeOut: six nodes with demand 1 under
// L_global 10 heartbeat in turn, each acknowledging its newest grant. The
// targets add up to exactly L_global (R = 4 split by largest remainder:
// the four first by node id get 2, the others 1), so once the shares have
// settled every node holds at least 1 and they add up to 10. Rounded up,
// every target was 2 and the last node stayed at 0.
func TestHeartbeatSplitLeavesNoNodeOut(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "c", "d", "e", "f"}
	s := NewState("k", t0)
	for round := range 4 {
		for _, id := range ids {
			r := rep(id, int64(round+1), 10, 0, 1, 0)
			if n, ok := s.Node(id, t0); ok {
				r.Epoch, r.AppliedGen = n.Epoch, n.GrantedGen
			}
			s, _ = mustHeartbeat(t, s, r, t0)
		}
	}
	sum := 0
	for _, id := range ids {
		sum += node(s, id).Share
	}
	require.Equal(t, 10, s.Key.LGlobal)
	require.Equal(t, 10, sum)
	require.Equal(t, []int{2, 2, 2, 2, 1, 1}, []int{node(s, "a").Share, node(s, "b").Share, node(s, "c").Share,
		node(s, "d").Share, node(s, "e").Share, node(s, "f").Share})
}

// TestSplitTargetAddsUp: for every eligible set, the targets add up to
// max(n, L_global), each is at least 1, and each is within 1 of its
// proportional part of the rest.
func TestSplitTargetAddsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l       int
		demands []int
	}{
		{10, []int{1, 1, 1, 1, 1, 1}}, {4, []int{1, 1, 1}}, {3, []int{5, 1, 1}}, {2, []int{1, 1, 1}},
		{100, []int{7, 3, 5, 1}}, {7, []int{1000000, 1, 1}}, {1, []int{1}}, {9, []int{3, 3, 3}},
	} {
		claims := make([]claim[int], len(tc.demands))
		for i, d := range tc.demands {
			claims[i] = claim[int]{fmt.Sprintf("n%d", i), "i", d}
		}
		sum, total := 0, 0
		for _, d := range tc.demands {
			total += d
		}
		rest := max(0, tc.l-len(claims))
		for i := range claims {
			target := splitTarget(tc.l, claims[i], slices.Delete(slices.Clone(claims), i, i+1))
			part := float64(rest*claims[i].want) / float64(total)
			require.GreaterOrEqual(t, target, 1)
			require.InDelta(t, part, float64(target-1), 1, "L %d, demands %v, node %d", tc.l, tc.demands, i)
			sum += target
		}
		require.Equal(t, max(len(claims), tc.l), sum, "L %d, demands %v", tc.l, tc.demands)
	}
}

// TestWaitingOnlyWhenTheFloorsDoNotFit: Grant.Waiting counts the members
// granted 0 that want capacity only when more members want it than
// L_global holds. While every floor fits, such a member waits for a
// peer's reserve to drain, not for a turn.
func TestWaitingOnlyWhenTheFloorsDoNotFit(t *testing.T) {
	t.Parallel()
	// L_global 3: a holds 3 for a demand of 10, b (demand 1) was granted 0
	// while a's reserve held every slot. Two members want 3 slots: b's
	// floor fits, it is not waiting.
	s := state(3, 5, row("a", 3, 3, 10, 3, 3), row("b", 3, 0, 1, 0, 0))
	_, g := mustHeartbeat(t, s, rep("a", 2, 3, 3, 10, 5), t0)
	require.Zero(t, g.Waiting, "b's floor fits")
	// Four members want 3 slots: c, granted 0, waits for a turn.
	s = state(3, 5, row("a", 3, 1, 10, 1, 1), row("b", 3, 1, 1, 1, 1), row("c", 3, 0, 1, 0, 0), row("d", 3, 1, 1, 1, 1))
	_, g = mustHeartbeat(t, s, rep("a", 2, 3, 1, 10, 5), t0)
	require.Equal(t, 1, g.Waiting)
	// The stored grant of a stale report says the same.
	_, g = mustHeartbeat(t, s, rep("a", 1, 3, 1, 10, 5), t0)
	require.True(t, g.Stale)
	require.Equal(t, 1, g.Waiting)
}
