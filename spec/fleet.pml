/*
 * fleet.pml: a Promela model of fleetlimit's coordination protocol as
 * docs/design.md describes it and the code implements it (coord, fence,
 * fleet). docs/design.md §16 and spec/README.md say what it models, which
 * properties it checks and how to run it; `make spec` checks it.
 *
 * Processes (each action is one atomic step):
 *   node[i]  the process of node id i: heartbeats, grants, the fence,
 *            admissions, Stop and leave, crash and restart as a new
 *            instance, its l_local and its clock; and the provider ending
 *            its requests;
 *   link[i]  the network and the database for node id i's messages:
 *            each report is handled (a heartbeat transaction), lost or
 *            duplicated, in any order; replies and departures likewise;
 *   oper[i]  the operator on node id i: drain, undrain, evict;
 *   env      the operator's limits, the replica and failovers;
 *   clock    time.
 */

#include "config.pml"
#include "state.pml"
#include "sym.pml"
#include "compress.pml"
#include "coord.pml"

#define UP(i)      (nd[i].phase != DOWN)
#define FREEREP(i) (!nd[i].rep[NREP-1].used)
/* The node's clock may move on: no request of it is at its bound. */
#define CANADV(i)  ((nd[i].inf == 0 || nd[i].rem > 0) && (nd[i].oinf == 0 || nd[i].orem > 0))

/* Admission (fleet.Node.admissionErr, adaptive.Limiter): running, joined,
 * not evicted, below min(share, l_local), and before the fence deadline,
 * which the limiter compares with its clock at every admission. */
#ifdef MUT_TIMER_FENCE
/* (b) the fence is checked only by its timer: admission reads the flag the
 * timer sets, and a frozen node resumes with its timer late. */
#define FENCEOK(i) (!nd[i].fenced)
#else
#define FENCEOK(i) (nd[i].dl > 0)
#endif
#define CANADMIT(i) (nd[i].phase == RUN && nd[i].joined && !nd[i].evicted && \
	nd[i].inf < nd[i].share && nd[i].inf < nd[i].ll && FENCEOK(i))

/* Traces: random simulation would pick the operator and the clock as often
 * as the fleet; these gates make heartbeats the common step. */
#ifdef TRACE
#define OPGATE && (tgate % 6 == 5)
#define TICKGATE && (tgate >= tlast + 4)
#define GATESTEP tgate++;
#else
#define OPGATE
#define TICKGATE
#define GATESTEP
#endif

#ifdef LIVE
#define NOFAULT && !stable
#define ONEBEAT(i) && !beat[i]
#define ONEADMIT(i) && !admitted[i]
#else
#define NOFAULT
#define ONEBEAT(i)
#define ONEADMIT(i)
#endif

/* ---------------------------------------------------------------- checks */

/* The promise (docs/design.md §1, §12): Σ requests in flight at the
 * provider ≤ the largest L_global of the last WIN ticks (= L_global itself
 * while it is fixed or rising), and ≤ the operator's max likewise. */
inline check() {
	hx = 0;
	for (hk : 1 .. LCAP) {
		if
		:: lgAge[hk] <= WIN -> hx = hk
		:: else
		fi
	};
	hy = (opNoneAge <= WIN -> 255 : OPMAX);
	if
	:: tot > hx ->
		printf("VIOLATION t=%d: %d requests in flight at the provider > %d, the largest L_global of the last %d ticks\n",
			T, tot, hx, WIN)
	:: tot > hy ->
		printf("VIOLATION t=%d: %d requests in flight at the provider > the operator's max %d\n", T, tot, hy)
	:: else
	fi;
	assert(tot <= hx && tot <= hy);
#ifndef NOLEMMA
	if
	:: !lost -> lemma()
	:: else
	fi;
#endif
	skip
}

/* checkDelete: a delete without force takes the key from no fleet that
 * runs on it (docs/design.md §9): when it succeeds no instance has a
 * request in flight and none holds a grant it may still admit under; one
 * that did would re-create the key without the operator's limits at its
 * next heartbeat, beside requests the new key knows nothing of. */
inline checkDelete() {
	for (hj : 0 .. NN-1) {
		if
		:: nd[hj].inf > 0 || nd[hj].oinf > 0 || (UP(hj) && nd[hj].joined && !nd[hj].evicted && FENCEOK(hj)) ->
			printf("VIOLATION t=%d: the key is deleted while n%d holds a grant (fence deadline in %d ticks) or has requests in flight (%d, %d)\n",
				T, nm[hj], nd[hj].dl, nd[hj].inf, nd[hj].oinf);
			assert(false)
		:: else
		fi
	}
}

