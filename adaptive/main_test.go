package adaptive

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newTestLimiter returns a limiter on a fake clock.
func newTestLimiter(t testing.TB, cfg Config) (*Limiter, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	cfg.Clock = clk
	l, err := New(cfg)
	require.NoError(t, err)
	return l, clk
}

// acquireN admits n leases with TryAcquire, failing the test if any is
// refused.
func acquireN(t testing.TB, l *Limiter, n int) []Lease {
	t.Helper()
	leases := make([]Lease, n)
	for i := range leases {
		le, ok := l.TryAcquire()
		require.True(t, ok, "TryAcquire %d of %d refused", i+1, n)
		leases[i] = le
	}
	return leases
}

// waitUntil polls cond, yielding the processor, until it holds or a
// generous deadline passes. It waits for other goroutines to reach a
// state (such as being queued), not for time to pass.
func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		runtime.Gosched()
	}
}
