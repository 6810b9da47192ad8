package fleettest_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// Two nodes share a key capped at 10 through the in-memory coordinator:
// each holds three requests, so each is granted half of the key.
func ExampleMemory() {
	ctx := context.Background()
	c := fleettest.Memory()
	maxLimit := 10
	if err := c.CreateKey(ctx, "partner-api", nil, &maxLimit); err != nil {
		panic(err)
	}

	var nodes []*fleet.Node
	for _, id := range []string{"node-a", "node-b"} {
		n, err := fleet.NewWithCoordinator(c, fleet.Config{
			Key:               "partner-api",
			NodeID:            id,
			HeartbeatInterval: 100 * time.Millisecond,
			// A lease of many intervals: a heartbeat late on a busy
			// machine does not fence the node.
			LeaseTTL: 2 * time.Second,
			// The estimate of a node that has measured nothing yet.
			Limiter: adaptive.Config{InitialLimit: 20, MaxQueued: 100},
			Logger:  slog.New(slog.DiscardHandler),
		})
		if err != nil {
			panic(err)
		}
		if err := n.Start(ctx); err != nil {
			panic(err)
		}
		defer n.Stop(ctx)
		nodes = append(nodes, n)
	}

	for _, n := range nodes {
		for range 3 {
			lease, err := n.Acquire(ctx)
			if err != nil {
				panic(err)
			}
			defer lease.Release()
		}
	}
	for _, n := range nodes {
		for n.State().Share != 5 || n.State().LiveNodes != 2 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, n := range nodes {
		s := n.State()
		fmt.Printf("%s: share %d of %d, %d in flight\n", n.ID(), s.Share, s.LGlobal, s.Inflight)
	}
	// Output:
	// node-a: share 5 of 10, 3 in flight
	// node-b: share 5 of 10, 3 in flight
}
