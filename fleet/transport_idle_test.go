package fleet

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// idleCutUpstream is an HTTP/1.1 upstream on 127.0.0.1, plain or over
// TLS, that answers every request to "/" and cuts the connection of a
// request to "/cut" that is not its connection's first (a proxy closing a
// reused connection), then works on it for work. It counts the requests
// to "/cut" it works on at once (upstreamCount).
type idleCutUpstream struct {
	url string
	upstreamCount
	cuts atomic.Int64
}

// How a test reaches an idleCutUpstream: plain HTTP/1.1, TLS, or TLS
// through a dialer of the test's own (http.Transport's DialTLSContext).
const (
	plainConn = iota
	tlsConn
	tlsDialer
)

// startIdleCutUpstream starts an idleCutUpstream reached as way says,
// and an http.Transport for it whose connections are slow to close.
func startIdleCutUpstream(t *testing.T, way int, work time.Duration) (*idleCutUpstream, *http.Transport) {
	t.Helper()
	u := &idleCutUpstream{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served := r.Context().Value(connRequests{}).(*atomic.Int64).Add(1)
		if r.URL.Path != "/cut" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		u.enter()
		defer u.leave()
		if served > 1 {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = conn.Close()
			}
			u.cuts.Add(1)
			time.Sleep(work)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connRequests{}, new(atomic.Int64))
	}
	// Connections slow to close (a kernel's or a TLS close_notify's
	// write on a loaded machine): what http.Transport writes as it
	// closes one reaches the upstream.
	var dialer net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowClose{conn}, nil
	}
	base := &http.Transport{MaxIdleConnsPerHost: 16, DialContext: dial}
	if way == plainConn {
		srv.Start()
	} else {
		srv.StartTLS() // HTTP/1.1 only: the server offers no h2
		base.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		base.ForceAttemptHTTP2 = true // offered, and refused by the server
	}
	if way == tlsDialer {
		config := base.TLSClientConfig.Clone()
		base.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			c := config.Clone()
			c.ServerName = host
			tc := tls.Client(conn, c)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return slowClose{tc}, nil
		}
	}
	t.Cleanup(srv.Close)
	t.Cleanup(base.CloseIdleConnections)
	u.url = srv.URL
	return u, base
}

// slowClose is a connection that takes 20 ms to close.
type slowClose struct{ net.Conn }

func (c slowClose) Close() error {
	time.Sleep(20 * time.Millisecond)
	return c.Conn.Close()
}

// TestTransportEndsAResendHandedAnIdleConnection: http.Transport sends a
// replayable request again when the reused HTTP/1.1 connection it was
// written to is cut before the answer; Transport ends that resend as it
// asks for its connection (its first attempt may still run upstream, on
// the request's one slot). With idle connections in the base's pool,
// http.Transport may hand the resend one of them anyway — its choice
// between a connection ready and a context ended is random — and its
// write then raced the connection's close: about one resend in twenty
// reached the upstream beside the first attempt. A connection handed to
// an ended resend is closed before anything is written to it.
//
// Not parallel with the package's other tests: its cases' TLS handshakes
// and connections under the race detector load the machine that the
// real-time tests on 200-ms leases share.
func TestTransportEndsAResendHandedAnIdleConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		way    int
		method string
		// wrapped: the base is a RoundTripper around the http.Transport,
		// and the caller traces the request too (its hooks and
		// Transport's are composed).
		wrapped bool
	}{
		{"GET", plainConn, http.MethodGet, false},
		{"POST without a body", plainConn, http.MethodPost, false},
		{"GET over TLS", tlsConn, http.MethodGet, false},
		{"GET over a TLS dialer's own", tlsDialer, http.MethodGet, false},
		{"POST without a body over a TLS dialer's own", tlsDialer, http.MethodPost, false},
		{"GET through a wrapper, traced", plainConn, http.MethodGet, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const work = 40 * time.Millisecond
			up, base := startIdleCutUpstream(t, tc.way, work)
			cfg := testConfig("k", "a")
			cfg.Limiter = adaptive.Config{InitialLimit: 1, MinLimit: 1, MaxLimit: 1, MaxQueued: 10}
			cfg.MaxRequestDuration = 2 * time.Second
			// Room for a loaded machine: Transport's own resend, on a slot
			// of its own, comes once the first attempt's hold ends, and
			// finds the upstream done with the first.
			cfg.AbandonedHold = work + 300*time.Millisecond
			n := startNode(t, coord.NewMemory(nil), cfg)
			var through http.RoundTripper = base
			if tc.wrapped {
				through = roundTripFunc(base.RoundTrip)
			}
			client := &http.Client{Transport: n.Transport(through)}
			direct := &http.Client{Transport: base}
			if tc.way != plainConn {
				// The upstream speaks HTTP/1.1 only, as offered.
				resp, err := direct.Get(up.url + "/")
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
				require.Equal(t, "HTTP/1.1", resp.Proto)
			}
			for i := range 20 {
				// Four idle connections in the pool, each past its first
				// request: the request takes one and is cut on it.
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						resp, err := direct.Get(up.url + "/")
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
						}
					})
				}
				wg.Wait()
				ctx := t.Context()
				if tc.wrapped {
					ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {}})
				}
				req, err := http.NewRequestWithContext(ctx, tc.method, up.url+"/cut", nil)
				require.NoError(t, err)
				req.Header.Set("Idempotency-Key", "k")
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				require.EqualValues(t, 1, up.peak.Load(), "cut request %d: the upstream ran more requests at once than the node admits", i+1)
				eventually(t, func() bool { return n.State().Inflight == 0 }, "the held slot is freed")
			}
			require.GreaterOrEqual(t, up.cuts.Load(), int64(20), "every request was cut on a reused connection")
		})
	}
}

