package coord_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// lossBackend is a coordinator with a replica: save keeps the key's row
// and the database's record as a replica has them; lose fails over to
// them, under another incarnation.
type lossBackend struct {
	c          coordinator
	save, lose func(key string)
}

// lossBackends are Memory and Postgres, each as a lossBackend.
var lossBackends = []struct {
	name string
	new  func(t *testing.T, clock *fakeClock) lossBackend
}{
	{"memory", func(t *testing.T, clock *fakeClock) lossBackend {
		m := coord.NewMemory(clock)
		saved := map[string]coord.State{}
		var db coord.Database
		n := 0
		return lossBackend{c: m,
			save: func(key string) {
				if s, ok := m.Snapshot(key); ok {
					saved[key] = s
				}
				db = m.SnapshotDatabase()
			},
			lose: func(key string) {
				if s, ok := saved[key]; ok {
					m.Restore(key, s)
				} else {
					require.NoError(t, m.DeleteKey(context.Background(), key, true))
				}
				m.RestoreDatabase(db)
				n++
				m.SetIncarnation(fmt.Sprintf("after loss %d", n))
			}}
	}},
	{"postgres", func(t *testing.T, clock *fakeClock) lossBackend {
		pool := fleettest.Pool(t)
		ctx := context.Background()
		_, err := pool.Exec(ctx, `CREATE TABLE replica_keys (LIKE fleetlimit.keys);
CREATE TABLE replica_database_state (LIKE fleetlimit.database_state)`)
		require.NoError(t, err)
		return lossBackend{c: newPostgres(t, pool, coord.WithClock(clock)),
			save: func(key string) {
				_, err := pool.Exec(ctx, `INSERT INTO replica_keys SELECT * FROM fleetlimit.keys WHERE key = $1`, key)
				require.NoError(t, err)
				_, err = pool.Exec(ctx, `INSERT INTO replica_database_state SELECT * FROM fleetlimit.database_state`)
				require.NoError(t, err)
			},
			lose: func(key string) {
				_, err := pool.Exec(ctx, `DELETE FROM fleetlimit.keys WHERE key = $1`, key)
				require.NoError(t, err)
				_, err = pool.Exec(ctx, `INSERT INTO fleetlimit.keys SELECT * FROM replica_keys WHERE key = $1`, key)
				require.NoError(t, err)
				_, err = pool.Exec(ctx, `UPDATE fleetlimit.keys SET incarnation = 'before the loss' WHERE key = $1 AND incarnation IS NOT NULL`, key)
				require.NoError(t, err)
				_, err = pool.Exec(ctx, `DELETE FROM fleetlimit.database_state;
INSERT INTO fleetlimit.database_state SELECT * FROM replica_database_state;
UPDATE fleetlimit.database_state SET incarnation = 'before the loss'`)
				require.NoError(t, err)
			}}
	}},
}

