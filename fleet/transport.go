package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// Transport returns an http.RoundTripper that admits every request through
// the node before handing it to base (http.DefaultTransport when nil).
//
// A request waits for a slot with its own context (see Node.Acquire); if it
// cannot be admitted, RoundTrip returns the admission error and sends
// nothing. Nor does it send a request whose node was evicted, or whose
// node's lease did not hold without a break, since the admission (the
// process was frozen or stalled in between, even if a heartbeat renewed
// the lease since; FailClosed only): it returns an error wrapping
// ErrEvicted or ErrFenced and frees the slot. Sent that late, the request
// could run at the upstream past its bound, when its slot is freed, and
// past the coordinator's reserve for the node, beside requests admitted
// into that capacity since. Otherwise it is sent with its context bounded
// by Config.MaxRequestDuration from admission: at that bound the request
// is cancelled, body included, and its slot freed, a safety bound that
// the upstream's requests must not reach (see Config.MaxRequestDuration;
// the error, of the round trip or of a Read of the body, is the base's
// deadline error, its text naming MaxRequestDuration, except for an
// upgraded connection, which the bound closes). Before it, its
// slot is freed when the request has ended at the upstream, a refusal's
// no sooner than a served request's headers would have come:
//
//   - A 429, a 503, or a 529 (Anthropic's "overloaded") is a drop (the
//     node's estimate backs off) at once; its
//     slot stays held until a served request's headers would have come,
//     the limiter's RTTNoload after it was sent (no longer than the
//     bound), so refusals answered at once turn a slot over no faster
//     than answers do, and until its body's transfer ends: read to its
//     end, closed, failed, or ended by the request's context (a
//     refusal's body is no work at the upstream, so a body closed early
//     is not held as an abandoned request's). While the node's limit is
//     1 (its floor of one slot, or cut to its last) and its last grant
//     counted other live nodes, each refusal in a row — of a request
//     sent after the last one came back — holds its slot twice as long
//     as the one before, up to 8 × RTTNoload (never past the bound); a
//     served request sent after the last refusal came back, a refusal at
//     a higher limit, or 16 × RTTNoload without a refusal starts again
//     from one. More nodes
//     than the upstream's capacity then take turns instead of each being
//     refused every round trip. A limit of 0 (stopping, fenced, evicted,
//     drained) and a lone node keep the single hold. A Retry-After or
//     retry-after-ms header pauses the node's admission until it passes
//     (at most quota.MaxRetryAfter, 10 minutes).
//   - A 504, or Cloudflare's 524, is a gateway's timeout: the upstream
//     behind it may still be serving the request. It is a drop at once,
//     and its slot is held as an abandoned request's, for AbandonedHold
//     once its body has ended.
//   - Any response's quota headers (package quota: the IETF RateLimit
//     fields, X-RateLimit-*, OpenAI's x-ratelimit-*, Anthropic's
//     anthropic-ratelimit-*) are a ceiling hint: when one of their policies
//     says nothing is left until a reset, the node's admission pauses until
//     that reset, at most quota.MaxRetryAfter; on a 429, 503 or 529, a
//     Retry-After that asks for a wait takes precedence (one of 0, or a
//     date already past, leaves the pause to the quota fields). Node.Quota
//     returns the latest ones read.
//   - Any other response frees its slot when its body has been read to the
//     end: a streamed response occupies the upstream for its whole length.
//     A body of known length fully read and closed without its end (EOF)
//     seen is read on for that end: over HTTP/2 it is the stream's end,
//     which the upstream sends once it is done with the request (after
//     trailers, or work after the last byte), and the slot is held until
//     it comes, at most to the request's deadline (the bound, or the
//     caller's). Close waits up to 10 ms for it, then leaves the wait to
//     the background. Over HTTP/1.1 the end is the last byte, there at
//     once: work the upstream does after it cannot be seen. A 204's and a
//     304's body has no bytes, and ends with its stream, read or closed,
//     as a body read to its length (also when a Content-Length it should
//     not carry makes the read fail); Go's HTTP/2 client gives a HEAD's
//     response no body, so it ends when read or closed, and work after
//     its headers cannot be seen. A 3xx's body closed before its end
//     (http.Client closes one over 2 KiB unread when it follows the
//     redirect) is read to its end in the background, however long, and
//     frees its slot there, when the upstream is done with the request,
//     or, if its end does not come by the request's deadline, as an
//     abandoned request's, for AbandonedHold.
//   - A request has also not ended before its body has been sent: an
//     upstream may answer before it has read the whole body (HTTP/2 allows
//     it, and an HTTP/1.1 server may) and go on reading and working.
//     Whatever ends the response, its slot is held until the base reports
//     the request written (httptrace's WroteRequest; a base that reports
//     no httptrace event is not waited for), and the response's end alone
//     does not end the request's context, so the upload goes on. What
//     ends that context cuts the upload: the caller's (until the caller
//     closes the body), its deadline or the bound, the 100 ms drain of a
//     body closed before its end, and a give-up (below); a write cut so
//     holds the slot for AbandonedHold from then, whatever the status
//     (so does one Go's HTTP/2 client aborts when the caller closes the
//     body before the upload's end, after a 1xx or 2xx). So is a write
//     that this side's close of its connection ends (net.ErrClosed:
//     http.Transport gives up an HTTP/1.1 upload 50 ms after the
//     response has ended), whatever the status: an upstream that
//     answered first may read on what reached it. A write that fails
//     otherwise after a 1xx or 2xx response is a request given up
//     mid-upload, held for AbandonedHold too (http.Transport reports an
//     HTTP/1.1 write's end before it flushes its last buffered bytes, a
//     few KiB at most: a flush that fails then goes unseen). One that
//     fails otherwise after a status of 300 or more (the upstream reset
//     the connection, or Go's HTTP/2 client stopped the upload by itself,
//     resetting the stream when the body is closed) ends with the
//     response: the upstream turned the request away, and a refusal
//     keeps only its own hold. A write still going on AbandonedHold after
//     the response's end is given up: the request's context ends, which
//     cuts it, and the slot is held for AbandonedHold from then (at the
//     bound, the request's end by assumption, the slot is freed). A 2xx or 3xx
//     response's time to headers is a latency sample; any other status
//     gives none (a 404 answered at once is not the upstream's no-load
//     latency).
//   - A 101 response's body is the upgraded connection (a WebSocket's), an
//     io.ReadWriteCloser as http.Transport gives it. Its slot is held
//     until the caller closes it, then as an abandoned request's, for
//     AbandonedHold, or until the bound closes it: the upstream's end of
//     its half (EOF) leaves the connection writable, and the upstream may
//     go on reading, and working, until it sees the caller's close — a
//     WebSocket server ends its session there. Give an upstream of such
//     sessions a short AbandonedHold. The caller's context does not end an
//     upgraded connection, as with http.Transport.
//   - The caller's context ends the request only until the caller closes
//     the response's body (http.Client's Timeout cancels it as the body
//     closes): after Close the request's end is read for as said here.
//     A cancellation ends it with the caller's cause (context.Cause), as
//     http.Transport does; a deadline ends it as a deadline
//     (context.DeadlineExceeded; a WithTimeoutCause's own cause is not
//     carried). A Read after Close fails.
//   - A body closed before its end is read on, in the background, for up
//     to 4 KiB and 100 ms: a client that stops at its own end marker (an
//     SSE "data: [DONE]") closes a body whose end is arriving, and such a
//     request ends as a complete one. Close then returns nil at once and
//     closes the underlying body when that read ends.
//   - A request the client gives up on after sending it — an error or
//     timeout from the transport, the caller's context ending, the body
//     closed or failing before its end (and not ending within the read
//     above) — may still run at the upstream: its slot stays held for
//     Config.AbandonedHold (no longer than the bound).
//     A timeout before the response's headers counts as a drop at once,
//     unless the admission wait took the request's time: it arrived
//     with at least twice the limiter's RTTNoload left of its context's
//     deadline and was admitted with less. Its timeout says nothing of
//     the upstream's load, and counting it would feed a spiral: a lower
//     limit, longer waits, less time left, more timeouts. Such a
//     request admitted with less than one RTTNoload left is not sent at
//     all, nor is any request whose deadline has passed at admission:
//     they fail with ErrLate. A caller's own deadline shorter than that
//     (under twice RTTNoload when the request arrived) is sent, and its
//     timeout counts as a drop only if it left the request at least one
//     RTTNoload: a shorter one could not be met with no load at all. After the headers nothing counts as a
//     drop (a caller's own deadline mid-stream, or a user pressing
//     stop, is no overload signal). A request that failed before it was
//     sent counts as a drop only for the base's own timeout (its
//     context's end is none); it frees its slot at once and gives back
//     its debit from the node's rate shares, as does one not sent for
//     ErrEvicted, ErrFenced or ErrLate. "Sent" means that base reported
//     writing the request's headers through net/http/httptrace
//     (WroteHeaders), as http.Transport does, or, for a base that reports
//     no httptrace event at all for a request (not even GetConn, which
//     http.Transport reports before it can send anything), that its error
//     does not say a dial or name lookup failed: such a base may have
//     sent it without saying so, and Transport logs this once (a scheme
//     added to an http.Transport with RegisterProtocol counts as such a
//     base). A wrapper that fails before it hands the request on (a token
//     fetch, an open circuit breaker) reports nothing either, so its
//     failures hold their slots for AbandonedHold too: keep it short. Not
//     sent either: http.Transport's refusal of a scheme it does not serve,
//     and another node's Transport's refusal to send (one Transport as
//     another's base, for two keys). A base that panics may have sent the
//     request: its slot is held for AbandonedHold, and the panic goes on.
//   - One RoundTrip is one attempt at the upstream per slot. http.Transport
//     sends a replayable request — GET, HEAD, OPTIONS, TRACE, or one with
//     an Idempotency-Key or X-Idempotency-Key header, whose body is none
//     or one it can rewind (GetBody) — again on its own when the reused
//     connection it wrote it to closes before the response; Go's HTTP/2
//     client sends any request whose body is none or can be rewound again
//     when its stream is refused or reset (also with PROTOCOL_ERROR,
//     golang/go#47635) or its connection goes away. The upstream may have
//     received the first attempt and go on serving it (a proxy or load
//     balancer cutting the connection). Once the request's headers were
//     written, Transport ends such a resend: one with a body when it asks
//     for the body again (GetBody refuses), any other when it asks for its
//     connection (httptrace's
//     GetConn, which http.Transport and Go's HTTP/2 client report for
//     every attempt) while the attempt before it had no answer
//     (GotFirstResponseByte): a base that sends a second
//     round trip on purpose after reading the first's answer (a digest or
//     NTLM challenge, its body asked for again with GetBody) goes on, once
//     the first attempt's upload has ended without an error (GetBody waits
//     for that end, up to 100 ms, and refuses with ErrNotResent an upload
//     still going or one that failed — over HTTP/1.1, http.Transport's
//     close 50 ms after the answer; over HTTP/2, the client's own stop of
//     an upload its answer came before: an upstream that answered before
//     it read the whole body may read on what reached it, and Go's HTTP/2
//     server lets a handler read what it had buffered after the stream's
//     reset; the request then fails, its slot held, and is not sent
//     again). A base that sends its own copy of the
//     body, asking for no GetBody, has its second attempt ended as soon as
//     the first's upload is known cut, which may come after it reached the
//     upstream. A base that closes that answer before its end (an HTTP/2
//     stream it resets) sends the second attempt while the upstream may
//     still run the first, until it notices the reset: read the
//     challenge's answer to its end before sending again. An interim 1xx
//     response (Got1xxResponse) is no answer, and as no hook
//     reports the final response after one, an attempt that had a 1xx
//     counts as unanswered (a challenge after a 103 fails with
//     ErrNotResent). The request's
//     context ends then, with ErrNotResent as its cause: Go's HTTP/2
//     client writes nothing more, and http.Transport may still hand the
//     request an idle connection (it picks at random between one ready
//     and the ended context) and write it there in a race with its own
//     close of that connection. A connection handed over (httptrace's
//     GotConn) to an attempt so ended is closed before anything is
//     written to it when http.Transport's HTTP/1 pool handed it over
//     (it reports GotConn for an HTTP/1.x connection only, which is that
//     request's alone) — also under a base that wraps http.Transport,
//     and whatever the connection (plain or TLS). A connection an
//     HTTP/2 client hands over (its own GotConn) is shared by other
//     requests and is never closed — nor is one handed over by a
//     RoundTripper registered on an http.Transport (RegisterProtocol)
//     that speaks unencrypted HTTP/2.
//     The first attempt keeps its slot as an abandoned
//     request's (AbandonedHold) — also when none of it reached the
//     upstream (a connection the server closed while idle, a stream
//     refused or beyond a GOAWAY), which Transport cannot tell — and
//     Transport sends the request once more itself, on a slot of its own
//     (admitted as a new request, its tokens debited again); when it
//     cannot, the error wraps ErrNotResent. Still resent on one slot:
//     any request of a base that retries or hedges by itself without
//     reporting GetConn for each attempt, and a resend of Go's HTTP/2
//     client that it puts on a connection another request has just
//     opened (its pool reports no GetConn for that one).
//     Retry above Transport (as the official SDKs
//     do, through the http.Client), where each attempt takes its own
//     slot, and build the retry from the request you sent: a response's
//     Request is Transport's copy, whose Context ends with the body and
//     whose GetBody refuses once its headers were written, until an
//     answer and the upload's end (see above). A retry of a request whose
//     headers were not written goes through on its slot.
//   - The error for a request not sent is its cause's — http.Client's
//     url.Error adds the method and URL — wrapped (errors.Is finds
//     ErrLate, ErrFenced, adaptive.ErrPaused — an upstream's pause that
//     began after the request's admission, while it waited for the rate,
//     say: nothing is sent while paused — context's errors), and is a
//     timeout (the
//     Timeout method that url.Error and os.IsTimeout consult) when its
//     cause is one: ErrLate, or a deadline that ended while it waited for
//     admission (a slot or the rate).
//
// Close every body. The returned RoundTripper is safe for concurrent use.
func (n *Node) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{node: n, base: base}
}

