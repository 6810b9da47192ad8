package fleet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// uploadBase is a base that answers at once with resp(), before it has
// written the whole request (as an upstream that answers before it has
// read the body lets it), and reports the write's end (WroteRequest):
// with writeErr once written is closed (a nil written: never), or with
// the request's context's error once that context ends (the upload cut),
// whichever comes first. It sends each request's context on sent.
func uploadBase(resp func() *http.Response, written <-chan struct{}, writeErr error, sent chan<- context.Context) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		// As net/http does, only the hooks that are set are called.
		trace := httptrace.ContextClientTrace(r.Context())
		if trace.GetConn != nil {
			trace.GetConn(r.URL.Host)
		}
		if trace.WroteHeaders != nil {
			trace.WroteHeaders()
		}
		go func() {
			err := writeErr
			select {
			case <-written:
			case <-r.Context().Done():
				err = r.Context().Err()
			}
			if trace.WroteRequest != nil {
				trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
			}
		}()
		sent <- r.Context()
		return resp(), nil
	})
}

// answer returns a response of the given status and body, for uploadBase.
func answer(status int, body string) func() *http.Response {
	return func() *http.Response {
		return &http.Response{StatusCode: status, ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
	}
}

// TestTransportHeldUntilTheRequestIsWritten: a response that ended while
// the request's body was still being sent freed its slot at once, and its
// context ended, cutting the upload. The upstream still had the request:
// the slot is held until the write ends, freed then if it succeeded, and
// held for AbandonedHold if it failed.
func TestTransportHeldUntilTheRequestIsWritten(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		writeErr error
	}{
		{"written", nil},
		{"write failed", errors.New("connection reset by peer")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("k", "a")
			cfg.AbandonedHold = time.Second
			n := startNode(t, coord.NewMemory(nil), cfg)
			written := make(chan struct{})
			sent := make(chan context.Context, 1)
			client := &http.Client{Transport: n.Transport(uploadBase(answer(http.StatusOK, "ok"), written, tc.writeErr, sent))}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("upload"))
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, "ok", string(b))
			require.NoError(t, resp.Body.Close())
			ctx := <-sent
			time.Sleep(20 * time.Millisecond)
			require.Equal(t, 1, n.State().Inflight, "the response has ended, the request's write has not: the slot is held")
			require.NoError(t, ctx.Err(), "and the request's context runs on, so the upload is not cut")
			close(written)
			eventually(t, func() bool { return ctx.Err() != nil }, "the context ends with the write")
			if tc.writeErr == nil {
				eventually(t, func() bool { return n.State().Inflight == 0 }, "freed when the write ends")
				return
			}
			time.Sleep(100 * time.Millisecond)
			require.Equal(t, 1, n.State().Inflight, "a write that failed is an upload given up: held for AbandonedHold")
			eventually(t, func() bool { return n.State().Inflight == 0 }, "and freed after it")
		})
	}
}

// TestTransportHeldWhileTheUpstreamReadsTheUpload: an HTTP/1.1 upstream
// that answers in full before it has read the request's body (full
// duplex) and reads on. The slot was freed when the client read the
// response's end, with the upstream still serving the request; when the
// upload does not end, http.Transport gives it up and the upstream may
// still serve what it read, so the slot is held for AbandonedHold.
func TestTransportHeldWhileTheUpstreamReadsTheUpload(t *testing.T) {
	t.Parallel()
	var serving atomic.Int64 // the upstream's own count of requests it serves
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serving.Add(1)
		defer serving.Add(-1)
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
		w.(http.Flusher).Flush()
		_, _ = io.Copy(io.Discard, r.Body) // the upload, until it ends or is cut
		time.Sleep(50 * time.Millisecond)  // and work on what it read
	}))
	defer srv.Close()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 2 * time.Second
	n := startNode(t, coord.NewMemory(nil), cfg)
	upload, sending := io.Pipe()
	defer sending.Close()
	go func() { _, _ = io.WriteString(sending, strings.Repeat("x", 1<<10)) }() // and no end
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, upload)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(nil)}).Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "ok", string(b))
	require.NoError(t, resp.Body.Close())
	time.Sleep(20 * time.Millisecond)
	require.EqualValues(t, 1, serving.Load(), "the upstream reads the upload")
	require.Equal(t, 1, n.State().Inflight, "the slot is held while it does")
	eventually(t, func() bool { return serving.Load() == 0 }, "http.Transport gives the upload up")
	require.Equal(t, 1, n.State().Inflight, "an upload given up is held for AbandonedHold")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "and freed after it")
}

