package coord

import (
	"errors"
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
		Demand: demand, Share: share, UnackedHigh: unacked, LeaseExpiresAt: t0.Add(time.Second),
		JoinedAt: t0.Add(-time.Minute), HeartbeatAt: t0.Add(-time.Second), Labels: map[string]string{}}
}

func evictedRow(id string, lLocal int) NodeState {
	n := row(id, lLocal, 0, 0, 0, 0)
	n.Evicted = true
	return n
}

func state(lGlobal int, gen int64, nodes ...NodeState) State {
	s := NewState("k", t0.Add(-time.Hour))
	s.Key.LGlobal, s.Key.Generation = lGlobal, gen
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

	tests := []struct {
		name  string
		s     State
		r     Report
		grant Grant
		check func(t *testing.T, s State)
	}{{
		name:  "first node takes the whole ceiling",
		s:     NewState("k", t0),
		r:     rep("a", 1, 8, 0, 0, 0),
		grant: Grant{Share: 8, LGlobal: 8, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
		check: func(t *testing.T, s State) {
			a, _ := s.Node("a")
			require.Equal(t, 8, a.UnackedHigh)
			require.Equal(t, int64(1), a.GrantedGen)
			require.Equal(t, t0.Add(ttl), a.LeaseExpiresAt)
			require.Equal(t, t0, a.JoinedAt)
		},
	}, {
		name:  "lower median of an even count",
		s:     state(0, 0, row("b", 10, 0, 0, 0, 0), row("c", 30, 0, 0, 0, 0), row("d", 40, 0, 0, 0, 0)),
		r:     rep("a", 1, 20, 0, 0, 0),
		grant: Grant{Share: 5, LGlobal: 20, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 4},
	}, {
		name: "lower median ignores evicted rows",
		// Counting them, the lower median of 1, 1, 9, 9 would be 1.
		s:     state(0, 0, row("b", 9, 0, 0, 0, 0), evictedRow("c", 1), evictedRow("d", 1)),
		r:     rep("a", 1, 9, 0, 0, 0),
		grant: Grant{Share: 4, LGlobal: 9, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 4},
	}, {
		name: "min aggregate",
		s: func() State {
			s := state(0, 0, row("b", 7, 0, 0, 0, 0), row("c", 30, 0, 0, 0, 0))
			s.Key.Aggregate = AggregateMin
			return s
		}(),
		r:     rep("a", 1, 20, 0, 0, 0),
		grant: Grant{Share: 2, LGlobal: 7, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "max override clamps",
		s: func() State {
			s := NewState("k", t0)
			s.Key.MaxLimit = 5
			return s
		}(),
		r:     rep("a", 1, 20, 0, 0, 0),
		grant: Grant{Share: 5, LGlobal: 5, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
	}, {
		name: "min override clamps",
		s: func() State {
			s := NewState("k", t0)
			s.Key.MinLimit = 50
			return s
		}(),
		r:     rep("a", 1, 20, 0, 0, 0),
		grant: Grant{Share: 50, LGlobal: 50, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
	}, {
		name: "demand split with floor division",
		// L=10, n=2, R=8, D=3+1: self 1+8*3/4 = 7.
		s:     state(10, 4, row("b", 10, 0, 1, 0, 0)),
		r:     rep("a", 1, 10, 0, 3, 0),
		grant: Grant{Share: 7, LGlobal: 10, Generation: 5, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 2},
	}, {
		name: "demand split rounds down",
		// L=10, n=3, R=7, D=1+1+1: self 1+7/3 = 3.
		s:     state(10, 0, row("b", 10, 0, 1, 0, 0), row("c", 10, 0, 1, 0, 0)),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 3, LGlobal: 10, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name:  "no demand anywhere splits evenly",
		s:     state(10, 0, row("b", 10, 0, 0, 0, 0), row("c", 10, 0, 0, 0, 0)),
		r:     rep("a", 1, 10, 0, 0, 0),
		grant: Grant{Share: 3, LGlobal: 10, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 3},
	}, {
		name: "floor of 1 even without demand",
		// L=10, n=2, R=8, D=5: self has no demand: 1.
		s:     state(10, 0, row("b", 10, 0, 5, 0, 0)),
		r:     rep("a", 1, 10, 0, 0, 0),
		grant: Grant{Share: 1, LGlobal: 10, Generation: 1, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 2},
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
		name:  "evicted peer keeps its reserve",
		s:     state(10, 3, evicted),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 7, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, PeerInflight: 2, LiveNodes: 2},
	}, {
		name:  "expired peer is deleted and frees its reserve",
		s:     state(10, 3, expired),
		r:     rep("a", 1, 10, 0, 1, 0),
		grant: Grant{Share: 10, LGlobal: 10, Generation: 4, LeaseRemaining: ttl, Status: StatusActive, LiveNodes: 1},
		check: func(t *testing.T, s State) {
			_, ok := s.Node("b")
			require.False(t, ok)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.s.Clone()
			next, g := mustHeartbeat(t, tt.s, tt.r, t0)
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

func TestHeartbeatAcknowledgement(t *testing.T) {
	t.Parallel()
	s, g := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 0, 0, 0), t0)
	require.Equal(t, 4, g.Share)
	// b joins; a holds 4 granted, not yet acknowledged: b gets nothing.
	s, g = mustHeartbeat(t, s, rep("b", 1, 4, 0, 4, 0), t0)
	require.Equal(t, 0, g.Share)
	// a reports without having applied gen 1: its target is now 1 (b has all
	// the demand), but it may still enforce 4.
	s, g = mustHeartbeat(t, s, rep("a", 2, 4, 0, 0, 0), t0)
	require.Equal(t, 1, g.Share)
	a, _ := s.Node("a")
	require.Equal(t, 4, a.UnackedHigh, "unacknowledged grants stay reserved")
	s, g = mustHeartbeat(t, s, rep("b", 2, 4, 0, 4, 0), t0)
	require.Equal(t, 0, g.Share, "a may still enforce 4")
	// a applies its newest grant and says so: the reserve drops to 1.
	s, g = mustHeartbeat(t, s, rep("a", 3, 4, 0, 0, a.GrantedGen), t0)
	a, _ = s.Node("a")
	require.Equal(t, 1, a.UnackedHigh)
	require.Equal(t, 1, g.Share)
	_, g = mustHeartbeat(t, s, rep("b", 3, 4, 0, 4, 0), t0)
	require.Equal(t, 3, g.Share)
}

func TestHeartbeatStaleSeq(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 5, 4, 0, 0, 0), t0)
	for _, seq := range []int64{5, 4, 0} {
		next, g := mustHeartbeat(t, s, rep("a", seq, 9, 3, 3, 7), t0.Add(time.Second))
		require.True(t, g.Stale)
		require.Equal(t, Grant{Share: 4, LGlobal: 4, Generation: 1, LeaseRemaining: time.Second,
			Status: StatusActive, LiveNodes: 1, Stale: true}, g)
		require.Equal(t, s, next, "a stale report writes nothing")
	}
}

func TestHeartbeatInstances(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 5, 4, 0, 0, 0), t0)
	other := rep("a", 9, 4, 0, 0, 0)
	other.Instance = "a-2"

	_, _, err := s.Heartbeat(other, t0.Add(ttl-time.Microsecond))
	require.ErrorIs(t, err, ErrNodeIDInUse)

	// Once the lease has run out, a restart takes the row over afresh.
	now := t0.Add(ttl)
	next, g := mustHeartbeat(t, s, other, now)
	require.Equal(t, int64(2), g.Generation, "a fresh row gets a new generation")
	a, _ := next.Node("a")
	require.Equal(t, "a-2", a.Instance)
	require.Equal(t, now, a.JoinedAt)

	// So does the same instance coming back late, with any seq.
	late := rep("a", 1, 4, 0, 0, 0)
	next, g = mustHeartbeat(t, s, late, now)
	require.False(t, g.Stale)
	require.Equal(t, int64(2), g.Generation)
	a, _ = next.Node("a")
	require.Equal(t, int64(1), a.Seq)
}

func TestHeartbeatEvictedIsFrozen(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 0, 0, 0), t0)
	s, _ = mustHeartbeat(t, s, rep("b", 1, 4, 0, 0, 0), t0)
	s, err := s.Evict("a")
	require.NoError(t, err)
	a, _ := s.Node("a")
	require.Equal(t, 0, a.Share)
	require.Equal(t, 4, a.UnackedHigh)

	later := t0.Add(time.Second)
	next, g := mustHeartbeat(t, s, rep("a", 2, 4, 0, 9, a.GrantedGen), later)
	require.Equal(t, StatusEvicted, g.Status)
	require.Equal(t, 0, g.Share)
	require.Equal(t, ttl-time.Second, g.LeaseRemaining, "an evicted node's lease is not renewed")
	require.Equal(t, s, next, "an evicted node's heartbeat writes nothing")

	// b still cannot use a's reserve until a's lease has run out.
	_, g = mustHeartbeat(t, s, rep("b", 2, 4, 0, 9, 0), later)
	require.Equal(t, 0, g.Share)
	_, g = mustHeartbeat(t, s, rep("b", 2, 4, 0, 9, 0), t0.Add(ttl))
	require.Equal(t, 4, g.Share)
}