// unsentError is Transport's error for a request it did not send. It is a
// timeout (Timeout, which url.Error and os.IsTimeout ask for) when its
// cause is: a deadline that ended while it waited for admission, or
// ErrLate.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }

func (e *unsentError) Unwrap() error { return e.err }

func (e *unsentError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

// boundError is Transport's error for a request its bound
// (Config.MaxRequestDuration) ended, before the response's headers or in
// a Read of its body: the base's timeout, which it wraps, with the bound
// named. It is a timeout (Timeout, which url.Error and os.IsTimeout ask
// for) as the base's was.
type boundError struct {
	err   error
	bound time.Duration
}

func (e *boundError) Error() string {
	return fmt.Sprintf("%v (fleet: the request reached its bound, MaxRequestDuration = %v after its admission)", e.err, e.bound)
}

func (e *boundError) Unwrap() error { return e.err }

func (e *boundError) Timeout() bool { return true }

// boundErr returns err as a *boundError if the bound ended the request:
// err is a timeout, the request's context ctx (whose deadline is the
// bound) passed its deadline, and the caller's context had not ended.
// Otherwise it returns err.
func boundErr(err error, ctx, caller context.Context, bound time.Duration) error {
	if isTimeout(err) && errors.Is(ctx.Err(), context.DeadlineExceeded) && caller.Err() == nil {
		return &boundError{err: err, bound: bound}
	}
	return err
}

type transport struct {
	node *Node
	base http.RoundTripper
	// admitted, when set, runs between a request's admission and the
	// check that it may still be sent (tests).
	admitted func()
	silent   sync.Once // logs that base reports no httptrace events
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(req)
	if !errors.Is(err, ErrNotResent) || errors.Is(err, errUncleanUpload) || req.Context().Err() != nil {
		// Not a resend of the base's own, or one after an answer (a
		// challenge), which a resend would meet again.
		return resp, err
	}
	// The base would have sent req again (see guardResends); its first
	// attempt keeps its slot. Sent again once, on a slot of its own.
	again := *req
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, err
		}
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, fmt.Errorf("%w; rewinding its body to send it again: %w", ErrNotResent, gerr)
		}
		again.Body = body
	}
	resp, err = t.roundTrip(&again)
	var unsent *unsentError
	if errors.As(err, &unsent) {
		// Not sent again: the first attempt may still run upstream.
		return nil, &unsentError{err: fmt.Errorf("%w; sending it again: %w", ErrNotResent, unsent.err)}
	}
	return resp, err
}