// TestTransportRefusalMidUpload: an upstream that refuses a request
// before it has read its body. Go's HTTP/2 client stops the upload by
// itself at any status of 300 or more and resets the stream when the
// body is closed, which the upstream learns at once: the refusal keeps
// its own hold (it held AbandonedHold once, and a node at a limit of 1
// stalled that long after every such 429). http.Transport closes an
// HTTP/1.1 connection whose upload goes on 50 ms after the response's
// end: the upstream may read on what reached it (see
// TestTransportUploadClosedByThisSideIsHeld), so the slot is held for
// AbandonedHold, the price of a large upload refused early.
func TestTransportRefusalMidUpload(t *testing.T) {
	t.Parallel()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests) // without reading the upload
	}))
	srv.Config.Protocols = &protocols
	srv.Start()
	defer srv.Close()
	for _, h2 := range []bool{false, true} {
		cfg := testConfig("k", "a")
		cfg.AbandonedHold = time.Second
		// A lease a loaded machine's scheduler cannot outlast: the test is
		// of the holds, and a fence would refuse the request.
		cfg.HeartbeatInterval, cfg.LeaseTTL, cfg.FenceMargin = 200*time.Millisecond, 5*time.Second, time.Second
		n := startNode(t, coord.NewMemory(nil), cfg)
		var bp http.Protocols
		if h2 {
			bp.SetUnencryptedHTTP2(true)
		} else {
			bp.SetHTTP1(true)
		}
		base := &http.Transport{Protocols: &bp}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(strings.Repeat("x", 8<<20)))
		require.NoError(t, err)
		resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		ended := time.Now()
		if h2 {
			require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 500*time.Millisecond, 5*time.Millisecond,
				"HTTP/2: the refusal keeps its own hold, not AbandonedHold")
		} else {
			time.Sleep(300 * time.Millisecond)
			require.Equal(t, 1, n.State().Inflight, "HTTP/1.1: the upload cut by this side is held for AbandonedHold")
			eventually(t, func() bool { return n.State().Inflight == 0 }, "and freed after it")
			require.GreaterOrEqual(t, time.Since(ended), 900*time.Millisecond)
		}
		base.CloseIdleConnections()
	}
}

// challengeBase answers a 401 from inner as a digest or NTLM client does:
// it reads the 401 to its end and sends the request again with an
// Authorization header, its body asked for again with GetBody.
func challengeBase(inner http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := inner.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		again := r.Clone(r.Context())
		again.Header.Set("Authorization", `Digest response="…"`)
		if r.GetBody != nil {
			if again.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
		return inner.RoundTrip(again)
	})
}

// TestTransportLetsABaseAnswerAChallenge: a base that reads a 401 to its
// end and sends the request again on purpose (a digest or NTLM
// challenge), on the same context, was taken for its own resend of an
// unanswered request and always failed with ErrNotResent. A second
// attempt after a response goes on, on the request's slot: the two run
// one after the other.
func TestTransportLetsABaseAnswerAChallenge(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.enter()
		defer up.leave()
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Digest realm="r", nonce="n"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	inner := &http.Transport{}
	defer inner.CloseIdleConnections()
	challenged := challengeBase(inner)
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	client := &http.Client{Transport: n.Transport(challenged)}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "ok", string(b))

	// With a body, asked for again: GetBody refused it once the headers
	// were written, answer or none.
	challengedWithBody := challengeBase(inner)
	resp, err = (&http.Client{Transport: n.Transport(challengedWithBody)}).Post(srv.URL, "text/plain", strings.NewReader("body"))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 1, up.peak.Load())
	eventually(t, func() bool { return n.State().Inflight == 0 }, "the slots are freed")

	// Go's HTTP/2 client reports WroteHeaders after it has sent them, so
	// the answer's first byte may come first: that answer still counts.
	early := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		trace := httptrace.ContextClientTrace(r.Context())
		trace.GetConn(r.URL.Host)
		trace.GotFirstResponseByte() // the 401, before WroteHeaders is reported
		trace.WroteHeaders()
		trace.WroteRequest(httptrace.WroteRequestInfo{})
		trace.GetConn(r.URL.Host) // the answer to the challenge
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		trace.WroteHeaders()
		trace.WroteRequest(httptrace.WroteRequestInfo{})
		trace.GotFirstResponseByte()
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})
	resp, err = (&http.Client{Transport: n.Transport(early)}).Get("http://127.0.0.1:1/")
	require.NoError(t, err, "an answer whose first byte came before WroteHeaders")
	require.NoError(t, resp.Body.Close())
}