// TestNewKeyLearnsAfterALoss pins, on Memory and on Postgres, what the
// database's own record is for: a loss that takes a key whole, or every
// heartbeat of it, leaves the key nothing to compare, but the database's
// record comes back as the replica had it: with the incarnation of before,
// and the bounds of the keys the replica knew (here another key's, the
// same as the lost one's). So the first heartbeat after the loss, from a
// node that applied no grant, finds the key in learning mode and gets
// nothing while the forgotten grant of a node that still runs may be
// used.
func TestNewKeyLearnsAfterALoss(t *testing.T) {
	t.Parallel()
	for _, impl := range lossBackends {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			for _, created := range []bool{false, true} {
				ctx := context.Background()
				clock := newFakeClock(t0)
				b := impl.new(t, clock)
				key := map[bool]string{false: "joined", true: "created"}[created]
				// The database's history before the loss: another key,
				// with the same lease and request bound.
				_, err := b.c.Heartbeat(ctx, coord.Report{Key: "other", NodeID: "o", Instance: "o/1", Seq: 1, LLocal: 10,
					Demand: 1, LeaseTTL: 10 * time.Second, MaxRequestDuration: 5 * time.Second})
				require.NoError(t, err)
				if created {
					require.NoError(t, b.c.CreateKey(ctx, key, nil, nil))
				}
				b.save(key)
				ga, err := b.c.Heartbeat(ctx, coord.Report{Key: key, NodeID: "a", Instance: "a/1", Seq: 1, LLocal: 10,
					Demand: 10, LeaseTTL: 10 * time.Second, MaxRequestDuration: 5 * time.Second})
				require.NoError(t, err)
				require.Equal(t, 10, ga.Share)
				b.lose(key)

				clock.Advance(time.Second)
				g, err := b.c.Heartbeat(ctx, coord.Report{Key: key, NodeID: "b", Instance: "b/1", Seq: 1, LLocal: 10,
					Demand: 10, LeaseTTL: 10 * time.Second, MaxRequestDuration: 5 * time.Second})
				require.NoError(t, err)
				require.True(t, g.Learning, "%s: the key learns from the database's record", key)
				require.Zero(t, g.Share, "%s: a's forgotten grant of 10 may still be in use", key)
				require.Greater(t, g.Epoch, ga.Epoch, key)
				keys, err := b.c.Keys(ctx)
				require.NoError(t, err)
				require.WithinDuration(t, t0.Add(16*time.Second), keys[0].LearningUntil, 0, "a's lease and request bound from the loss's discovery")

				clock.Set(t0.Add(16 * time.Second))
				g, err = b.c.Heartbeat(ctx, coord.Report{Key: key, NodeID: "b", Instance: "b/1", Seq: 2, LLocal: 10,
					Demand: 10, LeaseTTL: 10 * time.Second, MaxRequestDuration: 5 * time.Second, Epoch: g.Epoch, AppliedGen: g.Generation})
				require.NoError(t, err)
				require.False(t, g.Learning)
				require.Equal(t, 10, g.Share, "%s: after learning mode, b alone", key)
			}
		})
	}
}

// TestLearningCoversTheReportsOwnBounds pins, on Memory and on Postgres,
// that learning mode after a loss lasts at least the heartbeat's own lease
// and request bound, for the bounds the database and the key recorded come
// back with the loss and the lost history may have raised them. A node of
// the lost history was granted all of L_global 10 with a 10 s lease and a
// 5 s request bound; a newcomer with the same settings must get nothing
// for 15 s from the loss's discovery.
//   - "whole": the key was lost whole, and the only key the replica knew
//     ran with a 1 s lease and no bound. That key's heartbeat is the first
//     check after the loss, so the database learns for 1 s; the newcomer
//     comes 2.1 s after it.
//   - "raised": the key's node raised its lease from 1 s to 10 s and its
//     bound from 0 to 5 s at a heartbeat the loss took; the key learns for
//     the 1 s it recorded, and the newcomer comes again 1.1 s after its
//     first heartbeat.
func TestLearningCoversTheReportsOwnBounds(t *testing.T) {
	t.Parallel()
	const key = "lost"
	long := func(node string, seq int64, g coord.Grant) coord.Report {
		return coord.Report{Key: key, NodeID: node, Instance: node + "/1", Seq: seq, LLocal: 10, Demand: 10,
			LeaseTTL: 10 * time.Second, MaxRequestDuration: 5 * time.Second, Epoch: g.Epoch, AppliedGen: g.Generation}
	}
	for _, impl := range lossBackends {
		for _, c := range []string{"whole", "raised"} {
			t.Run(impl.name+"/"+c, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				clock := newFakeClock(t0)
				b := impl.new(t, clock)
				var ga coord.Grant
				if c == "whole" {
					short := coord.Report{Key: "other", NodeID: "o", Instance: "o/1", Seq: 1, LLocal: 10, Demand: 1, LeaseTTL: time.Second}
					_, err := b.c.Heartbeat(ctx, short)
					require.NoError(t, err)
					b.save(key)
					ga, err = b.c.Heartbeat(ctx, long("a", 1, coord.Grant{}))
					require.NoError(t, err)
					require.Equal(t, 10, ga.Share)
					b.lose(key)
					clock.Advance(100 * time.Millisecond)
					short.Seq = 2
					_, err = b.c.Heartbeat(ctx, short)
					require.NoError(t, err)
					clock.Advance(2100 * time.Millisecond)
				} else {
					first := long("a", 1, coord.Grant{})
					first.LeaseTTL, first.MaxRequestDuration = time.Second, 0
					g, err := b.c.Heartbeat(ctx, first)
					require.NoError(t, err)
					b.save(key)
					clock.Advance(500 * time.Millisecond)
					ga, err = b.c.Heartbeat(ctx, long("a", 2, g))
					require.NoError(t, err)
					require.Equal(t, 10, ga.Share)
					b.lose(key)
					clock.Advance(100 * time.Millisecond)
					g, err = b.c.Heartbeat(ctx, long("b", 1, coord.Grant{}))
					require.NoError(t, err)
					require.True(t, g.Learning)
					clock.Advance(1100 * time.Millisecond)
				}
				discovered := clock.Now().Add(-2100 * time.Millisecond)
				if c == "raised" {
					discovered = clock.Now().Add(-1100 * time.Millisecond)
				}
				g, err := b.c.Heartbeat(ctx, long("b", 2, coord.Grant{}))
				require.NoError(t, err)
				require.True(t, g.Learning, "the newcomer's own lease and bound from the loss's discovery")
				require.Zero(t, g.Share, "a's forgotten grant of 10 may still be in use")
				require.Greater(t, g.Epoch, ga.Epoch)
				keys, err := b.c.Keys(ctx)
				require.NoError(t, err)
				until := time.Time{}
				for _, k := range keys {
					if k.Key == key {
						until = k.LearningUntil
					}
				}
				require.WithinDuration(t, discovered.Add(15*time.Second), until, 0)

				clock.Set(until)
				g, err = b.c.Heartbeat(ctx, long("b", 3, g))
				require.NoError(t, err)
				require.False(t, g.Learning)
				require.Equal(t, 10, g.Share, "after learning mode, b alone")
			})
		}
	}
}