// unsent ends req, which Transport does not send for err: it closes the
// request's body, as a RoundTripper must, and waits for a caller's passed
// deadline to end the caller's context (see callerDone; ErrLate may find
// the deadline passed before its timer fires).
func unsent(req *http.Request, err error) error {
	if req.Body != nil {
		req.Body.Close()
	}
	callerDone(req.Context())
	return &unsentError{err: err}
}

// roundTrip sends req once, on a slot of its own (see Node.Transport).
func (t *transport) roundTrip(req *http.Request) (*http.Response, error) {
	arrived := time.Now()
	if req.URL == nil {
		return nil, unsent(req, errors.New("fleet: Transport: the request has a nil URL; not sent"))
	}
	a, err := t.node.acquire(req.Context(), RequestFrom(req.Context()), TokensFrom(req.Context()), true)
	le := a.lease
	if err != nil {
		return nil, unsent(req, err)
	}
	if t.admitted != nil {
		t.admitted()
	}
	admitted := le.Admitted()
	late, _, err := t.node.sendCheck(req.Context(), admitted, arrived)
	if err != nil {
		le.Ignore()
		a.debit.cancel()
		return nil, unsent(req, err)
	}
	cfg := &t.node.cfg
	bound := admitted.Add(cfg.MaxRequestDuration)
	deadline := bound
	if d, ok := req.Context().Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The request runs on a context of its own, which the caller's ends
	// until the caller closes the response's body: after that, waiting
	// for the body's end is Transport's, and a caller that cancels its
	// context as it closes (http.Client's Timeout does) must not cut it.
	// Its deadline is the caller's or the bound, whichever comes first,
	// so that it ends as a deadline (a base may return ctx.Err()); the
	// caller's cancellation ends it with the caller's cause, which
	// http.Transport returns.
	caller, end := context.WithCancelCause(context.WithoutCancel(req.Context()))
	ctx, stop := context.WithDeadline(caller, deadline)
	cancel := func() { stop(); end(nil) }
	detached := new(atomic.Bool)
	unlink := context.AfterFunc(req.Context(), func() {
		if !detached.Load() && !errors.Is(req.Context().Err(), context.DeadlineExceeded) {
			end(context.Cause(req.Context()))
		}
	})
	var way sendTrace
	ctx = httptrace.WithClientTrace(ctx, way.hooks())
	// For SettleTokens, through resp.Request, should a client wrap the body.
	ctx = context.WithValue(ctx, ticketKey, a.debit)
	start := time.Now()
	out := req.WithContext(ctx)
	guardResends(out, &way)
	way.resend = end
	way.ctx = ctx
	returned := false
	defer func() {
		if !returned {
			// The base panicked (or its goroutine exited) and may have
			// sent the request first: its slot is held as an abandoned
			// request's, not lost with the panic, which goes on as it
			// was.
			abandon(le, false, bound, cfg.AbandonedHold)
			unlink()
			cancel()
		}
	}()
	resp, err := t.base.RoundTrip(out)
	returned = true
	if resp == nil && err == nil {
		// A broken base: http.Client refuses this answer too.
		err = fmt.Errorf("fleet: Transport's base RoundTripper (%T) returned a nil *http.Response with a nil error", t.base)
	}
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrNotResent) && !errors.Is(err, ErrNotResent) {
			// The base's own second attempt, ended as it asked for its
			// connection (see sendTrace).
			err = fmt.Errorf("%w: %w", cause, err)
		}
		if deadline.Equal(bound) {
			// The bound, not the caller, may have ended it: a bare
			// deadline error would not say whose.
			err = boundErr(err, ctx, req.Context(), cfg.MaxRequestDuration)
		}
		drop := (isTimeout(err) || pastDeadline(ctx)) && !late
		sent := t.mayHaveSent(req, &way, err)
		switch {
		case sent:
			abandon(le, drop, bound, cfg.AbandonedHold)
		case drop && ctx.Err() == nil:
			le.Drop() // the base's own timeout before sending: connecting, say
		default:
			le.Ignore() // not sent, or its own deadline ended it first
		}
		if !sent {
			a.debit.cancel() // the upstream never had the request: it spent none of the rate
		}
		unlink()
		cancel()
		callerDone(req.Context())
		return nil, err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody // as http.Client does
	}
	body := &leaseBody{ReadCloser: resp.Body, lease: le, rtt: time.Since(start), ctx: ctx, caller: req.Context(), cancel: cancel, unlink: unlink,
		detached: detached, length: resp.ContentLength, bound: bound, hold: cfg.AbandonedHold, debit: a.debit,
		empty: req.Method == http.MethodHead, way: &way, status: resp.StatusCode}
	if deadline.Equal(bound) {
		body.limit = cfg.MaxRequestDuration
	}
	if code := resp.StatusCode; code == http.StatusNoContent || code == http.StatusNotModified {
		// No bytes, whatever a Content-Length says: read or closed, the
		// body ends with its stream, and a body that ends short of a
		// Content-Length it should not have carried (Go's HTTP/2 client
		// then fails it) has ended all the same.
		body.length, body.bodiless = 0, true
	}
	now := time.Now()
	t.node.readQuota(resp.Header, resp.StatusCode, now)
	t.node.observeRate(now, start, resp.StatusCode == http.StatusTooManyRequests)
	switch code := resp.StatusCode; {
	case refusedStatus(code):
		// A refusal is a drop at once. Its slot stays held for the
		// refusal's hold and until its body's transfer has ended.
		hold := t.node.refusalHold(admitted, body.rtt, now)
		le.ObserveDrop()
		body.refused, body.rtt = now.Add(hold), -1
	case gatewayTimeout(code):
		// A gateway gave up waiting for the upstream, which may still be
		// serving the request: a timeout, so a drop at once, and a
		// request given up on, whose slot is held for AbandonedHold once
		// its body has ended.
		le.ObserveDrop()
		body.gaveUp, body.rtt = true, -1
	case code < 400:
		t.node.floor.served(admitted)
		body.redirect = code >= 300
	case code >= 400:
		// An error answered at once (404, 400, 401…) says nothing of the
		// upstream's no-load latency; an internal error says nothing of
		// its load. Neither is a sample.
		body.rtt = -1
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (a WebSocket) is the caller's once the
		// headers are back: neither its context nor the request's ends
		// it. The bound does, by closing it, and its slot is held as an
		// abandoned request's.
		detached.Store(true)
		bounded := time.AfterFunc(time.Until(bound), func() {
			_ = rwc.Close()
			body.abandon()
		})
		body.stop = bounded.Stop
		resp.Body = &upgradedBody{leaseBody: body, w: rwc}
		return resp, nil
	}
	// The request ends when its context does, if its body has not ended
	// first: the caller gave up, or the bound has come. Once the headers
	// are back, neither is an overload signal: the upstream answered.
	body.stop = context.AfterFunc(ctx, func() { body.abandon() })
	resp.Body = body
	return resp, nil
}

