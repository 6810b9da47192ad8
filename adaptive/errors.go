package adaptive

import "errors"

// ErrQueueFull is returned by Limiter.Acquire when no slot is free and the
// admission queue already holds Config.MaxQueued waiters. With MaxQueued 0
// (the default) every Acquire that cannot take a slot at once returns it.
// A full queue means waiting would not help: shed the request.
var ErrQueueFull = errors.New("adaptive: admission queue full")

// ErrPaused is returned by Limiter.Acquire while admission is paused by
// Limiter.PauseUntil or Limiter.RetryAfter, both to new calls and to calls
// that were waiting in the queue when the pause began.
var ErrPaused = errors.New("adaptive: admission paused")