/* noteL: L_global is db.lg from now on (a heartbeat, a failover). */
inline noteL() {
	if
	:: db.exists ->
		for (hk : 1 .. LCAP) {
			if
			:: hk <= db.lg -> lgAge[hk] = 0
			:: else
			fi
		}
	:: else
	fi;
	if
	:: !db.exists || db.opmax == 0 -> opNoneAge = 0
	:: else
	fi
}

/* The lemma (docs/design.md §5, §6): an instance's requests in flight
 * never exceed its row's reserve; once the row's hold has ended (or the
 * row is gone) it has none. Not after a failover: §10 argues differently. */
inline lemma() {
	for (hj : 0 .. NN-1) {
		if
		:: nd[hj].inf > 0 ->
			findRow(hj, nd[hj].inst);
			if
			:: hs == NOSLOT || nd[hj].inf > RESERVE(db.row[hs]) ->
				printf("VIOLATION t=%d: n%d has %d in flight above its row's reserve\n", T, nm[hj], nd[hj].inf);
				assert(false)
			:: else
			fi
		:: else
		fi;
		if
		:: nd[hj].oinf > 0 ->
			hw = nd[hj].oinf;
			findRow(hj, nd[hj].oinst);
			if
			:: hs == NOSLOT || hw > RESERVE(db.row[hs]) ->
				printf("VIOLATION t=%d: a dead instance of n%d has %d in flight above its row's reserve\n", T, nm[hj], hw);
				assert(false)
			:: else
			fi
		:: else
		fi
	}
}

/* --------------------------------------------------------------- printing */

inline printGrant(I, J) {
	if
	:: hkind == G_INUSE ->
		printf("t=%d   db: n%d i%d seq %d refused: ErrNodeIDInUse\n", T, nm[I], nd[I].rep[J].inst, nd[I].rep[J].seq)
	:: else ->
		printf("t=%d   db: n%d i%d seq %d -> share %d (L_global %d, epoch %d gen %d, lease %d, status %d, stale %d, learning %d)\n",
			T, nm[I], nd[I].rep[J].inst, nd[I].rep[J].seq, hshare, hlg, hep, hgen, hrem, hstatus,
			hkind == G_STALE, hlearn)
	fi;
	printf("@@ hb %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n",
		T, I, nd[I].rep[J].inst, nd[I].rep[J].seq, nd[I].rep[J].ll, nd[I].rep[J].inf, nd[I].rep[J].dem,
		nd[I].rep[J].ep, nd[I].rep[J].ag,
		hkind, hshare, hlg, hep, hgen, hrem, hstatus, hlearn, hpinf, hlive)
}

/* ------------------------------------------------------------- the node */

inline sendReport(I, D) {
	nd[I].seq++;
	hx = nd[I].inf + D;
	if
	:: nd[I].phase == NEW -> hx = MAX2(hx, 1)
	:: nd[I].phase == STOPPING -> hx = 0
	:: else
	fi;
#ifdef LIVE
	if
	:: I == 0 -> hx = MAX2(hx, 1)   /* node 0 always has demand */
	:: else
	fi;
#endif
#if LCAP <= 2 && !defined(TRACE)
	/* With L_global <= 2 no rest is left to split among two nodes with
	 * demand: every target is 1, or L_global for a node alone with
	 * demand. How much demand a node has never matters, only whether it
	 * has any. */
	hx = MIN2(hx, 1);
#endif
	nd[I].rep[NREP-1].used = 1;
	nd[I].rep[NREP-1].inst = nd[I].inst;
	nd[I].rep[NREP-1].seq = nd[I].seq;
	nd[I].rep[NREP-1].ll = nd[I].ll;
	nd[I].rep[NREP-1].inf = nd[I].inf;
	nd[I].rep[NREP-1].dem = hx;
	nd[I].rep[NREP-1].ep = nd[I].ep;
	nd[I].rep[NREP-1].ag = nd[I].ag;
	nd[I].await = nd[I].seq;
	printf("t=%d n%d i%d sends report seq %d: l_local %d, in flight %d, demand %d, applied epoch %d gen %d\n",
		T, nm[I], nd[I].inst, nd[I].seq, nd[I].ll, nd[I].inf, hx, nd[I].ep, nd[I].ag);
	normalize()
}

/* applyReply: fleet.Node.apply and fence.Renew/Evict. The node also
 * ignores a grant of an earlier generation of the epoch it applied last
 * (Node.olderGrant); here a node takes only the reply to the report it
 * awaits, whose generation is never older, so that rule never acts. */
