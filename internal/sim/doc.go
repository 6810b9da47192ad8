// Package sim simulates the upstream that fleetlimit protects: a
// latent-capacity model for offline experiments, and an HTTP Provider with
// a hidden concurrency capacity for the demo, the integration tests and the
// benchmarks.
//
// # The latent-capacity model
//
// Model reproduces the simulation of "Handling Concurrency" (2026). Time
// moves in one-second steps. Log-capacity x follows a discrete
// Ornstein–Uhlenbeck process whose mean drops while the backend is
// overloaded by the step's concurrency k:
//
//	μ_t = log 20 − 0.5·max(0, log k − x)
//	x'  = x + 0.05·(μ_t − x) + 0.2·ε,   ε ~ N(0, 1),   x_0 = log 20
//
// and the capacity is c = exp(x). A step first observes the latency of k
// against the current c — ℓ0 = 1s when k <= c, ℓ0·k/c above, plus N(0,
// 0.1²) noise — and counts all k requests as succeeded when that latency is
// at most 1.5s, else all as rate-limited; then it updates x with this k.
// The latency noise is drawn before ε on every step, whatever k is.
// Randomness comes from a seeded math/rand/v2 PCG source, so a (config,
// seed) pair always yields the same run.
//
// Run drives a Model with a Policy for a number of steps and reports the
// effective throughput (succeeded / steps, in req/s) and the rate-limited
// fraction (rate-limited / sent). The published strategies are Constant,
// AIMD and Oracle. Over seeds 0..299, 300 steps each, the medians are
//
//	strategy      median req/s   published   median rate-limited
//	Constant(20)  13.10          13.1        34.5%
//	AIMD          15.39          15.2        26.2%
//	Oracle        23.86          23.5         0.0%
//	LaggedOracle  22.38          (23.5)       3.1%
//
// (TestPublishedMedians; go test -run TestPublishedMedians -v
// ./internal/sim/ prints them). Two readings of the brief were settled by
// trying the variants against these medians:
//
//   - AIMD keeps an interval between requests (start 1s, clamped to
//     [25ms, 1s]); a step whose observed latency is at most the 1.25s
//     target shrinks it by α = 20ms, a step over it divides it by β = 0.75
//     (the rate becomes 0.75 times itself). k = 1/interval rounded to the
//     nearest integer. Floor gives 15.14 and ceiling 15.66 on the same
//     seeds; round matches best across eight disjoint blocks of 300 seeds
//     (floor averages about 14.9, round about 15.2). Reacting to rate
//     limiting (latency > 1.5s) instead of the 1.25s target gives about
//     13.1–13.5, far from the published figure.
//   - Oracle applies floor of the capacity the coming step faces (the one
//     the previous step left, StepResult.NextCapacity). LaggedOracle uses
//     the capacity the previous step was judged against, one update late;
//     it lands about 5% under the published 23.5.
//
// The published single run (9.13 req/s for constant 20, 14.9 for AIMD)
// came from another random generator and cannot be matched seed for seed;
// seed 0 here gives 8.20 and 13.24.
//
// # The simulated provider
//
// Provider is an http.Handler (StartProvider also serves it on
// 127.0.0.1) whose hidden capacity is Fixed, Stepped over time, or follows
// a Model (FollowModel): then the model takes one step per second of the
// provider's Clock, fed with the time-weighted mean in-flight count of that
// second. A request's latency is fixed on arrival from the in-flight count
// k (itself included) and capacity c: BaseLatency when k <= c, else
// BaseLatency·k/c, so a limiter sees the gradient. In 429 mode a request
// that would make k > c is rejected at once with an optional Retry-After.
// ?stream=N streams N flushed chunks after sending the headers, holding the
// concurrency for the whole stream as an LLM response does.
//
// The accounting — successes, 429s, abandoned requests, current and
// maximum concurrency, time over capacity, and the same per value of the
// X-Fleet-Node header — is exact on the provider's Clock: inject a
// ManualClock to hold requests in flight and integrate time deterministically.
//
// # Rate quotas
//
// ProviderConfig.RateLimit adds what an LLM provider's requests- and
// tokens-per-minute limits do. A request states its token cost with
// ?tokens=N (0 when absent; 400 naming the value when it is not an integer
// in [0, MaxRequestTokens]). It is admitted when the sliding window of
// RateLimit.Window (a minute by default) ending at its arrival, with it
// added, holds at most Quota.Requests requests and Quota.Tokens tokens;
// otherwise it gets 429 at once and takes nothing from the quota. The
// window is an exact log of accepted requests: one accepted at t counts
// until t+Window, not included. The quota follows a schedule like Stepped
// or is replaced by SetRateQuota; a lowered quota refuses requests until
// enough of what the window holds has left it. Optional headers: a
// Retry-After on 429 (whole seconds until the request would fit), OpenAI's
// x-ratelimit-* on every response, and HeaderUsageTokens, the tokens
// charged, on every accepted response, for a client to settle an
// estimate by. RateStats counts accepted and refused requests and tokens
// per window, with the most the sliding window held. The accounting,
// RateWindow, reads no clock: the handler passes its Clock's now.
package sim
