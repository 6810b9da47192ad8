package fence

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

type recorder struct {
	mu      sync.Mutex
	reasons []Reason
}

func (r *recorder) on(reason Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func newFence(t *testing.T, margin time.Duration) (*Fence, *recorder) {
	t.Helper()
	rec := &recorder{}
	f, err := New(Config{SafetyMargin: margin, OnFenced: rec.on})
	require.NoError(t, err)
	return f, rec
}

func TestNewRejectsNegativeMargin(t *testing.T) {
	t.Parallel()
	_, err := New(Config{SafetyMargin: -time.Second})
	require.ErrorContains(t, err, "Config.SafetyMargin = -1s")
}

func TestFencedUntilFirstRenewalWithoutNotifying(t *testing.T) {
	t.Parallel()
	f, rec := newFence(t, 100*time.Millisecond)
	require.True(t, f.Check(at(0)))
	require.Empty(t, rec.reasons)
	require.Equal(t, Reason(""), f.State().Reason)
}

func TestDeadlineIsSendTimePlusRemainingMinusMargin(t *testing.T) {
	t.Parallel()
	f, rec := newFence(t, 300*time.Millisecond)
	// Sent at 0 ms, answered at 40 ms with 2 s remaining.
	fenced, deadline := f.Renew(at(40), at(0), 2*time.Second)
	require.False(t, fenced)
	require.Equal(t, at(1700), deadline)

	require.False(t, f.Check(at(1699)))
	require.True(t, f.Check(at(1700)))
	require.True(t, f.Check(at(1800)))
	require.Equal(t, []Reason{ReasonLeaseExpiring}, rec.reasons, "OnFenced fires once per fencing")
}

func TestLateReplyDoesNotShortenLease(t *testing.T) {
	t.Parallel()
	f, _ := newFence(t, 0)
	_, d := f.Renew(at(1010), at(1000), 2*time.Second)
	require.Equal(t, at(3000), d)
	// The reply to the heartbeat sent at 0 ms arrives after the newer one.
	_, d = f.Renew(at(1020), at(0), 2*time.Second)
	require.Equal(t, at(3000), d)
}

func TestRenewalLiftsFenceOnlyWithAFreshLease(t *testing.T) {
	t.Parallel()
	f, rec := newFence(t, 0)
	f.Renew(at(0), at(0), time.Second)
	require.True(t, f.Check(at(1000)))

	// A delayed reply to an old heartbeat whose lease is over lifts nothing.
	fenced, _ := f.Renew(at(1500), at(100), time.Second)
	require.True(t, fenced)

	// A fresh grant does.
	fenced, _ = f.Renew(at(1600), at(1550), time.Second)
	require.False(t, fenced)
	require.False(t, f.Check(at(2000)))
	require.True(t, f.Check(at(2550)))
	require.Equal(t, []Reason{ReasonLeaseExpiring, ReasonLeaseExpiring}, rec.reasons)
}

func TestLeaseShorterThanMarginStaysFenced(t *testing.T) {
	t.Parallel()
	f, _ := newFence(t, time.Second)
	fenced, _ := f.Renew(at(10), at(0), time.Second)
	require.True(t, fenced)
}

func TestEvictionIsPermanent(t *testing.T) {
	t.Parallel()
	f, rec := newFence(t, 0)
	f.Renew(at(0), at(0), time.Second)
	f.Evict()
	f.Evict()
	fenced, _ := f.Renew(at(100), at(90), time.Second)
	require.True(t, fenced)
	require.True(t, f.Check(at(200)))
	st := f.State()
	require.True(t, st.Evicted)
	require.Equal(t, ReasonEvicted, st.Reason)
	require.Equal(t, []Reason{ReasonEvicted}, rec.reasons)
}

func TestEvictionAfterExpiryNotifiesAgain(t *testing.T) {
	t.Parallel()
	f, rec := newFence(t, 0)
	f.Renew(at(0), at(0), time.Second)
	f.Check(at(1000))
	f.Evict()
	require.Equal(t, []Reason{ReasonLeaseExpiring, ReasonEvicted}, rec.reasons)
}

func TestConcurrentChecksNotifyOnce(t *testing.T) {
	t.Parallel()
	f, rec := newFence(t, 0)
	f.Renew(at(0), at(0), time.Second)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { f.Check(at(1000)) })
	}
	wg.Wait()
	require.Len(t, rec.reasons, 1)
}

// TestUnbrokenAcrossALapse: a lease renewed before each deadline holds
// without a break from any time since the first renewal; one renewed
// after its deadline passed — with or without a Check in between, as
// after a freeze that ran no timer — begins a new run, and what was
// decided before the lapse no longer stands, though the fence is lifted.
func TestUnbrokenAcrossALapse(t *testing.T) {
	t.Parallel()
	for _, checked := range []bool{false, true} {
		f, _ := newFence(t, 0)
		f.Renew(at(0), at(0), 100*time.Millisecond)   // deadline 100
		f.Renew(at(80), at(80), 100*time.Millisecond) // 180, no break
		require.True(t, f.Unbroken(at(10), at(150)), "renewed before its deadline")
		require.False(t, f.Unbroken(at(-10), at(150)), "before the first renewal")
		if checked {
			require.True(t, f.Check(at(190)))
		}
		fenced, _ := f.Renew(at(300), at(300), 100*time.Millisecond) // 400, after a lapse
		require.False(t, fenced)
		require.False(t, f.Unbroken(at(150), at(310)), "decided before the lapse (checked %v)", checked)
		require.True(t, f.Unbroken(at(300), at(310)), "decided under the renewed lease")
		require.False(t, f.Unbroken(at(300), at(400)), "past the deadline")
	}
}
