package adaptive

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// newQueueWaiter returns an unqueued waiter for the wfq unit tests.
func newQueueWaiter(p uint8, weight int) *waiter {
	w := newWaiter().(*waiter)
	w.priority, w.weight, w.cost = p, weight, cost(p, weight)
	return w
}

// headFinish returns the finish time of w, which heads its priority.
func headFinish(q *wfq, w *waiter) uint64 {
	f := &q.flows[w.priority]
	if f.head != w {
		panic("not a head")
	}
	return q.heads[f.index].finish
}

// popOrder pops every waiter and returns their priorities in order.
func popOrder(q *wfq) []uint8 {
	var out []uint8
	for q.len > 0 {
		out = append(out, q.pop().priority)
	}
	return out
}

func TestWFQSamePriorityIsFIFO(t *testing.T) {
	t.Parallel()
	var q wfq
	ws := make([]*waiter, 5)
	for i := range ws {
		ws[i] = newQueueWaiter(7, 1+i%3) // weights differ, order does not
		q.push(ws[i])
	}
	for i := range ws {
		require.Same(t, ws[i], q.pop())
	}
}

// At equal weights priority 255 costs 1 and 254 costs 2 per request, so
// with both backlogged 255 is admitted twice as often; finish times are
// 255: 1 2 3 4 5 6, 254: 2 4 6, ties going to the earlier arrival.
func TestWFQOrderByFinishTime(t *testing.T) {
	t.Parallel()
	var q wfq
	for range 3 {
		q.push(newQueueWaiter(254, 1))
	}
	for range 6 {
		q.push(newQueueWaiter(255, 1))
	}
	require.Equal(t, []uint8{255, 254, 255, 255, 254, 255, 255, 254, 255}, popOrder(&q))
	require.Zero(t, q.vt, "an empty queue restarts virtual time")
}

// A request's cost is its weight times 256 − priority: weight 2 at 255
// costs the same as weight 1 at 254.
func TestWFQWeightMultipliesCost(t *testing.T) {
	t.Parallel()
	var q wfq
	q.push(newQueueWaiter(254, 1)) // arrival 0, finish 2
	q.push(newQueueWaiter(255, 2)) // arrival 1, finish 2
	q.push(newQueueWaiter(255, 2)) // arrival 2, finish 4
	q.push(newQueueWaiter(254, 1)) // arrival 3, finish 4
	require.Equal(t, []uint8{254, 255, 255, 254}, popOrder(&q))
}

// A waiter that leaves without being admitted charges its priority
// nothing: the next waiter finishes where the departed one would have.
func TestWFQRemoveChargesNothing(t *testing.T) {
	t.Parallel()
	var q wfq
	a := newQueueWaiter(200, 1) // finish 56
	b := newQueueWaiter(200, 1) // finish 112
	c := newQueueWaiter(200, 1) // finish 168
	q.push(a)
	q.push(b)
	q.push(c)
	q.remove(b) // from the middle
	require.Equal(t, uint64(112), q.flows[200].vt+q.flows[200].cost, "tail finish")
	q.remove(a) // the head
	require.Same(t, c, q.head())
	require.Equal(t, uint64(56), headFinish(&q, c), "c moved up into a's finish time")
	require.Equal(t, 1, q.len)
	require.Same(t, c, q.pop())
	require.Zero(t, q.len)
}

// A priority that had no waiters resumes at the queue's virtual time, not
// at its own older one: idleness earns no credit.
func TestWFQIdleFlowEarnsNoCredit(t *testing.T) {
	t.Parallel()
	var q wfq
	for range 4 {
		q.push(newQueueWaiter(255, 1))
	}
	q.push(newQueueWaiter(0, 1)) // finish 256, keeps the queue open
	for range 4 {
		require.Equal(t, uint8(255), q.pop().priority)
	}
	require.Equal(t, uint64(4), q.vt)
	late := newQueueWaiter(254, 1)
	q.push(late)
	require.Equal(t, uint64(4+2), headFinish(&q, late), "starts at V, not at 0")
}

// When the queue is full, an arrival evicts the waiter that would be
// admitted last, if the arrival would be admitted before it.
func TestWFQWorse(t *testing.T) {
	t.Parallel()
	var q wfq
	low1, low2 := newQueueWaiter(0, 1), newQueueWaiter(0, 1) // finish 256, 512
	high := newQueueWaiter(255, 1)                           // finish 1
	q.push(low1)
	q.push(high)
	q.push(low2)
	require.Same(t, low2, q.worse(255, cost(255, 1)), "the last low waiter goes")
	require.Nil(t, q.worse(0, cost(0, 1)), "a low arrival finishes after every waiter")
	require.Same(t, low2, q.worse(1, cost(1, 1)), "finish 255 < 512")
	// A tie goes to the waiter: the arrival came later.
	var tie wfq
	tie.push(newQueueWaiter(128, 1)) // finish 128
	require.Nil(t, tie.worse(128, 128), "same flow: behind the waiter")
	require.Nil(t, tie.worse(0, 128), "finish 128 too: the waiter arrived first")
	require.NotNil(t, tie.worse(0, 127))
}

