package fleet

import "errors"

// ErrFenced is returned by Node.Acquire, Node.AcquireRequest,
// Node.TryAcquireRequest and Transport while the node is
// fenced under FailClosed: its lease is about to run out because heartbeats
// are failing. The error's message says why; State().LastError has the
// heartbeat's error.
var ErrFenced = errors.New("fleet: node fenced")

// ErrEvicted is returned by Node.Acquire, Node.AcquireRequest,
// Node.TryAcquireRequest and Transport once an operator has evicted the
// node. An evicted node stays fenced; restart the process (with
// a fresh instance) to rejoin.
var ErrEvicted = errors.New("fleet: node evicted")

// ErrStopped is returned by Node.Acquire, Node.AcquireRequest,
// Node.TryAcquireRequest and Transport once Stop was called, and by
// Node.Start after Stop.
var ErrStopped = errors.New("fleet: node stopped")

// ErrStarted is returned by Node.Start on a node that is running, or
// whose first heartbeat another Start is sending.
var ErrStarted = errors.New("fleet: node already started")

// ErrNotStarted is returned by Node.Acquire, Node.AcquireRequest,
// Node.TryAcquireRequest and Transport before Start.
var ErrNotStarted = errors.New("fleet: node not started")

// ErrLate is returned by Transport for a request whose admission wait
// left less of its context's deadline than the upstream's no-load round
// trip (the limiter's RTTNoload), when it arrived with two or more, and
// for one whose deadline had passed when it was admitted: it could not be
// answered in time, so it is not sent, its slot is freed at once and its
// rate debit given back. Acquire, AcquireRequest and Transport also
// return it for a request that waited for the key's rate share until its
// bound (Config.MaxRequestDuration after it took its slot): it is not
// sent either. The error also wraps context.DeadlineExceeded.
var ErrLate = errors.New("fleet: too late to send")

// ErrNotResent is wrapped by Transport's error for a request whose base
// RoundTripper would have sent it a second time after the first
// attempt's headers were written — http.Transport resends a replayable
// request found unanswered on a reused connection, and Go's HTTP/2 client
// one whose stream was refused or reset — when Transport's own second
// attempt, on a slot of its own, would be resent too or the caller's
// context had ended. The first attempt may still run at the upstream, so
// each attempt's slot stays held as an abandoned request's
// (Config.AbandonedHold); a retry takes a slot of its own.
var ErrNotResent = errors.New("fleet: the connection failed after the request was sent, and it may still run upstream: not sent again on its slot")