func TestDrainUndrain(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 2, 2, 0), t0)
	s, err := s.Drain("a")
	require.NoError(t, err)
	a, _ := s.Node("a")
	require.Equal(t, Grant{}.Share, a.Share)
	require.Equal(t, int64(2), a.GrantedGen)
	require.Equal(t, int64(2), s.Key.Generation)
	require.Equal(t, StatusDraining, a.Status())

	again, err := s.Drain("a")
	require.NoError(t, err)
	require.Equal(t, s, again, "draining twice changes nothing")

	s, g := mustHeartbeat(t, s, rep("a", 2, 4, 1, 1, 2), t0)
	require.Equal(t, 0, g.Share)
	require.Equal(t, StatusDraining, g.Status)

	s, err = s.Undrain("a")
	require.NoError(t, err)
	_, g = mustHeartbeat(t, s, rep("a", 3, 4, 0, 1, 2), t0)
	require.Equal(t, 4, g.Share)
	require.Equal(t, StatusActive, g.Status)

	_, err = s.Drain("zz")
	require.ErrorIs(t, err, ErrUnknownNode)
}

func TestLeave(t *testing.T) {
	t.Parallel()
	s, _ := mustHeartbeat(t, NewState("k", t0), rep("a", 1, 4, 0, 0, 0), t0)
	_, err := s.Leave("a", "someone-else")
	require.ErrorIs(t, err, ErrNodeIDInUse)
	_, err = s.Leave("b", "b-1")
	require.ErrorIs(t, err, ErrUnknownNode)
	s, err = s.Leave("a", "a-1")
	require.NoError(t, err)
	require.Empty(t, s.Nodes)
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