// upgradedBody is the body of a 101 response: the upgraded connection,
// which the caller writes to as well (an io.ReadWriteCloser, as
// http.Transport gives it).
type upgradedBody struct {
	*leaseBody
	w io.Writer
}

func (u *upgradedBody) Write(p []byte) (int, error) { return u.w.Write(p) }

// CloseWrite ends the caller's half of the connection, when the
// connection can (http.Transport's can): the upstream reads its end and
// may answer. The slot stays held.
func (u *upgradedBody) CloseWrite() error {
	if cw, ok := u.w.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("fleet: the upgraded connection (%T) cannot close its write half: %w", u.w, http.ErrNotSupported)
}

// Read reads the connection. Its end (EOF) is only the upstream's half:
// the connection stays writable and the upstream may go on reading, so
// the slot is held until Close or the bound.
func (u *upgradedBody) Read(p []byte) (int, error) { return u.ReadCloser.Read(p) }

// Close closes the connection at once: the upstream sees the session end.
// The slot is held as an abandoned request's, for whatever the upstream
// still does once it sees the close: whether the upstream had ended its
// half, and when, a closed connection does not say (its end may wait
// unread behind the caller's CloseWrite while the upstream reads on). A
// connection the bound closed closes without an error.
func (u *upgradedBody) Close() error {
	err := u.ReadCloser.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	u.abandon()
	u.release()
	return err
}