// TestUncheckedIsWhatTheNextCheckLearns: State.Unchecked says a key is
// unchecked exactly when the database's check and the key's, with no
// report (an operator's action), put it in learning mode, and then a
// heartbeat's check does too, for every combination of the key's
// incarnation, the database's record (incarnation, bounds, learning mode,
// a past learning_since) and the current incarnation, empty ones
// included. A key that recorded an incarnation has had a heartbeat, so
// it has a lease of its own.
func TestUncheckedIsWhatTheNextCheckLearns(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	incs := []string{"", "A", "B"}
	bounds := [][2]time.Duration{{0, 0}, {10 * time.Second, 0}, {0, 5 * time.Second}, {10 * time.Second, 5 * time.Second}}
	times := []time.Time{{}, now.Add(-time.Second), now.Add(time.Second)}
	heartbeat := coord.Report{LeaseTTL: time.Second}
	cases := 0
	for _, keyInc := range incs {
		for _, dbInc := range incs {
			for _, cur := range incs {
				for _, b := range bounds {
					for _, until := range times {
						for _, since := range times[:2] { // a check in the past
							s := coord.State{Key: coord.KeyState{Key: "k", Incarnation: keyInc}}
							if keyInc != "" { // a key that recorded one has had a heartbeat
								s.Key.MaxLeaseTTL, s.Key.MaxRequestDuration = 10*time.Second, 5*time.Second
							}
							d := coord.Database{Incarnation: dbInc, MaxLeaseTTL: b[0], MaxRequestDuration: b[1],
								LearningUntil: until, LearningSince: since}
							checked := d.Check(cur, now)
							learns := s.Incarnate(checked, now, coord.Report{}).Key.LearningUntil.After(now)
							what := fmt.Sprintf("key %q, database %+v, current %q", keyInc, d, cur)
							got := s.Unchecked(d, cur, now)
							require.Equal(t, learns, got, what)
							if got {
								require.True(t, s.Incarnate(checked, now, heartbeat).Key.LearningUntil.After(now), what)
							}
							cases++
						}
					}
				}
			}
		}
	}
	require.Equal(t, 3*3*3*4*3*2, cases)
}

