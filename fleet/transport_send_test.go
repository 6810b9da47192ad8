package fleet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/bubble"
)

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sendRig is a started node whose Transport sends to a base that counts
// the requests it is handed and answers each 200 at once.
type sendRig struct {
	n      *Node
	tr     *transport
	client *http.Client
	sent   atomic.Int64
}

// newSendRig starts a node with cfg on c and checks that a request on its
// live lease is sent.
func newSendRig(t *testing.T, c coord.Coordinator, cfg Config) *sendRig {
	t.Helper()
	r := &sendRig{n: startNode(t, c, cfg)}
	r.tr = r.n.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		r.sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})).(*transport)
	r.client = &http.Client{Transport: r.tr}
	require.NoError(t, r.get(t), "a request on a live lease is sent")
	require.EqualValues(t, 1, r.sent.Load())
	return r
}

// newLapseRig is a sendRig on a coordinator that can fail. freeze stands
// for a process frozen right after an admission: from its call no
// heartbeat gets through, and it returns once the lease has run out.
func newLapseRig(t *testing.T) (r *sendRig, fc *failingCoord, freeze func()) {
	t.Helper()
	fc = &failingCoord{Coordinator: coord.NewMemory(nil)}
	cfg := testConfig("k", "a")
	r = newSendRig(t, fc, cfg)
	return r, fc, func() {
		fc.fail.Store(true)
		time.Sleep(cfg.LeaseTTL + cfg.HeartbeatInterval)
	}
}

// get sends one request and reads its body, if any, to the end.
func (r *sendRig) get(t *testing.T) error {
	t.Helper()
	resp, err := get(t, r.client, "http://127.0.0.1:1/")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	return err
}

// TestTransportSendsNothingOnALeaseThatRanOut: a process frozen between a
// request's admission and its sending resumes past its lease. Sent then,
// the request ran at the upstream past its bound, when its slot was freed,
// and beside the requests admitted into the node's capacity since (a
// chaos run: peak 25 for 24 over 1.28 s, 60 ms after a 2.94 s SIGSTOP).
// Transport now checks the lease again before sending.
func TestTransportSendsNothingOnALeaseThatRanOut(t *testing.T) {
	t.Parallel()
	r, _, freeze := newLapseRig(t)
	r.tr.admitted = freeze
	err := r.get(t)
	require.ErrorIs(t, err, ErrFenced)
	require.ErrorContains(t, err, "after the request was admitted; it was not sent")
	require.EqualValues(t, 1, r.sent.Load(), "the request admitted before the lease ran out was sent after it")
	require.Zero(t, r.n.State().Inflight, "its slot is freed")
}

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
	r, fc, freeze := newLapseRig(t)
	r.tr.admitted = func() {
		freeze()
		// The fence's timer fires at the deadline, or a little later on a
		// busy machine.
		require.Eventually(t, func() bool { return r.n.State().Fenced }, 5*time.Second, time.Millisecond, "the lease ran out")
		fc.fail.Store(false)
		require.Eventually(t, func() bool { return !r.n.State().Fenced }, time.Second, time.Millisecond)
	}
	require.ErrorIs(t, r.get(t), ErrFenced)
	require.EqualValues(t, 1, r.sent.Load(), "a request admitted before its lease ran out was sent after it")
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
	r := newSendRig(t, mem, cfg)
	r.tr.admitted = func() {
		require.NoError(t, mem.Evict(t.Context(), "k", "a"))
		require.Eventually(t, func() bool { return r.n.fence.State().Evicted }, time.Second, time.Millisecond)
	}
	require.ErrorIs(t, r.get(t), ErrEvicted)
	require.EqualValues(t, 1, r.sent.Load(), "an evicted node sent a request")
}

// rateRequest returns a GET to the unroutable test address whose context
// carries a token estimate of tokens.
func rateRequest(t *testing.T, tokens int64) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(WithTokens(t.Context(), tokens), http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	return req
}

// tokenLevel returns what the node's token bucket holds now.
func tokenLevel(n *Node) float64 {
	_, tokens := n.rate.pacer.Levels(time.Now())
	return tokens
}

