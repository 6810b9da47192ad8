package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

func TestCollectorReportsNodeState(t *testing.T) {
	t.Parallel()
	n := startNode(t, coord.NewMemory(nil), testConfig("openai:gpt-4o", "pod-1"))
	le, err := n.Acquire(t.Context())
	require.NoError(t, err)
	defer le.Release()

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(n.Collector()))
	want := `
# HELP fleetlimit_inflight Sum of the weights of the requests this node has in flight (their number when each weighs 1).
# TYPE fleetlimit_inflight gauge
fleetlimit_inflight{key="openai:gpt-4o",node="pod-1"} 1
# HELP fleetlimit_share The node's share of the global limit, as last granted.
# TYPE fleetlimit_share gauge
fleetlimit_share{key="openai:gpt-4o",node="pod-1"} 10
# HELP fleetlimit_fenced 1 while the node is fenced: before its first grant, when its lease is about to run out (under HoldLastShare it admits at its last share even so), or once evicted.
# TYPE fleetlimit_fenced gauge
fleetlimit_fenced{key="openai:gpt-4o",node="pod-1"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleetlimit_inflight", "fleetlimit_share", "fleetlimit_fenced"))
	count, err := testutil.GatherAndCount(reg, "fleetlimit_heartbeat_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, count)
}

// TestRejectionsCountEveryAdmissionWithoutASlot pins what
// fleetlimit_rejections_total counts, which its help text states: a
// refusal, a wait the caller's context ended and an invalid request each
// count once; the per-priority series tell them apart.
func TestRejectionsCountEveryAdmissionWithoutASlot(t *testing.T) {
	t.Parallel()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "pod-1"))
	var held []Lease
	for range 10 {
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		held = append(held, le)
	}
	defer func() {
		for _, le := range held {
			le.Release()
		}
	}()
	_, ok := n.TryAcquire()
	require.False(t, ok, "no room")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, err := n.Acquire(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline while queued")
	_, err = n.AcquireRequest(t.Context(), adaptive.Request{Weight: -1})
	require.ErrorIs(t, err, adaptive.ErrInvalidRequest)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(n.Collector()))
	want := `
# HELP fleetlimit_rejections_total ` + rejectionsHelp + `
# TYPE fleetlimit_rejections_total counter
fleetlimit_rejections_total{key="k",node="pod-1"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "fleetlimit_rejections_total"))
	stats := n.PriorityStats()
	require.Len(t, stats, 1)
	require.Equal(t, uint64(1), stats[0].Refused, "TryAcquire with no room")
	require.Equal(t, uint64(1), stats[0].TimedOut+stats[0].Cancelled, "the expired wait")
}
