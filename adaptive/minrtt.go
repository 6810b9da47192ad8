package adaptive

import "time"

// minWindow is the minimum of the last size samples, kept in a monotonic
// deque: each entry is smaller than every entry behind it, so the front is
// the minimum. Push and Min are O(1) amortized and allocation-free; the
// ring is allocated once at construction. It is not safe for concurrent
// use; the Limiter guards it with its lock.
type minWindow struct {
	size  uint64 // samples the minimum spans
	seq   uint64 // samples pushed so far
	ring  []rttEntry
	head  int // index of the front (oldest, smallest) entry
	count int // entries in the deque
}

type rttEntry struct {
	seq uint64
	rtt time.Duration
}

func newMinWindow(size int) minWindow {
	return minWindow{size: uint64(size), ring: make([]rttEntry, size)}
}

// push records rtt as the newest sample.
func (w *minWindow) push(rtt time.Duration) {
	w.seq++
	// Entries no smaller than rtt can never be the minimum again.
	for w.count > 0 && w.at(w.count-1).rtt >= rtt {
		w.count--
	}
	// Entries older than the window fall off the front.
	for w.count > 0 && w.at(0).seq+w.size <= w.seq {
		w.head = (w.head + 1) % len(w.ring)
		w.count--
	}
	w.ring[(w.head+w.count)%len(w.ring)] = rttEntry{seq: w.seq, rtt: rtt}
	w.count++
}

// min returns the smallest of the last size samples, or 0 and false when
// the window is empty.
func (w *minWindow) min() (time.Duration, bool) {
	if w.count == 0 {
		return 0, false
	}
	return w.at(0).rtt, true
}

// last returns the sample pushed last; the window must not be empty.
func (w *minWindow) last() time.Duration { return w.at(w.count - 1).rtt }

// reset empties the window.
func (w *minWindow) reset() {
	w.head, w.count = 0, 0
}

func (w *minWindow) at(i int) *rttEntry {
	return &w.ring[(w.head+i)%len(w.ring)]
}
