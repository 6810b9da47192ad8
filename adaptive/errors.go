package adaptive

import (
	"errors"
	"time"
)

// ErrQueueFull is returned by Limiter.Acquire and Limiter.AcquireRequest
// when the request does not fit now and the admission queue already holds
// Config.MaxQueued waiters that would all be admitted before it; and to a
// queued request evicted from a full queue by an arrival that would be
// admitted before it (see Config.MaxQueued). With MaxQueued 0 (the
// default) every Acquire that cannot take a slot at once returns it. A full
// queue means waiting would not help: shed the request.
var ErrQueueFull = errors.New("adaptive: admission queue full")

// ErrPaused is what the refusals of a pause match (errors.Is): Limiter's
// admissions return a *PauseError while admission is paused by
// Limiter.PauseUntil or Limiter.RetryAfter, both to new calls and to calls
// that were waiting in the queue when the pause began.
var ErrPaused = errors.New("adaptive: admission paused")

// PauseError is the error of an admission refused during a pause: it
// matches ErrPaused and says when the pause ends, so a server in front of
// the limiter can pass the wait on (a Retry-After of its own). A limiter
// makes one per pause (each PauseUntil or RetryAfter that extends it) and
// returns that one to every refusal, so refusing allocates nothing: the
// same pointer reaches many callers, and none may change it. The limiter
// never does; a pause extended after an error was returned leaves that
// error with the earlier end.
type PauseError struct {
	// Until is when the pause ends, on the limiter's Config.Clock.
	Until time.Time
}

// Error names the pause's end, in UTC to the millisecond.
func (e *PauseError) Error() string {
	return "adaptive: admission paused until " + e.Until.UTC().Format("2006-01-02 15:04:05.000 UTC") +
		" (Limiter.PauseUntil or RetryAfter)"
}

// Unwrap returns ErrPaused.
func (e *PauseError) Unwrap() error { return ErrPaused }

// ErrWouldWait is returned by Limiter.TryAcquireRequest when the request
// does not fit under the limit now, or others wait ahead of it.
var ErrWouldWait = errors.New("adaptive: no room for the request now")

// ErrWaitTimeout is wrapped, in an error naming Config.TimeoutFactor, by
// the error Limiter.AcquireRequest and Limiter.Acquire return when the
// request waited Config.TimeoutFactor × its weight in the queue without
// being admitted; it holds no slot. Match it with errors.Is.
var ErrWaitTimeout = errors.New("adaptive: waited TimeoutFactor × weight without a slot")

// ErrTooHeavy is returned, wrapped in an error naming the request's weight
// and Config.MaxLimit, by Limiter.AcquireRequest and
// Limiter.TryAcquireRequest at once for a request whose weight exceeds
// Config.MaxLimit: the hard bound never exceeds MaxLimit, so no ceiling or
// estimate could ever hold it. A weight above the limit but within
// MaxLimit is not refused: it runs alone, or waits (see the package
// documentation, Admission). The limiter keeps the last wrapping error it
// made and returns it again for the same weight, so refusing one weight
// over and over allocates nothing; a weight other than the last one
// refused costs one allocation. A fleet node also returns it for a weight
// above the key's global limit (package fleet).
var ErrTooHeavy = errors.New("adaptive: request heavier than the limit")

// ErrInvalidRequest is returned, wrapped in an error naming the field and
// its allowed range, by Limiter.AcquireRequest and
// Limiter.TryAcquireRequest for a Request whose Weight is below 1. The
// wrapping error is made once, so refusing allocates nothing.
var ErrInvalidRequest = errors.New("adaptive: invalid request")
