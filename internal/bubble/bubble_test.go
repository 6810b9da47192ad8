package bubble

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDueTimersFromManyGoroutines fires timers already due from eight
// bubbled goroutines at each instant, the pattern that crashes the race
// runtime under synctest.Test with more than one processor.
func TestDueTimersFromManyGoroutines(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	fired := 0
	Test(t, func(t *testing.T) {
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
// and is then set back; without it, GOMAXPROCS is left alone.
func TestParallelBubblesShareOneProcessor(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	want := before
	if raceEnabled {
		want = 1
	}
	t.Run("group", func(t *testing.T) {
		for range 4 {
			t.Run("bubble", func(t *testing.T) {
				t.Parallel()
				Test(t, func(t *testing.T) {
					time.Sleep(time.Second)
					require.Equal(t, want, runtime.GOMAXPROCS(0))
				})
			})
		}
	})
	require.Equal(t, before, runtime.GOMAXPROCS(0), "GOMAXPROCS is set back")
}
