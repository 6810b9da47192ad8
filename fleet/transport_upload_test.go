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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// uploadBase is a base that answers at once, before it has written the
// whole request (as an upstream that answers before it has read the body
// lets it), and reports the write's end (WroteRequest) when written is
// closed, with writeErr.
func uploadBase(written <-chan struct{}, writeErr error, sent chan<- context.Context) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		trace := httptrace.ContextClientTrace(r.Context())
		trace.GetConn(r.URL.Host)
		trace.WroteHeaders()
		go func() {
			<-written
			trace.WroteRequest(httptrace.WroteRequestInfo{Err: writeErr})
		}()
		sent <- r.Context()
		return &http.Response{StatusCode: http.StatusOK, ContentLength: 2, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})
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
			client := &http.Client{Transport: n.Transport(uploadBase(written, tc.writeErr, sent))}
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