inline applyReply(I) {
	if
	:: nd[I].gkind == G_INUSE ->
		printf("t=%d n%d i%d: heartbeat failed (node id in use)\n", T, nm[I], nd[I].inst)
	:: nd[I].gkind == G_STALE ->
		printf("t=%d n%d i%d: stale grant ignored\n", T, nm[I], nd[I].inst)
	:: else ->
		/* The deadline: send time + lease remaining - margin, on the
		 * node's clock; it only moves forward. The reply comes within
		 * the tick of the send (see advance). */
		hx = nd[I].grem - MARGIN;
		if
		:: hx > nd[I].dl -> nd[I].dl = hx
		:: else
		fi;
#ifdef MUT_TIMER_FENCE
		if
		:: nd[I].fenced && !nd[I].evicted && nd[I].dl > 0 -> nd[I].fenced = 0
		:: else
		fi;
#endif
		if
		:: nd[I].gkind == G_EVICTED ->
			nd[I].evicted = 1;
#ifdef MUT_TIMER_FENCE
			nd[I].fenced = 1;
#endif
			skip
		:: else
		fi;
		nd[I].joined = 1;
		nd[I].share = nd[I].gshare;
		nd[I].ep = nd[I].gep;
		nd[I].ag = nd[I].ggen;
		printf("t=%d n%d i%d applies share %d (epoch %d gen %d): fence deadline in %d ticks\n",
			T, nm[I], nd[I].inst, nd[I].share, nd[I].ep, nd[I].ag, nd[I].dl);
		if
		:: nd[I].gkind == G_EVICTED -> printf("t=%d n%d i%d is evicted: fenced for good\n", T, nm[I], nd[I].inst)
		:: else
		fi
	fi;
	if
	:: nd[I].phase == NEW && nd[I].gkind != G_INUSE -> nd[I].phase = RUN
	:: else
	fi;
#ifdef LIVE
	if
	:: stable -> beat[I] = 1
	:: else
	fi;
#endif
	clearReply(I);
	normalize()
}

inline clearReply(I) {
	nd[I].await = 0;
	nd[I].gkind = G_NONE; nd[I].gshare = 0; nd[I].gep = 0; nd[I].ggen = 0; nd[I].grem = 0
}

/* advance: the node's clock moves one tick. */
inline advance(I) {
	if
	:: nd[I].inf > 0 -> nd[I].rem--
	:: else
	fi;
	if
	:: nd[I].oinf > 0 -> nd[I].orem--
	:: else
	fi;
	if
	:: nd[I].dl > 0 -> nd[I].dl--
	:: else
	fi;
	/* A heartbeat call times out within a tick (HeartbeatTimeout is at
	 * most a heartbeat interval): a reply that comes later is dropped, and
	 * the report may still reach the database. */
	if
	:: nd[I].await != 0 ->
		printf("t=%d n%d i%d: heartbeat seq %d times out\n", T, nm[I], nd[I].inst, nd[I].await);
		clearReply(I)
	:: else
	fi
}

/* goDown: the process ends (crash, or after its leave); its requests run
 * on at the provider. */
inline goDown(I) {
	if
	:: nd[I].inf > 0 ->
		nd[I].oinst = nd[I].inst; nd[I].oinf = nd[I].inf; nd[I].orem = nd[I].rem
	:: else
	fi;
	nd[I].phase = DOWN; nd[I].inst = 0; nd[I].seq = 0; nd[I].joined = 0; nd[I].evicted = 0;
	nd[I].fenced = 0; nd[I].share = 0; nd[I].ep = 0; nd[I].ag = 0; nd[I].dl = 0;
	nd[I].inf = 0; nd[I].rem = 0;
	clearReply(I);
	evG[I] = 0
}

inline endReq(I) {
	nd[I].inf--;
	if
	:: nd[I].inf == 0 -> nd[I].rem = 0
	:: else
	fi;
	tot--;
	printf("t=%d n%d: a request ends (%d in flight at the provider)\n", T, nm[I], tot)
}

inline endOld(I) {
	nd[I].oinf--;
	if
	:: nd[I].oinf == 0 -> nd[I].orem = 0; nd[I].oinst = 0
	:: else
	fi;
	tot--;
	printf("t=%d n%d: a request of a dead instance ends (%d in flight at the provider)\n", T, nm[I], tot)
}

/* AWAITED(i): the report the node waits for a reply to is in the network. */
#define AWAITEDREP(i, j) (nd[i].rep[j].used && nd[i].rep[j].inst == nd[i].inst && nd[i].rep[j].seq == nd[i].await)
#if NREP == 1
#define AWAITED(i) (AWAITEDREP(i, 0))
#elif NREP == 2
#define AWAITED(i) (AWAITEDREP(i, 0) || AWAITEDREP(i, 1))
#else
#define AWAITED(i) (AWAITEDREP(i, 0) || AWAITEDREP(i, 1) || AWAITEDREP(i, 2))
#endif

