package adaptive

import "sync"

// waiter is one Acquire call parked in the admission queue. The granter
// sets lease or err and then sends on ready, all with the limiter's lock
// held; ready has room for one signal, so the send never blocks.
type waiter struct {
	prev, next *waiter
	queued     bool
	lease      Lease
	err        error
	ready      chan struct{}
}

var waiterPool = sync.Pool{
	New: func() any { return &waiter{ready: make(chan struct{}, 1)} },
}

func getWaiter() *waiter { return waiterPool.Get().(*waiter) }

// putWaiter recycles w; its ready channel must be empty.
func putWaiter(w *waiter) {
	w.lease, w.err = Lease{}, nil
	waiterPool.Put(w)
}

// waitQueue is a FIFO of waiters: an intrusive doubly linked list, so a
// cancelled waiter leaves from the middle in O(1). Guarded by the
// limiter's lock.
type waitQueue struct {
	head, tail *waiter
	len        int
}

func (q *waitQueue) pushBack(w *waiter) {
	w.queued = true
	w.prev, w.next = q.tail, nil
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
	q.len++
}

func (q *waitQueue) popFront() *waiter {
	w := q.head
	q.remove(w)
	return w
}

func (q *waitQueue) remove(w *waiter) {
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.len--
}

// grant hands the front waiter a lease.
func (q *waitQueue) grant(le Lease) {
	w := q.popFront()
	w.lease = le
	w.ready <- struct{}{}
}

// rejectAll empties the queue, failing every waiter with err.
func (q *waitQueue) rejectAll(err error) {
	for q.head != nil {
		w := q.popFront()
		w.err = err
		w.ready <- struct{}{}
	}
}
