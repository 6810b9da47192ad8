package coord

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rrep is a report of id with a rate demand of rpm requests and tpm tokens
// a minute, learning no rate.
func rrep(id string, seq int64, rpm, tpm int64) Report {
	r := rep(id, seq, 4, 0, 1, 0)
	r.RateDemand = Rates{Requests: rpm, Tokens: tpm}
	return r
}

// rateState is a key with the operator rates rpm and tpm.
func rateState(t *testing.T, rpm, tpm int64) State {
	t.Helper()
	s, err := NewState("k", t0).SetRates(RatesChange{SetRequests: true, Requests: rpm, SetTokens: true, Tokens: tpm})
	require.NoError(t, err)
	return s
}

func TestRateSharesFollowDemand(t *testing.T) {
	t.Parallel()
	s := rateState(t, 600, 60000)
	var g Grant
	// Two rounds: in the first, each node is granted against what the
	// others already hold.
	for round := int64(1); round <= 3; round++ {
		for _, r := range []Report{rrep("a", round, 60, 6000), rrep("b", round, 30, 3000), rrep("c", round, 10, 1000)} {
			s, g = mustHeartbeat(t, s, applied(r, grantOf(s, r.NodeID)), t0)
			require.Equal(t, Rates{Requests: 600, Tokens: 60000}, g.Rate)
		}
	}
	require.Equal(t, Rates{Requests: 360, Tokens: 36000}, node(s, "a").RateShare)
	require.Equal(t, Rates{Requests: 180, Tokens: 18000}, node(s, "b").RateShare)
	require.Equal(t, Rates{Requests: 60, Tokens: 6000}, node(s, "c").RateShare)
	ki := keyInfo(s, t0)
	require.Equal(t, Rates{Requests: 600, Tokens: 60000}, ki.SumRateShare, "all of the rate is granted")
}

// grantOf is the grant stored for id's row in s, as the node applied it.
func grantOf(s State, id string) Grant {
	n, ok := s.Node(id, t0)
	if !ok {
		return Grant{}
	}
	return Grant{Epoch: n.Epoch, Generation: n.GrantedGen}
}

func TestRateHandoffWaitsForTheAcknowledgement(t *testing.T) {
	t.Parallel()
	s := rateState(t, 600, 0)
	s, ga := mustHeartbeat(t, s, rrep("a", 1, 100, 0), t0)
	require.Equal(t, int64(600), ga.RateShare.Requests, "alone, a is granted the whole rate")
	require.Zero(t, ga.RateShare.Tokens, "no token rate: nothing to share")
	require.Zero(t, ga.Rate.Tokens)
	// b asks for as much: a still paces to 600 until it acknowledges.
	s, gb := mustHeartbeat(t, s, rrep("b", 1, 100, 0), t0)
	require.Zero(t, gb.RateShare.Requests)
	// a's share is lowered to 300, not yet acknowledged: b still gets nothing.
	s, ga2 := mustHeartbeat(t, s, rrep("a", 2, 100, 0), t0)
	require.Equal(t, int64(300), ga2.RateShare.Requests)
	require.Greater(t, ga2.Generation, ga.Generation, "a changed rate share is a new grant")
	require.Equal(t, int64(600), node(s, "a").RateHigh.Requests)
	s, gb = mustHeartbeat(t, s, rrep("b", 2, 100, 0), t0)
	require.Zero(t, gb.RateShare.Requests, "the freed rate waits for a to apply its lowered share")
	// a acknowledges the lowered share: b is granted the rest.
	s, _ = mustHeartbeat(t, s, applied(rrep("a", 3, 100, 0), ga2), t0)
	require.Equal(t, int64(300), node(s, "a").RateHigh.Requests)
	_, gb = mustHeartbeat(t, s, rrep("b", 3, 100, 0), t0)
	require.Equal(t, int64(300), gb.RateShare.Requests)
}

func TestRateReserveEndsWithTheLease(t *testing.T) {
	t.Parallel()
	s := rateState(t, 600, 0)
	s, _ = mustHeartbeat(t, s, rrep("a", 1, 100, 0), t0)
	r := rrep("a", 1, 0, 0)
	r.MaxRequestDuration = time.Hour // a's requests may run long: the concurrency hold does not matter
	// Just before a's lease ends b gets nothing; at its end, all of it.
	_, g := mustHeartbeat(t, s, rrep("b", 1, 100, 0), t0.Add(ttl-time.Microsecond))
	require.Zero(t, g.RateShare.Requests)
	_, g = mustHeartbeat(t, s, rrep("b", 1, 100, 0), t0.Add(ttl))
	require.Equal(t, int64(600), g.RateShare.Requests)
	// A node that left frees its rate at once.
	left, err := s.Leave(Departure{Key: "k", NodeID: "a", Instance: "a-1", Inflight: 3, Hold: time.Hour}, t0)
	require.NoError(t, err)
	_, g = mustHeartbeat(t, left, rrep("b", 1, 100, 0), t0)
	require.Equal(t, int64(600), g.RateShare.Requests)
}

