package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/fleetlimit/fleetlimit/adaptive"
	gclcore "github.com/platinummonkey/go-concurrency-limits/core"
	gcllimit "github.com/platinummonkey/go-concurrency-limits/limit"
	gcllimiter "github.com/platinummonkey/go-concurrency-limits/limiter"
	gclstrategy "github.com/platinummonkey/go-concurrency-limits/strategy"
)

// The overhead benchmarks admit a request and settle it as a success at
// once, over and over: the cost a limiter adds to every request. All
// limiters get the same limits, far above the at most GOMAXPROCS requests
// the benchmark has in flight, so nothing is rejected (the rejects/op
// metric counts refusals and should read 0). Each limiter reads the real
// clock, as it would in production.
const (
	overheadMinLimit = 100
	overheadLimit    = 1000
)

// OverheadCase is one limiter's acquire+release benchmark.
type OverheadCase struct {
	// Library is the Go module the limiter comes from.
	Library string
	// Setup says which limiter and settings are measured.
	Setup string
	// Parallel is true when the body runs under b.RunParallel (GOMAXPROCS
	// goroutines sharing one limiter), false for a single goroutine.
	Parallel bool
	// NewOp builds the limiter and returns one operation: admit a request
	// and settle it as a success, reporting false if admission was refused.
	// It fails tb if the limiter cannot be built.
	NewOp func(tb testing.TB) func() bool
}

// Bench is the case's benchmark: it runs the operation b.N times and
// reports allocations and rejects/op.
func (c OverheadCase) Bench(b *testing.B) {
	runOverhead(b, c.Parallel, c.NewOp(b))
}

// Name is the case's sub-benchmark name, such as "fleetlimit/serial".
func (c OverheadCase) Name() string {
	mode := "serial"
	if c.Parallel {
		mode = "parallel"
	}
	return c.key() + "/" + mode
}

func (c OverheadCase) key() string {
	switch c.Library {
	case LibFleetlimit:
		return "fleetlimit"
	case LibGCL:
		if c.Setup == gclEverySampleSetup {
			return "gcl-every-sample"
		}
		return "gcl"
	default:
		return "failsafe"
	}
}

// Library names of the overhead cases.
const (
	LibFleetlimit = "fleetlimit"
	LibGCL        = "platinummonkey/go-concurrency-limits v0.10.0"
	LibFailsafe   = "failsafe-go/failsafe-go v0.9.8"
)

var (
	fleetlimitSetup     = fmt.Sprintf("adaptive.New, gradient2, limit %d (min %d): TryAcquire, Release", overheadLimit, overheadMinLimit)
	gclDefaultSetup     = fmt.Sprintf("DefaultLimiter + Gradient2Limit + SimpleStrategy, limit %d (min %d), default 100µs min-RTT threshold: Acquire, OnSuccess", overheadLimit, overheadMinLimit)
	gclEverySampleSetup = "as above with min-RTT threshold 0, so every sample enters the window as in the other two: Acquire, OnSuccess"
	failsafeSetup       = fmt.Sprintf("adaptivelimiter.NewBuilder[any]().WithLimits(%d, %d, %d).Build(): TryAcquirePermit, Record", overheadMinLimit, overheadLimit, overheadLimit)
)

// OverheadCases returns every overhead benchmark: fleetlimit's adaptive
// limiter, go-concurrency-limits' Gradient2 behind its DefaultLimiter (with
// its default minimum-RTT threshold, under which samples are discarded,
// and with the threshold off) and failsafe-go's adaptivelimiter, each on a
// single goroutine and under b.RunParallel.
func OverheadCases() []OverheadCase {
	var out []OverheadCase
	for _, parallel := range []bool{false, true} {
		out = append(out,
			OverheadCase{Library: LibFleetlimit, Setup: fleetlimitSetup, Parallel: parallel, NewOp: newFleetlimitOp},
			OverheadCase{Library: LibGCL, Setup: gclDefaultSetup, Parallel: parallel, NewOp: newGCLOp(100_000)},
			OverheadCase{Library: LibGCL, Setup: gclEverySampleSetup, Parallel: parallel, NewOp: newGCLOp(0)},
			OverheadCase{Library: LibFailsafe, Setup: failsafeSetup, Parallel: parallel, NewOp: newFailsafeOp},
		)
	}
	return out
}

func newFleetlimitOp(tb testing.TB) func() bool {
	l, err := adaptive.New(adaptive.Config{
		MinLimit:     overheadMinLimit,
		InitialLimit: overheadLimit,
		MaxLimit:     overheadLimit,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return func() bool {
		le, ok := l.TryAcquire()
		if !ok {
			return false
		}
		le.Release()
		return true
	}
}

// newGCLOp returns a constructor for go-concurrency-limits' operation;
// minRTTThreshold is in nanoseconds (its API's unit), and samples faster
// than it are discarded.
func newGCLOp(minRTTThreshold int64) func(testing.TB) func() bool {
	return func(tb testing.TB) func() bool {
		lim, err := gcllimit.NewGradient2Limit("bench",
			overheadLimit, overheadLimit, overheadMinLimit,
			nil, 0.2, 600,
			gcllimit.NoopLimitLogger{}, gclcore.EmptyMetricRegistryInstance)
		if err != nil {
			tb.Fatal(err)
		}
		l, err := gcllimiter.NewDefaultLimiter(lim,
			1e9, 1e9, minRTTThreshold, 100,
			gclstrategy.NewSimpleStrategy(overheadLimit),
			gcllimit.NoopLimitLogger{}, gclcore.EmptyMetricRegistryInstance)
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return func() bool {
			listener, ok := l.Acquire(ctx)
			if !ok {
				return false
			}
			listener.OnSuccess()
			return true
		}
	}
}

func newFailsafeOp(testing.TB) func() bool {
	l := adaptivelimiter.NewBuilder[any]().
		WithLimits(overheadMinLimit, overheadLimit, overheadLimit).
		Build()
	return func() bool {
		permit, ok := l.TryAcquirePermit()
		if !ok {
			return false
		}
		permit.Record()
		return true
	}
}

// runOverhead runs op b.N times, on one goroutine or under RunParallel,
// and reports allocations and the fraction of refused admissions.
func runOverhead(b *testing.B, parallel bool, op func() bool) {
	b.ReportAllocs()
	var rejects atomic.Int64
	if parallel {
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				if !op() {
					n++
				}
			}
			rejects.Add(n)
		})
	} else {
		var n int64
		for b.Loop() {
			if !op() {
				n++
			}
		}
		rejects.Add(n)
	}
	b.ReportMetric(float64(rejects.Load())/float64(b.N), "rejects/op")
}

// ClockFloor measures two time.Now calls and their difference: what every
// limiter above spends at least per request (one reading at admission and
// one at release, for the round-trip time). It is the floor under all of
// them, not a limiter. b.Loop keeps the calls from being optimized away.
func ClockFloor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		end := time.Now()
		_ = end.Sub(start)
	}
}
