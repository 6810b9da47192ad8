package bubble

import (
	"flag"
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
// and is then set back; without it, GOMAXPROCS is left alone. The bubbles
// meet on channels made outside them, so they all run at once, and end
// one after another, each checking GOMAXPROCS as it ends.
func TestParallelBubblesShareOneProcessor(t *testing.T) {
	before := atLeastTwoProcs(t)
	want := before
	if raceEnabled {
		want = 1
	}
	// As many bubbles as -test.parallel lets run at once, up to 4.
	n := min(4, flag.Lookup("test.parallel").Value.(flag.Getter).Get().(int))
	var arrived atomic.Int32
	started := make(chan struct{})
	turn := make([]chan struct{}, n+1)
	for i := range turn {
		turn[i] = make(chan struct{})
	}
	close(turn[0])
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run("bubble", func(t *testing.T) {
				t.Parallel()
				Test(t, func(t *testing.T) {
					if int(arrived.Add(1)) == n {
						close(started)
					}
					<-started // every bubble has started
					<-turn[i] // the bubbles before this one have checked
					defer close(turn[i+1])
					require.Equal(t, want, runtime.GOMAXPROCS(0))
				})
			})
		}
	})
	require.Equal(t, before, runtime.GOMAXPROCS(0), "GOMAXPROCS is set back")
}
