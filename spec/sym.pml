/*
 * sym.pml: symmetry reduction. Node ids are interchangeable: every
 * process of node id i runs the same code on node id i's data, and the
 * coordinator treats node ids alike (drain and evict act on one node id's
 * rows, in instance order). So the search keeps the node ids' data sorted:
 * states that differ by a renaming of node ids are one state. The hidden
 * array nm keeps each slot's original name for printing, so a trail reads
 * with stable names. Off in LIVE mode, where node 0 is special, in
 * traces, and with NOSYM (make spec searches the mutants with NOSYM, so
 * that their trails replay without any renaming of node ids).
 */

#define CMPX(x, y) if :: hv == 0 && x < y -> hv = 1 :: hv == 0 && x > y -> hv = 2 :: else fi;
#define SWPX(x, y) hx = x; x = y; y = hx;

#define ROW_PAIRS(OP, D, a, b) \
	OP(D.row[a].used, D.row[b].used) OP(D.row[a].dr, D.row[b].dr) OP(D.row[a].ev, D.row[b].ev) \
	OP(D.row[a].dep, D.row[b].dep) OP(D.row[a].inst, D.row[b].inst) OP(D.row[a].seq, D.row[b].seq) \
	OP(D.row[a].ll, D.row[b].ll) OP(D.row[a].inf, D.row[b].inf) OP(D.row[a].dem, D.row[b].dem) \
	OP(D.row[a].share, D.row[b].share) OP(D.row[a].ep, D.row[b].ep) OP(D.row[a].gen, D.row[b].gen) \
	OP(D.row[a].unack, D.row[b].unack) OP(D.row[a].lease, D.row[b].lease) OP(D.row[a].hold, D.row[b].hold)

#define NODE_PAIRS(OP, a, b) \
	OP(nd[a].phase, nd[b].phase) OP(nd[a].inst, nd[b].inst) OP(nd[a].seq, nd[b].seq) \
	OP(nd[a].await, nd[b].await) OP(nd[a].joined, nd[b].joined) OP(nd[a].evicted, nd[b].evicted) \
	OP(nd[a].fenced, nd[b].fenced) OP(nd[a].share, nd[b].share) OP(nd[a].ep, nd[b].ep) \
	OP(nd[a].ag, nd[b].ag) OP(nd[a].dl, nd[b].dl) OP(nd[a].ll, nd[b].ll) OP(nd[a].off, nd[b].off) \
	OP(nd[a].inf, nd[b].inf) OP(nd[a].rem, nd[b].rem) OP(nd[a].oinst, nd[b].oinst) \
	OP(nd[a].oinf, nd[b].oinf) OP(nd[a].orem, nd[b].orem) OP(nd[a].gkind, nd[b].gkind) \
	OP(nd[a].gshare, nd[b].gshare) OP(nd[a].gep, nd[b].gep) OP(nd[a].ggen, nd[b].ggen) \
	OP(nd[a].grem, nd[b].grem) OP(nd[a].lv, nd[b].lv) OP(nd[a].linst, nd[b].linst) \
	OP(nd[a].linf, nd[b].linf) OP(db.drain[a], db.drain[b]) OP(snap.drain[a], snap.drain[b]) \
	OP(drG[a], drG[b]) OP(evG[a], evG[b]) \
	for (hq : 0 .. EVN-1) { OP(db.evi[(a)*EVN+hq], db.evi[(b)*EVN+hq]) OP(snap.evi[(a)*EVN+hq], snap.evi[(b)*EVN+hq]) skip }; \
	for (hq : 0 .. NREP-1) { \
		OP(nd[a].rep[hq].used, nd[b].rep[hq].used) OP(nd[a].rep[hq].inst, nd[b].rep[hq].inst) \
		OP(nd[a].rep[hq].seq, nd[b].rep[hq].seq) OP(nd[a].rep[hq].ll, nd[b].rep[hq].ll) \
		OP(nd[a].rep[hq].inf, nd[b].rep[hq].inf) OP(nd[a].rep[hq].dem, nd[b].rep[hq].dem) \
		OP(nd[a].rep[hq].ep, nd[b].rep[hq].ep) OP(nd[a].rep[hq].ag, nd[b].rep[hq].ag) skip }; \
	for (hq : 0 .. RPN-1) { \
		ROW_PAIRS(OP, db, (a)*RPN+hq, (b)*RPN+hq) ROW_PAIRS(OP, snap, (a)*RPN+hq, (b)*RPN+hq) skip }

/* symSort2 puts node ids a < b in order. */
inline symSort2(a, b) {
	hv = 0;
	NODE_PAIRS(CMPX, a, b)
	if
	:: hv == 2 ->
		NODE_PAIRS(SWPX, a, b)
		hx = nm[a]; nm[a] = nm[b]; nm[b] = hx
	:: else
	fi
}

inline symmetry() {
#if !defined(LIVE) && !defined(TRACE) && !defined(NOSYM)
	if
	:: compressOn ->
		symSort2(0, 1);
#if NN > 2
		symSort2(1, 2);
		symSort2(0, 1);
#endif
		skip
	:: else
	fi;
#endif
	skip
}
