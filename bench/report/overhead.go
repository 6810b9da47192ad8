package report

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/bench"
)

// Targets of the overhead comparison.
const targetSpeedup = 2.0

// benchMeasure is the median of one case's runs.
type benchMeasure struct {
	name      string
	library   string
	setup     string
	parallel  bool
	nsPerOp   float64 // median over runs
	nsMin     float64
	nsMax     float64
	bytes     int64
	allocs    int64
	rejectsOp float64 // largest over runs
}

var initTesting sync.Once

// setBenchTime makes testing.Benchmark run each benchmark for d. The
// testing package reads its -test.benchtime flag, which exists only after
// testing.Init.
func setBenchTime(d time.Duration) error {
	initTesting.Do(testing.Init)
	return flag.Set("test.benchtime", d.String())
}

func summarizeBench(results []testing.BenchmarkResult) (median, lo, hi float64, bytes, allocs int64, rejects float64) {
	ns := make([]float64, len(results))
	for i, r := range results {
		ns[i] = float64(r.T.Nanoseconds()) / float64(r.N)
		bytes = max(bytes, r.AllocedBytesPerOp())
		allocs = max(allocs, r.AllocsPerOp())
		rejects = max(rejects, r.Extra["rejects/op"])
	}
	slices.Sort(ns)
	return bench.Summarize(ns).Median, ns[0], ns[len(ns)-1], bytes, allocs, rejects
}

func runOverhead(ctx context.Context, e *env) (string, error) {
	if err := setBenchTime(e.opts.BenchTime); err != nil {
		return "", err
	}
	start := time.Now()
	load := loadAverage()
	cases := bench.OverheadCases()
	runs := make([][]testing.BenchmarkResult, len(cases))
	var floor []testing.BenchmarkResult
	// Interleave the runs, so that a burst of load from other processes
	// spreads over every case instead of hitting one.
	for range e.opts.BenchRuns {
		for i, c := range cases {
			e.logf("overhead: %s", c.Name())
			r, err := measureBenchOnce(ctx, c.Bench)
			if err != nil {
				return "", err
			}
			runs[i] = append(runs[i], r)
		}
		r, err := measureBenchOnce(ctx, bench.ClockFloor)
		if err != nil {
			return "", err
		}
		floor = append(floor, r)
	}
	var ms []benchMeasure
	for i, c := range cases {
		m := benchMeasure{name: c.Name(), library: c.Library, setup: c.Setup, parallel: c.Parallel}
		m.nsPerOp, m.nsMin, m.nsMax, m.bytes, m.allocs, m.rejectsOp = summarizeBench(runs[i])
		ms = append(ms, m)
		e.logf("overhead: %-32s %7.1f ns/op %4d B/op %2d allocs/op", m.name, m.nsPerOp, m.bytes, m.allocs)
	}
	floorNs, _, _, _, _, _ := summarizeBench(floor)
	return renderOverhead(e, ms, floorNs, load, time.Since(start)), nil
}

func measureBenchOnce(ctx context.Context, f func(*testing.B)) (testing.BenchmarkResult, error) {
	if err := ctx.Err(); err != nil {
		return testing.BenchmarkResult{}, err
	}
	return testing.Benchmark(f), nil
}