#define ME me
proctype node(byte me) {
end:
	do
	/* Heartbeats (fleet.Node.beat): one call at a time. */
	:: d_step { UP(ME) && nd[ME].await == 0 && FREEREP(ME) ONEBEAT(ME) -> sendReport(ME, 0) }
#if DSLACK > 0
	:: d_step { nd[ME].phase == RUN && nd[ME].await == 0 && FREEREP(ME) ONEBEAT(ME) -> sendReport(ME, DSLACK) }
#endif
	:: d_step { nd[ME].gkind != G_NONE -> applyReply(ME) }
	/* The call times out: a reply that comes later is dropped. */
#ifdef LIVE
	:: d_step { nd[ME].await != 0 && nd[ME].gkind == G_NONE && (!stable || !AWAITED(ME)) ->
#else
	:: d_step { nd[ME].await != 0 && nd[ME].gkind == G_NONE ->
#endif
		printf("t=%d n%d i%d: heartbeat seq %d times out\n", T, nm[ME], nd[ME].inst, nd[ME].await);
		clearReply(ME);
		normalize() }

	/* Admissions, and the provider ending requests. */
	:: d_step { CANADMIT(ME) ONEADMIT(ME) ->
		GATESTEP
		nd[ME].inf++;
		nd[ME].rem = BOUND-1;
		tot++;
#ifdef LIVE
		if
		:: stable -> admitted[ME] = 1
		:: else
		fi;
#endif
		printf("t=%d n%d i%d admits a request (%d in flight at the node, %d at the provider)\n",
			T, nm[ME], nd[ME].inst, nd[ME].inf, tot);
		check();
		symmetry() }
	:: d_step { nd[ME].inf > 0 -> endReq(ME); symmetry() }
	:: d_step { nd[ME].oinf > 0 -> endOld(ME); normalize() }

	/* Stop: no admissions, heartbeats with demand 0 until drained or
	 * until its context ends; then the departure. (A Stop during Start
	 * makes Start leave after its first heartbeat: NEW may stop too.) */
#if STOP
	:: d_step { (nd[ME].phase == RUN || nd[ME].phase == NEW) NOFAULT OPGATE ->
		GATESTEP
		nd[ME].phase = STOPPING;
		printf("t=%d n%d i%d stops\n", T, nm[ME], nd[ME].inst);
		symmetry() }
#endif
	:: d_step { nd[ME].phase == STOPPING && nd[ME].await == 0 && !nd[ME].lv && (nd[ME].oinf == 0 || nd[ME].inf == 0) ->
		nd[ME].lv = 1; nd[ME].linst = nd[ME].inst; nd[ME].linf = nd[ME].inf;
		printf("t=%d n%d i%d leaves with %d in flight (hold %d)\n", T, nm[ME], nd[ME].inst, nd[ME].inf, REQHOLD);
		goDown(ME);
		normalize() }
	/* An evicted node leaves on its own once drained. */
	:: d_step { nd[ME].phase == RUN && nd[ME].evicted && nd[ME].inf == 0 && nd[ME].await == 0 && !nd[ME].lv ->
		nd[ME].lv = 1; nd[ME].linst = nd[ME].inst; nd[ME].linf = 0;
		printf("t=%d n%d i%d (evicted) leaves\n", T, nm[ME], nd[ME].inst);
		goDown(ME);
		normalize() }
#if CRASH
	:: d_step { UP(ME) && (nd[ME].oinf == 0 || nd[ME].inf == 0) NOFAULT OPGATE ->
		GATESTEP
		printf("t=%d n%d i%d crashes with %d in flight\n", T, nm[ME], nd[ME].inst, nd[ME].inf);
		goDown(ME);
		normalize() }
#endif
	/* A new process with the same node id: a new instance. */
	:: d_step { nd[ME].phase == DOWN ->
		newInst(ME);
		nd[ME].inst = hv;
		nd[ME].phase = NEW;
#ifdef MUT_TIMER_FENCE
		nd[ME].fenced = 1;
#endif
		printf("t=%d n%d starts as instance i%d\n", T, nm[ME], nd[ME].inst);
		normalize() }

	/* l_local rises and falls. */
#if LHI > LLO
	:: d_step { UP(ME) && nd[ME].ll < LHI NOFAULT ->
		nd[ME].ll++;
		printf("t=%d n%d: l_local rises to %d\n", T, nm[ME], nd[ME].ll);
		symmetry() }
	:: d_step { UP(ME) && nd[ME].ll > LLO NOFAULT ->
		nd[ME].ll--;
		printf("t=%d n%d: l_local falls to %d\n", T, nm[ME], nd[ME].ll);
		symmetry() }
#endif
	/* The node's clock gains a tick on the database's. */
#if DRIFT > 0
	:: d_step { nd[ME].off < DRIFT && CANADV(ME) ->
		nd[ME].off++;
		advance(ME);
		printf("t=%d n%d: its clock gains a tick\n", T, nm[ME]);
		normalize() }
#endif
#ifdef MUT_TIMER_FENCE
	/* The fence timer fires, as late as the scheduler pleases. */
	:: d_step { nd[ME].joined && !nd[ME].fenced && nd[ME].dl == 0 ->
		nd[ME].fenced = 1;
		printf("t=%d n%d: the fence timer fires\n", T, nm[ME]);
		symmetry() }
#endif
	od
}
#undef ME

/* ---------------------------------------------------------- the network */

#define ROWOF(k, i) (db.row[k].used && db.row[k].inst == (i))
/* The database can take the report without a third row for its node id
 * (RPN = 2): its instance has a row, a slot is free or will be, or
 * another instance is a member and the report is refused. */
#define SLOTOK(I, J) (ROWOF((I)*2, nd[I].rep[J].inst) || ROWOF((I)*2+1, nd[I].rep[J].inst) || \
	!db.row[(I)*2+1].used || db.row[(I)*2].used && GONE((I)*2) || db.row[(I)*2+1].used && GONE((I)*2+1) || \
	MEMBER(db.row[(I)*2]) || MEMBER(db.row[(I)*2+1]))

