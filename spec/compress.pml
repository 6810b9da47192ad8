/*
 * compress.pml: canonical form. Seqs, instances, epochs and generations
 * only grow, and the rules only compare them (<, =) or take the next one,
 * so the search renames them by rank after every step: states that differ
 * only in those names are one state, and an unbounded run of the fleet
 * has finitely many states.
 *
 *   - seqs (per node id) and instances (per node id): the next value is
 *     always the largest + 1, so ranks keep every comparison;
 *   - epochs: a new epoch is later than every earlier one (learn takes
 *     max(now µs, epoch + 1)), so ranks again;
 *   - generations: the next one is db.gen + 1, and a failover can make
 *     db.gen fall back to the replica's. The pivot P is the replica's
 *     generation (db.gen once no failover can follow); values above it
 *     keep their exact distance to it, so a regressed generation collides
 *     with a forgotten one exactly as it would unrenamed. At or below P
 *     only the order matters, and only among one node id's values (its
 *     reports and grants are compared with its own rows and with db.gen,
 *     never with another node id's): each node id's values <= P are
 *     ranked downwards from GTOP, which stands for P.
 *
 * Traces (TRACE) keep the raw values, which the Go core reproduces. The
 * renaming is an isomorphism (it keeps every comparison), so a short trail
 * found with it replays step for step without it (spin -t -DCOMPRESS=0
 * prints the raw values) as long as the raw values fit their bit fields;
 * spin -t alone replays any trail, with the renamed values.
 */

/* The pivot of the generations, and the generations left before the
 * replica must catch up (see LAGMAX). */
#define PIVOT (fo >= FMAX -> db.gen : (snap.exists -> snap.gen : 0))
#define GENROOM (fo >= FMAX || db.gen + RPN <= PIVOT + LAGMAX)

#define MAXOF(x) hv = MAX2(hv, x);
#define MARK(x) pres[x] = 1; hm = MAX2(hm, x);
#define REMAP(x) x = rk[x];
#define MARKLE(x) if :: x > 0 && x <= hy -> pres[x] = 1; hm = MAX2(hm, x) :: else fi;
/* rk[v] counts the marked values in 1..v, rk[hy] all of them. */
#define REMAPG(x) x = (x == 0 -> 0 : (x <= hy -> GTOP - rk[hy] + rk[x] : GTOP + x - hy));

#define GTOP 16


#define EACH_EP(OP) \
	OP(db.ep) OP(snap.ep) \
	for (hk : 0 .. NROWS-1) { OP(db.row[hk].ep) OP(snap.row[hk].ep) skip }; \
	for (hk : 0 .. NN-1) { OP(nd[hk].ep) OP(nd[hk].gep) \
		for (hj : 0 .. NREP-1) { OP(nd[hk].rep[hj].ep) skip } }

/* Per node id hk. */
#define EACH_GEN(OP) \
	OP(nd[hk].ag) OP(nd[hk].ggen) \
	for (hj : 0 .. NREP-1) { OP(nd[hk].rep[hj].ag) skip }; \
	for (hj : hk*RPN .. hk*RPN+RPN-1) { OP(db.row[hj].gen) OP(snap.row[hj].gen) skip }

/* Per node id hk. */
#define EACH_SEQ(OP) \
	OP(nd[hk].seq) OP(nd[hk].await) \
	for (hj : 0 .. NREP-1) { OP(nd[hk].rep[hj].seq) skip }; \
	for (hj : hk*RPN .. hk*RPN+RPN-1) { OP(db.row[hj].seq) OP(snap.row[hj].seq) skip }

#define EACH_INST(OP) \
	OP(nd[hk].inst) OP(nd[hk].oinst) OP(nd[hk].linst) \
	for (hj : 0 .. NREP-1) { OP(nd[hk].rep[hj].inst) skip }; \
	for (hj : hk*EVN .. hk*EVN+EVN-1) { OP(db.evi[hj]) OP(snap.evi[hj]) skip }; \
	for (hj : hk*RPN .. hk*RPN+RPN-1) { OP(db.row[hj].inst) OP(snap.row[hj].inst) skip }

/* compressGens: see the top of the file. hy is P. */
inline compressGens() {
	hy = PIVOT;
	if
	:: hy > 0 ->
		for (hk : 0 .. NN-1) {
			hm = hy;
			pres[hy] = 1;
			EACH_GEN(MARKLE)
			rankBuild();
			EACH_GEN(REMAPG)
			skip
		};
		db.gen = GTOP + db.gen - hy;
		if
		:: snap.exists -> snap.gen = GTOP + snap.gen - hy
		:: else
		fi
	:: else   /* nothing granted below the pivot: the values stay */
	fi
}

