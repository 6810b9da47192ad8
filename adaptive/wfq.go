package adaptive

import (
	"math"
	"math/bits"
)

// wfq is the admission queue: weighted fair queueing by virtual finish
// time, after Aperture's scheduler. Each priority p is a flow, a FIFO of
// its waiters. A request of weight w at priority p costs
//
//	cost = w · (256 − p)
//
// units of virtual time. A flow's head finishes at
//
//	finish = vt_p + cost
//
// where vt_p, the flow's virtual time, is the finish time of the flow's
// last admission; a flow that had no waiters starts at max(vt_p, V), V
// being the queue's virtual time, the latest finish time admitted from
// the queue — so an idle flow earns no credit for its idle time. Only the
// flows' heads are ordered, in a min-heap by (finish, arrival); the rest
// wait behind their head in arrival order. Admitting a head advances its
// flow's virtual time to its finish; a waiter that leaves unadmitted
// (cancelled, timed out, evicted) charges its flow nothing. When the queue
// empties V returns to 0 and every flow starts afresh.
//
// Between flows that stay backlogged, admissions therefore follow
// 1/(256 − p): priority 255 is admitted twice as often as 254 at equal
// weight, priority 200 (cost 56 per unit) 156/56 ≈ 2.79 times as often as
// priority 100 (cost 156). No flow starves: each is admitted at least
// once for every 256·weight units of virtual time.
//
// A waiter heavier than the hard bound (the ceiling), which could not run
// even alone, is passed over: the next waiter considered is the earliest
// finish among the first waiter of each flow that is not that heavy, whose
// finish is its flow's virtual time plus its own cost, as if the heavier
// ones ahead of it in its flow were not there (see next). When a request
// joins a flow that holds only such waiters, the flow resumes at V, as an
// idle flow would (see resume), so passing them over earns no credit.
//
// The heap holds at most 256 heads, so pushing, admitting and removing a
// waiter cost O(log 256) whatever the queue's length; while a waiter
// heavier than the hard bound waits, finding the next waiter also walks
// the flows (at most 256) and the waiters that heavy. Its entries carry
// their keys and each flow its entry's index, so sifting touches only the
// heap and the flows, never a waiter: with many waiters in memory that is
// most of the cost (BenchmarkQueue). Guarded by the limiter's lock.
type wfq struct {
	heads  []head // min-heap of the flows' heads by (finish, seq)
	flows  [256]flow
	active [4]uint64 // bit p set while flows[p] has waiters
	vt     uint64    // V: the latest finish time admitted since the queue last emptied
	gen    uint64    // bumped whenever the queue empties
	seq    uint64    // arrivals so far
	len    int       // waiters
	weight int64     // Σ weight of the waiters: ≤ 2^30 · 2^30, no overflow
	// maxHead is at least the weight of every flow's head: raised when a
	// waiter becomes a head, made exact again by next when it exceeds the
	// bound, 0 when the queue is empty.
	maxHead int
	// maxWeight is at least the weight of every waiter: raised by push,
	// made exact by rejectHeavier, 0 when the queue is empty.
	maxWeight int
	stats     [256]priorityCounters
}

// flow is one priority's waiters.
type flow struct {
	head, tail *waiter
	n          int
	index      int    // the flow's entry in wfq.heads while it has waiters
	cost       uint64 // Σ cost of the waiters
	vt         uint64 // the finish time of the flow's last admission
	gen        uint64 // wfq.gen when vt was set
}

// head is a heap entry: the head waiter of flow priority, which finishes
// at finish and arrived seq-th.
type head struct {
	finish, seq uint64
	priority    uint8
}

// cost is r's virtual-time cost, weight·(256 − priority).
func cost(priority uint8, weight int) uint64 {
	return uint64(weight) * (256 - uint64(priority))
}

// start is the virtual time at which a new request of priority p would
// start: behind the flow's waiters, or where an idle flow resumes.
func (q *wfq) start(p uint8) uint64 {
	f := &q.flows[p]
	switch {
	case f.head != nil:
		return f.vt + f.cost
	case f.gen != q.gen:
		return q.vt
	default:
		return max(f.vt, q.vt)
	}
}

// fitting returns the first waiter of flow p, in arrival order, whose
// weight is at most bound, or nil.
func (q *wfq) fitting(p uint8, bound int) *waiter {
	for w := q.flows[p].head; w != nil; w = w.next {
		if w.weight <= bound {
			return w
		}
	}
	return nil
}