#if NREP == 1
#define HANDLEABLE(i) (nd[i].rep[0].used && SLOTOK(i, 0))
#elif NREP == 2
#define HANDLEABLE(i) (nd[i].rep[0].used && SLOTOK(i, 0) || nd[i].rep[1].used && SLOTOK(i, 1))
#else
#define HANDLEABLE(i) (nd[i].rep[0].used && SLOTOK(i, 0) || nd[i].rep[1].used && SLOTOK(i, 1) || \
	nd[i].rep[2].used && SLOTOK(i, 2))
#endif

/* handle: the database runs the heartbeat; the reply goes back if the
 * node still waits for it. */
inline handle(I, J) {
	GATESTEP
	coordHeartbeat(I, J);
	printGrant(I, J);
#if defined(TRACE) && FMAX > 0
	/* Traces: the replica catches up right after the database's first
	 * heartbeat, so that failovers (which do not go back to before it)
	 * stay possible in them. */
	if
	:: fo < FMAX && db.dbSeen && !snap.dbSeen ->
		copyDb(snap, db);
		printf("t=%d the replica catches up\n", T);
		printf("@@ sync %d\n", T)
	:: else
	fi;
#endif
	noteL();
	/* A drain survives lapses; an evicted instance never holds a share. */
	if
	:: hkind != G_INUSE && drG[I] && hshare > 0 ->
		printf("VIOLATION t=%d: n%d is drained but granted %d\n", T, nm[I], hshare);
		assert(false)
	:: hkind != G_INUSE && evG[I] && nd[I].rep[J].inst == nd[I].inst && hshare > 0 ->
		printf("VIOLATION t=%d: n%d i%d was evicted but is granted %d\n", T, nm[I], nd[I].inst, hshare);
		assert(false)
	:: else
	fi;
	if
	:: UP(I) && nd[I].rep[J].inst == nd[I].inst && nd[I].rep[J].seq == nd[I].await ->
		nd[I].gkind = hkind; nd[I].gshare = hshare; nd[I].gep = hep; nd[I].ggen = hgen; nd[I].grem = hrem
	:: else
	fi;
	REPF(CLEARREP, I, J, 0)
	normalize()
}

#ifdef LIVE
#define PART0(i) part0 = part0 || (i) == 0;
#else
#define PART0(i)
#endif

#define REPACT(J) \
	:: d_step { nd[ME].rep[J].used && GENROOM && SLOTOK(ME, J) -> handle(ME, J) } \
	:: d_step { nd[ME].rep[J].used NOFAULT -> \
		printf("t=%d net: report seq %d of n%d i%d is lost\n", T, nd[ME].rep[J].seq, nm[ME], nd[ME].rep[J].inst); \
		REPF(CLEARREP, ME, J, 0) \
		PART0(ME) \
		normalize() }
#define DUPACT(J) \
	:: d_step { nd[ME].rep[J].used && FREEREP(ME) NOFAULT -> \
		REPF(COPYREP, ME, NREP-1, J) \
		printf("t=%d net: report seq %d of n%d i%d is duplicated\n", T, nd[ME].rep[J].seq, nm[ME], nd[ME].rep[J].inst); \
		normalize() }

