package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// BenchmarkAcquireRelease measures what a fleet node adds to a request
// over its limiter: Node.Acquire (the share and rate checks, the lease's
// context and bound) and Lease.Release. Compare it with the adaptive
// package's BenchmarkTryAcquireRelease in the same run:
//
//	go test -run '^$' -bench 'AcquireRelease$' -benchmem ./fleet ./adaptive
func BenchmarkAcquireRelease(b *testing.B) {
	n := benchNode(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			le, err := n.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			le.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				le, err := n.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				le.Release()
			}
		})
	})
}

// benchNode starts a node on an in-memory coordinator with a limit far
// above the benchmark's in-flight, so that nothing waits.
func benchNode(b *testing.B) *Node {
	b.Helper()
	cfg := Config{
		Key:               "bench",
		NodeID:            "bench-node",
		HeartbeatInterval: time.Second,
		LeaseTTL:          10 * time.Second,
		Limiter:           adaptive.Config{InitialLimit: 1000, MinLimit: 100, MaxLimit: 1000},
		Logger:            quiet,
	}
	n, err := NewWithCoordinator(coord.NewMemory(nil), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Stop(ctx)
	})
	return n
}