// TestTransportLateWriteOfAChallengedAttempt: a base that answers a
// challenge sends the request twice, and the first attempt's upload may
// end (WroteRequest) after the second's headers were written — an
// upstream that answered 401 before reading the body. That end was taken
// for the second's: the slot was freed at the response's end while the
// second upload went on.
func TestTransportLateWriteOfAChallengedAttempt(t *testing.T) {
	t.Parallel()
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	first, second := make(chan struct{}), make(chan struct{})
	firstEnded := make(chan struct{})
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		trace := httptrace.ContextClientTrace(r.Context())
		trace.GetConn(r.URL.Host)
		trace.WroteHeaders()
		trace.GotFirstResponseByte() // the 401, its upload still going
		trace.GetConn(r.URL.Host)    // the answer to the challenge
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		trace.WroteHeaders()
		go func() {
			<-first
			trace.WroteRequest(httptrace.WroteRequestInfo{})
			close(firstEnded)
			<-second
			trace.WroteRequest(httptrace.WroteRequestInfo{})
		}()
		trace.GotFirstResponseByte()
		return answer(http.StatusOK, "ok")(), nil
	})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("upload"))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	close(first)
	<-firstEnded
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, 1, n.State().Inflight, "the first attempt's upload ended, the second's goes on: the slot is held")
	close(second)
	eventually(t, func() bool { return n.State().Inflight == 0 }, "freed when the second's ends")
}

// TestTransportUploadGivenUpAfterARefusalIsHeld: an upload still going on
// AbandonedHold after the response's end is cut then, whatever the
// status: the upstream was still reading it, and learns of the end from
// the cut. After a 404 its slot was freed at the cut.
func TestTransportUploadGivenUpAfterARefusalIsHeld(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 300 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	sent := make(chan context.Context, 1)
	base := uploadBase(answer(http.StatusNotFound, "no"), nil, nil, sent)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("upload"))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	rctx := <-sent
	<-rctx.Done() // the give-up's cut
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 1, n.State().Inflight, "the cut upload is held for AbandonedHold")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "and freed after it")
}

// TestTransportCallerStillEndsAnUploadBeforeClose: the caller's context
// ends the request until the caller closes the body. Read's EOF, with
// the upload still going on, unlinked it: a cancellation between EOF and
// Close no longer cut the upload.
func TestTransportCallerStillEndsAnUploadBeforeClose(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 3 * time.Second // when an upload still going on is given up
	n := startNode(t, coord.NewMemory(nil), cfg)
	sent := make(chan context.Context, 1)
	base := uploadBase(answer(http.StatusOK, "ok"), nil, nil, sent)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("upload"))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	rctx := <-sent
	cancel() // after EOF, before Close
	require.Eventually(t, func() bool { return rctx.Err() != nil }, time.Second, time.Millisecond,
		"the caller's cancellation cuts the upload, long before it is given up")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 1, n.State().Inflight, "an upload cut after a 200 is held for AbandonedHold")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "and freed after it")
}

// TestTransportUploadCutByTheCallerAfterA404IsHeld: after a 404, an
// upload the caller's context cut (its cancellation before Close) ended
// with the context's error, which the status rule took for the client
// library stopping the upload, and freed the slot at once while the
// upstream still read it. A write cut by the request's context is an
// upload given up, whatever the status.
func TestTransportUploadCutByTheCallerAfterA404IsHeld(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = time.Second
	n := startNode(t, coord.NewMemory(nil), cfg)
	base := uploadBase(answer(http.StatusNotFound, "no"), nil, nil, make(chan context.Context, 1))
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("upload"))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	cancel() // after EOF, before Close: cuts the upload
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 1, n.State().Inflight, "the cut upload is held for AbandonedHold")
	require.NoError(t, resp.Body.Close())
	eventually(t, func() bool { return n.State().Inflight == 0 }, "and freed after it")
}

// TestTransportGiveUpCutsTheUpload: a body whose Read failed is abandoned
// at once; with its upload still going on, the hold waits for the
// write's end, and a give-up AbandonedHold later started the hold but
// left the upload running until the caller's Close: nothing else ends
// the request's context on that path. The give-up cuts it.
func TestTransportGiveUpCutsTheUpload(t *testing.T) {
	t.Parallel()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = 200 * time.Millisecond
	n := startNode(t, coord.NewMemory(nil), cfg)
	sent := make(chan context.Context, 1)
	failing := func() *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(iotest.ErrReader(errors.New("reset")))}
	}
	base := uploadBase(failing, nil, nil, sent)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", strings.NewReader("upload"))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: n.Transport(base)}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	require.Error(t, err)
	rctx := <-sent
	require.Eventually(t, func() bool { return rctx.Err() != nil }, 2*time.Second, time.Millisecond,
		"the give-up cuts the upload, the body still open")
	eventually(t, func() bool { return n.State().Inflight == 0 }, "and the hold ends")
}