// waitForTokenShare sends one request of 1 token through n, so that it
// asks for a share of the key's token rate, and waits until it paces
// tokens at the share granted.
func waitForTokenShare(t *testing.T, n *Node) {
	t.Helper()
	le, err := n.Acquire(WithTokens(t.Context(), 1))
	require.NoError(t, err)
	le.Release()
	require.Eventually(t, func() bool { return n.Rates().Share.Tokens > 0 }, 5*time.Second, time.Millisecond)
}

// TestTransportRefundsTheRateOfARequestItDidNotSend: a request that
// Transport admits, debiting its token estimate from the node's bucket,
// and then does not send because the lease ran out meanwhile never reached
// the upstream. Its debit stayed spent: the bucket was 99 tokens in debt
// for a request that cost nothing, and the usage reported counted it. It
// is given back now.
func TestTransportRefundsTheRateOfARequestItDidNotSend(t *testing.T) {
	t.Parallel()
	// 60 tokens a minute: the node's bucket holds about 1 token, so a
	// request estimated at 100 goes once it is full and leaves it about
	// 99 in debt.
	fc := &failingCoord{Coordinator: rateKey(t, 6000, 60)}
	cfg := testConfig("k", "a")
	r := newSendRig(t, fc, cfg)
	waitForTokenShare(t, r.n)
	r.tr.admitted = func() {
		fc.fail.Store(true)
		time.Sleep(cfg.LeaseTTL + cfg.HeartbeatInterval)
	}
	_, err := r.client.Do(rateRequest(t, 100))
	require.ErrorIs(t, err, ErrFenced)
	require.EqualValues(t, 1, r.sent.Load())
	require.GreaterOrEqual(t, tokenLevel(r.n), 0.0, "the unsent request's 100 tokens are back in the bucket")

	r.tr.admitted = nil
	fc.fail.Store(false)
	require.Eventually(t, func() bool { return !r.n.State().Fenced }, 5*time.Second, time.Millisecond)
	reports := len(fc.delivered())
	require.Eventually(t, func() bool { return len(fc.delivered()) > reports }, 5*time.Second, time.Millisecond)
	require.Equal(t, coord.Rates{Requests: 2, Tokens: 1}, r.n.Rates().Used,
		"the usage reported counts the two requests sent and their one token")
}

// TestTransportRefundsTheRateOfARequestThatFailedBeforeItWasSent: a base
// transport that fails before the request's headers are written (a refused
// connection) sent nothing upstream, and the request's debit and slot come
// back; one that fails after writing them keeps both, since the upstream
// may have the request. A base that reports no httptrace event at all may
// have sent it without saying so, and keeps both too, unless its error
// says no connection was ever made. Such a base's failures freed the slot
// at once and gave the debit back: the upstream could be serving more
// than the node held.
func TestTransportRefundsTheRateOfARequestThatFailedBeforeItWasSent(t *testing.T) {
	t.Parallel()
	reset := errors.New("connection reset by peer")
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name   string
		report func(*httptrace.ClientTrace)
		err    error
		sent   bool
	}{
		{"before the headers", func(tr *httptrace.ClientTrace) { tr.GetConn("127.0.0.1:1") }, reset, false},
		{"after the headers", func(tr *httptrace.ClientTrace) { tr.GetConn("127.0.0.1:1"); tr.WroteHeaders() }, reset, true},
		{"by a base that reports nothing", func(*httptrace.ClientTrace) {}, reset, true},
		{"by a base that reports nothing, in its dial", func(*httptrace.ClientTrace) {}, dial, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("k", "a")
			cfg.AbandonedHold = time.Second // the abandoned slot's hold, which Stop waits for
			n := startNode(t, rateKey(t, 6000, 60), cfg)
			waitForTokenShare(t, n)
			client := &http.Client{Transport: n.Transport(roundTripFunc(func(req *http.Request) (*http.Response, error) {
				tc.report(httptrace.ContextClientTrace(req.Context()))
				return nil, tc.err
			}))}
			_, err := client.Do(rateRequest(t, 100))
			require.ErrorIs(t, err, tc.err)
			if tc.sent {
				require.Less(t, tokenLevel(n), -50.0, "a request that may have reached the upstream keeps its debit")
				require.Equal(t, 1, n.State().Inflight, "and its slot, for AbandonedHold")
			} else {
				require.GreaterOrEqual(t, tokenLevel(n), 0.0, "a request that never left keeps no debit")
				require.Zero(t, n.State().Inflight, "nor its slot")
			}
		})
	}
}