// leaseBody holds a lease until the body has ended, or gives it up as
// abandoned; closing it also releases the request's context.
type leaseBody struct {
	io.ReadCloser
	lease    adaptive.Lease
	rtt      time.Duration   // the sample to release with; < 0 settles without one
	ctx      context.Context // the request's
	caller   context.Context // the caller's
	cancel   context.CancelFunc
	unlink   func() bool  // stops the caller's context from ending the request's
	detached *atomic.Bool // the caller closed the body: its context no longer ends the request's
	stop     func() bool  // stops the context's AfterFunc
	length   int64        // the response's Content-Length; -1 when unknown
	empty    bool         // the response to a HEAD: no body, whatever its headers say
	bodiless bool         // a 204 or 304: no bytes, io.ErrUnexpectedEOF ends it too
	read     atomic.Int64
	eof      atomic.Bool // Read has returned io.EOF
	mu       sync.Mutex
	reading  int  // the caller's Reads in flight, under mu
	closed   bool // Close has begun, under mu: no Read of the caller's starts after
	bound    time.Time
	limit    time.Duration // MaxRequestDuration when bound is the request's deadline, else 0
	hold     time.Duration
	once     sync.Once // settles the lease
	closing  sync.Once // closes the body
	closeErr error
	debit    *debit     // the request's debit from the node's rate shares
	way      *sendTrace // the request's way out: when its write ended
	status   int        // the response's status code
	// refused is, for a refusal (a 429, 503 or 529), when its hold ends: its
	// slot is held until then even if its body ended before. Zero for
	// any other response.
	refused time.Time
	// gaveUp is a gateway's timeout (a 504 or 524): settled as an
	// abandoned request's, whatever ends its body.
	gaveUp bool
	// redirect is a 3xx: the upstream's answer is its status and
	// Location; closed before its end (http.Client closes a body over 2
	// KiB unread when it follows it), its body is read to its end in the
	// background, where the slot is freed (see drain).
	redirect bool
}

func (b *leaseBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errReadAfterClose
	}
	if b.empty {
		b.mu.Unlock()
		b.eof.Store(true)
		b.finish()
		b.release()
		return 0, io.EOF
	}
	b.reading++
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.reading--
	b.mu.Unlock()
	b.read.Add(int64(n))
	switch {
	case err == nil:
	case b.ended(b.read.Load(), err):
		b.eof.Store(true)
		b.finish()
		b.release()
	default:
		if b.limit > 0 {
			err = boundErr(err, b.ctx, b.caller, b.limit)
		}
		b.abandon()
		callerDone(b.caller)
	}
	return n, err
}

// Close ends the caller's part in the request. The request has ended if
// its body has: read to EOF, or there is none. So has a refusal's, whose
// end is its transfer's, and a body closed to stop a Read in flight is a
// request given up (abandoned). Otherwise its end is read for after the
// caller is done with it, with the caller's context no longer cutting the
// request (see drain). A second Close returns the first's error.
func (b *leaseBody) Close() error {
	b.closing.Do(func() { b.closeErr = b.close() })
	return b.closeErr
}

