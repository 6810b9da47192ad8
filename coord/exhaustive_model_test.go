package coord

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// The model explored by the exhaustive test (see exhaustive_test.go): the
// fleet's state, its canonical encoding and its transitions.

const (
	xMaxNodes = 3
	xMaxMsgs  = 3
)

// model configures one search.
type model struct {
	nodes       int
	l           int   // L at the start: every l_local, and min = max = l
	raises      []int // values the operator may raise L to
	lowers      []int // values the operator may lower L to; then only Σ in-flight ≤ max L is checked
	maxReports  int   // pending reports per node
	maxReplies  int   // pending replies per node
	demandSlack int   // a report's demand exceeds its in-flight by 0..demandSlack
	drain       bool  // operator may drain and undrain
	evict       bool  // operator may evict
	reserve     func(NodeState, time.Time) int
	lemma       bool // check every node's in-flight against its reserve
}

type xReport struct {
	seq, appliedGen  int64
	inflight, demand int
}

type xReply struct {
	share int
	gen   int64
}

type xNode struct {
	inflight, enforced  int
	appliedGen, nextSeq int64
	nReports, nReplies  int
	reports             [xMaxMsgs]xReport
	replies             [xMaxMsgs]xReply
}

// xState is one global state: the key's State and the nodes with their
// pending messages. It is a value; copying it copies everything but
// coord.Nodes, which is replaced, never modified, by the actions.
type xState struct {
	coord State
	nodes [xMaxNodes]xNode
}

var modelNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const modelTTL = time.Hour

var modelIDs = [xMaxNodes]string{"n0", "n1", "n2"}

func (m model) initial() xState {
	s := NewState("k", modelNow)
	s.Key.MinLimit, s.Key.MaxLimit = m.l, m.l
	return xState{coord: s}
}

// limit is the operator's L in x.
func (x *xState) limit() int { return x.coord.Key.MaxLimit }

func (x *xState) row(i int) (NodeState, bool) { return x.coord.Row(modelIDs[i], modelIDs[i]) }

// encode appends the canonical encoding of x (see the top of the file) to
// buf. Decoding it yields x in canonical form, its nodes possibly renamed.
func (m model) encode(x *xState, buf []byte) []byte {
	var rows [xMaxNodes]*NodeState
	for j := range x.coord.Nodes {
		rows[x.coord.Nodes[j].NodeID[1]-'0'] = &x.coord.Nodes[j]
	}
	stale := func(i int, r *xReport) bool { return rows[i] != nil && r.seq <= rows[i].Seq }
	useful := func(i int, r *xReply) bool { return r.gen > x.nodes[i].appliedGen }

	var genBuf [2 + xMaxNodes*(2+2*xMaxMsgs)]int64
	gens := append(genBuf[:0], 0, x.coord.Key.Generation)
	for i := range m.nodes {
		n := &x.nodes[i]
		if rows[i] != nil {
			gens = append(gens, rows[i].GrantedGen)
		}
		gens = append(gens, n.appliedGen)
		for j := range n.nReports {
			if !stale(i, &n.reports[j]) {
				gens = append(gens, n.reports[j].appliedGen)
			}
		}
		for j := range n.nReplies {
			if useful(i, &n.replies[j]) {
				gens = append(gens, n.replies[j].gen)
			}
		}
	}
	slices.Sort(gens)
	gens = slices.Compact(gens)
	gen := func(v int64) byte { i, _ := slices.BinarySearch(gens, v); return byte(i) }

	var blocks [xMaxNodes][xNodeBytes]byte
	for i := range m.nodes {
		n := &x.nodes[i]
		var seqBuf [3 + xMaxMsgs]int64
		seqs := append(seqBuf[:0], 0, n.nextSeq)
		if rows[i] != nil {
			seqs = append(seqs, rows[i].Seq)
		}
		for j := range n.nReports {
			seqs = append(seqs, n.reports[j].seq)
		}
		slices.Sort(seqs)
		seqs = slices.Compact(seqs)
		seq := func(v int64) byte { i, _ := slices.BinarySearch(seqs, v); return byte(i) }

		b := blocks[i][:0]
		if row := rows[i]; row != nil {
			flags := byte(1)
			if row.Draining {
				flags |= 2
			}
			if row.Evicted {
				flags |= 4
			}
			b = append(b, flags, seq(row.Seq), byte(row.Inflight), byte(row.Demand),
				byte(row.Share), gen(row.GrantedGen), byte(row.UnackedHigh))
		} else {
			b = append(b, 0, 0, 0, 0, 0, 0, 0)
		}
		var reps [xMaxMsgs][4]byte
		nr := 0
		for j := range n.nReports {
			r := &n.reports[j]
			if stale(i, r) {
				reps[nr] = [4]byte{0, 255, 255, 255}
			} else {
				reps[nr] = [4]byte{seq(r.seq), byte(r.inflight), byte(r.demand), gen(r.appliedGen)}
			}
			nr++
		}
		slices.SortFunc(reps[:nr], func(a, b [4]byte) int { return int(a[0]) - int(b[0]) })
		var rpls [xMaxMsgs][2]byte
		np := 0
		for j := range n.nReplies {
			if r := &n.replies[j]; useful(i, r) {
				rpls[np] = [2]byte{gen(r.gen), byte(r.share)}
				np++
			}
		}
		slices.SortFunc(rpls[:np], func(a, b [2]byte) int {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			return int(a[1]) - int(b[1])
		})
		b = append(b, byte(n.inflight), byte(n.enforced), gen(n.appliedGen), seq(n.nextSeq), byte(nr), byte(np))
		for _, r := range reps[:nr] {
			b = append(b, r[:]...)
		}
		for _, r := range rpls[:np] {
			b = append(b, r[:]...)
		}
	}
	sorted := blocks[:m.nodes]
	slices.SortFunc(sorted, func(a, b [xNodeBytes]byte) int { return bytes.Compare(a[:], b[:]) })

	k := x.coord.Key
	buf = append(buf, gen(k.Generation), byte(k.LGlobal), byte(k.MaxLimit))
	for _, b := range sorted {
		buf = append(buf, b[:]...)
	}
	return buf
}

