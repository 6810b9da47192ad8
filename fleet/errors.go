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
// rate debit given back. Lease.CheckSend returns it alike, counting from
// the call of Acquire: settle the lease with Unsent. Acquire, AcquireRequest and Transport also
// return it for a request that waited for the key's rate share until its
// bound (Config.MaxRequestDuration after it took its slot): it is not
// sent either. The error also wraps context.DeadlineExceeded.
var ErrLate = errors.New("fleet: too late to send")

// ErrNotResent is wrapped by Transport's error for a request its base
// RoundTripper would have sent a second time after the first attempt's
// headers were written — http.Transport resends a replayable request
// found unanswered on a reused connection, and Go's HTTP/2 client one
// whose stream was refused or reset — and that Transport could not send
// again on a slot of its own: the caller's context had ended, rewinding
// the body (GetBody) failed, that second attempt was not admitted (the
// error wraps its cause too: a deadline, ErrFenced…), or its base would
// have resent it as well. It is also wrapped, without that resend, for a
// base that would have sent the request again after the first attempt's
// answer (a digest or NTLM challenge) while that attempt's upload had not
// ended cleanly: an upstream that answered before it read the whole body
// may read on, and sending the request again would meet the same answer.
// The first attempt may still run at the upstream, so its slot stays held
// as an abandoned request's (Config.AbandonedHold); a retry takes a slot
// of its own.
var ErrNotResent = errors.New("fleet: the request was sent, and its base would have sent it again while the first attempt may still run upstream")

// ErrDraining, ErrLearning, ErrNoShare and ErrShareRising say why a node
// refused a request it could neither admit nor queue: the errors of
// Node.Acquire, Node.AcquireRequest, Node.TryAcquireRequest and Transport
// wrap one of them beside the limiter's own refusal
// (adaptive.ErrQueueFull, adaptive.ErrWouldWait, or for ErrLearning also
// adaptive.ErrWaitTimeout), so errors.Is finds both, and the message says
// the rest.
var (
	// ErrDraining: an operator drained the node (fleetctl drain); its
	// share is 0 until fleetctl undrain.
	ErrDraining = errors.New("fleet: node draining")
	// ErrLearning: the key is in learning mode, after the database may
	// have lost state; the node is granted no more than it holds until
	// every request of before must have ended.
	ErrLearning = errors.New("fleet: key in learning mode")
	// ErrNoShare: the node holds no share now (it gave it up after a
	// heartbeat interval without requests, or L_global is held by other
	// nodes); its demand asks for one at its next heartbeat.
	ErrNoShare = errors.New("fleet: node holds no share")
	// ErrShareRising: the node's share rose and it is taking it up over
	// a round trip (just after Start, for one); the request would have
	// needed a slot of the rest.
	ErrShareRising = errors.New("fleet: node taking up its share")
)
