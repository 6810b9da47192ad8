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

// TestDemoSummarySaysWhenDemandBoundsTheGoodput: fewer workers in all than
// the capacity cannot fill it, and the summary says so; the default fleet
// can, and the line is not there.
func TestDemoSummarySaysWhenDemandBoundsTheGoodput(t *testing.T) {
	t.Parallel()
	schedule := []sim.Step{{Capacity: 40}, {At: 6700 * time.Millisecond, Capacity: 20}, {At: 13300 * time.Millisecond, Capacity: 60}}
	var b bytes.Buffer
	newDemoSummary("k", demoConfig{nodes: 2, workers: 8}, schedule, 0, 20*time.Second, sim.Stats{}, nil).write(&b)
	require.Contains(t, b.String(), "  demand            16 workers in all, below the capacity of 60: the goodput is bounded by the demand, not the capacity\n")
	b.Reset()
	newDemoSummary("k", demoConfig{nodes: DefaultDemoNodes, workers: DefaultDemoWorkers}, schedule, 0, 20*time.Second, sim.Stats{}, nil).write(&b)
	require.NotContains(t, b.String(), "demand")
}

// TestDemoSummarySaysLearningMode: a run on a database that lost state
// (its key in learning mode, admitting only what the nodes hold) says so,
// rather than showing a goodput of 0 with no reason; a run that never
// saw the mode has no such line.
func TestDemoSummarySaysLearningMode(t *testing.T) {
	t.Parallel()
	schedule := []sim.Step{{Capacity: 40}}
	until := time.Date(2026, 12, 6, 14, 3, 7, 0, time.Local)
	var learning demoLearning
	learning.note(frame{})
	for range 3 {
		learning.note(frame{Key: keyView{LearningUntil: &until}})
	}
	sum := newDemoSummary("k", demoConfig{nodes: 3, workers: 20}, schedule, 0, 12*time.Second, sim.Stats{}, nil)
	var b bytes.Buffer
	sum.write(&b)
	require.NotContains(t, b.String(), "learning mode")
	sum.learning = learning
	b.Reset()
	sum.write(&b)
	require.Contains(t, b.String(), "  learning mode     in 3 of 4 reads of the key, until 14:03:07: the database may have lost state "+
		"(a failover, a restore or a server restart), so each node was granted no more than it held (design §10)\n")
}

// TestDemoSummaryCountsRequestsStillRunning: the requests sent are the
// ones the provider received, those still running at the end included.
func TestDemoSummaryCountsRequestsStillRunning(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	st := sim.Stats{Successes: 32, Rejected: 4, Canceled: 2, Current: 30}
	newDemoSummary("k", demoConfig{nodes: 2, workers: 16}, []sim.Step{{Capacity: 40}}, 0, time.Second, st, nil).write(&b)
	require.Contains(t, b.String(), "4 429s = 5.9% of 68 requests sent")
}