// earlyAnswer is an upstream that answers a request without an
// Authorization header with status before it has read the body, then
// reads on what reaches it (HTTP/1.1 full duplex) for up to readOn,
// counted in up from its entry to its return; one with the header it
// reads whole and answers 200.
func earlyAnswer(up *upstreamCount, status int, readOn time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		up.enter()
		defer up.leave()
		if r.Header.Get("Authorization") != "" {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok")
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		_ = rc.SetReadDeadline(time.Now().Add(readOn))
		w.Header().Set("WWW-Authenticate", `Digest realm="r", nonce="n"`)
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(status)
		_ = rc.Flush()
		buf := make([]byte, 1<<10)
		for {
			if _, err := r.Body.Read(buf); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// bigUpload returns a POST of n zero bytes to url, its body rewindable.
func bigUpload(t *testing.T, url string, n int64) *http.Request {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, io.LimitReader(zeros{}, n))
	require.NoError(t, err)
	req.ContentLength = n
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(io.LimitReader(zeros{}, n)), nil }
	return req
}

// TestTransportUploadClosedByThisSideIsHeld: an upstream that answered
// 404 before reading a large upload and read on. http.Transport closes
// the connection under the upload 50 ms after the response's end, and
// the failed write after a status of 300 or more freed the slot, the
// upstream's handler still running (its answer did not end its work).
func TestTransportUploadClosedByThisSideIsHeld(t *testing.T) {
	t.Parallel()
	var up upstreamCount
	srv := httptest.NewServer(earlyAnswer(&up, http.StatusNotFound, 500*time.Millisecond))
	defer srv.Close()
	inner := &http.Transport{}
	defer inner.CloseIdleConnections()
	cfg := testConfig("k", "a")
	cfg.AbandonedHold = time.Second
	n := startNode(t, coord.NewMemory(nil), cfg)
	resp, err := (&http.Client{Transport: n.Transport(inner)}).Do(bigUpload(t, srv.URL, 64<<20))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body) // ends once http.Transport gave the upload up
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	time.Sleep(200 * time.Millisecond) // past http.Transport's 50 ms: the write has failed
	require.EqualValues(t, 1, up.now.Load(), "the upstream reads on")
	for up.now.Load() > 0 {
		require.Equal(t, 1, n.State().Inflight, "this side cut the upload: the slot is held while the upstream reads")
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, func() bool { return n.State().Inflight == 0 }, "freed after AbandonedHold")
}

