package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// traceCoord logs every heartbeat through lateFailoverCoord: when it was
// answered, whose, the report's seq and in-flight, and the grant.
type traceCoord struct {
	*lateFailoverCoord
	begin time.Time
	mu    sync.Mutex
	log   []string
}

func (c *traceCoord) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	sent := time.Now()
	g, err := c.lateFailoverCoord.Heartbeat(ctx, r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.log = append(c.log, fmt.Sprintf("%8v %s seq %d inflight %d: %v", sent.Sub(c.begin), r.NodeID, r.Seq, r.Inflight, err))
		return g, err
	}
	c.log = append(c.log, fmt.Sprintf("%8v→%v %s seq %d inflight %d: share %d L %d learning %v lease %v",
		sent.Sub(c.begin), time.Since(c.begin), r.NodeID, r.Seq, r.Inflight, g.Share, g.LGlobal, g.Learning, g.LeaseRemaining))
	return g, nil
}

// TestConcurrencyLateAnswerInLearning: node a's report, sampled with
// requests in flight before its fence deadline, is taken after a
// failover that lost the grant its peer b got once a's row had stopped
// holding on the old primary (its lease plus its request bound had
// passed: a had nothing in flight any more, and b was granted all of
// L_global there). Learning mode grants a what the report says it holds,
// beside b's lost grant of L_global that b still enforces — and, when
// the answer is lost, grants it again to a's next report as the share
// this epoch already granted a. Σ in flight is counted at the upstream
// (the workers' Acquire/Release): 11–12 before a node took no more than
// it still holds from a learning-mode grant answered after its fence
// deadline, for the rest of the epoch's learning mode.
func TestConcurrencyLateAnswerInLearning(t *testing.T) {
	for _, tc := range []struct {
		aInterval, bDown, slowAfter, slow, bound time.Duration
		what                                     string
		drop                                     bool
	}{
		{time.Second, 0, 1400 * time.Millisecond, 950 * time.Millisecond, 100 * time.Millisecond, "a resend after a's hold, b reachable", false},
		{200 * time.Millisecond, 1300 * time.Millisecond, 1400 * time.Millisecond, 950 * time.Millisecond, 100 * time.Millisecond, "a resend after a's hold, b cut off", false},
		{time.Second, 1300 * time.Millisecond, time.Second, 1350 * time.Millisecond, 100 * time.Millisecond, "a periodic report answered after a's hold", false},
		// Its answer lost: the share it was granted is the share this
		// epoch already granted a, which a's next report is granted.
		{time.Second, 1300 * time.Millisecond, time.Second, 1350 * time.Millisecond, 100 * time.Millisecond, "a periodic report taken after a's hold, its answer lost", true},
		// Taken after a's lease ran out but within its hold (a request
		// bound of 10 s): a's row still reserves what the report claims.
		{200 * time.Millisecond, 1300 * time.Millisecond, 1400 * time.Millisecond, 950 * time.Millisecond, 10 * time.Second, "a resend within a's hold, b cut off", false},
		{time.Second, 1300 * time.Millisecond, time.Second, 1350 * time.Millisecond, 10 * time.Second, "a periodic report within a's hold", false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			bubble.Test(t, func(t *testing.T) {
				const L = 8
				m := coord.NewMemory(nil)
				lim := L
				require.NoError(t, m.CreateKey(t.Context(), "k", &lim, &lim))
				c := &traceCoord{lateFailoverCoord: &lateFailoverCoord{Memory: m, slowAfter: tc.slowAfter, slow: tc.slow, bDown: tc.bDown, dropLate: tc.drop}, begin: time.Now()}
				cfg := func(id string, interval time.Duration) Config {
					return Config{Key: "k", NodeID: id, HeartbeatInterval: interval, LeaseTTL: 2 * time.Second, Logger: quiet,
						FenceMargin: 500 * time.Millisecond, MaxRequestDuration: tc.bound, HeartbeatTimeout: time.Second,
						Limiter: adaptive.Config{InitialLimit: L, MinLimit: L, MaxLimit: L, MaxQueued: 64}}
				}
				a := startNode(t, c, cfg("a", tc.aInterval))
				b := startNode(t, c, cfg("b", 200*time.Millisecond))
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				defer func() { cancel(); wg.Wait() }()
				var upstream, peak atomic.Int64
				var peakAt atomic.Int64
				var each [2]atomic.Int64
				for i, n := range []*Node{a, b} {
					for range 8 {
						wg.Go(func() {
							for ctx.Err() == nil {
								le, err := n.Acquire(ctx)
								if err != nil {
									time.Sleep(5 * time.Millisecond)
									continue
								}
								each[i].Add(1)
								v := upstream.Add(1)
								for p := peak.Load(); v > p; p = peak.Load() {
									if peak.CompareAndSwap(p, v) {
										peakAt.Store(int64(time.Since(c.begin)))
										break
									}
								}
								time.Sleep(10 * time.Millisecond)
								upstream.Add(-1)
								each[i].Add(-1)
								le.Release()
							}
						})
					}
				}
				time.Sleep(8 * time.Second)
				last := a.State().LastHeartbeat
				for a.State().LastHeartbeat.Equal(last) {
					time.Sleep(time.Millisecond)
				}
				c.mu.Lock()
				c.log = append(c.log, fmt.Sprintf("%8v a's last answered heartbeat; a's heartbeats fail from here", time.Since(c.begin)))
				c.mu.Unlock()
				peak.Store(0)
				peakAt.Store(0)
				c.lateFailoverCoord.mu.Lock()
				c.failing = true
				c.lateFailoverCoord.mu.Unlock()
				var samples []string
				worst := 0
				for begin := time.Now(); time.Since(begin) < 6*time.Second; time.Sleep(time.Millisecond) {
					ai, bi := int(each[0].Load()), int(each[1].Load())
					if ai+bi > worst || ai+bi > L && len(samples) < 20 {
						worst = max(worst, ai+bi)
						sa, sb := a.State(), b.State()
						samples = append(samples, fmt.Sprintf("%8v a %d (share %d fenced %v) + b %d (share %d fenced %v) = %d",
							time.Since(c.begin), ai, sa.Share, sa.Fenced, bi, sb.Share, sb.Fenced, ai+bi))
					}
				}
				c.lateFailoverCoord.mu.Lock()
				g, failedOver := c.grant, !c.failedOver.IsZero()
				c.lateFailoverCoord.mu.Unlock()
				c.mu.Lock()
				trace := strings.Join(c.log[max(0, len(c.log)-60):], "\n")
				c.mu.Unlock()
				t.Logf("the late answer: learning %v, share %d; Σ in flight peaked at %d at %v (L_global %d)",
					g.Learning, g.Share, peak.Load(), time.Duration(peakAt.Load()), L)
				if testing.Verbose() || peak.Load() > L {
					t.Logf("heartbeats:\n%s\nsamples:\n%s", trace, strings.Join(samples, "\n"))
				}
				require.True(t, failedOver && g.Learning, "the case tests nothing: no failover before the late report")
				require.LessOrEqual(t, peak.Load(), int64(L), fmt.Sprintf("Σ in flight above L_global (%s)", tc.what))
			})
		})
	}
}
