package fleet

import (
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

// TestTransportRefusalMidUploadKeepsOnlyItsHold: an upstream that refuses
// a request before it has read its body ends the upload: Go's HTTP/2
// client stops it at any status of 300 or more, and http.Transport gives
// it up. That failed write held the refusal's slot for AbandonedHold, as
// an upload given up, though the upstream had turned the request away:
// a node at a limit of 1 stalled that long after every such 429.
func TestTransportRefusalMidUploadKeepsOnlyItsHold(t *testing.T) {
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
		cfg.AbandonedHold = 5 * time.Second
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
		require.Eventually(t, func() bool { return n.State().Inflight == 0 }, 2*time.Second, 5*time.Millisecond,
			"HTTP/2 %v: the refusal keeps its own hold, not AbandonedHold", h2)
		base.CloseIdleConnections()
	}
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
	challenged := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := inner.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		again := r.Clone(r.Context())
		again.Header.Set("Authorization", `Digest response="…"`)
		return inner.RoundTrip(again)
	})
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
	challengedWithBody := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := inner.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		again := r.Clone(r.Context())
		again.Header.Set("Authorization", `Digest response="…"`)
		if again.Body, err = r.GetBody(); err != nil {
			return nil, err
		}
		return inner.RoundTrip(again)
	})
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
