package bench

import "testing"

// BenchmarkOverhead measures acquire+release for fleetlimit and its peers;
// run it with
//
//	go test -run '^$' -bench Overhead -benchmem
//
// The report command (cmd/report) runs the same cases through
// testing.Benchmark.
func BenchmarkOverhead(b *testing.B) {
	for _, c := range OverheadCases() {
		b.Run(c.Name(), c.Bench)
	}
}

// BenchmarkClockFloor measures the two clock readings every limiter makes
// per request.
func BenchmarkClockFloor(b *testing.B) { ClockFloor(b) }
