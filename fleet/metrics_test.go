package fleet

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

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
# HELP fleetlimit_fenced 1 while the node is fenced (its lease is about to run out, or it was evicted).
# TYPE fleetlimit_fenced gauge
fleetlimit_fenced{key="openai:gpt-4o",node="pod-1"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleetlimit_inflight", "fleetlimit_share", "fleetlimit_fenced"))
	count, err := testutil.GatherAndCount(reg, "fleetlimit_heartbeat_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, count)
}
