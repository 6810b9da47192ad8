package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// cuttingUpstream is a server on 127.0.0.1 that counts its own requests
// in flight (upstreamCount), from the handler's start to its return. The
// second request on each connection has its connection cut once it is
// received (a proxy or a load balancer in front of the upstream closing
// it), and the upstream goes on working on it for work; every other
// request is answered after serve.
type cuttingUpstream struct {
	url string
	upstreamCount
	cuts   atomic.Int64
	framed atomic.Int64 // requests of a method without a body that came with one's framing
}

type connRequests struct{}

func startCuttingUpstream(t *testing.T, serve, work time.Duration) *cuttingUpstream {
	t.Helper()
	u := &cuttingUpstream{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connRequests{}, new(atomic.Int64))
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if r.Method != http.MethodPost && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
				u.framed.Add(1)
			}
			u.enter()
			defer u.leave()
			if r.Context().Value(connRequests{}).(*atomic.Int64).Add(1) == 2 {
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.Close()
				}
				u.cuts.Add(1)
				time.Sleep(work)
				return
			}
			time.Sleep(serve)
			_, _ = io.WriteString(w, "ok")
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	u.url = "http://" + ln.Addr().String() + "/"
	return u
}

// cutRig starts a cutting upstream (see startCuttingUpstream) and a node
// admitting one request at a time, whose Transport over an http.Transport
// of its own holds an abandoned request's slot a little longer than the
// upstream works on a cut one.
func cutRig(t *testing.T, serve, work time.Duration) (*cuttingUpstream, *Node, *http.Client) {
	t.Helper()
	up := startCuttingUpstream(t, serve, work)
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 1, MinLimit: 1, MaxLimit: 1, MaxQueued: 10}
	cfg.MaxRequestDuration = 2 * time.Second
	cfg.AbandonedHold = work + 100*time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	return up, n, &http.Client{Transport: n.Transport(base)}
}