#define ME me
proctype link(byte me) {
end:
	do
	REPACT(0)
#if NREP > 1
	REPACT(1)
#endif
#if NREP > 2
	REPACT(2)
#endif
#if DUP
	DUPACT(0)
#endif
	:: d_step { nd[ME].gkind != G_NONE NOFAULT ->
		printf("t=%d net: the reply to n%d is lost\n", T, nm[ME]);
		PART0(ME)
		nd[ME].gkind = G_NONE; nd[ME].gshare = 0; nd[ME].gep = 0; nd[ME].ggen = 0; nd[ME].grem = 0;
		normalize() }
	:: d_step { nd[ME].lv ->
		coordLeave(ME);
		printf("t=%d   db: leave of n%d i%d with %d in flight (error %d)\n", T, nm[ME], nd[ME].linst, nd[ME].linf, herr);
		printf("@@ leave %d %d %d %d %d %d\n", T, ME, nd[ME].linst, nd[ME].linf, REQHOLD, herr);
		nd[ME].lv = 0; nd[ME].linst = 0; nd[ME].linf = 0;
		normalize() }
	:: d_step { nd[ME].lv NOFAULT ->
		printf("t=%d net: the departure of n%d i%d is lost\n", T, nm[ME], nd[ME].linst);
		nd[ME].lv = 0; nd[ME].linst = 0; nd[ME].linf = 0;
		normalize() }
	od
}
#undef ME

/* --------------------------------------------------------- the operator */

#ifdef MUT_ROW_DRAIN
#define CANDRAIN(i) (db.row[(i)*RPN].used && !db.row[(i)*RPN].dr || db.row[(i)*RPN+1].used && !db.row[(i)*RPN+1].dr)
#define CANUNDRAIN(i) (db.row[(i)*RPN].dr || db.row[(i)*RPN+1].dr)
#else
#define CANDRAIN(i) (!db.drain[i])
#define CANUNDRAIN(i) (db.drain[i])
#endif
#define CANEVICT(i) (db.row[(i)*RPN].used && !db.row[(i)*RPN].ev || db.row[(i)*RPN+1].used && !db.row[(i)*RPN+1].ev)

inline setEvG(I) {
	findRow(I, nd[I].inst);
	evG[I] = (UP(I) && hs != NOSLOT && db.row[hs].ev)
}

#if defined(LIVE) && !defined(LIVE_ANYOPER)
#define LIVEOPER && ME != 0   /* node 0 is never drained or evicted */
#else
#define LIVEOPER
#endif

#define ME me
proctype oper(byte me) {
end:
	do
#if DRAIN
	:: d_step { db.exists && CANDRAIN(ME) && GENROOM NOFAULT LIVEOPER OPGATE ->
		GATESTEP
		coordDrain(ME);
		drG[ME] = drG[ME] || herr == E_OK;
		printf("t=%d operator drains n%d (error %d)\n", T, nm[ME], herr);
		printf("@@ drain %d %d %d\n", T, ME, herr);
		normalize() }
	:: d_step { db.exists && CANUNDRAIN(ME) NOFAULT LIVEOPER OPGATE ->
		GATESTEP
		coordUndrain(ME);
		drG[ME] = 0;
		printf("t=%d operator undrains n%d\n", T, nm[ME]);
		printf("@@ undrain %d %d %d\n", T, ME, herr) }
#endif
#if EVICT
	:: d_step { db.exists && CANEVICT(ME) && GENROOM NOFAULT LIVEOPER OPGATE ->
		GATESTEP
		coordEvict(ME);
		setEvG(ME);
		printf("t=%d operator evicts n%d\n", T, nm[ME]);
		printf("@@ evict %d %d %d\n", T, ME, herr);
		normalize() }
#endif
	:: false
	od
}
#undef ME

/* ------------------------------------------------- limits and failovers */

inline printLimits() {
	printf("t=%d operator sets the key's limits: min %d, max %d (0: none)\n", T, db.opmin, db.opmax);
	printf("@@ limits %d %d %d\n", T, db.opmin, db.opmax)
}