func (b *leaseBody) close() error {
	b.detached.Store(true)
	b.mu.Lock()
	b.closed = true
	reading := b.reading > 0
	b.mu.Unlock()
	switch {
	case b.empty || b.eof.Load() || !b.refused.IsZero():
		b.finish()
	case reading:
		b.abandon()
	case b.redirect:
		// The upstream's answer, its status and Location, is in; the
		// request ends when the upstream has sent the rest of its body
		// (http.Client closes one over 2 KiB unread when it follows it),
		// which is read for it in the background, however long, until
		// the request's context ends. The read also lets the connection
		// be used again.
		go func() { _ = b.drain(math.MaxInt64-1, 0) }()
		return nil
	default:
		whole := b.length >= 0 && b.read.Load() >= b.length
		wait := drainWait
		if whole {
			wait = 0
		}
		done := make(chan error, 1)
		go func() { done <- b.drain(drainLimit, wait) }()
		if !whole {
			return nil
		}
		// Over HTTP/1.1 the end of a body read to its length is there at
		// once: wait for it here, so that Close returns with the slot
		// freed. Over HTTP/2 it is the stream's end, which may come later.
		timer := time.NewTimer(endWait)
		defer timer.Stop()
		select {
		case err := <-done:
			return err
		case <-timer.C:
			return nil
		}
	}
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// ended reports whether a Read's error err, after read bytes of the body
// in all, is its end: EOF, or for a 204 or 304 with no byte read, a
// failure for the Content-Length it should not have carried.
func (b *leaseBody) ended(read int64, err error) bool {
	return errors.Is(err, io.EOF) || b.bodiless && read == 0 && errors.Is(err, io.ErrUnexpectedEOF)
}

// callerDone waits, when the deadline of the caller's context ctx has
// passed, for ctx to be done, for at most callerGrace: the request's
// context ends at that deadline by a timer of its own, which may fire
// first, and a caller that finds an error looks at its own context to
// tell its deadline from a failure. A context that reports a deadline
// but never ends is not waited for longer.
func callerDone(ctx context.Context) {
	d, ok := ctx.Deadline()
	done := ctx.Done()
	if !ok || done == nil || time.Now().Before(d) {
		return
	}
	grace := time.NewTimer(callerGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	}
}

// callerGrace bounds callerDone's wait: a deadline's timer fires late on
// a loaded machine, by far less than this.
const callerGrace = time.Second

// errReadAfterClose is a Read's error once Close has begun.
var errReadAfterClose = errors.New("fleet: read on closed response body")

// drainLimit and drainWait bound what a body closed before its end may
// still read to find that end: a few KiB, for a short while. endWait is
// how long Close waits for the end of a body read to its known length
// before it leaves the wait to the background.
const (
	drainLimit = 4 << 10
	drainWait  = 100 * time.Millisecond
	endWait    = 10 * time.Millisecond
)

// drain reads for the body's end after the caller closed it, at most
// limit bytes (below math.MaxInt64) and, with a wait above 0, for at most
// wait, and then closes it. A body read to its known length ends when its
// stream does — over HTTP/2 the upstream sends the stream's end once it
// is done with the request, after trailers or work after the last byte —
// and is waited for with no wait of its own, as long as the request's
// context runs (its bound, or the caller's deadline), holding the slot;
// so is the rest of a redirect's body, however long. Another body closed
// before that may be arriving at its end anyway (a client that stops at
// an SSE "data: [DONE]"): it is read for at most drainLimit and
// drainWait. An end completes the request with its sample; anything else
// abandons it, as a request cut short that the upstream may still serve.
func (b *leaseBody) drain(limit int64, wait time.Duration) error {
	// The context's end closes the body, which ends a Read that the
	// context alone does not (a base's own body).
	unblock := context.AfterFunc(b.ctx, func() { _ = b.ReadCloser.Close() })
	var timer *time.Timer
	if wait > 0 {
		timer = time.AfterFunc(wait, b.cancel) // ends a blocked Read
	}
	n, err := io.CopyN(io.Discard, b.ReadCloser, limit+1)
	if timer != nil {
		timer.Stop()
	}
	unclosed := unblock()
	if n <= limit && b.ended(b.read.Load()+n, err) {
		b.finish()
	} else {
		b.abandon()
	}
	err = nil
	if unclosed {
		err = b.ReadCloser.Close()
	}
	b.release()
	return err
}

// finish settles the lease of a response that has ended, once the
// request has been written (see sendTrace.whenWritten): a write that
// failed after a 1xx or 2xx response is a request given up mid-upload,
// which the upstream may still serve, and is settled as abandon does;
// after a status of 300 or more the upstream turned the request away.
func (b *leaseBody) finish() { b.settle(false) }

// abandon gives the lease up as abandoned: its slot stays held for the
// hold, from when the request's write has ended. It is never a drop: the
// headers came back (a refusal's drop counted then). A refusal's body is
// no work of the upstream's, and ends with its transfer: a refusal given
// up on is one that ended (finish).
func (b *leaseBody) abandon() { b.settle(b.refused.IsZero()) }

// settle settles the lease, the first time it is called, once the
// request's write has ended: as an abandoned request's or, unless the
// write failed, as one that ended.
func (b *leaseBody) settle(abandoned bool) {
	b.once.Do(func() {
		b.afterWrite(func(werr error) {
			switch {
			case errors.Is(werr, errWriteUnended):
				// Given up while the upstream still read the upload,
				// whatever it answered: cut it (release may not come
				// before the caller's Close), and hold the slot for
				// what the upstream does once it sees the cut.
				b.cancel()
				fallthrough
			case cutWrite(werr):
				// Cut by the request's context (the caller's, a
				// deadline, a drain's wait, a give-up's cut), or by
				// this side's close of its connection (http.Transport
				// gives an HTTP/1.1 upload up 50 ms after the
				// response's end), while the upstream still read it,
				// whatever it answered; a refusal's own hold, if
				// longer, still counts.
				abandon(b.lease, false, b.bound, max(b.hold, time.Until(b.refused)))
			case !b.refused.IsZero():
				// The upstream refused the request: whatever the
				// write, no work of its own is left.
				abandon(b.lease, false, b.bound, time.Until(b.refused))
			case abandoned || b.gaveUp || werr != nil && b.status < 300:
				abandon(b.lease, false, b.bound, b.hold)
			case b.rtt < 0:
				b.lease.Ignore()
			default:
				b.lease.ReleaseRTT(b.rtt)
			}
		})
	})
}

// release ends the request's context once the body is done with and the
// request's write has ended: ending it sooner would cut an upload the
// upstream still reads. Until then the caller's context still ends it,
// until the caller closes the body (see detached).
func (b *leaseBody) release() {
	if b.stop != nil {
		b.stop()
	}
	b.afterWrite(func(error) {
		if b.unlink != nil {
			b.unlink()
		}
		b.cancel()
	})
}

// afterWrite calls f once the request's write has ended (see
// sendTrace.whenWritten), or has gone on for the hold from now (and not
// past the bound): an upload the upstream no longer reads, or one the
// caller's body holds up, is then given up, f called with
// errWriteUnended.
func (b *leaseBody) afterWrite(f func(error)) {
	giveUp := time.Now().Add(b.hold)
	if b.bound.Before(giveUp) {
		giveUp = b.bound
	}
	b.way.whenWritten(giveUp, f)
}

// sendTrace is what a base RoundTripper reported, through
// net/http/httptrace, of one request's way out: whether it asked for a
// connection (GetConn), whether it wrote the request's headers
// (WroteHeaders), and whether the writing of the whole request, its body
// included, has ended since (WroteRequest), with the write's error. Safe
// for concurrent use: a base may report from its own goroutines.
type sendTrace struct {
	asked, wrote atomic.Bool
	// attempt: the headers were written since the last GetConn. net/http
	// reports GetConn twice for one attempt over its own unencrypted
	// HTTP/2 on a connection it reuses (from its pool, then from the
	// HTTP/2 one's): the second comes with no headers written since.
	attempt atomic.Bool
	// resend, when set, ends the request's context with its cause, which
	// wraps ErrNotResent: called by a GetConn that comes once the attempt
	// before wrote its headers and before an answer to them (a base's own
	// second attempt asking for its connection), or after an answer when
	// an upload was cut, then or later (see cut).
	resend func(cause error)
	// answered: the attempt's response began (GotFirstResponseByte) and
	// was no 1xx (Got1xxResponse), since the attempt's GetConn.
	answered atomic.Bool
	// ctx is the request's context: a write that fails once it has ended
	// was cut by it (errWriteCut).
	ctx context.Context
	mu  sync.Mutex
	// unended counts the attempts whose headers were written
	// (WroteHeaders) and whose write has not ended (WroteRequest), under
	// mu. A base that sends twice (a challenge answered) may report the
	// first attempt's end after the second's headers: that end is not
	// the second's.
	unended int
	written bool // every attempt's write has ended, under mu
	// err is the first cut write's error (see cutWrite), or else the
	// last write's, under mu: an upstream that answered an attempt
	// before it read the whole body may read on what reached it, beside
	// the attempts after it.
	err error
	cut error // the first cut write's error, under mu
	// headers and ends count WroteHeaders and WroteRequest; againAt is
	// headers when an attempt began after an answer (0: none), so the
	// ends up to it are the attempts' before it. Under mu.
	headers, ends, againAt int
	waiting                []func(error) // whenWritten's, under mu
}

// cutWrite reports whether err, a write's error, says the upload was cut
// while the upstream may still read it: by the request's context, or by
// this side's close of the connection.
func cutWrite(err error) bool {
	return errors.Is(err, errWriteCut) || closedHere(err)
}

func (s *sendTrace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn: func(string) {
			if s.attempt.Load() && s.resend != nil {
				// A second attempt, before it is written.
				if !s.answered.Load() {
					s.resend(errUnanswered)
				} else {
					// After an answer: ended if an upload was cut,
					// now or once it is (see WroteRequest). It cannot
					// wait here: Go's HTTP/2 pool reports GetConn
					// holding its lock.
					s.mu.Lock()
					s.againAt = s.headers
					cut := s.cut
					s.mu.Unlock()
					if cut != nil {
						s.resend(uncleanUpload(cut))
					}
				}
			}
			s.answered.Store(false) // a new attempt
			s.attempt.Store(false)
			s.asked.Store(true)
		},
		GotConn: func(info httptrace.GotConnInfo) {
			// An attempt ended as it asked for its connection (see
			// GetConn) may be handed one anyway: http.Transport picks
			// at random between a connection ready (an idle one) and
			// the ended context, writes the request, and closes the
			// connection in a race with that write's flush. A
			// connection handed over by http.Transport's HTTP/1 pool is
			// this attempt's alone: closed here, before anything is
			// written to it. Go's HTTP/2 client, which reports GotConn
			// from its own pool for a connection other streams share,
			// checks the context before it writes a stream's headers.
			if info.Conn != nil && s.ctx != nil && errors.Is(context.Cause(s.ctx), ErrNotResent) &&
				handedByHTTP1Pool() {
				_ = info.Conn.Close()
			}
		},
		GotFirstResponseByte: func() { s.answered.Store(true) },
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			s.answered.Store(false) // an interim response answers nothing
			return nil
		},
		WroteHeaders: func() {
			s.mu.Lock()
			s.written, s.err = false, nil // a resend writes the request again
			s.unended++
			s.headers++
			s.wrote.Store(true)
			s.attempt.Store(true)
			s.mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			err := info.Err
			if err != nil && s.ctx != nil && s.ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", errWriteCut, err)
			}
			s.mu.Lock()
			s.ends++
			if cutWrite(err) && s.cut == nil {
				s.cut = err
				if s.ends <= s.againAt && s.resend != nil {
					// An attempt before the one that began after an
					// answer had its upload cut: end the later one,
					// which runs beside it (once mu is released).
					defer s.resend(uncleanUpload(err))
				}
			}
			// http.Transport reports the end of a write whose headers
			// failed without WroteHeaders.
			s.unended = max(s.unended-1, 0)
			if s.unended > 0 {
				s.mu.Unlock()
				return // an earlier attempt's write ended; the last one's goes on
			}
			if s.cut != nil {
				err = s.cut
			}
			s.written, s.err = true, err
			waiting := s.waiting
			s.waiting = nil
			s.mu.Unlock()
			for _, f := range waiting {
				f(err)
			}
		},
	}
}

