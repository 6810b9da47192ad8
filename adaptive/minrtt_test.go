package adaptive

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMinWindowMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 2, 3, 7, 64} {
		w := newMinWindow(size)
		var all []time.Duration
		_, ok := w.min()
		require.False(t, ok)
		for i := range 2000 {
			rtt := time.Duration(rng.IntN(100)) * time.Millisecond
			if i%500 == 499 {
				w.reset()
				all = all[:0]
				_, ok := w.min()
				require.False(t, ok)
			}
			w.push(rtt)
			all = append(all, rtt)
			got, ok := w.min()
			require.True(t, ok)
			require.Equal(t, slices.Min(all[max(0, len(all)-size):]), got, "size %d step %d", size, i)
		}
	}
}

func TestMinWindowBaselineMovesUp(t *testing.T) {
	t.Parallel()
	w := newMinWindow(3)
	w.push(10 * time.Millisecond)
	w.push(50 * time.Millisecond)
	w.push(50 * time.Millisecond)
	got, _ := w.min()
	require.Equal(t, 10*time.Millisecond, got)
	w.push(50 * time.Millisecond)
	got, _ = w.min()
	require.Equal(t, 50*time.Millisecond, got, "the old minimum left the window")
}

func TestMinWindowDoesNotAllocate(t *testing.T) {
	w := newMinWindow(16)
	var i time.Duration
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		w.push(i % 37)
		w.min()
	})
	require.Zero(t, allocs)
}
