package fleet

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// upstreamCount is an upstream's own count of the requests it is serving,
// from its handler's entry to its return, and the most at once.
type upstreamCount struct{ now, peak, total atomic.Int64 }

func (c *upstreamCount) enter() {
	c.total.Add(1)
	n := c.now.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
}

func (c *upstreamCount) leave() { c.now.Add(-1) }

// TestTransportSendsHTTPTransportRetriesOnASlotOfTheirOwn: http.Transport
// sends a request again when a reused keep-alive connection turns out
// closed. Here nothing of the first attempt reached the upstream, but
// Transport cannot tell: the request's headers were written into the
// connection's buffer either way, and a connection closed after the
// upstream received the request looks the same to it (see
// TestTransportDoesNotResendBesideTheFirstAttempt). The first attempt
// keeps its slot as an abandoned request's, and the request is sent again
// on a slot of its own.
func TestTransportSendsHTTPTransportRetriesOnASlotOfTheirOwn(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		hits.Store(0)
		var dials atomic.Int64
		stale := new(atomic.Bool)
		base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if dials.Add(1) > 1 {
				return c, nil // fresh connections are fine
			}
			return &staleConn{Conn: c, stale: stale}, nil
		}}
		cfg := testConfig("k", "a")
		cfg.AbandonedHold = time.Second
		n := startNode(t, coord.NewMemory(nil), cfg)
		client := &http.Client{Transport: n.Transport(base)}
		do := func() error {
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL, strings.NewReader("body"))
			require.NoError(t, err)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
		require.NoError(t, do())
		stale.Store(true) // the server reset the idle connection
		require.NoError(t, do(), "%s: the retry on a fresh connection is served", method)
		require.EqualValues(t, 2, hits.Load())
		require.EqualValues(t, 2, dials.Load(), "%s: a second connection was dialled for the retry", method)
		require.Equal(t, 1, n.State().Inflight, "%s: the first attempt's slot is held", method)
		eventually(t, func() bool { return n.State().Inflight == 0 }, "%s: the slot is freed after AbandonedHold", method)
		base.CloseIdleConnections()
	}
}

// staleConn is a keep-alive connection the server reset while it sat
// idle: once stale, a Write fails with ECONNRESET having written nothing.
type staleConn struct {
	net.Conn
	writes atomic.Int64
	stale  *atomic.Bool
}

func (c *staleConn) Write(p []byte) (int, error) {
	if c.writes.Add(1) > 1 && c.stale.Load() {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Write(p)
}

// TestTransportRegisteredProtocolMayHaveSent: a scheme added to an
// *http.Transport with RegisterProtocol goes to a RoundTripper of its
// own, which reports no httptrace event. Its failure after sending
// counted as not sent because the base was an *http.Transport: the slot
// came back at once and the rate debit was given back, though the
// upstream had the request.
func TestTransportRegisteredProtocolMayHaveSent(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	std := &http.Transport{}
	std.RegisterProtocol("x-up", roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent.Add(1) // written on a connection of its own; the answer never comes
		return nil, errors.New("read: connection reset by peer")
	}))
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = time.Second
	n := startNode(t, rateKey(t, 6000, 60), cfg)
	waitForTokenShare(t, n)
	req, err := http.NewRequestWithContext(WithTokens(t.Context(), 100), http.MethodGet, "x-up://127.0.0.1:1/", nil)
	require.NoError(t, err)
	_, err = (&http.Client{Transport: n.Transport(std)}).Do(req)
	require.ErrorContains(t, err, "connection reset by peer")
	require.EqualValues(t, 1, sent.Load())
	require.Less(t, tokenLevel(n), -50.0, "a request that may have reached the upstream keeps its debit")
	require.Equal(t, 1, n.State().Inflight, "and its slot, for AbandonedHold")
}

// TestTransportNilBodyFromTheBase: a base may answer with a nil Body,
// which http.Client takes as an empty one; closing it panicked.
func TestTransportNilBodyFromTheBase(t *testing.T) {
	t.Parallel()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	client := &http.Client{Transport: n.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}}, nil
	}))}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(string(b)))
	require.NoError(t, resp.Body.Close())
	require.Zero(t, n.State().Inflight)
}

// TestTransportNilResponseAndNilErrorFromTheBase: a base that breaks
// the RoundTripper contract with (nil, nil) made RoundTrip dereference
// the nil response, and the slot was never freed. It is an error now,
// and the request, which that base may have sent without a trace event,
// holds its slot for AbandonedHold as any failure after sending does.
func TestTransportNilResponseAndNilErrorFromTheBase(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 100 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	rt := n.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, nil }))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.Nil(t, resp)
	require.ErrorContains(t, err, "returned a nil *http.Response with a nil error")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "the slot is freed after AbandonedHold")
}

