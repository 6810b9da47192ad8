package fleettest

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// StopTimeout bounds the Stop that [StartNode] registers at a test's cleanup.
const StopTimeout = 10 * time.Second

// Coordinator returns a coord.Postgres, with opts, on a new migrated
// database of its own (see [Pool]). It is also a coord.Admin, for the
// operator's verbs: CreateKey, SetLimits, Drain, Evict, Nodes. Coordinator
// skips or fails t when no Postgres is available (see the package doc).
func Coordinator(t testing.TB, opts ...coord.PostgresOption) *coord.Postgres {
	t.Helper()
	c, err := coord.NewPostgres(Pool(t), opts...)
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	return c
}

// Memory returns an in-memory coordinator on the system clock, for unit
// tests that need no Postgres. It runs the same protocol as coord.Postgres
// (one conformance suite runs both) but shares nothing outside this
// process, has no roles and does not survive it. It is safe for concurrent
// use; see coord.Memory for the hooks it adds for tests (SetIncarnation,
// Snapshot, Restore).
func Memory() *coord.Memory {
	return coord.NewMemory(nil)
}

// StartNode creates a fleet node with cfg on c and starts it, failing t if
// either fails. At t's cleanup the node is stopped, as a process shutting
// down gracefully would be (waiting up to [StopTimeout] for its requests to
// end), and a failed Stop fails t. The ctx of Start is context.Background,
// so the node outlives any context of the test.
func StartNode(t testing.TB, c coord.Coordinator, cfg fleet.Config) *fleet.Node {
	t.Helper()
	n, err := fleet.NewWithCoordinator(c, cfg)
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatalf("fleettest: start node %q: %v", n.ID(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("fleettest: stop node %q: %v", n.ID(), err)
		}
	})
	return n
}

// WaitFor polls n's State every 10ms until cond holds for it and returns
// that state, or fails t with the last state seen once timeout has passed.
// Grants change on heartbeats, so give timeout a few heartbeat intervals.
func WaitFor(t testing.TB, n *fleet.Node, timeout time.Duration, cond func(fleet.State) bool) fleet.State {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := n.State()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleettest: node %q: condition not met within %s; last state %+v", n.ID(), timeout, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