func TestRateLearnedIsFoldedAndCapped(t *testing.T) {
	t.Parallel()
	learn := func(id string, seq, rpm int64) Report {
		r := rrep(id, seq, 10, 0)
		r.RateLocal = Rates{Requests: rpm}
		return r
	}
	s := NewState("k", t0)
	s, _ = mustHeartbeat(t, s, learn("a", 1, 900), t0)
	s, _ = mustHeartbeat(t, s, learn("b", 1, 300), t0)
	s, g := mustHeartbeat(t, s, learn("c", 1, 600), t0)
	require.Equal(t, int64(600), g.Rate.Requests, "the lower median of 900, 300 and 600")
	s, g = mustHeartbeat(t, s, rrep("d", 1, 10, 0), t0)
	require.Equal(t, int64(600), g.Rate.Requests, "a node learning nothing does not vote")
	s, err := s.SetRates(RatesChange{SetRequests: true, Requests: 400})
	require.NoError(t, err)
	_, g = mustHeartbeat(t, s, learn("a", 2, 900), t0)
	require.Equal(t, int64(400), g.Rate.Requests, "the operator's rate caps what the nodes learn")
	s, err = s.SetRates(RatesChange{SetRequests: true, Requests: 1000})
	require.NoError(t, err)
	_, g = mustHeartbeat(t, s, learn("a", 2, 900), t0)
	require.Equal(t, int64(600), g.Rate.Requests, "and does not raise it")
}

func TestRateSharesInLearningMode(t *testing.T) {
	t.Parallel()
	s := rateState(t, 600, 0)
	s, _ = mustHeartbeat(t, s, rrep("b", 1, 0, 0), t0) // leases of ttl were issued
	s = s.Relearn(t0)
	r := rrep("a", 1, 100, 0)
	r.RateApplied = Rates{Requests: 250}
	_, g := mustHeartbeat(t, s, r, t0)
	require.True(t, g.Learning)
	require.Equal(t, int64(250), g.RateShare.Requests, "no more than the node paces to already")
}

func TestRateSharesDrainedAndEvicted(t *testing.T) {
	t.Parallel()
	s := rateState(t, 600, 0)
	s, _ = mustHeartbeat(t, s, rrep("a", 1, 100, 0), t0)
	d, err := s.Drain("a")
	require.NoError(t, err)
	_, g := mustHeartbeat(t, d, rrep("a", 2, 100, 0), t0)
	require.Zero(t, g.RateShare.Requests)
	e, err := s.Evict("a")
	require.NoError(t, err)
	_, g = mustHeartbeat(t, e, rrep("a", 2, 100, 0), t0)
	require.Equal(t, StatusEvicted, g.Status)
	require.Zero(t, g.RateShare.Requests)
	// The evicted row still reserves its rate until its lease ends: its
	// node may not know yet.
	_, g = mustHeartbeat(t, e, rrep("b", 1, 100, 0), t0)
	require.Zero(t, g.RateShare.Requests)
}

func TestRatesValidation(t *testing.T) {
	t.Parallel()
	r := rrep("a", 1, 0, MaxRate+1)
	_, _, err := NewState("k", t0).Heartbeat(r, t0)
	require.ErrorIs(t, err, ErrInvalidReport)
	require.ErrorContains(t, err, "rate_demand.tokens = 1000000001")
	_, err = NewState("k", t0).SetRates(RatesChange{SetRequests: true, Requests: -2})
	require.True(t, errors.Is(err, ErrInvalidOverride))
	require.ErrorContains(t, err, "rpm = -2")
}

// TestRateSplitLeavesNoNodeOut: six nodes with rate demand 1 under a rate
// of 10 per minute heartbeat in turn, each acknowledging its newest grant.
// The rate targets add up to exactly the rate (largest remainder: the four
// first by node id get 2, the others 1), so every node ends with a rate
// share. Rounded up, every target was 2 and the last node stayed at 0.
func TestRateSplitLeavesNoNodeOut(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "c", "d", "e", "f"}
	s, err := NewState("k", t0).SetRates(RatesChange{SetRequests: true, Requests: 10})
	require.NoError(t, err)
	for round := range 4 {
		for _, id := range ids {
			r := rep(id, int64(round+1), 10, 0, 1, 0)
			r.RateDemand = Rates{Requests: 1}
			if n, ok := s.Node(id, t0); ok {
				r.Epoch, r.AppliedGen = n.Epoch, n.GrantedGen
			}
			s, _ = mustHeartbeat(t, s, r, t0)
		}
	}
	var shares []int64
	for _, id := range ids {
		shares = append(shares, node(s, id).RateShare.Requests)
	}
	require.Equal(t, []int64{2, 2, 2, 2, 1, 1}, shares)
}
