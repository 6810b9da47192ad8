package coord

import (
	"bytes"
	"slices"
	"time"
)

// The canonical encoding of the exhaustive test's states (see the top of
// exhaustive_test.go for why it is sound).

// Sizes of the parts of a node's block in an encoding.
const (
	xRowBytes     = 10 // the current instance's row
	xDeadRowBytes = 8  // the predecessor's row
	xProcBytes    = 11 // the process
	xReportBytes  = 5
	xReplyBytes   = 3
	xNodeBytes    = xRowBytes + xDeadRowBytes + xProcBytes + xReportBytes*xMaxMsgs + xReplyBytes*xMaxMsgs
)

// xMaxGenRank bounds the rank of a generation among one node's.
const xMaxGenRank = 3 + 2*xMaxMsgs

// Flags of a row.
const (
	xPresent byte = 1 << iota
	xDraining
	xEvicted
	xDeparted
	xMeasuring
)

// Flags of a process.
const (
	xLeft byte = 1 << iota
	xDrained
	xEvictionKept
	xProcEvicted
)

// encode appends the canonical encoding of x to buf. Decoding it yields x
// in canonical form, its nodes possibly renamed.
func (m model) encode(x *xState, buf []byte) []byte {
	var rows, dead [xMaxNodes]*NodeState
	for j := range x.coord.Nodes {
		r := &x.coord.Nodes[j]
		i := r.NodeID[1] - '0'
		if r.Instance == modelInstances[i][x.nodes[i].inst] {
			rows[i] = r
		} else {
			dead[i] = r
		}
	}
	// What a node enforces, and its applied generation, as far as they
	// can still matter (see the top of exhaustive_test.go).
	var enforced [xMaxNodes]int
	var applied [xMaxNodes]int64
	for i := range m.nodes {
		n := &x.nodes[i]
		enforced[i], applied[i] = n.enforced, n.appliedGen
		if !m.time || m.unfenced {
			continue
		}
		renewing := false
		for j := range n.nReplies {
			renewing = renewing || n.replies[j].lease > 0
		}
		if n.fence == 0 && !renewing {
			enforced[i] = 0
		}
		if rows[i] == nil && n.inflight == 0 {
			enforced[i], applied[i] = 0, 0
		}
	}
	stale := func(i int, r *xReport) bool { return r.stale || rows[i] != nil && r.seq <= rows[i].Seq }
	useful := func(i int, r *xReply) bool {
		if m.time && !m.unfenced && rows[i] == nil && x.nodes[i].inflight == 0 {
			return false
		}
		return r.gen > applied[i] || enforced[i] > 0 && r.lease > x.nodes[i].fence
	}

	rowFlags := func(r *NodeState) byte {
		f := xPresent
		for _, b := range []struct {
			on   bool
			flag byte
		}{{r.Draining, xDraining}, {r.Evicted, xEvicted}, {r.Departed, xDeparted}, {len(m.lLocals) > 0 && r.Member(modelNow) && r.Measuring, xMeasuring}} {
			if b.on {
				f |= b.flag
			}
		}
		return f
	}
	// A row's l_local is read only while it is a member that votes, or
	// by the first heartbeat (L_global 0), and only as clamped by the
	// operator's bounds, which are fixed when l_local varies.
	k := x.coord.Key
	lLocal := func(r *NodeState) byte {
		if len(m.lLocals) == 0 || !r.Member(modelNow) || !r.Measuring && k.LGlobal > 0 {
			return 0
		}
		return byte(k.clamp(r.LLocal))
	}
	// A report's l_local likewise. With one report pending, a report with
	// nothing in flight of a row without a share (or of no row) will not
	// vote: only its own reports give the row a share.
	reportLLocal := func(i int, r *xReport) byte {
		if len(m.lLocals) == 0 || m.maxReports == 1 && k.LGlobal > 0 && r.inflight == 0 && (rows[i] == nil || rows[i].Share == 0) {
			return 0
		}
		return byte(k.clamp(r.lLocal))
	}
	times := func(r *NodeState) (byte, byte) {
		if !m.time {
			return 0, 0
		}
		return byte(ticks(r.LeaseExpiresAt)), byte(ticks(r.HoldUntil))
	}

	// Demand is read as eligibility (> 0) and in the split R·d/D with R =
	// max(0, L − n) for n eligible members: while L ≤ 2, R is 0 when n ≥
	// 2 and d = D when n = 1, so only whether a demand is positive
	// matters.
	demand := func(d int) byte {
		if m.maxL() <= 2 {
			return byte(min(d, 1))
		}
		return byte(d)
	}
	// A row's in-flight is read only in its reserve, max(UnackedHigh,
	// Share, Inflight), and UnackedHigh ≥ Share stays until its own
	// next report replaces Inflight: in-flight at or below UnackedHigh
	// is never read.
	rowInflight := func(r *NodeState) byte {
		if m.reserve == nil && r.Inflight <= r.UnackedHigh {
			return 0
		}
		return byte(r.Inflight)
	}

	var blocks [xMaxNodes][xNodeBytes]byte
	for i := range m.nodes {
		n := &x.nodes[i]
		var genBuf [3 + 2*xMaxMsgs]int64
		gens := append(genBuf[:0], 0, applied[i])
		if rows[i] != nil {
			gens = append(gens, rows[i].GrantedGen)
		}
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
		slices.Sort(gens)
		gens = slices.Compact(gens)
		gen := func(v int64) byte { i, _ := slices.BinarySearch(gens, v); return byte(i) }

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
			lease, hold := times(row)
			b = append(b, rowFlags(row), seq(row.Seq), rowInflight(row), demand(row.Demand),
				byte(row.Share), gen(row.GrantedGen), byte(row.UnackedHigh), lLocal(row), lease, hold)
		} else {
			b = append(b, make([]byte, xRowBytes)...)
		}
		if row := dead[i]; row != nil {
			lease, hold := times(row)
			b = append(b, rowFlags(row), rowInflight(row), demand(row.Demand), byte(row.Share),
				byte(row.UnackedHigh), lLocal(row), lease, hold)
		} else {
			b = append(b, make([]byte, xDeadRowBytes)...)
		}

		var reps [xMaxMsgs][xReportBytes]byte
		nr := 0
		for j := range n.nReports {
			r := &n.reports[j]
			if stale(i, r) {
				reps[nr] = [xReportBytes]byte{0, 255, 255, 255, 255}
			} else {
				reps[nr] = [xReportBytes]byte{seq(r.seq), byte(r.inflight), demand(r.demand), gen(r.appliedGen), reportLLocal(i, r)}
			}
			nr++
		}
		slices.SortFunc(reps[:nr], func(a, b [xReportBytes]byte) int { return bytes.Compare(a[:], b[:]) })
		var rpls [xMaxMsgs][xReplyBytes]byte
		np := 0
		for j := range n.nReplies {
			if r := &n.replies[j]; useful(i, r) {
				rpls[np] = [xReplyBytes]byte{gen(r.gen), byte(r.share), byte(r.lease)}
				np++
			}
		}
		slices.SortFunc(rpls[:np], func(a, b [xReplyBytes]byte) int { return bytes.Compare(a[:], b[:]) })

		var flags byte
		if n.left {
			flags |= xLeft
		}
		if x.coord.drained(modelIDs[i]) {
			flags |= xDrained
		}
		if !n.left && x.coord.evicted(modelIDs[i], modelInstances[i][n.inst]) {
			flags |= xEvictionKept
		}
		if n.evicted && !n.left {
			flags |= xProcEvicted
		}
		reqLeft, orphanLeft := n.reqLeft, n.orphanLeft
		if n.inflight == 0 {
			reqLeft = 0
		}
		if n.orphans == 0 {
			orphanLeft = 0
		}
		fence := n.fence
		if enforced[i] == 0 || m.unfenced {
			fence = 0
		}
		b = append(b, byte(n.inflight), byte(enforced[i]), gen(applied[i]), seq(n.nextSeq), byte(fence),
			byte(reqLeft), flags, byte(n.orphans), byte(orphanLeft), byte(nr), byte(np))
		for _, r := range reps[:nr] {
			b = append(b, r[:]...)
		}
		for _, r := range rpls[:np] {
			b = append(b, r[:]...)
		}
	}
	sorted := blocks[:m.nodes]
	slices.SortFunc(sorted, func(a, b [xNodeBytes]byte) int { return bytes.Compare(a[:], b[:]) })

	fell := byte(0)
	if x.fell {
		fell = 1
	}
	buf = append(buf, byte(k.LGlobal), byte(k.MinLimit), byte(k.MaxLimit), fell)
	buf = append(buf, x.recent[:m.window()]...)
	for _, b := range sorted {
		buf = append(buf, b[:]...)
	}
	return buf
}

