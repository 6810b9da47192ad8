package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// closeFunc is an io.Closer made of a function.
type closeFunc func() error

func (f closeFunc) Close() error { return f() }

// TestTransportStopsAResendOfAWrittenRequest: a base that begins to send
// a request again after writing it once — http.Transport retrying an
// idempotent request whose reused connection failed after the upstream
// had it, or a base with its own retries — sent it twice on one slot,
// while the first attempt still ran at the upstream: two requests there
// for a limit of one. The second attempt is now stopped, the request
// fails saying why, and its slot is held as an abandoned one's.
func TestTransportStopsAResendOfAWrittenRequest(t *testing.T) {
	t.Parallel()
	std := func(srv *httptest.Server) http.RoundTripper { return &http.Transport{} }
	perTry := func(srv *httptest.Server) http.RoundTripper {
		inner := &http.Transport{}
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			var last error
			for range 2 { // a try that takes 200 ms is given up and sent again
				ctx, cancel := context.WithTimeout(r.Context(), 200*time.Millisecond)
				resp, err := inner.RoundTrip(r.Clone(ctx))
				if err == nil {
					body := resp.Body
					resp.Body = struct {
						io.Reader
						io.Closer
					}{body, closeFunc(func() error { cancel(); return body.Close() })}
					return resp, nil
				}
				cancel()
				last = err
			}
			return nil, last
		})
	}
	for _, tc := range []struct {
		name string
		base func(*httptest.Server) http.RoundTripper
		cut  bool // the upstream drops the connection of the first /work it reads
	}{{"by http.Transport", std, true}, {"by a base retrying each 200ms", perTry, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var up upstreamCount
			var cut atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/work" {
					return
				}
				up.enter()
				defer up.leave()
				if tc.cut && cut.CompareAndSwap(false, true) {
					if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
						conn.Close() // the connection dies; the work goes on
					}
				}
				time.Sleep(400 * time.Millisecond)
			}))
			defer srv.Close()
			cfg := testConfig("k", "a")
			cfg.Limiter.InitialLimit, cfg.Limiter.MinLimit, cfg.Limiter.MaxLimit = 1, 1, 1
			cfg.AbandonedHold = time.Second
			n := startNode(t, coord.NewMemory(nil), cfg)
			client := &http.Client{Transport: n.Transport(tc.base(srv))}
			get := func(path string) (*http.Response, error) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
				require.NoError(t, err)
				return client.Do(req)
			}
			resp, err := get("/warm") // a connection for http.Transport to reuse
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()

			_, err = get("/work")
			require.ErrorContains(t, err, "began to send the request again after writing it once")
			require.EqualValues(t, 1, up.total.Load(), "the upstream had the request once")
			require.Equal(t, 1, n.State().Inflight, "its slot is held as an abandoned request's")
			require.Eventually(t, func() bool { return up.now.Load() == 0 }, 5*time.Second, time.Millisecond)
			require.EqualValues(t, 1, up.peak.Load())
		})
	}
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

// TestTransportUpgradedConnection: a 101 response's body is the upgraded
// connection (a WebSocket's), which the caller writes to too. Transport's
// body hid its Write, and the bound (MaxRequestDuration) freed the slot
// without closing the connection: the upstream went on serving a session
// no slot stood for. The body is now an io.ReadWriteCloser, the bound
// closes the connection, and the caller's context does not end it.
func TestTransportUpgradedConnection(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.enter()
		defer up.leave()
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = bw.Flush()
		buf := make([]byte, 1)
		for range 40 { // an echo session of up to 2 s
			_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := bw.Read(buf)
			if n > 0 {
				if _, err := conn.Write(buf[:n]); err != nil {
					return
				}
			} else if ne, ok := err.(interface{ Timeout() bool }); err != nil && (!ok || !ne.Timeout()) {
				return // closed
			}
		}
	}))
	defer srv.Close()
	cfg := testConfig("k", "a")
	cfg.MaxRequestDuration = 300 * time.Millisecond
	cfg.AbandonedHold = 100 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	client := &http.Client{Transport: n.Transport(nil)}
	dial := func(ctx context.Context) io.ReadWriteCloser {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "echo")
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		require.True(t, ok, "the upgraded connection is writable")
		return rwc
	}

	// A caller whose dial context ends after the handshake keeps its
	// session, until the bound closes it.
	ctx, cancel := context.WithCancel(t.Context())
	conn := dial(ctx)
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
	conn = dial(t.Context())
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return up.now.Load() == 0 }, 2*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, time.Millisecond)
	require.EqualValues(t, 1, up.peak.Load())
}

// TestSendTraceLetsHTTP2ResendsThrough: over HTTP/2, http.Transport sends
// a request again only when the server refused its stream or never
// processed it (REFUSED_STREAM, GOAWAY); those resends go through, while
// one after headers written on an HTTP/1 connection is stopped.
func TestSendTraceLetsHTTP2ResendsThrough(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.NextProtos = []string{"h2"}
	h2, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
	require.NoError(t, err)
	defer h2.Close()
	require.Equal(t, "h2", h2.ConnectionState().NegotiatedProtocol)
	h1, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer h1.Close()

	for _, tc := range []struct {
		conn    net.Conn
		stopped bool
	}{{h2, false}, {h1, true}} {
		stopped := false
		way := sendTrace{stop: func() { stopped = true }}
		hooks := way.hooks()
		hooks.GetConn("127.0.0.1")
		hooks.GotConn(httptrace.GotConnInfo{Conn: tc.conn})
		hooks.WroteHeaders()
		hooks.GetConn("127.0.0.1") // the resend
		require.Equal(t, tc.stopped, stopped, "%T", tc.conn)
		require.Equal(t, tc.stopped, way.resent.Load())
	}
}