// TestTransportUpgradedConnection: a 101 response's body is the upgraded
// connection (a WebSocket's), which the caller writes to too. Transport's
// body hid its Write, and the bound (MaxRequestDuration) freed the slot
// without closing the connection: the upstream went on serving a session
// no slot stood for. The body is now an io.ReadWriteCloser, the bound
// closes the connection, and the caller's context does not end it.
func TestTransportUpgradedConnection(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := upgradeServer(t, &up, func(conn net.Conn, rw *bufio.ReadWriter) {
		buf := make([]byte, 1)
		for range 40 { // an echo session of up to 2 s
			_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := rw.Read(buf)
			if n > 0 {
				if _, err := conn.Write(buf[:n]); err != nil {
					return
				}
			} else if ne, ok := err.(interface{ Timeout() bool }); err != nil && (!ok || !ne.Timeout()) {
				return // closed
			}
		}
	})
	cfg := testConfig("k", "a")
	cfg.MaxRequestDuration = 300 * time.Millisecond
	cfg.AbandonedHold = 100 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)

	// A caller whose dial context ends after the handshake keeps its
	// session, until the bound closes it.
	ctx, cancel := context.WithCancel(t.Context())
	conn := dialUpgrade(t, ctx, n, srv)
	cancel()
	_, err := conn.Write([]byte("x"))
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = io.ReadFull(conn, b)
	require.NoError(t, err, "the session outlives the caller's context")
	require.Equal(t, "x", string(b))
	require.Equal(t, 1, n.State().Inflight)
	require.Eventually(t, func() bool { return up.now.Load() == 0 }, 2*time.Second, time.Millisecond,
		"the bound closed the connection, so the upstream ended the session")
	require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, time.Millisecond)
	_, err = conn.Read(b)
	require.Error(t, err)
	require.NoError(t, conn.Close())

	// The caller's Close ends the session at once; the slot is held for
	// AbandonedHold.
	conn = dialUpgrade(t, t.Context(), n, srv)
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return up.now.Load() == 0 }, 2*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, time.Millisecond)
	require.EqualValues(t, 1, up.peak.Load())
}

// TestTransportUpgradedHalfClose: an upstream that ends its half of an
// upgraded connection (EOF to the caller) may go on reading what the
// caller writes. EOF freed the slot and stopped the bound, and the
// session went on past both.
func TestTransportUpgradedHalfClose(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := upgradeServer(t, &up, func(conn net.Conn, rw *bufio.ReadWriter) {
		_ = conn.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, rw) // goes on reading what the caller writes
	})
	cfg := testConfig("k", "a")
	cfg.MaxRequestDuration = 300 * time.Millisecond
	cfg.AbandonedHold = 100 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	conn := dialUpgrade(t, t.Context(), n, srv)
	_, err := conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 1, n.State().Inflight, "the upstream's end of its half leaves the slot held")
	_, err = conn.Write([]byte("x"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return up.now.Load() == 0 }, 2*time.Second, time.Millisecond,
		"the bound closed the connection")
	require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, time.Millisecond)
	require.NoError(t, conn.Close())
}

// TestTransportUpgradedCloseWrite: the caller may end its half of an
// upgraded connection, as through http.Transport alone, and read the
// upstream's answer. Its Close is held for AbandonedHold all the same:
// the upstream's end may have waited unread behind the caller's
// CloseWrite while the upstream read on (a review found a slot freed so).
func TestTransportUpgradedCloseWrite(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := upgradeServer(t, &up, func(conn net.Conn, rw *bufio.ReadWriter) {
		b, _ := io.ReadAll(rw) // until the caller's half ends
		_, _ = conn.Write([]byte{byte(len(b))})
	})
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 300 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	conn := dialUpgrade(t, t.Context(), n, srv).(interface {
		io.ReadWriteCloser
		CloseWrite() error
	})
	_, err := conn.Write([]byte("abc"))
	require.NoError(t, err)
	require.NoError(t, conn.CloseWrite())
	b, err := io.ReadAll(conn)
	require.NoError(t, err)
	require.Equal(t, []byte{3}, b, "the upstream read the caller's 3 bytes to their end")
	require.Equal(t, 1, n.State().Inflight, "CloseWrite keeps the slot")
	require.NoError(t, conn.Close())
	require.Equal(t, 1, n.State().Inflight, "Close holds it for AbandonedHold")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "and frees it after")
}