// TestTransportChallengeWaitsForTheFirstUpload: a base answering a 401
// that the upstream sent before reading the upload sent the request again
// while the upstream still read the first attempt's: two handlers on one
// slot. GetBody waits for the first attempt's upload to end, and refuses
// a second attempt after one that did not end cleanly.
func TestTransportChallengeWaitsForTheFirstUpload(t *testing.T) {
	t.Parallel()
	t.Run("upload cut", func(t *testing.T) {
		t.Parallel()
		var up upstreamCount
		srv := httptest.NewServer(earlyAnswer(&up, http.StatusUnauthorized, 300*time.Millisecond))
		defer srv.Close()
		inner := &http.Transport{}
		defer inner.CloseIdleConnections()
		cfg := testConfig("k", "a")
		cfg.AbandonedHold = 600 * time.Millisecond // longer than the upstream reads on
		mem := coord.NewMemory(nil)
		require.NoError(t, mem.CreateKey(t.Context(), "k", nil, new(1)))
		n := startNode(t, mem, cfg)
		_, err := (&http.Client{Transport: n.Transport(challengeBase(inner))}).Do(bigUpload(t, srv.URL, 64<<20))
		require.ErrorIs(t, err, ErrNotResent)
		require.ErrorContains(t, err, "upload did not end cleanly")
		eventually(t, func() bool { return up.now.Load() == 0 && n.State().Inflight == 0 }, "the slots are freed")
		require.EqualValues(t, 1, up.peak.Load(), "never two attempts at once at a max of 1")
		require.EqualValues(t, 1, up.total.Load(), "nor sent again by Transport: it would meet the same answer")
	})
	t.Run("body buffered by the base", func(t *testing.T) {
		// A base that reads the body itself and sends its own copy
		// twice asks for no GetBody: its second attempt is ended once
		// the first's upload is known cut.
		t.Parallel()
		var up upstreamCount
		srv := httptest.NewServer(earlyAnswer(&up, http.StatusUnauthorized, 300*time.Millisecond))
		defer srv.Close()
		inner := &http.Transport{}
		defer inner.CloseIdleConnections()
		buffering := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			own := r.Clone(r.Context()) // its body is the base's copy
			own.Body = io.NopCloser(bytes.NewReader(body))
			own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			return challengeBase(inner).RoundTrip(own)
		})
		cfg := testConfig("k", "a")
		cfg.AbandonedHold = 600 * time.Millisecond
		mem := coord.NewMemory(nil)
		require.NoError(t, mem.CreateKey(t.Context(), "k", nil, new(1)))
		n := startNode(t, mem, cfg)
		_, err := (&http.Client{Transport: n.Transport(buffering)}).Do(bigUpload(t, srv.URL, 16<<20))
		require.ErrorIs(t, err, ErrNotResent)
		require.ErrorContains(t, err, "upload did not end cleanly")
		require.Equal(t, 1, n.State().Inflight, "held for AbandonedHold")
		eventually(t, func() bool { return up.now.Load() == 0 && n.State().Inflight == 0 }, "the slot is freed")
		t.Logf("upstream: %d handlers, at most %d at once", up.total.Load(), up.peak.Load())
	})
	t.Run("HTTP/2 stops the upload itself", func(t *testing.T) {
		// Go's HTTP/2 client stops an upload at a status of 300 or
		// more and resets the stream; Go's HTTP/2 server lets a
		// handler read on what it had buffered: the challenge fails.
		t.Parallel()
		var up upstreamCount
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			up.enter()
			defer up.leave()
			if r.Header.Get("Authorization") == "" {
				w.WriteHeader(http.StatusUnauthorized) // without reading the upload
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok")
		}))
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
		defer srv.Close()
		inner := &http.Transport{Protocols: new(http.Protocols)}
		inner.Protocols.SetUnencryptedHTTP2(true)
		defer inner.CloseIdleConnections()
		cfg := testConfig("k", "a")
		cfg.AbandonedHold = 200 * time.Millisecond
		n := startNode(t, coord.NewMemory(nil), cfg)
		_, err := (&http.Client{Transport: n.Transport(challengeBase(inner))}).Do(bigUpload(t, srv.URL, 4<<20))
		require.ErrorIs(t, err, ErrNotResent)
		require.ErrorContains(t, err, "aborting request body write")
		require.EqualValues(t, 1, up.total.Load(), "the second attempt is not sent")
	})
	t.Run("upload ended after the answer", func(t *testing.T) {
		t.Parallel()
		n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
		var writeEnded, bodyAsked atomic.Int64
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			trace := httptrace.ContextClientTrace(r.Context())
			trace.GetConn(r.URL.Host)
			trace.WroteHeaders()
			trace.GotFirstResponseByte() // the 401, the upload still going
			go func() {
				time.Sleep(30 * time.Millisecond)
				writeEnded.Store(time.Now().UnixNano())
				trace.WroteRequest(httptrace.WroteRequestInfo{})
			}()
			body, err := r.GetBody()
			bodyAsked.Store(time.Now().UnixNano())
			if err != nil {
				return nil, err
			}
			_ = body.Close()
			trace.GetConn(r.URL.Host)
			trace.WroteHeaders()
			trace.WroteRequest(httptrace.WroteRequestInfo{})
			trace.GotFirstResponseByte()
			return answer(http.StatusOK, "ok")(), nil
		})
		resp, err := (&http.Client{Transport: n.Transport(base)}).Post("http://127.0.0.1:1/", "text/plain", strings.NewReader("upload"))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		eventually(t, func() bool { return writeEnded.Load() != 0 }, "the first upload ends")
		require.GreaterOrEqual(t, bodyAsked.Load(), writeEnded.Load(), "GetBody returned once the first upload ended")
	})
}

// TestTransportChallengeOverHTTP2Cleartext: net/http's own unencrypted
// HTTP/2 reports GetConn twice for an attempt on a connection it reuses;
// the second was taken for a resend of an unanswered attempt, and every
// challenge answered on such a connection failed with ErrNotResent.
func TestTransportChallengeOverHTTP2Cleartext(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	inner := &http.Transport{Protocols: new(http.Protocols)}
	inner.Protocols.SetUnencryptedHTTP2(true)
	defer inner.CloseIdleConnections()
	challenged := challengeBase(inner)
	n := startNode(t, coord.NewMemory(nil), testConfig("k", "a"))
	client := &http.Client{Transport: n.Transport(challenged)}
	for range 3 { // the first opens the connection, the others reuse it
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, "HTTP/2.0", string(b))
	}
}