inline clearSnap() {
	snap.exists = 0; snap.incRec = 0; snap.incStale = 0; snap.seen = 0; snap.ep = 0; snap.gen = 0; snap.lg = 0; snap.learn = 0;
	snap.opmax = 0; snap.opmin = 0; snap.dbStale = 0; snap.dbSeen = 0; snap.dbLearn = 0;
	for (hk : 0 .. NN-1) { snap.drain[hk] = 0 };
	for (hk : 0 .. NN*EVN-1) { snap.evi[hk] = 0 };
	for (hk : 0 .. NROWS-1) {
		snap.row[hk].used = 0; snap.row[hk].dr = 0; snap.row[hk].ev = 0; snap.row[hk].dep = 0;
		snap.row[hk].inst = 0; snap.row[hk].seq = 0; snap.row[hk].ll = 0; snap.row[hk].inf = 0;
		snap.row[hk].dem = 0; snap.row[hk].share = 0; snap.row[hk].ep = 0; snap.row[hk].gen = 0;
		snap.row[hk].unack = 0; snap.row[hk].lease = 0; snap.row[hk].hold = 0
	}
}

proctype env() {
end:
	do
#if OPMAX > 0 && OPTOGGLE
	:: d_step { db.exists && db.opmax == 0 NOFAULT OPGATE ->
		GATESTEP
		db.opmax = OPMAX;
		printLimits() }
	:: d_step { db.exists && db.opmax != 0 NOFAULT OPGATE ->
		GATESTEP
		db.opmax = 0;
		noteL();
		printLimits() }
#endif
#if OPMIN > 0
	:: d_step { db.exists && db.opmin == 0 NOFAULT OPGATE ->
		GATESTEP
		db.opmin = OPMIN;
		printLimits() }
	:: d_step { db.exists && db.opmin != 0 NOFAULT OPGATE ->
		GATESTEP
		db.opmin = 0;
		printLimits() }
#endif
#if CREATEKEY
	/* The operator creates the key, with its max, before a node does. */
	:: d_step { !db.exists NOFAULT OPGATE ->
		GATESTEP
		createKey(OPMAX, 0);
		printf("t=%d operator creates the key with max %d\n", T, db.opmax);
		printf("@@ createkey %d %d %d %d\n", T, 0, db.opmax, E_OK);
		noteL();
		normalize() }
#endif
#if DELKEY
	/* The operator deletes the key (without force: refused while its rows
	 * may be stale, while it has members or a row holds its reserve). */
	:: d_step { db.exists NOFAULT OPGATE ->
		GATESTEP
		coordDeleteKey();
		printf("t=%d operator deletes the key (error %d)\n", T, herr);
		printf("@@ deletekey %d %d\n", T, herr);
		if
		:: herr == E_OK ->
			checkDelete();
			for (hk : 0 .. NN-1) { drG[hk] = 0; evG[hk] = 0 }
		:: else
		fi;
		noteL();
		normalize() }
#endif
#if RELEARN
	/* The operator puts the key in learning mode (fleetctl relearn). */
	:: d_step { db.exists NOFAULT OPGATE ->
		GATESTEP
		learnKey(0);
		printf("t=%d operator: relearn\n", T);
		printf("@@ relearn %d\n", T);
		normalize() }
#endif
#if FMAX > 0
	/* The replica catches up with the primary. */
	:: d_step { fo < FMAX OPGATE ->
		GATESTEP
		copyDb(snap, db);
		printf("t=%d the replica catches up\n", T);
		printf("@@ sync %d\n", T);
		normalize() }
	/* Failover: the replica, without the commits it had not received,
	 * becomes the database, under a new incarnation. */
	/* Not back to before the database's first heartbeat: a loss of its
	 * whole fleetlimit history leaves nothing to see it by (design §10). */
	:: d_step { fo < FMAX && (KEYLOSS || snap.exists) && (snap.dbSeen || !db.dbSeen) NOFAULT OPGATE ->
		GATESTEP
		copyDb(db, snap);
		db.incStale = db.exists && db.incRec;
		db.dbStale = 1;
		fo++;
		lost = 1;
		if
		:: fo >= FMAX -> clearSnap()
		:: else
		fi;
		for (hk : 0 .. NN-1) {
			drG[hk] = db.drain[hk] && drG[hk]
		};
		for (hj : 0 .. NN-1) { setEvG(hj) };
		noteL();
		printf("t=%d FAILOVER: the database loses the commits since the replica last caught up\n", T);
		printf("@@ failover %d\n", T);
		normalize() }
	/* From here on the database loses nothing. */
	:: d_step { fo < FMAX OPGATE ->
		GATESTEP
		fo = FMAX;
		clearSnap();
		normalize() }
#endif
#ifdef LIVE
	:: d_step { !stable ->
		stable = 1;
		fo = FMAX;
		clearSnap();
		for (hk : 0 .. NN-1) { beat[hk] = 0; admitted[hk] = 0 };
		printf("t=%d ---- from here on: no faults, every message in time ----\n", T);
		normalize() }
#endif
	:: false
	od
}

/* ----------------------------------------------------------------- time */

