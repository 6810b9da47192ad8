// Package adaptive is a single-process adaptive concurrency limiter: it
// infers how many requests an upstream can take at once from the latency
// and the failures of the requests it admits, and admits no more than that.
//
// # Leases
//
// TryAcquire and Acquire admit a request and return a Lease, a small value
// that is settled exactly once when the request ends (TryAcquireRequest and
// AcquireRequest admit one with a priority and a weight; see Admission):
//
//   - Release: the request succeeded; its round-trip time is a sample (a
//     round trip of 0, on a clock that did not move, is a success with no
//     latency: no sample for Gradient2 or rttNoload).
//   - Drop: the upstream signalled overload (429, 503, a timeout).
//   - Ignore: the outcome says nothing about capacity; the slot is freed.
//
// Settling a lease twice, or settling a copy, is a no-op. Neither admitting
// nor refusing allocates (a call that waits allocates nothing once the
// limiter's pool of waiters is warm), but for an ErrTooHeavy refusal of a
// weight other than the last one refused, which costs one. The limiter starts no goroutine: every
// adjustment happens while a lease settles, and time comes from
// Config.Clock, so tests drive it with a fake clock (advanced between an
// admission and its Release, for a latency sample).
//
// # Gradient2
//
// The law the default (Config.Law Auto) starts with, after Netflix's
// Gradient2Limit and Envoy's adaptive concurrency filter, compares a
// round trip's latency with rttNoload, the minimum of the last
// Config.RTTWindow round trips' fastest samples, and moves the estimate
// once per round trip.
//
// With a fixed Config.Tolerance it is Netflix's law on one sample rtt per
// round trip:
//
//	gradient  = clamp(tolerance · rttNoload / rtt, 0.5, 1.0)
//	newLimit  = estimate · gradient + queueSize(estimate)
//	estimate  = estimate·(1−smoothing) + newLimit·smoothing,
//	            clamped to [MinLimit, MaxLimit]
//
// By default (Tolerance zero) the tolerance is measured, and the law reads
// the round's fastest sample, which one slow request does not move, against a
// baseline: rttNoload, or the least fastest sample kept since the last new
// baseline when that is lower (below). The noise band is 1 plus four running
// medians of |f₀ − 2f₁ + f₂| ÷ the baseline over the rounds' fastest samples
// f, and at least 1.1: a load that climbs or falls steadily cancels out of
// the second difference, so the band is what the fastest sample wanders by
// chance — timing jitter, and the spread of the fastest of unequal requests.
// A round within the band counts as gradient 1 (newLimit = estimate +
// queueSize(estimate)). Two rounds in a row beyond it say the upstream queued
// (one may be noise, and moves nothing), and the second and each after it
// move to newLimit = estimate · max((baseline/fastest)², 0.5), without
// headroom: where latency grows in proportion to the load above a capacity,
// baseline/fastest is the capacity over the load, so the estimate heads as
// far under the capacity as the load was over it and climbs back through it
// from below.
//
// A round of a load under the utilization threshold (below) is held to a band
// of at least 2, since the fastest of a few requests is slower than the
// fastest of many, queue or not. The baseline the band compares with is the
// least fastest sample since the last new baseline, or the window's minimum
// if lower: a law that turns at the band keeps its sawtooth above the
// capacity, and a window that forgot every unqueued round would let the
// baseline, and the load, creep up window after window. A slower baseline is
// learned on evidence instead: when the rounds have stayed beyond the band
// while the load halved and the fastest sample did not fall with it, the
// latency is not this limiter's queue — a slower deploy, a failover — and the
// baseline and the window restart from the current round.
//
// On a provider that slows down above its capacity the defaults so hold the
// load near it, where a fixed tolerance of 2 lets it reach twice the
// capacity; and a spread of request sizes that leaves the window's minimum
// far below a typical sample reads mostly as noise: a fixed tolerance cuts
// the estimate to its floor there, the defaults hold most of it
// (docs/benchmarks.md, sections 3 and 5). The price is on upstreams that stay
// fast enough while they slow down: the latent-capacity model of section 1
// rewards riding latency up to its rate-limit threshold, and the defaults,
// which turn at the band, serve less there than a fixed tolerance of 2. And a
// fastest sample that wanders by several per cent from round to round,
// whatever the load, is partly read as queueing and holds the estimate below
// its maximum: set a Tolerance there, or use FlatLatency.
//
// The minimum is windowed (a monotonic deque over a ring buffer), so with
// a fixed Tolerance the baseline can rise after a deploy instead of
// staying pinned at an all-time low; it also rises when every round in
// the window queued. The measured band keeps its baseline until the
// new-baseline rule above, or a recalibration, replaces it.
// FlatLatency does not read latency. Optionally (Config.Recalibration)
// the limiter refreshes the minimum Envoy-style: every interval, with
// jitter, it pins the limit to MinLimit, waits for the leases admitted
// before the pin to settle, empties the window, takes fresh samples at
// that low concurrency and resumes.
//
// The AIMD law (Config.Law) is the simpler alternative: add
// Config.AIMDIncrease on every clean sample, back off by
// Config.AIMDBackoff on a sample slower than Config.LatencyTarget.
//
// Gradient2 reads Config.LatencyTarget too: a round trip slower than it,
// over a baseline under it, at a load that reached the utilization
// threshold, moves the estimate down by Config.AIMDBackoff instead of by
// the gradient. Left 0, Gradient2's
// target is 4/5 of Config.MaxHealthyRTT when that is set, so a limiter
// told when a request fails comes down while its requests still succeed;
// while that target is within twice rttNoload, a Config.Smoothing left 0
// is 0.4 instead of 0.2, since the target catches the overshoots of a
// faster climb. FlatLatency's law derives no target (one the Config sets
// carries over to it under Auto).
//
// # The utilization guard
//
// A clean sample shows that the upstream handled the load it was under,
// nothing more. So the estimate may rise only when that load reached
// Config.UtilizationThreshold (default half) of the estimate. The load of a
// sample is the larger of its value when the lease was admitted and when
// it settled, where load = own in-flight (this lease included) + peers'
// in-flight as last given to SetPeerInflight. A lone process leaves peers
// at 0. A fleet node, whose estimate is the capacity of the whole backend
// while it holds only a share of it, reports the fleet's in-flight from
// each heartbeat reply; judged by its own in-flight alone it would never
// grow. A fleet node (SetFleetLimit) holds the threshold to at least 0.9
// from a drop until 5 ProbeTicks pass without one, so that near a
// capacity the fleet keeps hitting its estimate stays close to the load
// served. Decreases are never blocked: rising latency while this process is
// idle is exactly how it learns that others are loading the backend.
//
// # Drops and pauses
//
// A drop multiplies the estimate by Config.BackoffRatio under every law,
// at most once per round trip: a drop of a request admitted before the
// last decrease does not decrease again. Under Gradient2, whose signal is
// latency, a drop after a round trip whose fastest clean sample queued
// (was slower than rttNoload) multiplies it by rttNoload over that sample
// instead when that is smaller, down to 0.5 — where the round trip said
// the queue would empty — once per such round trip; a stray slow request
// leaves the round trips' fastest samples alone. Round trips of requests
// sent within the queued round trip after such a backoff (the queue it
// answered still draining), recalibration probes, and round trips before
// SetEstimate do not count; with a fleet limit, one drop still takes at
// most 1 − BackoffRatio/2 of the estimate. Under a ceiling that binds the
// limit, the drop of a request admitted since the last decrease that
// comes while Config.PaceGrowth holds the in-flight below it, all the
// paced room in use (a climb to a share that rose, or to slots given
// back), ends the climb once: the limit comes down to what was in flight
// when the drop is reported, the refused request included, since each
// slot more would be refused too. Every drop also takes one slot off the
// ceiling at once (never its last), two for a request admitted after the
// last decrease and refused less than rttNoload after it (sent after the
// cut into the same overload; k requests sent together and refused
// together, the first of them decreasing, cut k): a fleet node whose
// share has become too large for the upstream stops refilling its excess
// slots with requests that will be refused too, without waiting for its
// next share. 5 round trips without a drop give one slot back, and each
// give-back that holds (5 round trips without a drop, more if requests
// sent while slots were coming back were refused late, until the cut has
// all come back) is followed by one twice as large (up to 32; one again
// after a drop or a lower ceiling), but never past the cut a refused
// give-back last left, which is tried one slot at a time; the wait after
// a drop doubles each time a give-back is refused before it held and is 5
// again once a give-back to the cut last refused holds. A higher
// ceiling after a drop raises the limit no further than one slot under
// the in-flight the drop was refused at; give-backs take it past that
// level one slot at a time, until one there holds (or 5 calm
// ProbeTicks pass). With SetFleetLimit, the backoff also takes the
// estimate down to the fleet's limit less the slots cut, but no lower
// than a backoff from the fleet's in-flight at the refused request's
// admission, and a give-back
// waits for the node's next grant (ProbeTick), so that nodes whose round
// trips the upstream ends together do not give back together, and takes
// its room no further than its share's part of one slot under the
// fleet's in-flight when the last refused request was admitted (so the
// parts of nodes refused at the same load add up to no more, whatever
// their peers' last reports say), past which it returns one slot at every
// ⌈fleet limit ÷ share⌉-th give-back until 5 calm ProbeTicks pass. With Config.MaxHealthyRTT set, a released
// sample slower than it counts as a drop. RetryAfter and PauseUntil
// refuse all admission until the given time.
//
// # Flat-latency upstreams
//
// An upstream that answers 429 above a capacity it does not announce, and
// is as fast at its capacity as when idle, gives the round-trip time no
// signal: Gradient2 can only read its noise, and a round that strays
// beyond the band cuts the estimate with no queue behind it. FlatLatency returns the configuration for such an
// upstream: AIMD on drops alone, with a slow start, and a step that
// scales with the estimate and doubles every 2 round trips without a
// drop; Config.PaceGrowth takes every rise of the limit up as leases
// settle, so that the first refusal comes before most of an excess is
// sent — all but a fleet node's slow start, which its share bounds. A
// fleet node also calls ProbeTick once a heartbeat (during the slow start
// just before its report, see SlowStarting; after it at the grant), a
// clock for the slow start and for probes above the last backoff's level
// that does not wait for round trips as long as a slow request.
//
// The default law, Auto, moves from Gradient2 to FlatLatency's law by
// itself once the upstream shows it is such an upstream: three drops in a
// row, with requests served between them and within 64 round trips, that
// each back the estimate off, come back in less than half of rttNoload (a
// refusal answered at once) and follow a round trip whose fastest clean
// sample was within 1.25 × rttNoload (no queueing before them). An
// upstream whose latency grows with its load before it refuses, that
// refuses by timing out, or a brief outage, keeps Gradient2; so does a
// flat upstream whose latencies spread widely, which rarely shows such
// evidence — choose FlatLatency for it. Until the move, a drop with that
// mark backs off by FlatLatency's BackoffRatio already. Snapshot.Law
// tells which law runs; Config.Law Gradient2, or FlatLatency() (whose Law
// is AIMD), chooses one for good.
//
// # Admission
//
// Two bounds govern admission. The hard bound H is the ceiling when one
// is set (SetCeiling: a fleet node's share, 0 when it is fenced or its
// grant has expired) and MaxLimit otherwise, and never above MaxLimit. The
// inferred limit S, Limit(), is min(ceiling − cut, floor(estimate)) —
// MinLimit instead of floor(estimate) while recalibrating — where cut
// counts the slots drops took (above); S ≤ H. Lowering either never
// revokes admitted leases.
//
// A request has a weight, the units of the limit it holds while in
// flight, and a priority from 0 (lowest) to 255 (highest): see Request.
// TryAcquire and Acquire are weight 1 at DefaultPriority (128). Inflight,
// the load the utilization guard judges, and TakePeak's demand are all in
// weight units. No admission takes the weight in flight above H. Normally
// it stays within S too, with one exception: a request heavier than S but
// not than H is admitted alone, when nothing is in flight and admission
// is not paused. Without it, inference could lock heavy requests out for
// good — backoffs taking the estimate below their weight, a drop's cut
// taking the limit below it, a recalibration pinning the limit to
// MinLimit — since no admission means no sample and no growth; admitted
// alone, they take samples and the estimate can grow again. Only a weight
// above MaxLimit, which could never run, fails with ErrTooHeavy. The
// weights are validated (≥ 1, ≤ MaxLimit) before any sum is taken, and
// the room left is compared as weight ≤ S − in-flight, so no sum
// overflows.
//
// TryAcquireRequest never waits. AcquireRequest waits in the admission
// queue while fewer than Config.MaxQueued callers wait. The queue is
// weighted fair queueing by virtual finish time, as in Aperture's
// scheduler: each priority p is a FIFO flow, a request costs
// weight·(256 − p), and the head of a flow finishes at the flow's virtual
// time plus its cost, where the flow's virtual time is the finish time of
// its last admission (a flow with no waiters resumes at the queue's
// virtual time, the latest finish admitted, so idleness earns no credit).
// Freed room goes to the head with the earliest finish time, the earliest
// arrival on a tie. While both wait, priority p is therefore admitted
// (256 − q)/(256 − p) times as often as q at equal weight: 255 twice as
// often as 254, 200 156/56 ≈ 2.79 times as often as 100. No priority
// starves while the queue holds it: priority 0 is admitted once per 256
// admissions of 255. A waiter leaving unadmitted charges its flow nothing.
//
// The head blocks: while it does not fit, nobody behind it is admitted,
// however light, so a heavy request is not starved by a stream of light
// ones; it runs once the room frees up, or alone once nothing is in
// flight. A waiter heavier than H, which could not run even alone (a
// fleet node's share smaller than its weight), is the exception: the
// queue passes over it, admitting the next waiter in finish order (a
// flow's first waiter not that heavy finishes at the flow's virtual time
// plus its own cost), and it stays queued — its weight counted in the
// queued weight and TakePeak's demand, so a fleet node's share can grow to
// it — until H holds it, its context ends or its wait bound passes. A new
// request goes ahead of the waiters only if it would finish before every
// waiter that can run and fits at once.
//
// Config.MaxQueued is the fast-rejecting gate of two-phase admission
// (running + queued): a burst of Limit() + MaxQueued unit requests is
// absorbed, and a request beyond it is refused at once with ErrQueueFull
// rather than left to wait for a slot that running requests will not free
// in time. A full queue refuses the request that would be admitted last:
// an arrival that would finish before the last waiter evicts it (the
// evicted call gets ErrQueueFull at once), otherwise the arrival itself is
// refused. "Last" is in weighted fair queueing's order, in which each
// priority gets turns in proportion to its weight: under overload a
// priority is refused once its turns come after every waiter's, so low
// priorities are refused sooner and more often, and fast — but a low
// priority's first request, its turn early, can outrank the tail of a
// higher one's (with eight priority-200 waiters in a full queue of 8, a
// priority-0 arrival evicts the eighth). A waiting call is bounded by its context and by
// Config.TimeoutFactor × its weight (ErrWaitTimeout). A cancelled waiter
// leaves the queue; a slot handed to it in the same instant is given back,
// and its flow stays charged for it. A waiter whose wait bound runs out in
// the instant a slot is handed to it keeps the slot: under overload with
// wait bounds, heads time out just as slots free up, and giving those
// slots back would charge their flows for admissions they did not get.
//
// The queue is a min-heap of at most 256 flow heads over intrusive FIFO
// lists: queueing, admitting and leaving cost O(log 256) whatever the
// queue's length (plus a walk of the flows and of the passed-over waiters
// while a waiter heavier than H waits), and a waiting call allocates
// nothing once the limiter's pool of waiters is warm. PriorityStats counts
// admissions, refusals, timeouts, cancellations, waiters and wait time per
// priority in a fixed array; a call counts once, under the outcome its
// caller saw.
//
// # Use in a fleet
//
// A fleet node feeds the limiter from each heartbeat reply: SetCeiling
// with its share (0 until the first grant and when fenced),
// SetPeerInflight with the peers' in-flight, and reports Snapshot's
// Estimate as l_local and Inflight as its in-flight. It warm-starts the
// estimate at the key's global limit with Config.InitialLimit or
// SetEstimate (at every grant until the limiter has a sample of its own:
// Snapshot's Rounds or Drops above 0), and turns a Retry-After into
// RetryAfter.
//
// The repository's design document, docs/design.md §3 and §3.1, gives the
// reasons behind the law, the guard and the admission order.
package adaptive