// decode rebuilds the state encode wrote; it returns the rest of b. Each
// node runs as its first instance token, its predecessor's row under the
// second.
func (m model) decode(b []byte) (xState, []byte) {
	s := NewState("k", modelNow)
	s.Key.LGlobal = int(b[0])
	s.Key.Generation = xMaxGenRank // above every node's ranks
	s.Key.MinLimit, s.Key.MaxLimit = int(b[1]), int(b[2])
	s.Key.MaxLeaseTTL, s.Key.MaxRequestDuration = m.leaseTTL(), m.requestBound()
	x := xState{coord: s, fell: b[3] != 0}
	b = b[4:]
	b = b[copy(x.recent[:m.window()], b):]
	for i := range m.nodes {
		block := b[:xNodeBytes]
		b = b[xNodeBytes:]
		next := func() int64 { v := block[0]; block = block[1:]; return int64(v) }
		row := func(instance string, flags byte) NodeState {
			r := NodeState{NodeID: modelIDs[i], Instance: instance, LLocal: m.l, Epoch: s.Key.Epoch,
				Draining: flags&xDraining != 0, Evicted: flags&xEvicted != 0, Departed: flags&xDeparted != 0,
				Measuring:      flags&xMeasuring != 0,
				LeaseExpiresAt: modelNow.Add(modelTTL), HoldUntil: modelNow.Add(modelTTL),
				JoinedAt: modelNow, HeartbeatAt: modelNow}
			return r
		}
		setTimes := func(r *NodeState, lLocal, lease, hold int64) {
			if lLocal > 0 {
				r.LLocal = int(lLocal)
			}
			if m.time {
				r.LeaseExpiresAt = modelNow.Add(time.Duration(lease) * modelTick)
				r.HoldUntil = modelNow.Add(time.Duration(hold) * modelTick)
			}
		}

		flags := byte(next())
		cur := row(modelInstances[i][0], flags)
		cur.Seq, cur.Inflight, cur.Demand = next(), int(next()), int(next())
		cur.Share, cur.GrantedGen, cur.UnackedHigh = int(next()), next(), int(next())
		setTimes(&cur, next(), next(), next())
		if flags != 0 {
			x.coord.Nodes = append(x.coord.Nodes, cur)
		}
		flags = byte(next())
		old := row(modelInstances[i][1], flags)
		old.Inflight, old.Demand, old.Share, old.UnackedHigh = int(next()), int(next()), int(next()), int(next())
		setTimes(&old, next(), next(), next())
		if flags != 0 {
			x.coord.Nodes = append(x.coord.Nodes, old)
		}

		n := &x.nodes[i]
		n.inflight, n.enforced, n.appliedGen, n.nextSeq = int(next()), int(next()), next(), next()
		n.fence, n.reqLeft = int(next()), int(next())
		flags = byte(next())
		n.left = flags&xLeft != 0
		n.evicted = flags&xProcEvicted != 0
		if flags&xDrained != 0 {
			x.coord.Drains = append(x.coord.Drains, modelIDs[i])
		}
		if flags&xEvictionKept != 0 {
			x.coord.Evictions = append(x.coord.Evictions, Instance{modelIDs[i], modelInstances[i][0]})
		}
		n.orphans, n.orphanLeft = int(next()), int(next())
		n.nReports, n.nReplies = int(next()), int(next())
		for j := range n.nReports {
			r := &n.reports[j]
			r.seq, r.inflight, r.demand, r.appliedGen, r.lLocal = next(), int(next()), int(next()), next(), int(next())
			if r.lLocal == 0 {
				r.lLocal = m.l
			}
			if r.inflight == 255 {
				*r = xReport{lLocal: m.l, stale: true} // seq 0 is not above the row's
			}
		}
		for j := range n.nReplies {
			n.replies[j].gen, n.replies[j].share, n.replies[j].lease = next(), int(next()), int(next())
		}
	}
	return x, b
}
