package fleet

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// TestTransportSendsNothingOnALeaseThatRanOutThenRenewed: as
// TestTransportSendsNothingOnALeaseThatRanOut, but on resuming the
// heartbeat goroutine renews the lease before the request's goroutine
// reaches the send check (a stall of the whole process, or a scheduler
// that runs the heartbeat first). A check of the fence as it is now,
// lifted by the renewal, sent the request admitted before the freeze, its
// bound (admission + MaxRequestDuration) mostly spent; the check now asks
// whether the lease held without a break since the admission.
func TestTransportSendsNothingOnALeaseThatRanOutThenRenewed(t *testing.T) {
	t.Parallel()
	fc := &failingCoord{Coordinator: coord.NewMemory(nil)}
	cfg := testConfig("k", "a")
	n := startNode(t, fc, cfg)
	var sent atomic.Int64
	tr := n.Transport(nil).(*transport)
	tr.base = roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})
	client := &http.Client{Transport: tr}
	resp, err := get(t, client, "http://127.0.0.1:1/")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())

	tr.admitted = func() {
		fc.fail.Store(true)
		time.Sleep(cfg.LeaseTTL + cfg.HeartbeatInterval) // frozen past the lease
		require.True(t, n.State().Fenced, "the lease ran out")
		fc.fail.Store(false)
		require.Eventually(t, func() bool { return !n.State().Fenced }, time.Second, time.Millisecond)
	}
	resp, err = get(t, client, "http://127.0.0.1:1/")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.ErrorIs(t, err, ErrFenced)
	require.EqualValues(t, 1, sent.Load(), "a request admitted before its lease ran out was sent after it")
}

// TestTransportSendsNothingOnceEvicted: under HoldLastShare an evicted
// node is fenced as under FailClosed (Config.Outage's doc) and admits
// nothing; a request admitted just before the node learnt of its
// eviction was still sent, and is not now.
func TestTransportSendsNothingOnceEvicted(t *testing.T) {
	t.Parallel()
	mem := coord.NewMemory(nil)
	cfg := testConfig("k", "a")
	cfg.Outage = HoldLastShare
	n := startNode(t, mem, cfg)
	var sent atomic.Int64
	tr := n.Transport(nil).(*transport)
	tr.base = roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})
	client := &http.Client{Transport: tr}
	resp, err := get(t, client, "http://127.0.0.1:1/")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())

	tr.admitted = func() {
		require.NoError(t, mem.Evict(t.Context(), "k", "a"))
		require.Eventually(t, func() bool { return n.fence.State().Evicted }, time.Second, time.Millisecond)
	}
	resp, err = get(t, client, "http://127.0.0.1:1/")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.ErrorIs(t, err, ErrEvicted)
	require.EqualValues(t, 1, sent.Load(), "an evicted node sent a request")
}
