package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// lateFailoverCoord is a Memory coordinator with a network and a replica
// the test drives. Node a's heartbeats fail once failing is set, until one
// is sent slowAfter or more after a's last success: that one takes slow
// and is taken after a failover. The replica keeps the state as it was
// just before b's first heartbeat once a's lease ran out (a lease and a
// margin after a's last success), and the failover, before the slow
// report is taken, restores it under a new incarnation: b's grant of a's
// rate share is lost, while b still paces to it. b cannot reach the new
// primary for bDown after the failover.
type lateFailoverCoord struct {
	*coord.Memory
	slowAfter, slow, bDown time.Duration
	// dropLate: the slow report is taken, and its answer lost (the
	// node's call timed out as the database committed it).
	dropLate bool

	mu         sync.Mutex
	failing    bool
	aLastOK    time.Time
	snap       coord.State
	snapDB     coord.Database
	snapped    bool
	failedOver time.Time
	delayed    bool
	grant      coord.Grant // the answer to the slow report
}

var errUnreachable = errors.New("unreachable")

func (c *lateFailoverCoord) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	now := time.Now()
	c.mu.Lock()
	switch {
	case r.NodeID == "a" && !c.failing:
		c.mu.Unlock()
		g, err := c.Memory.Heartbeat(ctx, r)
		if err == nil {
			c.mu.Lock()
			c.aLastOK = now
			c.mu.Unlock()
		}
		return g, err
	case r.NodeID == "a" && c.delayed && !c.failedOver.IsZero():
		c.mu.Unlock() // a's link is back after the failover
		return c.Memory.Heartbeat(ctx, r)
	case r.NodeID == "a" && (c.delayed || now.Sub(c.aLastOK) < c.slowAfter):
		c.mu.Unlock()
		return coord.Grant{}, errUnreachable
	case r.NodeID == "a":
		c.delayed = true
		c.mu.Unlock()
		time.Sleep(c.slow)
		c.mu.Lock()
		if c.snapped && c.failedOver.IsZero() {
			c.Memory.Restore(r.Key, c.snap)
			c.Memory.RestoreDatabase(c.snapDB)
			c.Memory.SetIncarnation("after the failover")
			c.failedOver = time.Now()
		}
		c.mu.Unlock()
		g, err := c.Memory.Heartbeat(ctx, r)
		c.mu.Lock()
		c.grant = g
		c.mu.Unlock()
		if c.dropLate && err == nil {
			return coord.Grant{}, context.DeadlineExceeded
		}
		return g, err
	case !c.failedOver.IsZero() && now.Sub(c.failedOver) < c.bDown:
		c.mu.Unlock()
		return coord.Grant{}, errUnreachable
	case c.failing && !c.snapped && now.Sub(c.aLastOK) > 2*time.Second:
		if s, ok := c.Memory.Snapshot(r.Key); ok {
			c.snap, c.snapDB, c.snapped = s, c.Memory.SnapshotDatabase(), true
		}
	}
	c.mu.Unlock()
	return c.Memory.Heartbeat(ctx, r)
}

// TestRateLateAnswerInLearningTakesNoShare: a report sent just before its
// node's fence deadline says the node paces to its rate share
// (RateApplied); it is taken, in learning mode, after the node's lease ran
// out on the old primary, the peer was granted the whole rate there, and
// a failover lost that grant. Learning mode caps the node at what its
// report said it paces to: its old share, beside the peer's lost grant of
// the whole rate. The node must take no rate share from an answer that
// came after its fence deadline. Sampled every 5 ms, the rates the nodes
// enforce (a node's share when not fenced) added up to 731–939 a minute on
// a key of 600 before.
func TestRateLateAnswerInLearningTakesNoShare(t *testing.T) {
	for _, tc := range []struct {
		aInterval, bDown, slowAfter, slow time.Duration
		what                              string
	}{
		{time.Second, 0, 1400 * time.Millisecond, 950 * time.Millisecond, "a resend, b reachable"},
		{200 * time.Millisecond, 1300 * time.Millisecond, 1400 * time.Millisecond, 950 * time.Millisecond, "a resend, b cut off"},
		{time.Second, 1300 * time.Millisecond, time.Second, 1350 * time.Millisecond, "a periodic report answered in the grace"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			bubble.Test(t, func(t *testing.T) {
				const rate = 600
				m := coord.NewMemory(nil)
				require.NoError(t, m.CreateKey(t.Context(), "k", nil, nil, coord.WithRates(coord.Rates{Requests: rate})))
				c := &lateFailoverCoord{Memory: m, slowAfter: tc.slowAfter, slow: tc.slow, bDown: tc.bDown}
				cfg := func(id string, interval time.Duration) Config {
					return Config{Key: "k", NodeID: id, HeartbeatInterval: interval, LeaseTTL: 2 * time.Second, Logger: quiet,
						MaxRequestDuration: 10 * time.Second,
						Limiter:            adaptive.Config{InitialLimit: 8, MinLimit: 8, MaxLimit: 8, MaxQueued: 64}}
				}
				a := startNode(t, c, cfg("a", tc.aInterval)) // a 2-s lease, a 0.5-s margin
				b := startNode(t, c, cfg("b", 200*time.Millisecond))
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				defer func() { cancel(); wg.Wait() }()
				for _, n := range []*Node{a, b} {
					for range 8 {
						wg.Go(func() {
							for ctx.Err() == nil {
								le, err := n.Acquire(ctx)
								if err != nil {
									time.Sleep(5 * time.Millisecond)
									continue
								}
								time.Sleep(10 * time.Millisecond)
								le.Release()
							}
						})
					}
				}
				time.Sleep(8 * time.Second)
				require.Positive(t, a.Rates().Share.Requests, "a's rate share before its outage")
				last := a.State().LastHeartbeat
				for a.State().LastHeartbeat.Equal(last) {
					time.Sleep(time.Millisecond)
				}
				c.mu.Lock()
				c.failing = true
				c.mu.Unlock()
				enforced := func(n *Node) int64 {
					if n.State().Fenced {
						return 0
					}
					return n.Rates().Share.Requests
				}
				worst := int64(0)
				for begin := time.Now(); time.Since(begin) < 6*time.Second; time.Sleep(5 * time.Millisecond) {
					worst = max(worst, enforced(a)+enforced(b))
				}
				c.mu.Lock()
				g, failedOver := c.grant, !c.failedOver.IsZero()
				c.mu.Unlock()
				t.Logf("the late answer: learning %v, rate share %d; Σ enforced peaked at %d a minute (R %d)",
					g.Learning, g.RateShare.Requests, worst, rate)
				require.True(t, failedOver && g.Learning, "the case tests nothing: no failover before the late report")
				require.LessOrEqual(t, worst, int64(rate), fmt.Sprintf("the nodes enforce more than the key's rate (%s)", tc.what))
			})
		})
	}
}
