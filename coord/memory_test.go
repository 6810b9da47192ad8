package coord_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

func TestMemoryConcurrentUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := coord.NewMemory(nil)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("n%d", i)
			for seq := int64(1); seq <= 50; seq++ {
				r := coord.Report{Key: "k", NodeID: id, Instance: id, Seq: seq, LLocal: 10, Inflight: int(seq % 3),
					Demand: 3, LeaseTTL: time.Minute}
				if _, err := m.Heartbeat(ctx, r); err != nil {
					errs <- err
					return
				}
				if seq%10 == 0 {
					if _, err := m.Nodes(ctx, "k"); err != nil {
						errs <- err
						return
					}
					if err := m.Drain(ctx, "k", id); err != nil {
						errs <- err
						return
					}
					if err := m.Undrain(ctx, "k", id); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	keys, err := m.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, 20, keys[0].LiveNodes)
	require.LessOrEqual(t, keys[0].SumShare, keys[0].LGlobal)
}

func TestMemoryErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock(t0)
	m := coord.NewMemory(clock)
	_, err := m.Heartbeat(ctx, coord.Report{Key: "k"})
	require.ErrorIs(t, err, coord.ErrInvalidReport)
	require.ErrorContains(t, err, "coord: heartbeat: invalid report: node_id")
	keys, err := m.Keys(ctx)
	require.NoError(t, err)
	require.Empty(t, keys, "a refused report creates no key")

	_, err = m.Nodes(ctx, "k")
	require.ErrorIs(t, err, coord.ErrUnknownKey)
	require.ErrorIs(t, m.Drain(ctx, "k", "a"), coord.ErrUnknownKey)
	require.ErrorIs(t, m.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "a-1"}), coord.ErrUnknownKey)

	_, err = m.Heartbeat(ctx, rep("a", 1, 4, 0, 0, 0))
	require.NoError(t, err)
	require.ErrorIs(t, m.Evict(ctx, "k", "b"), coord.ErrUnknownNode)
	require.ErrorContains(t, m.Evict(ctx, "k", "b"), "coord: evict: unknown node")

	clock.Advance(time.Second)
	nodes, err := m.Nodes(ctx, "k")
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.Equal(t, ttl-time.Second, nodes[0].LeaseRemaining)
	require.Equal(t, time.Second, nodes[0].HeartbeatAge)
	require.Equal(t, coord.StatusActive, nodes[0].Status)
}

// TestMemoryRestoreLearns: a restore from an older snapshot is found out by
// the first report that applied a grant the snapshot does not know, and a
// new incarnation by the next heartbeat of any node.
func TestMemoryRestoreLearns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock(t0)
	m := coord.NewMemory(clock)
	g, err := m.Heartbeat(ctx, rep("a", 1, 4, 0, 2, 0))
	require.NoError(t, err)
	backup, ok := m.Snapshot("k")
	require.True(t, ok)
	_, err = m.Heartbeat(ctx, rep("b", 1, 4, 0, 2, 0))
	require.NoError(t, err)
	g, err = m.Heartbeat(ctx, applied(rep("a", 2, 4, 2, 2, 0), g))
	require.NoError(t, err)
	require.False(t, g.Learning)

	m.Restore("k", backup)
	g, err = m.Heartbeat(ctx, applied(rep("a", 3, 4, 2, 2, 0), g))
	require.NoError(t, err)
	require.True(t, g.Learning, "a's grant is newer than the restored key")
	require.Equal(t, 2, g.Share)

	clock.Advance(time.Hour)
	m.SetIncarnation("failover")
	g, err = m.Heartbeat(ctx, applied(rep("a", 4, 4, 1, 2, 0), g))
	require.NoError(t, err)
	require.True(t, g.Learning)
	require.Equal(t, 1, g.Share)
}