func renderOverhead(e *env, ms []benchMeasure, floorNs float64, load string, took time.Duration) string {
	var b strings.Builder
	b.WriteString("## 2. Overhead per request\n\n")
	fmt.Fprintf(&b, "Measured %s on %s", e.date, e.machine)
	if load != "" {
		fmt.Fprintf(&b, ", 1-minute load average %s at the start (the machine is shared, so expect noise)", load)
	}
	fmt.Fprintf(&b, "; this section took %v.\n\n", took.Round(time.Second))
	b.WriteString(codeBlock(e.command))
	fmt.Fprintf(&b, `
or, as ordinary Go benchmarks,

`+"```sh\ncd bench && go test -run '^$' -bench 'Overhead|ClockFloor' -benchmem\n```"+`

One operation admits a request and settles it as a success at once: the
cost a limiter adds to every request. Every limiter has the same limits
(initial and maximum %d, minimum 100), far above the at most GOMAXPROCS
requests in flight, so nothing is rejected (the rejects column counts
refusals per operation). Each limiter reads the real clock. **serial**
runs one goroutine; **parallel** runs b.RunParallel with GOMAXPROCS
goroutines on one limiter, and its ns/op is wall time per operation over
all of them. Each case ran %d time(s) for %v, interleaved with the others;
ns/op is the median, with the range over runs.

`, 1000, e.opts.BenchRuns, e.opts.BenchTime)

	fleet := map[bool]float64{}
	for _, m := range ms {
		if m.library == bench.LibFleetlimit {
			fleet[m.parallel] = m.nsPerOp
		}
	}
	t := &table{
		header: []string{"limiter", "mode", "ns/op", "range", "B/op", "allocs/op", "rejects/op", "÷ fleetlimit"},
		align:  []byte("llrrrrrr"),
	}
	for _, m := range ms {
		mode := "serial"
		if m.parallel {
			mode = "parallel"
		}
		ratio := "—"
		if m.library != bench.LibFleetlimit {
			ratio = fmt.Sprintf("%.2f×", m.nsPerOp/fleet[m.parallel])
		}
		t.add(displayName(m), mode, fmt.Sprintf("%.0f", m.nsPerOp), fmt.Sprintf("%.0f–%.0f", m.nsMin, m.nsMax),
			fmt.Sprint(m.bytes), fmt.Sprint(m.allocs), fmt.Sprintf("%g", m.rejectsOp), ratio)
	}
	t.add("clock floor: two time.Now()", "serial", fmt.Sprintf("%.0f", floorNs), "", "0", "0", "", "")
	b.WriteString(t.String())

	b.WriteString("\nWhat each row measures:\n\n")
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[displayName(m)] {
			continue
		}
		seen[displayName(m)] = true
		fmt.Fprintf(&b, "- **%s** (%s): %s.\n", displayName(m), m.library, m.setup)
	}
	b.WriteString("- **clock floor**: two `time.Now()` calls and their difference, which every limiter above makes per request (at admission and at release, for the round-trip time).\n")

	fmt.Fprintf(&b, "\n**Target**: fleetlimit ≥ %.0f× faster than both peers (the default rows of go-concurrency-limits and failsafe-go) with 0 allocs/op.\n\n", targetSpeedup)
	for _, parallel := range []bool{false, true} {
		mode := "serial"
		if parallel {
			mode = "parallel"
		}
		worst := 0.0
		var fl benchMeasure
		for _, m := range ms {
			if m.parallel != parallel {
				continue
			}
			switch {
			case m.library == bench.LibFleetlimit:
				fl = m
			case displayName(m) == "go-concurrency-limits" || displayName(m) == "failsafe-go":
				if worst == 0 || m.nsPerOp < worst {
					worst = m.nsPerOp
				}
			}
		}
		speedup := worst / fl.nsPerOp
		verdict := "met"
		if speedup < targetSpeedup || fl.allocs != 0 {
			verdict = "**not met**"
		}
		above := func(ns float64) float64 { return ns - floorNs }
		fmt.Fprintf(&b, "- %s: fleetlimit %.0f ns/op, %d allocs/op; the faster peer takes %.2f× as long — %s.", mode, fl.nsPerOp, fl.allocs, speedup, verdict)
		if !parallel && above(fl.nsPerOp) > 0 {
			fmt.Fprintf(&b, " Above the %.0f ns clock floor: fleetlimit %.0f ns, the faster peer %.0f ns (%.1f×).", floorNs, above(fl.nsPerOp), above(worst), above(worst)/above(fl.nsPerOp))
		}
		b.WriteString("\n")
	}
	b.WriteString(`
The clock floor is large on this machine (a virtual machine, where a
time.Now call costs tens of nanoseconds), and all three limiters pay it
twice per request; the rest is each limiter's own work. go-concurrency-limits
with its default settings skips its sample window for any request faster
than 100 µs — every request in this benchmark — so its default row measures
admission and release without the limit update the other two perform; the
every-sample row shows its cost when samples count.
`)
	return b.String()
}

// displayName is a case's short name in the table.
func displayName(m benchMeasure) string {
	switch {
	case m.library == bench.LibFleetlimit:
		return "fleetlimit"
	case m.library == bench.LibFailsafe:
		return "failsafe-go"
	case strings.HasPrefix(m.name, "gcl-every-sample"):
		return "go-concurrency-limits, every sample"
	default:
		return "go-concurrency-limits"
	}
}