// TestHandedByHTTP1PoolOnlyForHTTP1: a connection handed to a request is
// said to come from http.Transport's HTTP/1 pool (and so may be closed for
// an attempt that must not be written) only when the response came over
// HTTP/1.x, whatever the base: http.Transport over every protocol it
// speaks, a base that wraps it, and an http.Transport whose scheme is
// served by a RoundTripper registered on it — an unencrypted HTTP/2 one
// hands plain connections that other requests share.
func TestHandedByHTTP1PoolOnlyForHTTP1(t *testing.T) {
	t.Parallel()
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	tls1 := httptest.NewUnstartedServer(handler)
	tls1.StartTLS()
	t.Cleanup(tls1.Close)
	tls2 := httptest.NewUnstartedServer(handler)
	tls2.EnableHTTP2 = true
	tls2.StartTLS()
	t.Cleanup(tls2.Close)
	var h2cOnly, both http.Protocols
	h2cOnly.SetUnencryptedHTTP2(true)
	both.SetHTTP1(true)
	both.SetUnencryptedHTTP2(true)
	h2c := httptest.NewUnstartedServer(handler)
	h2c.Config.Protocols = &h2cOnly
	h2c.Start()
	t.Cleanup(h2c.Close)
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	trusting := func(srv *httptest.Server) *http.Transport {
		return &http.Transport{TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(), ForceAttemptHTTP2: true}
	}
	registered := func(scheme string, inner *http.Transport) *http.Transport {
		outer := &http.Transport{}
		outer.RegisterProtocol(scheme, inner)
		return outer
	}
	for _, tc := range []struct {
		name  string
		url   string
		base  *http.Transport
		other bool // the base is wrapped: not an *http.Transport
		major int  // the response's protocol
		http1 bool // what handedByHTTP1Pool says
	}{
		{"TLS, h2 negotiated", tls2.URL, trusting(tls2), false, 2, false},
		{"TLS, h2 offered and refused", tls1.URL, trusting(tls1), false, 1, true},
		{"TLS, another base, h2 negotiated", tls2.URL, trusting(tls2), true, 2, false},
		{"TLS, another base, HTTP/1.1", tls1.URL, trusting(tls1), true, 1, true},
		{"plain", plain.URL, &http.Transport{}, false, 1, true},
		{"plain, unencrypted HTTP/2 beside HTTP/1", plain.URL, &http.Transport{Protocols: &both}, false, 1, true},
		{"plain, unencrypted HTTP/2 only", h2c.URL, &http.Transport{Protocols: &h2cOnly}, false, 2, false},
		{"plain, another base", plain.URL, &http.Transport{}, true, 1, true},
		{"plain, unencrypted HTTP/2 registered for http", h2c.URL, registered("http", &http.Transport{Protocols: &h2cOnly}), false, 2, false},
		{"plain, HTTP/1 registered for http", plain.URL, registered("http", &http.Transport{}), false, 1, true},
		{"TLS, h2 registered for https", tls2.URL, registered("https", trusting(tls2)), false, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t.Cleanup(tc.base.CloseIdleConnections)
			var base http.RoundTripper = tc.base
			if tc.other {
				base = roundTripFunc(tc.base.RoundTrip)
			}
			var said []bool
			trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { said = append(said, handedByHTTP1Pool()) }}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, tc.url, nil)
			require.NoError(t, err)
			resp, err := base.RoundTrip(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			require.Len(t, said, 1)
			require.Equal(t, tc.major, resp.ProtoMajor, "the case's protocol")
			require.Equal(t, tc.http1, said[0])
		})
	}
}
