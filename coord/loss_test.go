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
	type backend struct {
		c coordinator
		// save keeps the key's row and the database's record as a
		// replica has them; lose fails over to them, under another
		// incarnation.
		save, lose func(key string)
	}
	for _, impl := range []struct {
		name string
		new  func(t *testing.T, clock *fakeClock) backend
	}{
		{"memory", func(_ *testing.T, clock *fakeClock) backend {
			m := coord.NewMemory(clock)
			saved := map[string]coord.State{}
			var db coord.Database
			n := 0
			return backend{c: m,
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
		{"postgres", func(t *testing.T, clock *fakeClock) backend {
			pool := fleettest.Pool(t)
			ctx := context.Background()
			_, err := pool.Exec(ctx, `CREATE TABLE replica_keys (LIKE fleetlimit.keys);
CREATE TABLE replica_database_state (LIKE fleetlimit.database_state)`)
			require.NoError(t, err)
			return backend{c: newPostgres(t, pool, coord.WithClock(clock)),
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
					_, err = pool.Exec(ctx, `DELETE FROM fleetlimit.database_state;
INSERT INTO fleetlimit.database_state SELECT * FROM replica_database_state;
UPDATE fleetlimit.database_state SET incarnation = 'before the loss'`)
					require.NoError(t, err)
				}}
		}},
	} {
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