// TestTransportUpgradedEndedByTheUpstreamFirst: an upstream that ends
// its half first (EOF to the caller) and reads on learns of the
// session's end from the caller's Close, and may still work on it. Its
// slot was freed at Close since Read had seen EOF; it is held for
// AbandonedHold, as for any connection the caller closes, unless the
// caller's half had ended first (TestTransportUpgradedCloseWrite).
func TestTransportUpgradedEndedByTheUpstreamFirst(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := upgradeServer(t, &up, func(conn net.Conn, rw *bufio.ReadWriter) {
		_, _ = conn.Write([]byte("bye"))
		_ = conn.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, rw)     // until the caller closes
		time.Sleep(100 * time.Millisecond) // and work on the session after
	})
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = time.Second
	n := startNode(t, coord.NewMemory(nil), cfg)
	conn := dialUpgrade(t, t.Context(), n, srv)
	b, err := io.ReadAll(conn)
	require.NoError(t, err)
	require.Equal(t, "bye", string(b))
	require.NoError(t, conn.Close())
	time.Sleep(20 * time.Millisecond)
	require.EqualValues(t, 1, up.now.Load(), "the upstream works on after the caller's close")
	require.Equal(t, 1, n.State().Inflight, "so the slot is held")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "for AbandonedHold")
}

// upgradeServer is an upstream that switches every request's connection
// to a session, which session runs; up counts the sessions.
func upgradeServer(t *testing.T, up *upstreamCount, session func(conn net.Conn, rw *bufio.ReadWriter)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		up.enter()
		defer up.leave()
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tunnel\r\n\r\n")
		_ = rw.Flush()
		session(conn, rw)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// dialUpgrade asks srv for an upgraded connection through n's Transport,
// with ctx, and returns its body.
func dialUpgrade(t *testing.T, ctx context.Context, n *Node, srv *httptest.Server) io.ReadWriteCloser {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tunnel")
	resp, err := (&http.Client{Transport: n.Transport(nil)}).Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the upgraded connection is writable")
	return rwc
}

// TestTransportRefusesARequestWithoutURL: http.Client checks a request's
// URL before its Transport sees it, but a proxy calling RoundTrip itself
// need not. A nil URL took a slot, then panicked in Transport's own code
// after the base's error, and the slot was never freed. It is refused
// before admission now, as http.Transport refuses it. A nil Header is the
// base's to judge: http.Transport refuses it unsent.
func TestTransportRefusesARequestWithoutURL(t *testing.T) {
	t.Parallel()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	rt := n.Transport(nil)
	req := &http.Request{Method: http.MethodGet, Header: http.Header{}}
	resp, err := rt.RoundTrip(req.WithContext(t.Context()))
	require.Nil(t, resp)
	require.ErrorContains(t, err, "nil URL")
	require.Zero(t, n.State().Inflight, "refused before admission")

	req = &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}}
	_, err = rt.RoundTrip(req.WithContext(t.Context()))
	require.ErrorContains(t, err, "nil Request.Header")
	require.Zero(t, n.State().Inflight, "http.Transport refused it before asking for a connection")
}

// TestTransportBasePanicHoldsTheSlotForAbandonedHold: a base that panics
// (a middleware's bug; net/http's server recovers a handler's panic and
// serves on) lost the request's slot with the panic, one slot for good
// at each. The panic goes on up, and the slot is held as an abandoned
// request's, since the base may have sent the request first.
func TestTransportBasePanicHoldsTheSlotForAbandonedHold(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 100 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	rt := n.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) { panic("the base's bug") }))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	require.PanicsWithValue(t, "the base's bug", func() { _, _ = rt.RoundTrip(req) })
	require.Equal(t, 1, n.State().Inflight, "held: the base may have sent it")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "the slot is freed after AbandonedHold")

	// A base whose goroutine exits (t.FailNow in a test's fake base)
	// returns no more than a panicking one does.
	rt = n.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		runtime.Goexit()
		return nil, nil
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = rt.RoundTrip(req)
	}()
	<-done
	require.Equal(t, 1, n.State().Inflight, "held: the base may have sent it")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "the slot is freed after AbandonedHold")
}

// TestTransportUnsupportedSchemeIsNotSent: http.Transport refuses a
// scheme it has no RoundTripper for ("htp", or "HTTP": schemes are
// compared as written) before it asks for a connection. Transport took
// that for a base that may have sent the request, and held its slot and
// its rate debit for AbandonedHold (5 minutes by default): ten mistyped
// URLs stopped a node of limit 10.
func TestTransportUnsupportedSchemeIsNotSent(t *testing.T) {
	t.Parallel()
	n := startNode(t, rateKey(t, 6000, 60), testConfig("k", "a"))
	waitForTokenShare(t, n)
	client := &http.Client{Transport: n.Transport(nil)}
	before := tokenLevel(n)
	for _, scheme := range []string{"htp", "HTTP"} {
		req, err := http.NewRequestWithContext(WithTokens(t.Context(), 100), http.MethodGet, "http://127.0.0.1:1/", nil)
		require.NoError(t, err)
		req.URL.Scheme = scheme
		_, err = client.Do(req)
		require.ErrorContains(t, err, "unsupported protocol scheme")
		require.Zero(t, n.State().Inflight, "scheme %q: not sent, so its slot is free at once", scheme)
	}
	require.Greater(t, tokenLevel(n), before-50, "and the rate it never spent is given back")
}

