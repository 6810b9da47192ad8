package coord

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// The model explored by the exhaustive test (see exhaustive_test.go): the
// fleet's state and its transitions. exhaustive_encode_test.go holds the
// canonical encoding.

const (
	xMaxNodes = 3
	xMaxMsgs  = 3
)

// model configures one search.
type model struct {
	nodes  int
	l      int   // L at the start: min = max = l, and every l_local unless lLocals is set
	raises []int // values the operator may raise L to (min = max)
	lowers []int // values the operator may lower L to (min = max)
	// lLocals, when set, are the values a report's l_local may take (any
	// of them, at every report), and the operator's clamp is [minLimit,
	// maxLimit] for good: L_global moves with the voters' lower median.
	lLocals            []int
	minLimit, maxLimit int
	maxReports         int // pending reports per node
	maxReplies         int // pending replies per node
	// syncReplies: a reply is delivered the moment its report is handled,
	// or lost; none is ever pending (maxReplies is then unused).
	syncReplies bool
	demandSlack int  // a report's demand exceeds its in-flight by 0..demandSlack
	drain       bool // operator may drain and undrain
	evict       bool // operator may evict
	// time: the coordinator's clock advances in ticks, so leases expire,
	// nodes fence themselves and requests end within the request bound.
	time  bool
	lease int // LeaseTTL in ticks, with time
	bound int // MaxRequestDuration in ticks, with time: a request ends less than bound ticks after its admission
	// restart: a node id's process may be replaced by a new instance (a
	// crash and a takeover, or a rejoin after leaving).
	restart bool
	// idleRestart: a process is replaced only with nothing in flight.
	idleRestart bool
	leave       bool // a node may leave gracefully, with nothing in flight
	// reserve replaces NodeState.Reserve in the heartbeats when set; the
	// encoding then does not rely on the reserve's formula.
	reserve func(NodeState, time.Time) int
	// totalsOnly checks only what the fleet has in flight, not the
	// protocol's own invariants (Σ share, Σ reserve, the lemma): for the
	// weaker rules.
	totalsOnly bool

	leaveBusy bool // a node may also leave with requests in flight (a Stop whose context ended)

	// Weaker nodes, for the tests that show the search fails: a node that
	// admits past its fence deadline; a new process that keeps its
	// predecessor's instance token (and its seq); a node that leaves with
	// requests in flight and reports none.
	unfenced, sameInstance, leaveForgets bool
}

type xReport struct {
	seq, appliedGen  int64
	inflight, demand int
	lLocal           int
	stale            bool // it was stale once: its content is forgotten
}

type xReply struct {
	share int
	gen   int64
	lease int // ticks until the lease end the reply renews the fence to; 0 when it renews nothing (stale)
}

// xNode is the process currently running a node id (or the last one, when
// it left), and what is left of its predecessor.
type xNode struct {
	inflight, enforced  int
	appliedGen, nextSeq int64
	nReports, nReplies  int
	reports             [xMaxMsgs]xReport
	replies             [xMaxMsgs]xReply
	// With time: ticks until the fence deadline (it admits only while
	// > 0), and until the bound of its newest request (its requests end
	// before it reaches 0).
	fence, reqLeft int
	left           bool // it left: it admits, sends and receives nothing any more
	evicted        bool // the operator evicted its instance
	inst           int  // which of the node id's two instance tokens it runs as
	// orphans are the requests of the previous, dead instance still
	// running at the upstream; they end before orphanLeft reaches 0.
	orphans, orphanLeft int
}

// xState is one global state: the key's State and the nodes with their
// pending messages. It is a value; copying it copies everything but
// coord.Nodes, which is replaced, never modified, by the actions.
type xState struct {
	coord State
	nodes [xMaxNodes]xNode
	// recent[j] is the largest L_global the key held at the instant j
	// ticks ago, for j up to lease + bound (without time: ever, in
	// recent[0]).
	recent [xMaxWindow]uint8
	fell   bool // L_global has fallen at least once
	// broken names a broken invariant that no single state shows: an
	// evicted instance or a drained node id was granted a share.
	broken byte
}

// xMaxWindow bounds lease + bound + 1, in ticks.
const xMaxWindow = 6

// Values of xState.broken.
const (
	brokenNone byte = iota
	brokenEvicted
	brokenDrained
)

// window is the number of instants (ticks) whose L_global bounds the
// in-flight now: lease + bound + 1 with time, 1 (for ever) without.
func (m model) window() int {
	if !m.time {
		return 1
	}
	return m.lease + m.bound + 1
}

// bound is the largest L_global of the last lease + bound ticks: what
// Σ in-flight may not exceed (docs/design.md §12, §16).
func (x *xState) bound() int { return int(slices.Max(x.recent[:])) }

