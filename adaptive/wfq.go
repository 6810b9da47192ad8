package adaptive

import "math/bits"

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
// The heap holds at most 256 heads, so pushing, admitting and removing a
// waiter cost O(log 256) whatever the queue's length. Its entries carry
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
	weight int       // Σ weight of the waiters
	stats  [256]priorityCounters
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

// precedes reports whether a request of priority p and cost c, arriving
// now, would come before every waiter: its flow is idle and it would
// finish strictly before the queue's head (on a tie the waiter, which
// arrived first, goes first). An empty queue is preceded by anything.
func (q *wfq) precedes(p uint8, c uint64) bool {
	if q.len == 0 {
		return true
	}
	return q.flows[p].head == nil && q.start(p)+c < q.heads[0].finish
}

// admitAhead accounts a request of priority p and cost c admitted at once
// while others wait, as if it had been queued and admitted first. The
// caller has checked precedes.
func (q *wfq) admitAhead(p uint8, c uint64) {
	if q.len == 0 {
		return // no queue, no virtual time
	}
	f := &q.flows[p]
	f.vt = q.start(p) + c
	f.gen = q.gen
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
	q.weight += w.weight
}

// head returns the waiter that is admitted next. The queue is not empty.
func (q *wfq) head() *waiter { return q.flows[q.heads[0].priority].head }

// pop removes the head, advancing its flow's virtual time and V to its
// finish time: it is being admitted.
func (q *wfq) pop() *waiter {
	h := q.heads[0]
	f := &q.flows[h.priority]
	w := f.head
	f.vt = h.finish
	q.vt = max(q.vt, h.finish)
	q.remove(w)
	return w
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
	q.weight -= w.weight
	if q.len == 0 {
		q.gen++
		q.vt = 0
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

// rejectAll empties the queue, failing every waiter with err and counting
// it refused.
func (q *wfq) rejectAll(err error) {
	for q.len > 0 {
		w := q.head()
		q.remove(w)
		q.stats[w.priority].refused++
		w.err = err
		w.ready <- struct{}{}
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
