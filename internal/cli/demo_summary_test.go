package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// TestDemoSummaryShowsTheStepsTheRunSaw: a run interrupted before the
// schedule's later steps shows only the capacity it ran under, and the
// goodput the capacity allowed then.
func TestDemoSummaryShowsTheStepsTheRunSaw(t *testing.T) {
	t.Parallel()
	schedule := []sim.Step{{Capacity: 40}, {At: 6700 * time.Millisecond, Capacity: 20}, {At: 13300 * time.Millisecond, Capacity: 60}}
	cfg := demoConfig{nodes: 3, workers: 20, databaseLabel: "db"}
	var b bytes.Buffer
	newDemoSummary("k", cfg, schedule, 0, 5200*time.Millisecond, sim.Stats{}, nil).write(&b)
	require.Contains(t, b.String(), "  capacity          40 (hidden from the nodes;")
	require.Contains(t, b.String(), "capacity at most 40)")

	b.Reset()
	newDemoSummary("k", cfg, schedule, 0, 8*time.Second, sim.Stats{}, nil).write(&b)
	require.Contains(t, b.String(), "  capacity          40 → 20 at 6.7s (hidden from the nodes;")
}
