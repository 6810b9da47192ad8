package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestManualClock(t *testing.T) {
	t.Parallel()
	c := NewManualClock(epoch)
	require.Equal(t, epoch, c.Now())

	select {
	case got := <-c.After(0):
		require.Equal(t, epoch, got)
	default:
		require.FailNow(t, "After(0) must fire at once")
	}

	late := c.After(2 * time.Second)
	early := c.After(time.Second)
	require.Equal(t, 2, c.Waiters())

	c.Advance(999 * time.Millisecond)
	require.Equal(t, 2, c.Waiters())
	c.Advance(time.Millisecond)
	require.Equal(t, 1, c.Waiters())
	require.Equal(t, epoch.Add(time.Second), <-early)
	select {
	case <-late:
		require.FailNow(t, "fired before its deadline")
	default:
	}

	c.Advance(-time.Hour) // ignored
	require.Equal(t, epoch.Add(time.Second), c.Now())
	c.Advance(5 * time.Second)
	require.Equal(t, epoch.Add(6*time.Second), <-late, "fires with the clock's time")
	require.Zero(t, c.Waiters())
}