// next returns the waiter that is admitted next under the hard bound
// bound, and the virtual time at which it finishes: the head, unless it
// weighs more than bound; then the earliest finish (the earliest arrival
// on a tie) among each flow's first waiter of weight ≤ bound, finishing
// at its flow's virtual time plus its cost. nil if no waiter weighs at
// most bound.
func (q *wfq) next(bound int) (*waiter, uint64) {
	if q.len == 0 {
		return nil, 0
	}
	if q.maxHead > bound {
		q.maxHead = 0
		for _, h := range q.heads {
			q.maxHead = max(q.maxHead, q.flows[h.priority].head.weight)
		}
	}
	if q.maxHead <= bound {
		// Every head may run: the earliest finish is the heap's top.
		h := q.heads[0]
		return q.flows[h.priority].head, h.finish
	}
	var best *waiter
	var bestFinish uint64
	for i, word := range q.active {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			p := uint8(i<<6 | b)
			w := q.fitting(p, bound)
			if w == nil {
				continue
			}
			finish := q.flows[p].vt + w.cost
			if best == nil || finish < bestFinish || finish == bestFinish && w.seq < best.seq {
				best, bestFinish = w, finish
			}
		}
	}
	return best, bestFinish
}

// resume restarts flow p at V when it has waiters but none of weight ≤
// bound: a request that can run and joins it starts where it would in an
// idle flow, so the time its flow spent holding only waiters too heavy to
// run earns it no credit. The caller calls it before queueing a request
// of priority p or admitting one ahead of the queue.
func (q *wfq) resume(p uint8, bound int) {
	f := &q.flows[p]
	if f.head == nil || f.vt >= q.vt || q.fitting(p, bound) != nil {
		return
	}
	f.vt = q.vt
	q.heapReplace(f.index, head{f.vt + f.head.cost, f.head.seq, p})
}

// precedes reports whether a request of priority p and cost c, arriving
// now, would come before every waiter that can run under the hard bound
// bound: no waiter of its flow weighs ≤ bound, and it would finish
// strictly before the waiter next returns (on a tie the waiter, which
// arrived first, goes first). An empty queue is preceded by anything. The
// caller has called resume(p, bound).
func (q *wfq) precedes(p uint8, c uint64, bound int) bool {
	if q.len == 0 {
		return true
	}
	start := q.start(p)
	if q.flows[p].head != nil {
		if q.fitting(p, bound) != nil {
			return false
		}
		start = q.flows[p].vt // its waiters are passed over
	}
	w, finish := q.next(bound)
	return w == nil || start+c < finish
}

// admitAhead accounts a request of priority p and cost c admitted at once
// while others wait, as if it had been queued and admitted first. The
// caller has checked precedes.
func (q *wfq) admitAhead(p uint8, c uint64) {
	if q.len == 0 {
		return // no queue, no virtual time
	}
	f := &q.flows[p]
	if f.head == nil {
		f.vt = q.start(p) + c
		f.gen = q.gen
	} else {
		// Its flow's waiters are passed over (precedes): they finish
		// after it.
		f.vt += c
		q.heapReplace(f.index, head{f.vt + f.head.cost, f.head.seq, p})
	}
	q.vt = max(q.vt, f.vt)
}

// push queues w, whose priority, weight and cost are set.
func (q *wfq) push(w *waiter) {
	p := w.priority
	f := &q.flows[p]
	w.seq = q.seq
	q.seq++
	w.queued = true
	w.next = nil
	if f.head == nil {
		f.vt = q.start(p)
		f.gen = q.gen
		w.prev = nil
		f.head, f.tail = w, w
		q.maxHead = max(q.maxHead, w.weight)
		q.heapPush(head{f.vt + w.cost, w.seq, p})
		q.active[p>>6] |= 1 << (p & 63)
	} else {
		w.prev = f.tail
		f.tail.next = w
		f.tail = w
	}
	f.n++
	f.cost += w.cost
	q.len++
	q.weight += int64(w.weight)
	q.maxWeight = max(q.maxWeight, w.weight)
}

// head returns the queue's head: the waiter with the earliest finish. The
// queue is not empty.
func (q *wfq) head() *waiter { return q.flows[q.heads[0].priority].head }

// pop removes the head, advancing its flow's virtual time and V to its
// finish time: it is being admitted.
func (q *wfq) pop() *waiter {
	w, finish := q.next(math.MaxInt)
	q.take(w, finish)
	return w
}

// take removes w, which next returned with its finish time, from the
// queue, advancing its flow's virtual time and V to finish: it is being
// admitted.
func (q *wfq) take(w *waiter, finish uint64) {
	f := &q.flows[w.priority]
	f.vt = finish
	q.vt = max(q.vt, finish)
	wasHead := f.head == w
	q.remove(w)
	if !wasHead && f.head != nil {
		// w passed its flow's head, whose finish moves on with the flow.
		q.heapReplace(f.index, head{f.vt + f.head.cost, f.head.seq, w.priority})
	}
}