// TestLearningPassesTheReportsEpoch pins, on Memory and on Postgres, the
// epoch a report's proof of a loss moves the key to. A grant the lost
// state issued on a server whose clock ran ahead of this one's carries
// an epoch past this server's clock: learning moved the key's epoch past
// its own and past the clock, not past the report's, so the node's next
// report, still of that epoch until it applies its new grant, proved a
// loss again and the key learned once more. The new epoch passes the
// report's.
func TestLearningPassesTheReportsEpoch(t *testing.T) {
	onBoth(t, func(t *testing.T, c coordinator, clock *fakeClock) {
		ctx := context.Background()
		g, err := c.Heartbeat(ctx, rep("a", 1, 8, 0, 1, 0))
		require.NoError(t, err)
		ahead := g.Epoch + (10 * time.Second).Microseconds() // the lost server's, 10 s ahead
		r := rep("a", 2, 8, 1, 1, g.Generation)
		r.Epoch = ahead
		clock.Advance(time.Millisecond)
		g2, err := c.Heartbeat(ctx, r)
		require.NoError(t, err)
		require.True(t, g2.Learning, "an epoch the key never had proves a loss")
		require.Greater(t, g2.Epoch, ahead, "the new epoch passes the report's")

		r.Seq = 3 // the grant of g2 not applied yet: still the epoch of before
		clock.Advance(time.Millisecond)
		g3, err := c.Heartbeat(ctx, r)
		require.NoError(t, err)
		require.Equal(t, g2.Epoch, g3.Epoch, "the same report's epoch proves no second loss")
	})
}

// TestRateLearningLastsALease pins, on Memory and on Postgres, how long
// learning mode caps a rate share at what its node paces to: one lease
// from the loss's discovery, the longest lease the key or the database
// recorded, not the lease plus the request bound that the concurrency
// shares learn for. A rate is spent when a request is sent, and a node
// sends nothing once its lease runs out, so a rate share the lost state
// granted ends with its lease. Node a was granted the key's 600 a minute
// on a 2-s lease with a 5-minute request bound; a restart's failed
// heartbeat fenced it (it reports pacing to 0). Its rate share stays 0
// for the lease from the discovery, then comes back while the key still
// learns. With another key's 10-s lease on record, the cap lasts 10 s.
func TestRateLearningLastsALease(t *testing.T) {
	t.Parallel()
	for _, impl := range lossBackends {
		for _, otherLease := range []time.Duration{0, 10 * time.Second} {
			t.Run(fmt.Sprintf("%s/other lease %v", impl.name, otherLease), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				clock := newFakeClock(t0)
				b := impl.new(t, clock)
				if otherLease > 0 {
					_, err := b.c.Heartbeat(ctx, coord.Report{Key: "other", NodeID: "o", Instance: "o/1", Seq: 1,
						LLocal: 10, LeaseTTL: otherLease})
					require.NoError(t, err)
				}
				require.NoError(t, b.c.CreateKey(ctx, "k", nil, nil, coord.WithRates(coord.Rates{Requests: 600})))
				report := func(seq int64, applied int64) coord.Grant {
					t.Helper()
					g, err := b.c.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a/1", Seq: seq,
						LLocal: 10, Demand: 1, LeaseTTL: 2 * time.Second, MaxRequestDuration: 5 * time.Minute,
						RateDemand: coord.Rates{Requests: 100}, RateApplied: coord.Rates{Requests: applied}})
					require.NoError(t, err)
					return g
				}
				g := report(1, 0)
				require.Equal(t, int64(600), g.RateShare.Requests)
				b.save("k")
				b.lose("k")

				clock.Advance(time.Second) // the loss's discovery
				lease := max(2*time.Second, otherLease)
				g = report(2, 0)
				require.True(t, g.Learning)
				require.Zero(t, g.RateShare.Requests, "no more than a paces to")
				clock.Advance(lease - time.Microsecond)
				g = report(3, 0)
				require.Zero(t, g.RateShare.Requests, "a lease of before the loss may still run")
				clock.Advance(time.Microsecond)
				g = report(4, 0)
				require.True(t, g.Learning, "the concurrency shares learn for the request bound too")
				require.Equal(t, int64(600), g.RateShare.Requests, "every rate share of before the loss has ended")
			})
		}
	}
}