// xNodeBytes is the size of one node's block in an encoding.
const xNodeBytes = 7 + 6 + 4*xMaxMsgs + 2*xMaxMsgs

// decode rebuilds the state encode wrote; it returns the rest of b.
func (m model) decode(b []byte) (xState, []byte) {
	s := NewState("k", modelNow)
	s.Key.Generation, s.Key.LGlobal = int64(b[0]), int(b[1])
	s.Key.MaxLimit = int(b[2])
	s.Key.MinLimit = s.Key.MaxLimit
	b = b[3:]
	x := xState{coord: s}
	for i := range m.nodes {
		block := b[:xNodeBytes]
		b = b[xNodeBytes:]
		next := func() int64 { v := block[0]; block = block[1:]; return int64(v) }
		flags := next()
		row := NodeState{NodeID: modelIDs[i], Instance: modelIDs[i], LLocal: m.l, Epoch: s.Key.Epoch,
			Draining: flags&2 != 0, Evicted: flags&4 != 0,
			LeaseExpiresAt: modelNow.Add(modelTTL), HoldUntil: modelNow.Add(modelTTL),
			JoinedAt: modelNow, HeartbeatAt: modelNow}
		row.Seq, row.Inflight, row.Demand = next(), int(next()), int(next())
		row.Share, row.GrantedGen, row.UnackedHigh = int(next()), next(), int(next())
		if flags != 0 {
			x.coord.Nodes = append(x.coord.Nodes, row)
		}
		if row.Draining {
			x.coord.Drains = append(x.coord.Drains, row.NodeID)
		}
		n := &x.nodes[i]
		n.inflight, n.enforced, n.appliedGen, n.nextSeq = int(next()), int(next()), next(), next()
		n.nReports, n.nReplies = int(next()), int(next())
		for j := range n.nReports {
			r := &n.reports[j]
			r.seq, r.inflight, r.demand, r.appliedGen = next(), int(next()), int(next()), next()
			if r.inflight == 255 {
				*r = xReport{} // stale: seq 0 is not above the row's
			}
		}
		for j := range n.nReplies {
			n.replies[j].gen, n.replies[j].share = next(), int(next())
		}
	}
	return x, b
}

// xAction names a transition compactly; it is formatted only for traces.
type xAction struct {
	kind byte
	node int8
	a, b int16
}

const (
	actSend byte = iota
	actHandle
	actHandleStale
	actReportLost
	actDeliver
	actReplyLost
	actAdmit
	actFinish
	actDrain
	actUndrain
	actEvict
	actSetL
)

func (a xAction) String() string {
	id := ""
	if a.node >= 0 {
		id = modelIDs[a.node]
	}
	switch a.kind {
	case actSend:
		return fmt.Sprintf("%s sends a report (in-flight %d, demand %d more)", id, a.a, a.b)
	case actHandle:
		return fmt.Sprintf("coordinator handles a report of %s: share %d, gen rank %d", id, a.a, a.b)
	case actHandleStale:
		return fmt.Sprintf("coordinator handles a stale report of %s: share %d, gen rank %d", id, a.a, a.b)
	case actReportLost:
		return "a report of " + id + " is lost"
	case actDeliver:
		return fmt.Sprintf("%s receives share %d gen rank %d", id, a.a, a.b)
	case actReplyLost:
		return "a reply to " + id + " is lost"
	case actAdmit:
		return fmt.Sprintf("%s admits a request (in-flight now %d)", id, a.a)
	case actFinish:
		return id + " finishes a request"
	case actDrain:
		return "operator drains " + id
	case actUndrain:
		return "operator undrains " + id
	case actEvict:
		return "operator evicts " + id
	case actSetL:
		return fmt.Sprintf("operator sets L to %d", a.a)
	}
	return "?"
}

