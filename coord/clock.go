package coord

import "time"

// Clock tells a coordinator the time. Implementations must be safe for
// concurrent use.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// instant reads c at the coordinator's precision: whole microseconds, like a
// Postgres timestamptz, without a monotonic reading.
func instant(c Clock) time.Time {
	return c.Now().Round(0).Truncate(time.Microsecond)
}