// modelNow is the coordinator's time in every state: a tick moves the
// rows' times back instead of the clock forward.
var modelNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	modelTTL  = time.Hour   // the lease without time: it never expires
	modelTick = time.Second // one tick, with time
)

var modelIDs = [xMaxNodes]string{"n0", "n1", "n2"}

// modelInstances are each node id's two instance tokens.
var modelInstances = [xMaxNodes][2]string{{"n0a", "n0b"}, {"n1a", "n1b"}, {"n2a", "n2b"}}

func (m model) initial() xState {
	if m.time && m.maxReports != 1 {
		panic("model: with time, a node has at most 1 report pending (see the top of exhaustive_test.go)")
	}
	s := NewState("k", modelNow)
	s.Key.MinLimit, s.Key.MaxLimit = m.limits()
	return xState{coord: s}
}

// reserveRule is the reserve the coordinator holds for a row.
func (m model) reserveRule() func(NodeState, time.Time) int {
	if m.reserve != nil {
		return m.reserve
	}
	return NodeState.Reserve
}

// maxL is the largest L_global the model can reach.
func (m model) maxL() int {
	if len(m.lLocals) > 0 {
		return m.maxLimit
	}
	return slices.Max(append([]int{m.l}, m.raises...))
}

// limits is the operator's clamp at the start.
func (m model) limits() (int, int) {
	if len(m.lLocals) > 0 {
		return m.minLimit, m.maxLimit
	}
	return m.l, m.l
}

func (m model) leaseTTL() time.Duration {
	if m.time {
		return time.Duration(m.lease) * modelTick
	}
	return modelTTL
}

func (m model) requestBound() time.Duration {
	if m.time {
		return time.Duration(m.bound) * modelTick
	}
	return 0
}

// ticks converts a time after modelNow to whole ticks, 0 for the past.
func ticks(t time.Time) int {
	if !t.After(modelNow) {
		return 0
	}
	return int(t.Sub(modelNow) / modelTick)
}

// row is the row of node i's current instance, cur its instance token.
func (x *xState) row(i int) (NodeState, bool) {
	return x.coord.Row(modelIDs[i], modelInstances[i][x.nodes[i].inst])
}

// deadRow is the row of node i's other instance token: its predecessor's.
func (x *xState) deadRow(i int) (NodeState, bool) {
	return x.coord.Row(modelIDs[i], modelInstances[i][1-x.nodes[i].inst])
}

// xAction names a transition compactly; it is formatted only for traces.
type xAction struct {
	kind byte
	node int8
	c    int8
	a, b int16
}

const (
	actSend byte = iota
	actHandle
	actHandleStale
	actHandleDeliver
	actRefused
	actReportLost
	actDeliver
	actReplyLost
	actAdmit
	actFinish
	actDrain
	actUndrain
	actEvict
	actSetL
	actTick
	actLeave
	actRestart
)

func (a xAction) String() string {
	id := ""
	if a.node >= 0 {
		id = modelIDs[a.node]
	}
	switch a.kind {
	case actSend:
		return fmt.Sprintf("%s sends a report (in-flight %d, demand %d more, l_local %d)", id, a.a, a.b, a.c)
	case actHandle:
		return fmt.Sprintf("coordinator handles a report of %s: share %d, gen rank %d, lease %d ticks", id, a.a, a.b, a.c)
	case actHandleStale:
		return fmt.Sprintf("coordinator handles a stale report of %s: share %d, gen rank %d", id, a.a, a.b)
	case actHandleDeliver:
		return fmt.Sprintf("coordinator handles a report of %s and %s receives the reply at once: share %d, gen rank %d, lease %d ticks", id, id, a.a, a.b, a.c)
	case actRefused:
		return "coordinator refuses a report of " + id + ": another instance's lease runs"
	case actReportLost:
		return "a report of " + id + " is lost"
	case actDeliver:
		return fmt.Sprintf("%s receives share %d gen rank %d, lease %d ticks", id, a.a, a.b, a.c)
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
	case actTick:
		return "a tick passes"
	case actLeave:
		return fmt.Sprintf("%s leaves with %d in flight", id, a.a)
	case actRestart:
		return fmt.Sprintf("a new instance of %s starts (the old one has %d requests running)", id, a.a)
	}
	return "?"
}

