// Package handoff times the waiting path of a limiter: many goroutines
// looping on acquire and release under a limit far below their number, so
// that a steady queue forms and every operation is one freed slot handed
// to a waiter. The admission-queue benchmarks of adaptive and of the bench
// module share it, so that fleetlimit and its peers are timed alike.
package handoff

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
)

// Bench runs the op that newOp(i) returns for goroutine i in a loop on
// each of goroutines goroutines and times b.N completions of it, once
// every goroutine has completed one (which also warms any pool the
// limiter keeps). The goroutines loop on, so the queue keeps its depth
// until the last timed op; stopping them is not timed. An op that fails
// panics with its error. It reports allocations.
func Bench(b *testing.B, goroutines int, newOp func(i int) func() error) {
	var completed, target atomic.Int64
	target.Store(math.MaxInt64)
	var stop atomic.Bool
	finished := make(chan struct{})
	var finish sync.Once
	var warm, done sync.WaitGroup
	for i := range goroutines {
		op := newOp(i)
		warm.Add(1)
		done.Go(func() {
			first := true
			for !stop.Load() {
				if err := op(); err != nil {
					panic(err)
				}
				if first {
					warm.Done()
					first = false
				}
				if completed.Add(1) >= target.Load() {
					finish.Do(func() { close(finished) })
				}
			}
		})
	}
	warm.Wait()
	b.ReportAllocs()
	b.ResetTimer()
	target.Store(completed.Load() + int64(b.N))
	<-finished
	b.StopTimer()
	stop.Store(true)
	done.Wait()
}
