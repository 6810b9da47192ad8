// Package bench holds fleetlimit's comparisons with the published
// strategies and with its peer libraries; cmd/report runs them all and
// writes docs/benchmarks.md.
//
// It is a separate module (github.com/fleetlimit/fleetlimit/bench, with a
// replace directive onto the repository root) so that the peer libraries
// and gonum/plot stay out of the library's go.mod. Being under the root
// module's path, it may import internal/sim.
//
// # Model comparison
//
// LimiterPolicy drives an adaptive.Limiter through its public API as a
// sim.Policy on a simulated clock: k is what TryAcquire grants at the
// start of a step, and the step's outcome comes back as Release (the
// latency is the round-trip time) or Drop. ModelStrategies lists the
// strategies of the comparison, RunStrategy runs one over many seeds and
// Summarize reduces the runs to percentiles. The limiter configurations,
// and the grid they were chosen from, are in configs.go and grid.go.
//
// The limiter moves its estimate once per round trip, and a model step is
// one round trip (all its leases are admitted and settled together), so
// the law parameters of the model configurations are per step.
//
// # Overhead comparison
//
// OverheadCases are acquire+release benchmarks of fleetlimit's limiter,
// go-concurrency-limits and failsafe-go; BenchmarkOverhead runs them under
// go test, and the report through testing.Benchmark.
//
// # Fleet comparison
//
// RunFleetWay runs one FleetWay for a FleetScenario: nodes with closed-loop
// workers sending to a sim.Provider in 429 mode on 127.0.0.1 whose
// capacity halves after a third of the run and doubles back after two
// thirds. The ways are static semaphores of C/N and of C, independent
// adaptive.Limiters, and fleet.Nodes on a throwaway Postgres
// (StartFleetPostgres, internal/pgtemp). Every node's HTTP client counts
// its requests below the way's admission, so the result holds the fleet's
// attempted in-flight over time, which the provider in 429 mode cannot
// report, along with outcomes, latencies and the limiters' estimates.
// Convergence and JainIndex reduce it. DropBurst and JitterCeiling
// reproduce, on a lone limiter with a simulated clock, the two limiter
// properties the report's fleet findings rest on.
package bench