// TestWFQMatchesModel drives the heap through random pushes, pops,
// admissions under a hard bound and removals, and compares every admission
// with a direct implementation of the rule: each priority a FIFO, its
// first waiter of weight ≤ the bound finishing at the priority's virtual
// time + its cost, the smallest (finish, arrival) admitted first; a flow
// holding only waiters heavier than the bound resumes at V when a request
// joins it.
func TestWFQMatchesModel(t *testing.T) {
	t.Parallel()
	type item struct {
		w    *waiter
		cost uint64
		seq  uint64
	}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 13))
		var q wfq
		flows := map[uint8][]item{}
		vt := map[uint8]uint64{}
		gen := map[uint8]uint64{}
		var v, g, seq uint64
		n := 0
		priorities := []uint8{0, 1, 100, 128, 200, 254, 255}
		modelStart := func(p uint8) uint64 {
			if len(flows[p]) > 0 {
				s := vt[p]
				for _, it := range flows[p] {
					s += it.cost
				}
				return s
			}
			if gen[p] != g {
				return v
			}
			return max(vt[p], v)
		}
		modelHead := func() (uint8, uint64) {
			var best uint8
			var bestFinish, bestSeq uint64
			found := false
			for p, items := range flows {
				if len(items) == 0 {
					continue
				}
				f := vt[p] + items[0].cost
				if !found || f < bestFinish || f == bestFinish && items[0].seq < bestSeq {
					best, bestFinish, bestSeq, found = p, f, items[0].seq, true
				}
			}
			return best, bestFinish
		}
		afterLeave := func() {
			n--
			if n == 0 {
				g++
				v = 0
			}
		}
		modelNext := func(bound int) (*waiter, uint64) {
			var best *waiter
			var bestFinish uint64
			for p, items := range flows {
				for _, it := range items {
					if it.w.weight > bound {
						continue
					}
					f := vt[p] + it.cost
					if best == nil || f < bestFinish || f == bestFinish && it.seq < best.seq {
						best, bestFinish = it.w, f
					}
					break
				}
			}
			return best, bestFinish
		}
		for range 3000 {
			switch op := rng.IntN(12); {
			case op < 5 || n == 0: // push, after resume under a random bound
				p := priorities[rng.IntN(len(priorities))]
				w := newQueueWaiter(p, 1+rng.IntN(4))
				bound := 1 + rng.IntN(4)
				fits := false
				for _, it := range flows[p] {
					fits = fits || it.w.weight <= bound
				}
				if len(flows[p]) > 0 && !fits {
					vt[p] = max(vt[p], v)
				}
				q.resume(p, bound)
				if len(flows[p]) == 0 {
					vt[p], gen[p] = modelStart(p), g
				}
				require.Equal(t, modelStart(p)+w.cost, q.start(p)+w.cost, "seed %d: start", seed)
				q.push(w)
				flows[p] = append(flows[p], item{w, w.cost, seq})
				seq++
				n++
			case op < 8: // pop
				p, finish := modelHead()
				require.Equal(t, finish, headFinish(&q, q.head()))
				w := q.pop()
				require.Same(t, flows[p][0].w, w, "seed %d: admitted", seed)
				flows[p] = flows[p][1:]
				vt[p] = finish
				v = max(v, finish)
				afterLeave()
			case op < 10: // admit the next waiter under a random bound
				bound := 1 + rng.IntN(4)
				want, finish := modelNext(bound)
				w, got := q.next(bound)
				if want == nil {
					require.Nil(t, w, "seed %d: nothing fits under %d", seed, bound)
					continue
				}
				require.Same(t, want, w, "seed %d: admitted under %d", seed, bound)
				require.Equal(t, finish, got)
				q.take(w, finish)
				p := w.priority
				for i := range flows[p] {
					if flows[p][i].w == w {
						flows[p] = append(flows[p][:i:i], flows[p][i+1:]...)
						break
					}
				}
				vt[p] = finish
				v = max(v, finish)
				afterLeave()
			default: // remove a random waiter
				var all []item
				for _, items := range flows {
					all = append(all, items...)
				}
				it := all[rng.IntN(len(all))]
				p := it.w.priority
				q.remove(it.w)
				for i := range flows[p] {
					if flows[p][i].w == it.w {
						flows[p] = append(flows[p][:i:i], flows[p][i+1:]...)
						break
					}
				}
				afterLeave()
			}
			require.Equal(t, n, q.len)
			for i := range q.heads {
				f := &q.flows[q.heads[i].priority]
				require.Equal(t, i, f.index)
				require.Equal(t, f.vt+f.head.cost, q.heads[i].finish, "seed %d: a head finishes at its flow's time + its cost", seed)
				require.GreaterOrEqual(t, q.maxHead, f.head.weight)
				if i > 0 {
					require.False(t, q.less(i, (i-1)/2), "heap order")
				}
			}
		}
	}
}

// rejectHeavier fails exactly the waiters heavier than the bound, walks
// the queue only while one may be, and keeps maxWeight at least every
// waiter's weight.
func TestWFQRejectHeavier(t *testing.T) {
	t.Parallel()
	var q wfq
	ws := []*waiter{newQueueWaiter(1, 3), newQueueWaiter(2, 9), newQueueWaiter(1, 5), newQueueWaiter(3, 2)}
	for _, w := range ws {
		q.push(w)
	}
	require.Equal(t, 9, q.maxWeight)
	tooHeavy := func(int) error { return ErrTooHeavy }
	require.False(t, q.rejectHeavier(9, tooHeavy))
	require.Equal(t, 4, q.len)

	require.True(t, q.rejectHeavier(4, tooHeavy))
	require.Equal(t, 2, q.len)
	for _, w := range ws {
		require.Equal(t, w.weight > 4, w.err != nil, "weight %d", w.weight)
	}
	require.Equal(t, 3, q.maxWeight, "exact after a walk")
	require.False(t, q.rejectHeavier(3, tooHeavy))

	q.pop()
	q.pop()
	require.Zero(t, q.maxWeight)
	q.push(newQueueWaiter(4, 7))
	require.True(t, q.rejectHeavier(6, tooHeavy))
	require.Zero(t, q.len)
}