// TestTransportDoesNotResendBesideTheFirstAttempt: http.Transport sends a
// replayable request (a GET, or a request with an Idempotency-Key and a
// body it can rewind) again on a new connection when the reused one it
// was written to is closed before the response — also when the upstream
// had received it and goes on working on it. Let through, the resend ran
// beside the first attempt on one slot: the upstream counted 2 requests in
// flight for a node admitting 1 (a stranger's attack at M = 24: 49). Now
// the first attempt keeps its slot, held as an abandoned request's, and
// the request is sent again on a slot of its own; a request without a
// body still goes without one.
func TestTransportDoesNotResendBesideTheFirstAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  func(url string) *http.Request
	}{
		{"GET", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, url, nil)
			return r
		}},
		{"POST with an Idempotency-Key", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"m"}`))
			r.Header.Set("Idempotency-Key", "k")
			return r
		}},
		{"DELETE with an Idempotency-Key", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodDelete, url, nil)
			r.Header.Set("Idempotency-Key", "k")
			return r
		}},
		// No body to rewind, and none to give it: an empty one would go
		// chunked. The base's second attempt is ended as it asks for a
		// connection instead.
		{"POST without a body, with an Idempotency-Key", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, nil)
			r.Header.Set("Idempotency-Key", "k")
			return r
		}},
		{"PUT without a body, with an X-Idempotency-Key", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPut, url, nil)
			r.Header.Set("X-Idempotency-Key", "k")
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, n, client := cutRig(t, 20*time.Millisecond, 300*time.Millisecond)
			for range 4 {
				resp, err := client.Do(tc.req(up.url))
				require.NoError(t, err, "a cut request is sent again on a slot of its own")
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
			}
			require.EqualValues(t, 3, up.cuts.Load(), "the upstream cut every reused connection")
			require.EqualValues(t, 1, up.peak.Load(), "the upstream ran more requests at once than the node admits")
			require.Zero(t, up.framed.Load(), "a request without a body went with a body's framing")
			eventually(t, func() bool { return n.State().Inflight == 0 }, "the held slot is freed")
		})
	}
}

// TestTransportSendsBodilessRequestsOverHTTP2: a request without a body
// reaches an HTTP/2 upstream as through http.Transport alone: no bytes,
// and a content length of 0 (an empty body to rewind would go as an empty
// DATA frame, and the upstream would see ContentLength -1).
func TestTransportSendsBodilessRequestsOverHTTP2(t *testing.T) {
	t.Parallel()
	var proto, framed atomic.Value
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols: &protocols,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			proto.Store(r.Proto)
			framed.Store(len(b) > 0 || r.ContentLength != 0 || len(r.TransferEncoding) > 0)
			_, _ = io.WriteString(w, "ok")
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := &http.Transport{Protocols: &protocols}
	t.Cleanup(base.CloseIdleConnections)
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	client := &http.Client{Transport: n.Transport(base)}
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions} {
		req, err := http.NewRequest(method, "http://"+ln.Addr().String()+"/", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err, method)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, method)
		require.Equal(t, "HTTP/2.0", proto.Load(), method)
		require.Equal(t, false, framed.Load(), "%s came with bytes or a length", method)
	}
	eventually(t, func() bool { return n.State().Inflight == 0 }, "every slot is freed")
}

// TestTransportSaysWhenItCouldNotSendAgain: a request whose first attempt
// was cut after it was sent, and whose second attempt waits for a slot
// until the caller's deadline, fails with an error that says both: the
// first attempt may still run upstream (ErrNotResent), and the deadline
// ended the wait (a timeout).
func TestTransportSaysWhenItCouldNotSendAgain(t *testing.T) {
	t.Parallel()
	up := startCuttingUpstream(t, 20*time.Millisecond, 100*time.Millisecond)
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 1, MinLimit: 1, MaxLimit: 1, MaxQueued: 10}
	cfg.MaxRequestDuration = 5 * time.Second
	cfg.AbandonedHold = 2 * time.Second
	n := startNode(t, coord.NewMemory(nil), cfg)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: n.Transport(base)}
	resp, err := client.Get(up.url) // the connection's first request is served
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, up.url, nil)
	require.NoError(t, err)
	_, err = client.Do(req)
	require.ErrorIs(t, err, ErrNotResent)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var timeout interface{ Timeout() bool }
	require.ErrorAs(t, err, &timeout)
	require.True(t, timeout.Timeout(), "a deadline that ended the wait for a slot is a timeout")
	require.EqualValues(t, 1, up.cuts.Load())
	require.Equal(t, 1, n.State().Inflight, "the first attempt's slot is held")
}

// resettingH2Upstream is an HTTP/2 upstream on 127.0.0.1 (prior
// knowledge, no TLS) that resets every stream it is sent with
// PROTOCOL_ERROR once it has the request's headers, and works on each
// request for work after that: Go's HTTP/2 client sends such a request
// again, up to 6 times (golang/go#47635). peak is the most requests it
// worked on at once.
type resettingH2Upstream struct {
	addr string
	upstreamCount
	total atomic.Int64 // requests received
}

// startResettingH2Upstream starts a resettingH2Upstream; with hints, it
// answers each request with a 103 Early Hints before it resets it.
func startResettingH2Upstream(t *testing.T, work time.Duration, hints bool) *resettingH2Upstream {
	t.Helper()
	u := &resettingH2Upstream{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	u.addr = ln.Addr().String()
	frame := func(typ, flags byte, stream uint32, payload []byte) []byte {
		f := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags,
			byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
		return append(f, payload...)
	}
	serve := func(conn net.Conn) {
		defer conn.Close()
		preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		if _, err := io.ReadFull(conn, preface); err != nil {
			return
		}
		if _, err := conn.Write(frame(0x4, 0, 0, nil)); err != nil { // SETTINGS
			return
		}
		head := make([]byte, 9)
		for {
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			payload := make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
			if _, err := io.ReadFull(conn, payload); err != nil {
				return
			}
			typ, flags := head[3], head[4]
			stream := uint32(head[5]&0x7f)<<24 | uint32(head[6])<<16 | uint32(head[7])<<8 | uint32(head[8])
			switch {
			case typ == 0x4 && flags&0x1 == 0: // the client's SETTINGS: acknowledge
				_, _ = conn.Write(frame(0x4, 0x1, 0, nil))
			case typ == 0x1: // HEADERS: the request is in; reset it and work on
				u.total.Add(1)
				u.enter()
				time.AfterFunc(work, u.leave)
				if hints {
					// HEADERS, END_HEADERS: ":status: 103", a literal of
					// the static table's name 8.
					_, _ = conn.Write(frame(0x1, 0x4, stream, []byte{0x08, 3, '1', '0', '3'}))
				}
				_, _ = conn.Write(frame(0x3, 0, stream, []byte{0, 0, 0, 1})) // RST_STREAM PROTOCOL_ERROR
			}
		}
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(conn)
		}
	}()
	return u
}

// TestTransportDoesNotResendBesideTheFirstAttemptOverHTTP2: Go's HTTP/2
// client sends a request again when its stream is reset with
// PROTOCOL_ERROR, also one without a body of any method, which no GetBody
// can refuse: the upstream ran up to 7 attempts of a POST on the one slot
// the node admitted. The base's resend is ended as it asks for its
// connection, the first attempt keeps its slot for AbandonedHold, and
// Transport sends the request once more on a slot of its own.
func TestTransportDoesNotResendBesideTheFirstAttemptOverHTTP2(t *testing.T) {
	t.Parallel()
	for _, hints := range []bool{false, true} {
		t.Run(fmt.Sprintf("103 first %v", hints), func(t *testing.T) {
			t.Parallel()
			testNoResendOverHTTP2(t, hints)
		})
	}
}

// testNoResendOverHTTP2 is TestTransportDoesNotResendBesideTheFirstAttemptOverHTTP2
// on an upstream that answers with a 103 Early Hints, or not, before it
// resets: an interim response took the first attempt for an answered one,
// and the base's resends ran on one slot (2383 at once).
func testNoResendOverHTTP2(t *testing.T, hints bool) {
	const work = 200 * time.Millisecond
	up := startResettingH2Upstream(t, work, hints)
	cfg := testConfig("k", "a")
	cfg.Limiter = adaptive.Config{InitialLimit: 1, MinLimit: 1, MaxLimit: 1, MaxQueued: 10}
	cfg.MaxRequestDuration = 3 * time.Second
	cfg.AbandonedHold = work + 100*time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	base := &http.Transport{Protocols: &protocols}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: n.Transport(base)}
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		req, err := http.NewRequest(method, "http://"+up.addr+"/", nil)
		require.NoError(t, err)
		_, err = client.Do(req)
		require.ErrorIs(t, err, ErrNotResent, "%s: reset again when sent once more", method)
	}
	require.EqualValues(t, 1, up.peak.Load(), "the upstream ran more attempts at once than the node admits")
	require.EqualValues(t, 4, up.total.Load(), "each request went out twice: once by the base, once more by Transport")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "the held slots are freed")
}