// successors calls emit with every state one action away from x.
func (m model) successors(x *xState, emit func(xAction, *xState)) {
	emitL := func(a xAction, y *xState) {
		if l := y.coord.Key.LGlobal; l != x.coord.Key.LGlobal {
			y.recent[0] = max(y.recent[0], uint8(l))
			y.fell = y.fell || l < x.coord.Key.LGlobal
		}
		emit(a, y)
	}
	for i := range m.nodes {
		m.nodeSuccessors(x, i, emitL)
	}
	if m.time && x.canTick(m) {
		y := *x
		y.coord = x.coord.Clone()
		for j := range y.coord.Nodes {
			n := &y.coord.Nodes[j]
			n.LeaseExpiresAt = n.LeaseExpiresAt.Add(-modelTick)
			n.HoldUntil = n.HoldUntil.Add(-modelTick)
		}
		for i := range m.nodes {
			n := &y.nodes[i]
			n.fence, n.reqLeft, n.orphanLeft = max(0, n.fence-1), max(0, n.reqLeft-1), max(0, n.orphanLeft-1)
			for j := range n.nReplies {
				n.replies[j].lease = max(0, n.replies[j].lease-1)
			}
		}
		copy(y.recent[1:m.window()], y.recent[:m.window()-1])
		y.recent[0] = uint8(y.coord.Key.LGlobal)
		emitL(xAction{kind: actTick, node: -1}, &y)
	}
	for _, l := range m.raises {
		if l > x.coord.Key.MaxLimit {
			y := *x
			y.coord, _ = y.coord.SetLimits(&l, &l)
			emitL(xAction{kind: actSetL, node: -1, a: int16(l)}, &y)
		}
	}
	for _, l := range m.lowers {
		if l < x.coord.Key.MaxLimit {
			y := *x
			y.coord, _ = y.coord.SetLimits(&l, &l)
			emitL(xAction{kind: actSetL, node: -1, a: int16(l)}, &y)
		}
	}
}

// deliver applies reply g to the process: its grant when it is not older
// than the one the process enforces (a node applies grants in the order
// they were issued), and its lease to the fence deadline, which only moves
// forward (fence.Renew).
func (n *xNode) deliver(g xReply) {
	if g.gen >= n.appliedGen {
		n.enforced, n.appliedGen = g.share, g.gen
	}
	n.fence = max(n.fence, g.lease)
}

// canTick reports whether time may pass: every request, of a live
// instance or a dead one, ends before its bound.
func (x *xState) canTick(m model) bool {
	for i := range m.nodes {
		n := &x.nodes[i]
		if n.inflight > 0 && n.reqLeft <= 1 || n.orphans > 0 && n.orphanLeft <= 1 {
			return false
		}
	}
	return true
}