// whenWritten calls f once the request has been written, body and all,
// with the write's error: at once when the base reported that end, or
// reported no httptrace event at all (neither GetConn nor WroteHeaders),
// else when it reports it — Go's HTTP/2 client reports WroteHeaders only
// after it has sent them, so a response may end before — and at giveUp
// at the latest, with errWriteUnended (a zero giveUp: never). An upstream
// may answer before it has read the whole body (HTTP/2 allows it, and an
// HTTP/1.1 server may) and go on reading it: until the write ends, the
// request is not over.
func (s *sendTrace) whenWritten(giveUp time.Time, f func(error)) {
	s.mu.Lock()
	if s.written || !s.wrote.Load() && !s.asked.Load() {
		err := s.err
		s.mu.Unlock()
		f(err)
		return
	}
	if giveUp.IsZero() {
		s.waiting = append(s.waiting, f)
		s.mu.Unlock()
		return
	}
	var once sync.Once
	call := func(err error) { once.Do(func() { f(err) }) }
	timer := time.AfterFunc(time.Until(giveUp), func() { call(errWriteUnended) })
	s.waiting = append(s.waiting, func(err error) {
		timer.Stop()
		call(err)
	})
	s.mu.Unlock()
}

// writeEnded waits until every attempt's write has ended (see
// whenWritten), or ctx has, and returns the last write's error, or ctx's
// cause.
func (s *sendTrace) writeEnded(ctx context.Context) error {
	ended := make(chan error, 1)
	s.whenWritten(time.Time{}, func(err error) { ended <- err })
	select {
	case err := <-ended:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// errUnanswered is ErrNotResent for a second attempt of a base whose
// first had no answer.
var errUnanswered = fmt.Errorf("%w: the first attempt had no answer (its connection failed or its stream was reset)", ErrNotResent)

// errUncleanUpload is ErrNotResent for a second attempt of a base whose
// first was answered (a challenge) but whose upload did not end cleanly.
var errUncleanUpload = fmt.Errorf("%w: the first attempt was answered, but its upload did not end cleanly", ErrNotResent)

// uncleanUpload is errUncleanUpload for an upload that ended with err.
func uncleanUpload(err error) error {
	return fmt.Errorf("%w (%w), and the upstream may still read it", errUncleanUpload, err)
}

// closedHere reports whether err, a write's error, comes from this side's
// close of the connection under it (net.ErrClosed). http.Transport
// reports the failed copy of an HTTP/1.1 body in a type of its own that
// does not unwrap (it cannot tell the body's read from the connection's
// write), so the message is matched too.
func closedHere(err error) bool {
	return err != nil && (errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), net.ErrClosed.Error()))
}