/* rankBuild: rk[v] = how many marked values lie in 1..v; then pres is
 * cleared again. */
inline rankBuild() {
	hz = 0;
	rk[0] = 0;
	for (hq : 1 .. hm) {
		hz = hz + pres[hq];
		rk[hq] = hz;
		pres[hq] = 0
	};
	pres[0] = 0
}

/* gcEvictions forgets evicted instances that can never report or leave
 * again (the database keeps them for good; no later step reads them),
 * keeping each node id's entries sorted. */
inline gcEvictions() {
	for (hq : 0 .. NN-1) {
		for (hj : hq*EVN .. hq*EVN+EVN-1) {
			if
			:: db.evi[hj] != 0 && DEADINST(hq, db.evi[hj]) -> db.evi[hj] = 0
			:: else
			fi;
			if
			:: snap.evi[hj] != 0 && DEADINST(hq, snap.evi[hj]) -> snap.evi[hj] = 0
			:: else
			fi
		};
#if EVN == 2
		if
		:: db.evi[hq*EVN] == 0 && db.evi[hq*EVN+1] != 0 || db.evi[hq*EVN] != 0 && db.evi[hq*EVN+1] != 0 && db.evi[hq*EVN] > db.evi[hq*EVN+1] ->
			hx = db.evi[hq*EVN]; db.evi[hq*EVN] = db.evi[hq*EVN+1]; db.evi[hq*EVN+1] = hx
		:: else
		fi;
		if
		:: snap.evi[hq*EVN] == 0 && snap.evi[hq*EVN+1] != 0 || snap.evi[hq*EVN] != 0 && snap.evi[hq*EVN+1] != 0 && snap.evi[hq*EVN] > snap.evi[hq*EVN+1] ->
			hx = snap.evi[hq*EVN]; snap.evi[hq*EVN] = snap.evi[hq*EVN+1]; snap.evi[hq*EVN+1] = hx
		:: else
		fi;
#endif
		skip
	}
}

inline normalize() {
#ifndef TRACE
	if
	:: compressOn ->
		gcEvictions();
		hm = 0; EACH_EP(MARK) rankBuild(); EACH_EP(REMAP)
		compressGens();
		for (hk : 0 .. NN-1) {
			hm = 0; EACH_SEQ(MARK) rankBuild(); EACH_SEQ(REMAP)
			hm = 0; EACH_INST(MARK) rankBuild(); EACH_INST(REMAP)
			skip
		}
	:: else
	fi;
#endif
	sortReps();
	symmetry()
}

/* The reports of a node id are a bag: kept sorted by (instance, seq),
 * which names a report, used slots first. */
#define REPF(OP, i, a, b) OP(i, a, b, used) OP(i, a, b, inst) OP(i, a, b, seq) OP(i, a, b, ll) \
	OP(i, a, b, inf) OP(i, a, b, dem) OP(i, a, b, ep) OP(i, a, b, ag)
#define SWAPREP(i, a, b, f) hx = nd[i].rep[a].f; nd[i].rep[a].f = nd[i].rep[b].f; nd[i].rep[b].f = hx;
#define CLEARREP(i, a, b, f) nd[i].rep[a].f = 0;
#define COPYREP(i, a, b, f) nd[i].rep[a].f = nd[i].rep[b].f;
#define REPAFTER(i, a, b) (!nd[i].rep[a].used && nd[i].rep[b].used || \
	nd[i].rep[a].used && nd[i].rep[b].used && (nd[i].rep[a].inst > nd[i].rep[b].inst || \
	nd[i].rep[a].inst == nd[i].rep[b].inst && nd[i].rep[a].seq > nd[i].rep[b].seq))

inline sortReps() {
	for (hk : 0 .. NN-1) {
		for (hw : 1 .. NREP-1) {
			for (hj : 0 .. NREP-2) {
				if
				:: REPAFTER(hk, hj, hj+1) -> REPF(SWAPREP, hk, hj, hj+1) skip
				:: else
				fi
			}
		}
	}
}

/* newInst: an instance token no row or message of the node id carries. */
inline newInst(I) {
#ifdef TRACE
	ictr[I]++;
	hv = ictr[I];
#else
	hk = I;
	hv = 0;
	EACH_INST(MAXOF)
	hv++;
#endif
}