// TestCheckSend: a caller of Acquire had no way to make Transport's check
// before the send. A process frozen between the admission and the send,
// past its lease, sent the request with its Context still running — so
// late that it ran at the upstream past its bound, beside the requests
// admitted into the capacity the fleet had reserved for it (a stranger's
// test: 7 in flight at a key of max 6). Lease.CheckSend refuses it, also
// once a renewal has lifted the fence, and refuses a lease whose Context
// has ended and one of a node evicted since.
func TestCheckSend(t *testing.T) {
	t.Parallel()
	t.Run("fenced since the admission", func(t *testing.T) {
		t.Parallel()
		r, fc, freeze := newLapseRig(t)
		lease, err := r.n.Acquire(t.Context())
		require.NoError(t, err)
		require.NoError(t, lease.CheckSend(), "a fresh lease may be sent")
		freeze()
		require.Eventually(t, func() bool { return r.n.State().Fenced }, 5*time.Second, time.Millisecond, "the lease ran out")
		fc.fail.Store(false)
		require.Eventually(t, func() bool { return !r.n.State().Fenced }, 5*time.Second, time.Millisecond, "and was renewed")
		require.NoError(t, lease.Context().Err(), "the request's context still runs")
		require.ErrorIs(t, lease.CheckSend(), ErrFenced)
		lease.Unsent()
		require.Zero(t, r.n.State().Inflight)
	})
	t.Run("evicted since the admission", func(t *testing.T) {
		t.Parallel()
		mem := coord.NewMemory(nil)
		cfg := testConfig("k", "a")
		cfg.Outage = HoldLastShare
		r := newSendRig(t, mem, cfg)
		lease, err := r.n.Acquire(t.Context())
		require.NoError(t, err)
		require.NoError(t, mem.Evict(t.Context(), "k", "a"))
		require.Eventually(t, func() bool { return r.n.fence.State().Evicted }, time.Second, time.Millisecond)
		require.ErrorIs(t, lease.CheckSend(), ErrEvicted)
		lease.Unsent()
	})
	t.Run("its context ended", func(t *testing.T) {
		t.Parallel()
		r := newSendRig(t, coord.NewMemory(nil), testConfig("k", "a"))
		ctx, cancel := context.WithCancel(t.Context())
		lease, err := r.n.Acquire(ctx)
		require.NoError(t, err)
		cancel()
		require.ErrorIs(t, lease.CheckSend(), context.Canceled)
		lease.Unsent()
		require.NoError(t, Lease{}.CheckSend(), "the zero Lease holds nothing to refuse")
	})
}

// TestCheckSendLate: CheckSend refuses, with ErrLate, a request whose
// deadline left it two or more no-load round trips when Acquire was
// called and less than one now (the caller's work, or a wait, took its
// time), as Transport refuses one before sending; with one or more left it
// lets it go, and a deadline already passed is ErrLate too.
func TestCheckSendLate(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		const rtt = 20 * time.Millisecond
		n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
		client := &http.Client{Transport: n.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) {
			time.Sleep(rtt)
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
		}))}
		for range 3 {
			resp, err := client.Get("http://upstream.test/")
			require.NoError(t, err)
			resp.Body.Close()
		}
		require.Equal(t, rtt, n.Limiter().RTTNoload())

		check := func(work time.Duration) error {
			ctx, cancel := context.WithTimeout(t.Context(), 5*rtt)
			defer cancel()
			le, err := n.Acquire(ctx)
			require.NoError(t, err)
			defer le.Unsent()
			time.Sleep(work)
			return le.CheckSend()
		}
		require.NoError(t, check(3*rtt), "two round trips left")
		err := check(4*rtt + rtt/2)
		require.ErrorIs(t, err, ErrLate, "half a round trip left")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "10ms of the deadline left")
		require.ErrorIs(t, check(6*rtt), ErrLate, "the deadline passed")
		require.Zero(t, n.State().Inflight)
	})
}
