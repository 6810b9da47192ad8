package adaptive

import "time"

// Lease is one admitted request's hold on a slot. Settle it exactly once
// with Release, Drop or Ignore when the request ends; settling it again,
// or settling any copy of it, is a no-op. The zero Lease holds nothing and
// settling it is a no-op. Leases are small values: admitting and settling
// one does not allocate. Lease methods are safe for concurrent use.
type Lease struct {
	rec *leaseRecord
	gen uint64
}

// Release settles the lease as a success: the request's round-trip time
// (from admission to now, on Config.Clock) is a sample for the limiter's
// law. A sample slower than Config.MaxHealthyRTT counts as a drop
// instead. A round trip of 0 — a clock that did not move (a coarse one, or
// a fake one a test did not advance) — is a success whose latency was not
// measured: it counts as one for AIMD and the pacing, but is no latency
// sample for Gradient2 or rttNoload. One below 0 (a clock that went back)
// measures nothing: the lease is settled as by Ignore.
func (le Lease) Release() { le.settle(released, -1) }

// ReleaseRTT settles the lease as a success like Release, but with rtt as
// the request's round-trip time instead of the time since admission. It
// suits a request that keeps its slot after its latency is known, such as a
// streamed response: the time to its first byte is the latency signal, and
// the slot stays held until the stream ends. An rtt of 0 or less
// measures nothing: the lease is settled as by Ignore, since a sample
// that fast would stand as the no-load round trip for RTTWindow round
// trips.
func (le Lease) ReleaseRTT(rtt time.Duration) {
	if rtt <= 0 {
		le.settle(ignored, -1)
		return
	}
	le.settle(released, rtt)
}

// Drop settles the lease as an overload signal (a 429, a 503, a timeout):
// the estimate is multiplied by Config.BackoffRatio (or a ratio the law
// and the evidence of queueing set, see Config), at most once per round
// trip — a drop of a request admitted before the last decrease does not
// decrease it again; with a fleet limit, within the bounds
// Limiter.SetFleetLimit describes. Drop is counted in Limiter.Drops
// either way.
func (le Lease) Drop() { le.settle(dropped, -1) }

// Ignore settles the lease without a sample: the slot is freed and the
// estimate is untouched. Use it for requests whose outcome says nothing
// about the upstream's capacity and that have surely ended: one never
// sent, or one the upstream answered with an error of the request's own
// (a 400, a 404). A request cancelled, or timed out, after it was sent
// may still run at the upstream: keep its slot until it surely ended
// (ObserveDrop counts a timeout now), or the limiter hands it on while
// the upstream still serves it.
func (le Lease) Ignore() { le.settle(ignored, -1) }

// ObserveDrop counts an overload signal for the lease now, as Drop would,
// but keeps its slot held: for a request that timed out on the client's
// side while the upstream may still be serving it. Settle the lease later,
// once the request has surely ended; a Drop then counts nothing more.
// Calling it twice, or on a settled lease, does nothing.
func (le Lease) ObserveDrop() {
	if le.rec == nil {
		return
	}
	l := le.rec.limiter
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if le.rec.gen != le.gen || le.rec.dropSeen {
		return
	}
	le.rec.dropSeen = true
	l.drop(now, le.rec)
	l.pace(now)
}

// Admitted returns when the lease was admitted, by the limiter's clock; the
// zero time for the zero Lease and once the lease is settled.
func (le Lease) Admitted() time.Time {
	if le.rec == nil {
		return time.Time{}
	}
	l := le.rec.limiter
	l.mu.Lock()
	defer l.mu.Unlock()
	if le.rec.gen != le.gen {
		return time.Time{}
	}
	return le.rec.start
}

// settle settles le with outcome o; rtt < 0 means "measure it".
func (le Lease) settle(o outcome, rtt time.Duration) {
	if le.rec != nil {
		le.rec.limiter.settle(le, o, rtt)
	}
}

// outcome is how a lease was settled.
type outcome uint8

const (
	released outcome = iota
	dropped
	ignored
)

// leaseRecord is the limiter-side state of one admitted lease. Records are
// allocated in chunks and recycled through the limiter's free list; gen
// advances on every settle, so a stale Lease copy no longer matches.
// All fields except limiter are guarded by the limiter's lock.
type leaseRecord struct {
	limiter      *Limiter
	next         *leaseRecord // free list link
	gen          uint64
	start        time.Time
	weight       int    // the units of the limit the lease holds
	load         int    // own weight in flight + peers' in-flight at admission
	backoffEpoch uint64 // the limiter's backoffEpoch at admission
	recalSeq     uint64 // the recalibration phase at admission
	round        uint64 // the limiter's round at admission
	seq          uint64 // the limiter's admissions up to and including this one
	dropSeen     bool   // ObserveDrop counted this lease's drop already
}

const recordChunk = 32

// newRecord takes a record off the free list, growing it when empty.
func (l *Limiter) newRecord() *leaseRecord {
	if l.free == nil {
		chunk := make([]leaseRecord, recordChunk)
		for i := range chunk {
			chunk[i].limiter = l
			chunk[i].next = l.free
			l.free = &chunk[i]
		}
	}
	rec := l.free
	l.free = rec.next
	rec.next = nil
	return rec
}

// freeRecord returns a settled record to the free list.
func (l *Limiter) freeRecord(rec *leaseRecord) {
	rec.next = l.free
	l.free = rec
}
