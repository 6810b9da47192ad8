package fleet

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// TestPauseFailsTheWaitsForTheRate: on a key of 6 requests a minute, a
// caller waits in Acquire for the rate, its slot taken, when a refusal
// with a Retry-After of a minute pauses the node. It used to get its
// lease 9 s into the pause, and CheckSend let it be sent; now the pause
// fails its wait at once with adaptive.ErrPaused, as it fails the callers
// queued for a slot.
func TestPauseFailsTheWaitsForTheRate(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, rateKey(t, 6, 0), testConfig("k", "a"))
		first, err := n.Acquire(t.Context())
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			le, err := n.Acquire(t.Context()) // a slot, then a wait for the rate
			if err == nil {
				err = le.CheckSend()
				le.Ignore()
			}
			done <- err
		}()
		time.Sleep(time.Second)
		refused := time.Now()
		first.Refuse(time.Minute)
		err = <-done
		require.ErrorIs(t, err, adaptive.ErrPaused)
		require.Zero(t, time.Since(refused), "failed as the pause began")
		require.Zero(t, n.Limiter().Snapshot().Inflight, "its slot is freed")
	})
}

// TestNothingSentWhilePaused: 4 callers send through Transport on a key
// of 60 requests a minute, so most of them wait for the rate; the 5th
// response is a 429 with Retry-After: 20. Three requests waiting for the
// rate reached the upstream 1.0, 2.0 and 3.1 s into the pause; now none
// does, and a lease admitted before a pause is refused by CheckSend.
func TestNothingSentWhilePaused(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, rateKey(t, 60, 0), testConfig("k", "a"))
		var (
			mu     sync.Mutex
			sent   []time.Time
			paused time.Time
		)
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			i := len(sent)
			sent = append(sent, time.Now())
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			status, h := http.StatusOK, http.Header{}
			if i == 4 {
				mu.Lock()
				paused = time.Now()
				mu.Unlock()
				status, h = http.StatusTooManyRequests, http.Header{"Retry-After": {"20"}}
			}
			return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("x")),
				ContentLength: 1, Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
		})
		client := &http.Client{Transport: n.Transport(base)}
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.invalid/", nil)
					resp, err := client.Do(req)
					if err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.False(t, paused.IsZero(), "the 5th request was answered 429")
		var during []time.Duration
		for _, at := range sent {
			if at.After(paused) && at.Before(paused.Add(20*time.Second)) {
				during = append(during, at.Sub(paused))
			}
		}
		require.Empty(t, during, "requests sent into the upstream's pause")
		require.Greater(t, len(sent), 10, "sending resumed after the pause")

		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		n.quotaPause(time.Now(), time.Minute)
		err = le.CheckSend()
		le.Unsent()
		require.ErrorIs(t, err, adaptive.ErrPaused, "admitted before the pause, not sent in it")
		var perr *adaptive.PauseError
		require.True(t, errors.As(err, &perr))
	})
}

// TestStopSendsNothingIntoAPause: a lease admitted before an upstream's
// pause is refused by CheckSend during Stop too. The check read the
// limiter's pause, which Stop sets for good, and let a stopping node send
// into the upstream's (1 ms into Stop, 59 s of a Retry-After left).
func TestStopSendsNothingIntoAPause(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
		le, err := n.Acquire(t.Context())
		require.NoError(t, err)
		n.quotaPause(time.Now(), time.Minute)
		require.ErrorIs(t, le.CheckSend(), adaptive.ErrPaused, "refused before Stop")
		stopped := make(chan error, 1)
		go func() { stopped <- n.Stop(t.Context()) }()
		time.Sleep(time.Millisecond) // Stop waits for le
		err = le.CheckSend()
		le.Unsent()
		require.NoError(t, <-stopped)
		require.ErrorIs(t, err, adaptive.ErrPaused, "refused during Stop")
	})
}

// TestPauseBeforeTheRateWaitFailsIt: a request that took its slot before
// a pause began and reaches the wait for the rate after it fails at once.
// It waited on the next pause's wake-up, its slot held through this one,
// for 10 s.
func TestPauseBeforeTheRateWaitFailsIt(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		n := startNode(t, rateKey(t, 6, 0), testConfig("k", "a"))
		first, err := n.Acquire(t.Context()) // spends the rate
		require.NoError(t, err)
		defer first.Release()
		n.quotaPause(time.Now(), time.Minute)
		start := time.Now()
		_, _, _, err = n.pace(t.Context(), time.Now().Add(time.Minute), 0, true) // as acquire calls it once the slot is taken
		require.ErrorIs(t, err, adaptive.ErrPaused)
		require.Zero(t, time.Since(start), "failed at once")
	})
}