// nodeSuccessors calls emit with every state one action of node i, or of
// the operator on node i, away from x.
func (m model) nodeSuccessors(x *xState, i int, emit func(xAction, *xState)) {
	n := &x.nodes[i]
	id, inst := modelIDs[i], modelInstances[i][n.inst]
	act := func(kind byte, a, b, c int) xAction { return xAction{kind, int8(i), int8(c), int16(a), int16(b)} }
	lLocals := m.lLocals
	if len(lLocals) == 0 {
		lLocals = []int{m.l}
	}

	for _, lLocal := range lLocals {
		for slack := range m.demandSlack + 1 {
			if n.left || n.nReports == m.maxReports {
				break
			}
			y := *x
			yn := &y.nodes[i]
			yn.reports[yn.nReports] = xReport{seq: yn.nextSeq, appliedGen: yn.appliedGen,
				inflight: yn.inflight, demand: yn.inflight + slack, lLocal: lLocal}
			yn.nReports++
			yn.nextSeq++
			emit(act(actSend, yn.inflight, slack, lLocal), &y)
		}
	}
	for j := range n.nReports {
		if j > 0 && n.reports[j] == n.reports[j-1] {
			continue // two equal reports: the same action
		}
		r := n.reports[j]
		y := *x
		yn := &y.nodes[i]
		copy(yn.reports[j:], yn.reports[j+1:])
		yn.nReports--
		yn.reports[yn.nReports] = xReport{}
		lost := y
		emit(act(actReportLost, 0, 0, 0), &lost)
		if _, ok := y.row(i); r.stale && !ok {
			// Its row has gone since it was found stale: handling it
			// would make a fresh row, as losing it and sending a new
			// report does (see the top of exhaustive_test.go).
			continue
		}

		drained := y.coord.drained(id)
		var epoch int64
		if r.appliedGen > 0 {
			epoch = y.coord.Key.Epoch
		}
		next, g, err := y.coord.heartbeat(Report{Key: "k", NodeID: id, Instance: inst, Seq: r.seq, LLocal: r.lLocal,
			Inflight: r.inflight, Demand: r.demand, Epoch: epoch, AppliedGen: r.appliedGen,
			LeaseTTL: m.leaseTTL(), MaxRequestDuration: m.requestBound()},
			modelNow, m.reserveRule(), 0)
		if errors.Is(err, ErrNodeIDInUse) {
			emit(act(actRefused, 0, 0, 0), &y)
			continue
		}
		if err != nil {
			panic(err)
		}
		if next.Key.Epoch != y.coord.Key.Epoch {
			// A report delayed past its row's hold, claiming requests in
			// flight, is taken as evidence of a lost database and starts
			// learning mode, which the model leaves out: such a report is
			// lost instead.
			continue
		}
		y.coord = next
		switch {
		case g.Share > 0 && yn.evicted:
			y.broken = brokenEvicted
		case g.Share > 0 && drained:
			y.broken = brokenDrained
		}
		reply := xReply{share: g.Share, gen: g.Generation}
		if m.time {
			reply.lease = int(g.LeaseRemaining / modelTick)
		}
		kind := actHandle
		if g.Stale {
			kind = actHandleStale
		}
		a := act(kind, g.Share, int(g.Generation), reply.lease)
		switch {
		case m.syncReplies:
			emit(a, &y) // the reply is lost
			yn.deliver(reply)
			a.kind = actHandleDeliver
		case yn.nReplies < m.maxReplies:
			yn.replies[yn.nReplies] = reply
			yn.nReplies++
		}
		emit(a, &y)
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
		emit(act(actReplyLost, 0, 0, 0), &lost)
		yn.deliver(g)
		emit(act(actDeliver, g.share, int(g.gen), g.lease), &y)
	}
	if !n.left && n.inflight < n.enforced && (!m.time || n.fence > 0 || m.unfenced) {
		y := *x
		yn := &y.nodes[i]
		yn.inflight++
		yn.reqLeft = m.bound
		emit(act(actAdmit, yn.inflight, 0, 0), &y)
	}
	if n.inflight > 0 {
		y := *x
		yn := &y.nodes[i]
		yn.inflight--
		if yn.inflight == 0 {
			yn.reqLeft = 0
		}
		emit(act(actFinish, 0, 0, 0), &y)
	}
	if n.orphans > 0 {
		y := *x
		yn := &y.nodes[i]
		yn.orphans--
		if yn.orphans == 0 {
			yn.orphanLeft = 0
		}
		emit(act(actFinish, 0, 0, 0), &y)
	}

	op := func(kind byte, fn func(State) (State, error)) {
		y := *x
		var err error
		if y.coord, err = fn(y.coord); err != nil {
			panic(err)
		}
		emit(act(kind, 0, 0, 0), &y)
	}
	rows := x.coord.rowsOf(id)
	if m.drain && len(rows) > 0 && !x.coord.drained(id) {
		op(actDrain, func(s State) (State, error) { return s.Drain(id) })
	}
	if m.drain && x.coord.drained(id) {
		op(actUndrain, func(s State) (State, error) { return s.Undrain(id) })
	}
	if m.evict {
		for _, row := range rows {
			if !row.Evicted {
				y := *x
				var err error
				if y.coord, err = y.coord.Evict(id); err != nil {
					panic(err)
				}
				if _, ok := x.row(i); ok {
					y.nodes[i].evicted = true
				}
				emit(act(actEvict, 0, 0, 0), &y)
				break
			}
		}
	}

	_, hasRow := x.row(i)
	if m.leave && !n.left && hasRow && (n.inflight == 0 || m.leaveBusy) {
		// A leave: the node admits nothing more and departs with its
		// in-flight and the request bound as its hold (fleet.Node.Stop;
		// with nothing in flight once its requests have ended, or with
		// them when Stop's context ended first). Its pending messages
		// are lost with it; its requests run on.
		d := Departure{Key: "k", NodeID: id, Instance: inst, Inflight: n.inflight, Hold: m.requestBound()}
		if m.leaveForgets {
			d.Inflight = 0
		}
		y := *x
		var err error
		if y.coord, err = y.coord.Leave(d, modelNow); err != nil {
			panic(err)
		}
		y.nodes[i] = xNode{inst: n.inst, left: true, evicted: n.evicted, inflight: n.inflight, reqLeft: n.reqLeft,
			orphans: n.orphans, orphanLeft: n.orphanLeft}
		emit(act(actLeave, n.inflight, 0, 0), &y)
	}
	if m.restart && n.orphans == 0 && (n.inflight == 0 || !m.idleRestart) {
		// The process dies (or has left) and a new one, a new instance,
		// starts for the node id: the old one's requests run on until
		// their bound, its pending messages are lost. While the old
		// instance's lease runs, the new one's reports are refused.
		next := 1 - n.inst
		if m.sameInstance {
			next = n.inst
		}
		if _, taken := x.coord.Row(id, modelInstances[i][next]); !taken || m.sameInstance {
			y := *x
			fresh := xNode{inst: next, orphans: n.inflight, orphanLeft: n.reqLeft}
			if m.sameInstance {
				fresh.nextSeq = n.nextSeq
			}
			y.nodes[i] = fresh
			emit(act(actRestart, n.inflight, 0, 0), &y)
		}
	}
}
