package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// A node shares the key "partner-api" with every other process configured
// with the same key, and wraps an http.Client. In production pass a
// *pgxpool.Pool to fleet.New instead of an in-memory coordinator, after
// running migrations.Up once.
func Example() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	defer upstream.Close()

	node, err := fleet.NewWithCoordinator(coord.NewMemory(nil), fleet.Config{
		Key:     "partner-api",
		NodeID:  "worker-1",
		Limiter: adaptive.Config{InitialLimit: 8, MaxQueued: 64},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := node.Stop(stopCtx); err != nil {
			log.Print(err)
		}
	}()

	client := &http.Client{Transport: node.Transport(http.DefaultTransport)}
	resp, err := client.Get(upstream.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body), node.State().Share)
	// Output: hello 8
}

// A caller that does not go through Transport (a gRPC client, an SDK with
// its own connection) settles each lease itself; a refusal is settled
// with Refuse, which holds its slot for a round trip and pauses the node
// for the refusal's Retry-After.
func ExampleLease_Refuse() {
	node, err := fleet.NewWithCoordinator(coord.NewMemory(nil), fleet.Config{
		Key:     "partner-api",
		NodeID:  "worker-1",
		Limiter: adaptive.Config{InitialLimit: 8, MaxQueued: 64},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := node.Stop(stopCtx); err != nil {
			log.Print(err)
		}
	}()

	// call stands for the upstream: it refuses, asking for 2 s.
	call := func(context.Context) (retryAfter time.Duration, refused bool, err error) {
		return 2 * time.Second, true, nil
	}
	lease, err := node.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := lease.CheckSend(); err != nil {
		lease.Unsent()
		log.Fatal(err)
	}
	retryAfter, refused, err := call(lease.Context())
	switch {
	case refused:
		lease.Refuse(retryAfter)
	case err != nil:
		lease.Abandon(false) // given up after sending: the upstream may still serve it
	default:
		lease.Release()
	}
	_, err = node.Acquire(ctx)
	fmt.Println(node.State().Drops, errors.Is(err, adaptive.ErrPaused))
	// Output: 1 true
}
