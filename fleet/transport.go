package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// Transport returns an http.RoundTripper that admits every request through
// the node before handing it to base (http.DefaultTransport when nil).
//
// A request waits for a slot with its own context (see Node.Acquire); if it
// cannot be admitted, RoundTrip returns the admission error and sends
// nothing. Once admitted it is sent with its context bounded by
// Config.MaxRequestDuration from admission: at that bound the request is
// cancelled, body included, because the fleet reserves its slot no longer.
// The response is classified:
//
//   - 429 and 503 are drops (the node's estimate backs off) and release the
//     slot at once; a Retry-After or retry-after-ms header pauses the node's
//     admission until it passes.
//   - A transport timeout is a drop; any other transport error, and a 5xx
//     other than 503, releases the slot without a sample.
//   - Any other response is a success whose round-trip time (to the response
//     headers) is the latency sample. The slot stays held until the body is
//     read to EOF or closed, since a streamed response occupies the
//     upstream's concurrency for its whole length — or until the request's
//     context ends (the caller's cancellation, or the bound), which makes
//     net/http abandon the connection: a body never closed holds its slot
//     no longer than MaxRequestDuration. Close every body.
//
// The returned RoundTripper is safe for concurrent use.
func (n *Node) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{node: n, base: base}
}

type transport struct {
	node *Node
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	le, err := t.node.acquire(req.Context())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("fleet: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	ctx, cancel := context.WithDeadline(req.Context(), le.Admitted().Add(t.node.cfg.MaxRequestDuration))
	start := time.Now()
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		if isTimeout(err) || pastDeadline(ctx) {
			le.Drop()
		} else {
			le.Ignore()
		}
		cancel()
		return nil, err
	}
	rtt := time.Since(start)
	body := &leaseBody{ReadCloser: resp.Body, lease: le, rtt: rtt, cancel: cancel}
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d, ok := retryAfter(resp.Header, time.Now()); ok && d > 0 {
			t.node.lim.RetryAfter(d)
		}
		body.settle(true)
	case code >= 500:
		body.rtt = -1
	}
	// The request ends when its context does: settle the slot then, if
	// the body has not already.
	body.stop = context.AfterFunc(ctx, func() { body.settle(pastDeadline(ctx)) })
	resp.Body = body
	return resp, nil
}

// leaseBody holds a lease until the body is read to EOF or closed, or the
// request's context ends; closing it also releases the context.
type leaseBody struct {
	io.ReadCloser
	lease  adaptive.Lease
	rtt    time.Duration // the sample to release with; < 0 settles without one
	cancel context.CancelFunc
	stop   func() bool // stops the context's AfterFunc
	once   sync.Once
}

func (b *leaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.settle(false)
		b.release()
	case isTimeout(err):
		b.settle(true)
	default:
		b.settleIgnore()
	}
	return n, err
}

func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.settle(false)
	b.release()
	return err
}

// release ends the request's context once the body is done with.
func (b *leaseBody) release() {
	if b.stop != nil {
		b.stop()
	}
	b.cancel()
}

func (b *leaseBody) settle(drop bool) {
	b.once.Do(func() {
		switch {
		case drop:
			b.lease.Drop()
		case b.rtt < 0:
			b.lease.Ignore()
		default:
			b.lease.ReleaseRTT(b.rtt)
		}
	})
}

func (b *leaseBody) settleIgnore() {
	b.once.Do(b.lease.Ignore)
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