// remove takes w out of the queue without advancing virtual time.
func (q *wfq) remove(w *waiter) {
	p := w.priority
	f := &q.flows[p]
	if f.head == w {
		f.head = w.next
		if f.head == nil {
			f.tail = nil
			q.heapRemove(f.index)
			q.active[p>>6] &^= 1 << (p & 63)
		} else {
			// The next waiter heads the flow from where the flow stands.
			f.head.prev = nil
			q.maxHead = max(q.maxHead, f.head.weight)
			q.heapReplace(f.index, head{f.vt + f.head.cost, f.head.seq, p})
		}
	} else {
		w.prev.next = w.next
		if w.next == nil {
			f.tail = w.prev
		} else {
			w.next.prev = w.prev
		}
	}
	w.prev, w.next, w.queued = nil, nil, false
	f.n--
	f.cost -= w.cost
	q.len--
	q.weight -= int64(w.weight)
	if q.len == 0 {
		q.gen++
		q.vt = 0
		q.maxHead, q.maxWeight = 0, 0
	}
}

// worse returns the queued waiter that a new request of priority p and
// cost c would evict from a full queue: the waiter that would be admitted
// last (the latest finish time, the latest arrival on a tie), if the new
// request would finish strictly before it; otherwise nil. The waiter
// admitted last is the tail of some flow, and a flow's tail finishes at
// vt + the flow's queued cost, so only the flows need scanning.
func (q *wfq) worse(p uint8, c uint64) *waiter {
	var worst *waiter
	var worstFinish uint64
	for i, word := range q.active {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			f := &q.flows[i<<6|b]
			finish := f.vt + f.cost
			if worst == nil || finish > worstFinish || finish == worstFinish && f.tail.seq > worst.seq {
				worst, worstFinish = f.tail, finish
			}
		}
	}
	if worst == nil || q.start(p)+c >= worstFinish {
		return nil
	}
	return worst
}

// rejectHeavier fails every waiter heavier than n with the error err
// returns for its weight, counting it refused, and reports whether it
// failed any. It walks the queue only when some waiter may be heavier
// than n (see maxWeight), so a fleet limit that does not fall below the
// heaviest weight queued costs nothing.
func (q *wfq) rejectHeavier(n int, err func(weight int) error) bool {
	if q.maxWeight <= n {
		return false
	}
	var heavy []*waiter
	q.maxWeight = 0
	for i, word := range q.active {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			for w := q.flows[i<<6|b].head; w != nil; w = w.next {
				if w.weight > n {
					heavy = append(heavy, w)
				} else {
					q.maxWeight = max(q.maxWeight, w.weight)
				}
			}
		}
	}
	for _, w := range heavy {
		q.reject(w, err(w.weight))
	}
	return len(heavy) > 0
}

// reject takes w out of the queue and fails it with err, counting it
// refused.
func (q *wfq) reject(w *waiter, err error) {
	q.remove(w)
	q.stats[w.priority].refused++
	w.err = err
	w.ready <- struct{}{}
}

// rejectAll empties the queue, failing every waiter with err and counting
// it refused.
func (q *wfq) rejectAll(err error) {
	for q.len > 0 {
		q.reject(q.head(), err)
	}
}

// The heap of flow heads, hand-written so that each flow keeps its
// entry's index and leaves from the middle in O(log n).

func (q *wfq) less(i, j int) bool {
	a, b := &q.heads[i], &q.heads[j]
	return a.finish < b.finish || a.finish == b.finish && a.seq < b.seq
}

func (q *wfq) swap(i, j int) {
	h := q.heads
	h[i], h[j] = h[j], h[i]
	q.flows[h[i].priority].index = i
	q.flows[h[j].priority].index = j
}

func (q *wfq) heapPush(h head) {
	i := len(q.heads)
	q.heads = append(q.heads, h)
	q.flows[h.priority].index = i
	q.up(i)
}

// heapReplace puts h, of the same flow, in entry i's place.
func (q *wfq) heapReplace(i int, h head) {
	q.heads[i] = h
	q.fix(i)
}

func (q *wfq) heapRemove(i int) {
	last := len(q.heads) - 1
	if i != last {
		q.swap(i, last)
	}
	q.heads = q.heads[:last]
	if i != last {
		q.fix(i)
	}
}

func (q *wfq) fix(i int) {
	if !q.down(i) {
		q.up(i)
	}
}

func (q *wfq) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			return
		}
		q.swap(i, parent)
		i = parent
	}
}

// down sifts entry i down and reports whether it moved.
func (q *wfq) down(i int) bool {
	start, n := i, len(q.heads)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && q.less(r, child) {
			child = r
		}
		if !q.less(child, i) {
			break
		}
		q.swap(i, child)
		i = child
	}
	return i > start
}