#define STALLOK(i, M) (((M) >> (i)) & 1 -> nd[i].off > 0 : CANADV(i))
#ifdef LIVE
/* After GST, a tick waits until every node has heartbeat in this tick and
 * every message is delivered. */
#define READY(i) (UP(i) && (beat[i] || nd[i].await != 0 && AWAITED(i)) && nd[i].gkind == G_NONE && \
	!nd[i].lv && !HANDLEABLE(i))
#if NN == 2
#define SYNCOK (!stable || READY(0) && READY(1))
#else
#define SYNCOK (!stable || READY(0) && READY(1) && READY(2))
#endif
#else
#define SYNCOK true
#endif
#if NN == 2
#define TICKOK(M) (STALLOK(0, M) && STALLOK(1, M) && SYNCOK)
#else
#define TICKOK(M) (STALLOK(0, M) && STALLOK(1, M) && STALLOK(2, M) && SYNCOK)
#endif

inline tickRows(D) {
	for (hk : 0 .. NROWS-1) {
		if
		:: D.row[hk].lease > 0 -> D.row[hk].lease--
		:: else
		fi;
		if
		:: D.row[hk].hold > 0 -> D.row[hk].hold--
		:: else
		fi
	};
	if
	:: D.learn > 0 -> D.learn--
	:: else
	fi;
	if
	:: D.dbLearn > 0 -> D.dbLearn--
	:: else
	fi
}

/* tick: the database's clock moves one tick; each node's clock too, but
 * for the nodes in M, whose clocks stand still (they lose a tick). */
inline tick(M) {
	T++;
#ifdef TRACE
	tlast = tgate;
#endif
	tickRows(db);
	tickRows(snap);
	for (hj : 0 .. NN-1) {
		if
		:: ((M) >> hj) & 1 -> nd[hj].off--
		:: else -> advance(hj)
		fi
	};
	for (hk : 1 .. LCAP) {
		if
		:: lgAge[hk] <= WIN -> lgAge[hk]++
		:: else
		fi
	};
	if
	:: opNoneAge <= WIN -> opNoneAge++
	:: else
	fi;
	noteL();
#ifdef LIVE
	for (hk : 0 .. NN-1) { beat[hk] = 0; admitted[hk] = 0 };
#endif
	if
	:: M == 0 -> printf("t=%d ---- tick\n", T)
	:: else -> printf("t=%d ---- tick (clocks standing still: mask %d)\n", T, M)
	fi;
	printf("@@ tick %d\n", T);
	check();
	symmetry()
}

#define TICK(M) :: d_step { TICKOK(M) TICKGATE -> tick(M) }

proctype clock() {
end:
	do
	TICK(0)
#if DRIFT > 0
	TICK(1)
	TICK(2)
	TICK(3)
#if NN > 2
	TICK(4)
	TICK(5)
	TICK(6)
	TICK(7)
#endif
#endif
	od
}

init {
	d_step {
		for (hk : 0 .. NN-1) {
			nd[hk].phase = NEW;
			nd[hk].ll = LINIT;
			nd[hk].inst = 1;
#ifdef MUT_TIMER_FENCE
			nd[hk].fenced = 1;
#endif
#ifdef TRACE
			ictr[hk] = 1;
#endif
			skip
		};
		for (hk : 1 .. LCAP) { lgAge[hk] = WIN+1 };
		printf("@@ config %d %d %d %d %d %d\n", NN, TTL, MARGIN, BOUND, DRIFT, REQHOLD);
#if OPFIX
		/* The operator created the key with its max before any node
		 * started, and never changes it. */
		createKey(OPMAX, 0);
		opNoneAge = WIN+1;
		printf("@@ createkey %d %d %d %d\n", T, 0, db.opmax, E_OK);
#endif
		for (hk : 0 .. NN-1) { nm[hk] = hk };
		skip
	};
	atomic {
		run clock();
		run env();
		run node(0); run link(0); run oper(0);
		run node(1); run link(1); run oper(1);
#if NN > 2
		run node(2); run link(2); run oper(2);
#endif
		skip
	}
}

#ifdef LIVE
#define adm0 (nd[0].phase == RUN && nd[0].joined && !nd[0].evicted && nd[0].dl > 0 && nd[0].share >= 1)
#define under (tot <= db.lg)
/* L1: a node with demand gets a share >= 1 again and again (L_global >=
 * the nodes with demand: LLO >= NN). */
ltl share { <>stable -> []<> adm0 }
/* L2: after L_global falls, Σ in-flight returns under it and stays. */
ltl fall { <>stable -> <>[] under }
/* L3: a node that stops being partitioned admits again. */
ltl partition { <>stable -> [](part0 -> <> adm0) }
#endif
