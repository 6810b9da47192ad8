package bubble

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// atLeastTwoProcs sets GOMAXPROCS to at least 2 for the test, so that the
// hold is seen to act on a machine with one processor too.
func atLeastTwoProcs(t *testing.T) int {
	prev := runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	return runtime.GOMAXPROCS(0)
}

// TestDueTimersFromManyGoroutines fires timers already due from eight
// bubbled goroutines at each instant, the pattern that crashes the race
// runtime under synctest.Test with more than one processor.
func TestDueTimersFromManyGoroutines(t *testing.T) {
	before := atLeastTwoProcs(t)
	fired := 0
	Test(t, func(t *testing.T) {
		if raceEnabled {
			require.Equal(t, 1, runtime.GOMAXPROCS(0), "one processor inside the bubble")
		} else {
			require.Equal(t, before, runtime.GOMAXPROCS(0), "GOMAXPROCS left alone without -race")
		}
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for range 8 {
			wg.Go(func() {
				for range 20000 {
					time.Sleep(time.Millisecond)
					<-time.NewTimer(0).C
					done := make(chan struct{})
					time.AfterFunc(0, func() { close(done) })
					<-done
					mu.Lock()
					fired++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	require.Equal(t, 8*20000, fired)
	require.Equal(t, before, runtime.GOMAXPROCS(0), "GOMAXPROCS is set back")
}

// TestParallelBubblesShareOneProcessor: under the race detector
// GOMAXPROCS stays 1 until the last of several overlapping bubbles ends,
// and is then set back; without it, GOMAXPROCS is left alone. Four
// bubbles run at once (t.Run from four goroutines, which -test.parallel
// does not limit), meet on channels made outside them, and end one after
// another: each opens the next one's turn only once its Test call has
// returned, so the next checks GOMAXPROCS with the one before it over.
func TestParallelBubblesShareOneProcessor(t *testing.T) {
	before := atLeastTwoProcs(t)
	want := before
	if raceEnabled {
		want = 1
	}
	const n = 4
	var arrived atomic.Int32
	started := make(chan struct{})
	turn := make([]chan struct{}, n+1)
	for i := range turn {
		turn[i] = make(chan struct{})
	}
	close(turn[0])
	// A real deadline: a bubble waiting on a channel made outside it
	// does not move its own clock, and with -run naming one bubble the
	// others never arrive.
	deadline := time.After(10 * time.Second)
	wait := func(t *testing.T, c <-chan struct{}, what string) {
		select {
		case <-c:
		case <-deadline:
			t.Fatalf("%s did not come within 10s (this test runs its %d bubbles together; -run must select them all)", what, n)
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer close(turn[i+1])
			t.Run(fmt.Sprintf("bubble%d", i), func(t *testing.T) {
				Test(t, func(t *testing.T) {
					if arrived.Add(1) == n {
						close(started)
					}
					wait(t, started, "every bubble's start")
					wait(t, turn[i], "the turn of the bubble before")
					require.Equal(t, want, runtime.GOMAXPROCS(0), "while %d of %d bubbles run", n-i, n)
				})
			})
		})
	}
	wg.Wait()
	require.Equal(t, before, runtime.GOMAXPROCS(0), "GOMAXPROCS is set back")
}