// errWriteUnended is a write given up before it ended; errWriteCut wraps
// the error of a write that failed once the request's context had ended.
var (
	errWriteUnended = errors.New("fleet: the request's body was still being written when it was given up")
	errWriteCut     = errors.New("fleet: the request's body was cut by its context")
)

// guardResends makes a base that would send out a second time, after its
// first attempt's headers were written, ask out.GetBody for the body
// again, and has GetBody refuse then (ErrNotResent) unless the attempt
// was answered and its upload has ended without an error (GetBody waits
// up to drainWait for that end): the first attempt may still run at the
// upstream, and out has one slot. An upstream that answered before it read the whole
// body (a 401 challenge, say) may read on what reached it after its
// answer, until it sees the upload's end; a cut upload's end it sees when
// it comes to it. http.Transport and Go's HTTP/2 client rewind a body
// through GetBody to resend it, as do bases that answer a challenge. A
// request with a body and no GetBody is not resent once its body was
// read; one without a body is resent as it is, and its resend is ended
// when it asks for its connection (see sendTrace). A resend of a request
// whose headers were never written goes through.
func guardResends(out *http.Request, way *sendTrace) {
	getBody := out.GetBody
	if out.Body == nil || out.Body == http.NoBody || getBody == nil {
		return
	}
	out.GetBody = func() (io.ReadCloser, error) {
		if way.wrote.Load() {
			if !way.answered.Load() {
				return nil, errUnanswered
			}
			// Waiting no longer than a closed body's drain: a base
			// that asks before it has read the answer to its end holds
			// up http.Transport's own give-up of the upload.
			wait, stop := context.WithTimeoutCause(out.Context(), drainWait, errWriteUnended)
			err := way.writeEnded(wait)
			late := wait.Err() != nil
			stop()
			if late || err != nil {
				// Cut, or stopped by the base itself (Go's HTTP/2
				// client stops an upload its answer came before, and
				// Go's HTTP/2 server lets a handler read on what it
				// had buffered after the stream's reset).
				return nil, uncleanUpload(err)
			}
		}
		return getBody()
	}
}

// handedByHTTP1Pool reports whether the GotConn being reported comes from
// net/http's HTTP/1 connection pool (http.Transport's getConn), which
// reports GotConn for an HTTP/1.x connection only, one request's alone;
// HTTP/2 clients (net/http's own, golang.org/x/net/http2's) report it from
// their own pools, for a connection other requests share. What the
// connection is (plain or TLS) or which base handed it (one that wraps
// http.Transport, or a RoundTripper registered on one with
// RegisterProtocol) does not tell: the caller does. It is found by name,
// up to http.Transport's roundTrip: were getConn renamed, it would report
// false, which closes nothing (TestHandedByHTTP1PoolOnlyForHTTP1 fails).
// Called only for an attempt already ended (see sendTrace.hooks).
func handedByHTTP1Pool() bool {
	var pcs [48]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		switch f.Function {
		case "net/http.(*Transport).getConn":
			return true
		case "net/http.(*Transport).roundTrip", "net/http.(*Transport).RoundTrip":
			return false
		}
		if !more {
			return false
		}
	}
}

// mayHaveSent reports whether the upstream may have the request req that
// the base failed with err, as way traced it. Written headers say it may.
// A base that asked for a connection reports its way out (http.Transport
// and the bases that pass the request's context on to one), so no written
// headers then say it was not sent, as does an *http.Transport that
// failed an http or https request before asking (an invalid request, say;
// a scheme added with RegisterProtocol goes to a RoundTripper of its own,
// which need not report), or one of a scheme it does not support. A
// base that reported nothing may send without saying so: only an error
// that no connection was ever made (a failed dial or name lookup) says it
// was not sent, as does another Transport's refusal to send (a base that
// is a Transport of another key's node), and the first other failure is
// logged once, since every one holds its slot for AbandonedHold.
func (t *transport) mayHaveSent(req *http.Request, way *sendTrace, err error) bool {
	switch {
	case way.wrote.Load():
		return true
	case way.asked.Load():
		return false
	}
	_, std := t.base.(*http.Transport)
	if std && (req.URL.Scheme == "http" || req.URL.Scheme == "https" || unsupportedScheme(err)) ||
		neverConnected(err) || notSent(err) {
		return false
	}
	t.silent.Do(func() {
		t.node.log.Warn("fleet: Transport's base RoundTripper failed a request without reporting a net/http/httptrace event, so it may have reached the upstream: its slot is held for AbandonedHold and its rate debit kept (said once)",
			"base", fmt.Sprintf("%T", t.base), "error", err)
	})
	return true
}

// unsupportedScheme reports whether err is http.Transport's refusal of a
// request whose URL's scheme it has no RoundTripper for, made before it
// sends anything.
func unsupportedScheme(err error) bool {
	return strings.HasPrefix(err.Error(), "unsupported protocol scheme")
}

// notSent reports whether err is a Transport's refusal to send a request
// (see unsentError): a base that is another node's Transport did not send
// it, unless it failed to send a request again whose first attempt may
// still run (ErrNotResent).
func notSent(err error) bool {
	var u *unsentError
	return errors.As(err, &u) && !errors.Is(err, ErrNotResent)
}

// neverConnected reports whether err says that no connection to the
// upstream was made: a dial or a name lookup failed.
func neverConnected(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// pastDeadline reports whether ctx's deadline has passed. http.Client's
// Timeout cancels the request's context as its deadline arrives, so the
// error a wrapped RoundTripper sees may say "canceled" rather than
// "deadline exceeded"; a passed deadline is what makes it a timeout.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// isTimeout reports whether err is a deadline, the upstream's overload
// signal, as opposed to a cancellation or a connection error.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