// successors calls emit with every state one action away from x.
func (m model) successors(x *xState, emit func(xAction, *xState)) {
	for i := range m.nodes {
		n := &x.nodes[i]
		id := modelIDs[i]
		act := func(kind byte, a, b int) xAction { return xAction{kind, int8(i), int16(a), int16(b)} }

		for slack := range m.demandSlack + 1 {
			if n.nReports == m.maxReports {
				break
			}
			y := *x
			yn := &y.nodes[i]
			yn.reports[yn.nReports] = xReport{seq: yn.nextSeq, appliedGen: yn.appliedGen,
				inflight: yn.inflight, demand: yn.inflight + slack}
			yn.nReports++
			yn.nextSeq++
			emit(act(actSend, yn.inflight, slack), &y)
		}
		for j := range n.nReports {
			if j > 0 && n.reports[j] == n.reports[j-1] {
				continue // two stale reports: the same action
			}
			r := n.reports[j]
			y := *x
			yn := &y.nodes[i]
			copy(yn.reports[j:], yn.reports[j+1:])
			yn.nReports--
			yn.reports[yn.nReports] = xReport{}
			lost := y
			emit(act(actReportLost, 0, 0), &lost)

			var epoch int64
			if r.appliedGen > 0 {
				epoch = y.coord.Key.Epoch
			}
			next, g, err := y.coord.heartbeat(Report{Key: "k", NodeID: id, Instance: id, Seq: r.seq, LLocal: m.l,
				Inflight: r.inflight, Demand: r.demand, Epoch: epoch, AppliedGen: r.appliedGen, LeaseTTL: modelTTL},
				modelNow, m.reserve)
			if err != nil {
				panic(err)
			}
			if next.Key.Epoch != y.coord.Key.Epoch {
				panic("model: the coordinator entered learning mode; the encoding does not hold epochs")
			}
			y.coord = next
			if yn.nReplies < m.maxReplies {
				yn.replies[yn.nReplies] = xReply{share: g.Share, gen: g.Generation}
				yn.nReplies++
			}
			kind := actHandle
			if g.Stale {
				kind = actHandleStale
			}
			emit(act(kind, g.Share, int(g.Generation)), &y)
		}
		for j := range n.nReplies {
			if j > 0 && n.replies[j] == n.replies[j-1] {
				continue
			}
			g := n.replies[j]
			y := *x
			yn := &y.nodes[i]
			copy(yn.replies[j:], yn.replies[j+1:])
			yn.nReplies--
			yn.replies[yn.nReplies] = xReply{}
			lost := y
			emit(act(actReplyLost, 0, 0), &lost)
			if g.gen > yn.appliedGen {
				yn.enforced, yn.appliedGen = g.share, g.gen
			}
			emit(act(actDeliver, g.share, int(g.gen)), &y)
		}
		if n.inflight < n.enforced {
			y := *x
			y.nodes[i].inflight++
			emit(act(actAdmit, y.nodes[i].inflight, 0), &y)
		}
		if n.inflight > 0 {
			y := *x
			y.nodes[i].inflight--
			emit(act(actFinish, 0, 0), &y)
		}
		row, hasRow := x.row(i)
		op := func(kind byte, fn func(State) (State, error)) {
			y := *x
			var err error
			if y.coord, err = fn(y.coord); err != nil {
				panic(err)
			}
			emit(act(kind, 0, 0), &y)
		}
		if m.drain && hasRow && !row.Draining {
			op(actDrain, func(s State) (State, error) { return s.Drain(id) })
		}
		if m.drain && hasRow && row.Draining {
			op(actUndrain, func(s State) (State, error) { return s.Undrain(id) })
		}
		if m.evict && hasRow && !row.Evicted {
			op(actEvict, func(s State) (State, error) { return s.Evict(id) })
		}
	}
	for _, l := range m.raises {
		if l > x.limit() {
			y := *x
			y.coord, _ = y.coord.SetLimits(&l, &l)
			emit(xAction{kind: actSetL, node: -1, a: int16(l)}, &y)
		}
	}
	for _, l := range m.lowers {
		if l < x.limit() {
			y := *x
			y.coord, _ = y.coord.SetLimits(&l, &l)
			emit(xAction{kind: actSetL, node: -1, a: int16(l)}, &y)
		}
	}
}
