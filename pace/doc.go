// Package pace paces one node's requests to a rate: a rate it learns from
// the 429s it causes (Learner), or one it is given, enforced locally for
// requests and for tokens (Bucket, Pacer). It is the per-node half of
// fleet-wide rate budgets; sharing a rate across a fleet — folding the
// nodes' learned rates, handing each a share — is package coord's, and
// package fleet puts the two together (fleet.RateConfig).
//
// # Learning a rate
//
// Learner is the loop of seed 001 ("AIMD Rate Limiting for API Clients"):
// every check period, take the period's error percentage; above a target,
// cut the rate by a multiplier; below a lower recover percentage, add a
// step; between the two (the dead zone) hold, so the rate does not jitter
// around the limit; keep the rate within bounds. The seed steers an
// interval between requests (interval × 1.5 on a cut, − 200ms on a good
// period); Learner steers the rate, 1/interval, and its defaults are the
// seed's constants read that way: a cut divides the rate by 1.5, the
// bounds are half and twice the seed rate (the seed's 6000ms and 1500ms
// around its 3000ms), periods are 5s, the target 10% and the recover 5%.
// The increase is additive on the rate, as in TCP's AIMD and as issue 14
// asks, where the seed's step on the interval grows the rate faster the
// faster it goes; its size, SeedRate/15, is the seed's 200ms step as a
// share of its 3000ms interval. The seed persists the learned value
// between runs; Learner.Rate is the value to store and
// LearnerConfig.WarmRate the way back in.
//
// # Pacing to a rate
//
// A Bucket is a token bucket that lends against the future. It holds
// Rate×Burst units when full, starts full, and gains Rate units a second.
// Reserve always debits, so the level may go below zero, and tells how long
// until the reservation may act: the moment the rate has paid for it and
// for every reservation made before it. Reservations act in the order they
// were made. One larger than the whole bucket acts once the bucket is
// full, leaving it in debt, rather than never. So, with estimates that are
// exact, the units that act in any interval of length T are at most
// Rate×Burst + Rate×T, plus, at most once, the excess over Rate×Burst of
// the largest reservation (TestBucketBound).
//
// An LLM request's cost is known only after its response. Pacer debits a
// request's estimate from its token bucket; Settle then charges the
// difference from the actual usage. An under-estimate is charged, not
// forgiven: the level drops, below zero if need be, and later requests
// wait until the rate has paid it. An over-estimate is refunded, up to the
// bucket's size, and wakes the requests waiting. Cancel gives a
// reservation back without letting any reservation made before it act
// early. SetRate applies at once, to the requests already waiting too: a
// waiting request's delay is not fixed when it reserves but read from the
// bucket whenever it looks, and Wait looks again when its timer fires and
// whenever a rate changes or units are given back. A lowered rate also cuts
// what the bucket has saved up to the new size at once. That is the
// property a fleet needs when a node's share of the rate is lowered before
// the freed rate is granted elsewhere.
//
// golang.org/x/time/rate, the model for this package's shape (time passed
// in, a reservation per request), is not used underneath for three
// reasons: its Reservation cannot be partly refunded (CancelAt gives back a
// whole reservation, less what was reserved after it), so settling an
// over-estimate is not possible; ReserveN refuses n above the burst,
// where an LLM request may cost more tokens than a node's bucket holds;
// and a reservation's time to act is fixed when it is made, so, in that
// package's words, a new limit "may be violated or underutilized by those
// which reserved (using Reserve or Wait) but did not yet act".
//
// # Time and cost
//
// Learner and Bucket read no clock and start no goroutine: each method
// takes the time now. Pacer.Wait alone reads time.Now and sleeps; tests
// run it under testing/synctest. Every type is safe for concurrent use.
// Reserve, Delay, Settle, a Wait that need not wait, and the Learner's
// methods allocate nothing (TestHotPathAllocatesNothing; go test -run '^$'
// -bench . -benchmem ./pace gives each one's time).
//
// TestLearnerAgainstSlidingQuota closes the loop on one node: a Pacer at
// a Learner's rate against the simulated provider's sliding-window quota
// (package internal/sim), the quota dropping mid-run, measured by the
// provider's answers (go test -run TestLearnerAgainstSlidingQuota -v
// ./pace prints the shares used and refused). A period with 5% to 10%
// errors holds the rate (the default dead zone), so against a hard quota a
// node may go on with up to 10% of its requests refused; a lower
// TargetErrorPct trades quota used for fewer 429s.
//
// These are the per-node pieces of sharing a rate quota across a fleet:
// fleet.Node paces to its share with a Pacer and learns with a Learner
// (NeedSaturation on). The repository's design document, docs/design.md
// §17, describes how a fleet shares its rates.
package pace