// TestTransportOverAnotherNodesTransport: one node's Transport may be
// another's base (a key for an organisation's quota over one for a
// model's). The inner one's refusal to send (paused, its queue full, too
// late) held a slot of the outer node for AbandonedHold, as a base that
// may have sent the request would.
func TestTransportOverAnotherNodesTransport(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	outer := startNode(t, coord.NewMemory(nil), testConfig("org", "a"))
	inner := startNode(t, coord.NewMemory(nil), testConfig("model", "a"))
	client := &http.Client{Transport: outer.Transport(inner.Transport(nil))}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 1, hits.Load())
	inner.Limiter().RetryAfter(time.Minute)
	for range 3 {
		_, err := client.Get(srv.URL)
		require.ErrorIs(t, err, adaptive.ErrPaused)
	}
	require.EqualValues(t, 1, hits.Load())
	require.Zero(t, outer.State().Inflight, "the inner node sent nothing: the outer slots are free at once")
	require.Zero(t, inner.State().Inflight)
}

// TestTransportRedirectBodyClosedEarlyIsNoAbandonedRequest: http.Client
// closes a redirect's body over 2 KiB unread when it follows it, and
// Transport held each such hop's slot for AbandonedHold, as a request cut
// short that the upstream may still serve. Its body is read to its end in
// the background instead, and the slot freed there.
func TestTransportRedirectBodyClosedEarlyIsNoAbandonedRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			w.Header().Set("Location", "/b")
			w.WriteHeader(http.StatusMovedPermanently)
			_, _ = io.WriteString(w, strings.Repeat("<p>moved</p>", 1000)) // 12 KB
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 5 * time.Second
	n := startNode(t, coord.NewMemory(nil), cfg)
	resp, err := (&http.Client{Transport: n.Transport(nil)}).Get(srv.URL + "/a")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "ok", string(b))
	require.NoError(t, resp.Body.Close())
	require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, 5*time.Millisecond,
		"both hops' slots are free, long before AbandonedHold: %+v", n.State())
}

// TestTransportRedirectHeldUntilTheUpstreamEndsIt: a redirect whose body
// the upstream is still sending when http.Client closes it to follow the
// Location is a request the upstream still serves: its slot is held until
// the body's end, where the upstream is done, and freed then.
func TestTransportRedirectHeldUntilTheUpstreamEndsIt(t *testing.T) {
	t.Parallel()
	var serving atomic.Int64 // the upstream's own count of requests it serves
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serving.Add(1)
		defer serving.Add(-1)
		if r.URL.Path == "/a" {
			w.Header().Set("Location", "/b")
			w.WriteHeader(http.StatusFound)
			_, _ = io.WriteString(w, strings.Repeat("x", 3<<10)) // over http.Client's 2 KiB
			w.(http.Flusher).Flush()
			<-release // the rest of the body comes later
			_, _ = io.WriteString(w, strings.Repeat("y", 3<<10))
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	resp, err := (&http.Client{Transport: n.Transport(nil)}).Get(srv.URL + "/a")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	time.Sleep(50 * time.Millisecond)
	require.EqualValues(t, 1, serving.Load(), "the upstream still sends the redirect's body")
	require.Equal(t, 1, n.State().Inflight, "its slot is held while it does")
	close(release)
	require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, time.Millisecond,
		"freed at the body's end, long before AbandonedHold")
}

// TestTransportRedirectKeepsItsConnection: freeing a redirect's slot when
// its body is closed early must not give up the connection: what is left
// of a body of a few KiB is still read in the background, as for any body
// closed early, so that the next request reuses the connection.
func TestTransportRedirectKeepsItsConnection(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			w.Header().Set("Location", "/b")
			w.WriteHeader(http.StatusMovedPermanently)
			_, _ = io.WriteString(w, strings.Repeat("x", 3<<10)) // over http.Client's 2 KiB, within the drain's 4
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	client := &http.Client{Transport: n.Transport(nil)}
	for range 10 {
		resp, err := client.Get(srv.URL + "/a")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		// The drain runs in the background: give it its moment.
		require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond)
	}
	require.LessOrEqual(t, conns.Load(), int64(5), "the connections are reused (11 without the drain)")
}
